"""The engine renders and tokenises a batch of prompts in one tokenizer call (issue 52): the ids, the
offsets the message spans map through and the option ids are exactly those of one call per text,
on the embedded tokenizer and on each paper architecture's chat template."""
from __future__ import annotations

import pytest

from chorus.interventions.spans import message_token_span, offsets
from chorus.serving.dummy import write_config_and_tokenizer
from chorus.serving.engine import Engine

ARCHS = ["llama-3.1-8b-instruct", "gemma-4-e4b-it", "qwen3.5-9b"]
# labels that join the prompt's last token or not, multi-token ones, a leading space and a newline
OPTIONS = ["A", " B", "Paris", "\n", "ing", "not sure at all", "{\"x\": 1}"]


def convs() -> list[list[dict]]:
    peer = "My friend is certain that the answer is B. " * 3
    out = [[{"role": "user", "content": f"{peer}\nQuestion {k}: which?\nA. one\nB. two"}] for k in range(5)]
    out.append([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "The answer is"}])  # a prefill
    out.append([{"role": "user", "content": "x"}])
    return out


def engine_for(tok) -> Engine:
    e = Engine.__new__(Engine)
    e.tokenizer = tok
    return e


def old_render(tok, conv):
    """The per-text render as it was: the template, then one tokenizer call."""
    prefill = conv[-1]["role"] == "assistant"
    text = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=not prefill,
                                   continue_final_message=prefill)
    return text, list(tok(text, add_special_tokens=False).input_ids)


def old_option_ids(tok, text, ids, option):
    full = tok(text + option, add_special_tokens=False).input_ids
    n = len(ids)
    return list(full[n:]) if list(full[:n]) == ids else list(tok(option, add_special_tokens=False).input_ids)


def tokenizers(tmp_path_factory):
    from transformers import AutoTokenizer
    out = {}
    for arch in ARCHS:
        d = tmp_path_factory.mktemp(arch)
        write_config_and_tokenizer(arch, d, layers=1, narrow_by=16)
        out[arch] = AutoTokenizer.from_pretrained(str(d))
    return out


@pytest.fixture(scope="module")
def toks(tmp_path_factory, tokenizer):
    return {"embedded": tokenizer, **tokenizers(tmp_path_factory)}


@pytest.mark.parametrize("name", ["embedded", *ARCHS])
def test_render_many_equals_one_call_per_text(toks, name):
    tok = toks[name]
    eng = engine_for(tok)
    cs = convs()
    got = eng.render_many(cs, offsets=True)
    merged = 0
    for c, p in zip(cs, got):
        text, ids = old_render(tok, c)
        assert (p.text, p.ids) == (text, ids)
        assert p.offsets == offsets(tok, text, ids)  # what the spans used to compute by a second call
        assert eng.render(c) == p
        assert eng.render(c).offsets is None
    opts = eng.option_ids_many(got, OPTIONS)
    for p, row in zip(got, opts):
        for o, ids in zip(OPTIONS, row):
            assert ids == old_option_ids(tok, p.text, p.ids, o)
            assert eng.option_token_ids(p, o) == ids
            full = tok(p.text + o, add_special_tokens=False).input_ids
            merged += list(full[:len(p.ids)]) != p.ids
    # the fallback (the option tokenised alone) is exercised somewhere in the set
    assert merged or name != "embedded"
    # prompts and joint texts in one call: the same prompts, offsets and option ids
    both, oids = eng.prepare(cs, OPTIONS, offsets=True)
    assert both == got and [p.offsets for p in both] == [p.offsets for p in got] and oids == opts
    assert eng.prepare(cs)[1] is None


def test_spans_from_the_render_offsets_equal_recomputed(toks):
    tok = toks["llama-3.1-8b-instruct"]
    eng = engine_for(tok)
    cs = convs()[:5]
    for c, p in zip(cs, eng.render_many(cs, offsets=True)):
        for blk in (0, (0, 0, 20), (0, 5, 40)):
            assert message_token_span(tok, p.text, p.ids, c, blk, p.offsets) == \
                message_token_span(tok, p.text, p.ids, c, blk)
