"""The engine on the real embedded model (SmolLM2-135M), both local backends."""
from __future__ import annotations

import math

import pytest
import torch
from conftest import chats

MC = [[{"role": "user", "content": f"Question {i}: which option is correct? A) {a} B) {b}. Answer with the letter."}]
      for i, (a, b) in enumerate([("red", "blue"), ("cat", "dog"), ("one", "two"), ("sun", "moon")])]


def test_batched_greedy_equals_one_at_a_time(engine):
    batch = engine.chat(chats(), temperature=0, max_tokens=24)
    solo = [engine.chat([c], temperature=0, max_tokens=24)[0] for c in chats()]
    assert [o.text for o in batch] == [o.text for o in solo]
    for o in batch:
        assert o.text and o.prompt_tokens > 0 and 0 < o.completion_tokens <= 24
        assert o.finish_reason in ("stop", "length")


def test_option_logprobs_equal_a_manual_forward_pass(engine, hf_engine):
    options = ["A", "B", "A)", "Neither"]  # single- and multi-token labels
    got = engine.option_logprobs(MC, options)
    model, tok = hf_engine.model, hf_engine.tokenizer
    for conv, lp in zip(MC, got):
        prompt = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
        p_ids = tok(prompt, add_special_tokens=False).input_ids
        for opt in options:
            full = tok(prompt + opt, add_special_tokens=False).input_ids
            assert full[:len(p_ids)] == p_ids
            o_ids = full[len(p_ids):]
            with torch.no_grad():
                logits = model(torch.tensor([full])).logits[0].float()
            logp = torch.log_softmax(logits, -1)
            manual = sum(float(logp[len(p_ids) - 1 + k, t]) for k, t in enumerate(o_ids))
            assert lp[opt] == pytest.approx(manual, abs=2e-4), (opt, lp[opt], manual)
    # single-token option probabilities are a sub-distribution of the next token
    assert all(math.exp(lp["A"]) + math.exp(lp["B"]) <= 1 + 1e-6 for lp in got)


def test_readout_does_not_depend_on_the_batch(engine):
    alone = engine.option_logprobs(MC[:1], ["A", "B"])[0]
    batched = engine.option_logprobs(chats() + MC, ["A", "B"])[len(chats())]
    for k in alone:
        assert batched[k] == pytest.approx(alone[k], abs=1e-4)


def test_seeded_sampling_is_reproducible_and_batch_invariant(engine):
    convs = chats(4)
    a = engine.chat(convs, temperature=0.9, max_tokens=16, seed=[11, 12, 13, 14])
    b = engine.chat(convs[2:3], temperature=0.9, max_tokens=16, seed=13)
    assert b[0].text == a[2].text
    c = engine.chat(convs, temperature=0.9, max_tokens=16, seed=[21, 22, 23, 24])
    assert [x.text for x in a] != [x.text for x in c]


SCHEMA = {"type": "object", "properties": {"p_plus": {"type": "number", "minimum": 0, "maximum": 1},
                                           "stance": {"enum": ["for", "against", "torn"]}},
          "required": ["p_plus", "stance"], "additionalProperties": False}


@pytest.mark.parametrize("backend, n", [("vllm", 50), ("hf", 16)])  # hf's per-row grammar loop is slower on CPU
def test_structured_output_conforms_on_sampled_calls(request, backend, n):
    engine = request.getfixturevalue(f"{backend}_engine")
    convs = [[{"role": "user", "content": f"Statement {i}: trains are better than cars. Rate it as JSON."}]
             for i in range(n)]
    outs = engine.chat(convs, json_schema=SCHEMA, temperature=1.0, max_tokens=40, seed=list(range(n)))
    bad = [(o.text, o.error) for o in outs if not o.conformed]
    assert not bad, bad[:3]
    assert all(0 <= o.parsed["p_plus"] <= 1 and o.parsed["stance"] in ("for", "against", "torn") for o in outs)


def test_choices_are_enforced(engine):
    outs = engine.chat(chats(4), choices=["yes", "no", "maybe"], temperature=1.0, max_tokens=5, seed=3)
    assert all(o.conformed and o.parsed in ("yes", "no", "maybe") for o in outs)


def test_stop_strings_cut_the_text(engine):
    conv = [[{"role": "user", "content": "Count from one to ten in words, separated by commas."}]]
    full = engine.chat(conv, temperature=0, max_tokens=40)[0].text
    assert len(full) > 12
    stop = full[6:9]  # greedy decoding is identical up to the stop string, wherever it falls
    cut = engine.chat(conv, temperature=0, max_tokens=40, stop=["@@@", stop])[0]
    assert cut.text == full[:full.index(stop)] and cut.finish_reason == "stop"


def test_prefill_continues_the_assistant_message(engine):
    conv = [{"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "The capital of France is"}]
    out = engine.chat([conv], temperature=0, max_tokens=5)[0]
    assert "Paris" in out.text


def test_backends_agree_on_greedy_text_and_readouts(hf_engine, vllm_engine):
    """Measured tolerance: float32, max |d logprob| stays under 1e-4 on these prompts."""
    h = hf_engine.chat(chats(), temperature=0, max_tokens=32)
    v = vllm_engine.chat(chats(), temperature=0, max_tokens=32)
    assert [o.text for o in h] == [o.text for o in v]
    assert [o.completion_tokens for o in h] == [o.completion_tokens for o in v]
    opts = ["A", "B", "Neither"]
    hl, vl = hf_engine.option_logprobs(MC, opts), vllm_engine.option_logprobs(MC, opts)
    diff = max(abs(a[o] - b[o]) for a, b in zip(hl, vl) for o in opts)
    assert diff < 1e-3, diff
