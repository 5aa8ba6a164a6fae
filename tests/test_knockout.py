"""Attention knockout (issue 6): spans from template offsets, the AttentionInterface route
against the nnsight mask-edit route, the information-cut property, bad input, effect
accounting; on tiny random models of every supported family and on the embedded model."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from chorus.interventions import families as fam
from chorus.interventions import knockout as ko
from chorus.interventions.spans import SpanError, char_to_token_span, find_range, message_token_span
from chorus.serving.engine import engine_from_model

OPTS = [" A", " B"]
PEER = "I am quite sure the answer is B, because Rome is the capital."


def conversation(peer: str = PEER, question: str = "What is the capital of France? A. Paris B. Rome") -> list[dict]:
    return [{"role": "user", "content": question},
            {"role": "assistant", "content": "I think it is A, Paris."},
            {"role": "user", "content": f"Agent 2's response:\n\"\"\"\n{peer}\n\"\"\"\n\nGive your updated answer."},
            {"role": "assistant", "content": "Answer:"}]


def target(conv: list[dict]) -> tuple[int, int, int]:
    return (2, *find_range(conv[2]["content"], PEER))


# tokenizer, tiny: shared fixtures in conftest.py


def _full_logprobs(eng, rows):
    be = eng.backend
    return ko._forward(be, ko.layer_map(eng), rows, [r.prompt for r in rows],
                       [(len(r.prompt) - 1, len(r.prompt)) for r in rows], keep=0)


def _swap_span(rows, seed=0):
    """Same rows with the span's tokens replaced by other (random) tokens of the same length."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for r in rows:
        p = list(r.prompt)
        new = torch.randint(1000, 20000, (r.span.end - r.span.start,), generator=g).tolist()
        p[r.span.start:r.span.end] = new
        out.append(ko.Row(p, r.options, r.span, r.layers, r.queries))
    return out


# -- spans --------------------------------------------------------------------------------------
def test_char_to_token_span_hand_computed():
    offs = [(0, 3), (3, 4), (4, 9), (9, 10), (10, 15)]
    assert char_to_token_span(offs, 4, 9) == (2, 3)
    assert char_to_token_span(offs, 5, 10) == (2, 4)     # straddling tokens are included
    assert char_to_token_span(offs, 3, 15) == (1, 5)
    assert char_to_token_span(offs, 9, 9) == (3, 3)      # empty range -> empty span


@pytest.mark.parametrize("plain_template", [False, True])
def test_span_covers_exactly_the_peer_text(tiny, tokenizer, plain_template):
    eng = tiny("llama")
    if plain_template:  # a base model: the documented plain template
        eng = engine_from_model(eng.model, _no_template(tokenizer))
    conv = conversation()
    p = eng.render(conv)
    s = message_token_span(eng.tokenizer, p.text, p.ids, conv, target(conv))
    inner = eng.tokenizer.decode(p.ids[s.start:s.end])
    assert PEER in inner and len(inner) <= len(PEER) + 2   # the text, at most a boundary space more
    assert PEER not in eng.tokenizer.decode(p.ids[s.start + 1:s.end])
    assert PEER not in eng.tokenizer.decode(p.ids[s.start:s.end - 1])
    whole = message_token_span(eng.tokenizer, p.text, p.ids, conv, 0)  # a whole message
    assert conv[0]["content"] in eng.tokenizer.decode(p.ids[whole.start:whole.end])


def _no_template(tok):
    import copy
    t = copy.deepcopy(tok)
    t.chat_template = None
    return t


# -- the core properties on every family ----------------------------------------------------------
@pytest.mark.parametrize("family", fam.TINY_FAMILIES)
def test_empty_span_leaves_logits_identical(tiny, family):
    eng = tiny(family)
    convs = [conversation(), conversation(question="Which is larger? A. 3 B. 4")]
    lm = ko.layer_map(eng)
    plain = ko.prepare_rows(eng, convs, OPTS, None)
    empty = ko.prepare_rows(eng, convs, OPTS, [(2, 10, 10), (2, 0, 0)])
    for r in empty:
        assert r.span.empty
        r.layers = frozenset(lm.maskable)
    assert torch.equal(_full_logprobs(eng, plain), _full_logprobs(eng, empty))


@pytest.mark.parametrize("family", [f for f in fam.TINY_FAMILIES if f != "qwen3_5"])
def test_blocking_after_span_in_all_layers_cuts_the_information(tiny, family):
    eng = tiny(family)
    convs = [conversation(), conversation(question="Which is larger? A. 3 B. 4 (answer with the letter)")]
    rows = ko.prepare_rows(eng, convs, OPTS, [target(c) for c in convs])
    swapped = _swap_span(rows)
    plain = [ko.Row(r.prompt, r.options, r.span) for r in rows]
    plain_sw = [ko.Row(r.prompt, r.options, r.span) for r in swapped]
    a, b = _full_logprobs(eng, plain), _full_logprobs(eng, plain_sw)
    assert (a[:, -1] - b[:, -1]).abs().max() > 1e-4          # without knockout the span matters
    for r in rows + swapped:
        r.layers = frozenset(range(ko.layer_map(eng).n_layers))
    a, b = _full_logprobs(eng, rows), _full_logprobs(eng, swapped)
    assert torch.allclose(a[:, -1], b[:, -1], atol=1e-6, rtol=0)  # with it, nothing reaches the decision
    # the public entry point agrees (batched readout, option log-probs)
    x = ko.option_logprobs(eng, convs, OPTS, [target(c) for c in convs])
    assert x[0][" A"] == pytest.approx(float(a[0, -1, rows[0].options[0][0]]), abs=1e-5)


def test_hybrid_reports_unmaskable_layers_and_leaks(tiny):
    eng = tiny("qwen3_5")
    p = ko.plan(eng, "all")
    assert p["unmaskable"] == [0, 1, 2] and p["masked"] == [3]
    conv = conversation()
    with pytest.warns(UserWarning, match=r"layers \[0, 1, 2\] are recurrent"):
        ko.option_logprobs(eng, [conv], OPTS, target(conv))
    with pytest.raises(fam.LayerError, match=r"none of the requested layers \[0, 1\] can be masked"):
        ko.option_logprobs(eng, [conv], OPTS, target(conv), layers=[0, 1])
    # the recurrent route is not cut: swapping the span still moves the decision
    rows = ko.prepare_rows(eng, [conv], OPTS, target(conv))
    rows[0].layers = frozenset(p["masked"])
    sw = _swap_span(rows)
    a, b = _full_logprobs(eng, rows), _full_logprobs(eng, sw)
    assert (a[:, -1] - b[:, -1]).abs().max() > 1e-5


def test_decision_only_and_batch_invariance(tiny):
    eng = tiny("llama")
    convs = [conversation(), conversation(question="A much longer question here? A. one B. two " * 3)]
    solo = ko.option_logprobs(eng, convs[:1], OPTS, target(convs[0]), queries="decision")
    both = ko.option_logprobs(eng, convs, OPTS, [target(c) for c in convs], queries="decision")
    assert solo[0][" A"] == pytest.approx(both[0][" A"], abs=1e-5)
    after = ko.option_logprobs(eng, convs[:1], OPTS, target(convs[0]), queries="after")
    assert after[0] != solo[0]  # different query sets, different readouts
    multi = ko.option_logprobs(eng, convs, [" Paris", " Rome is"], [target(c) for c in convs], layers=[0, 2])
    assert all(np.isfinite(list(d.values())).all() for d in multi)


# -- bad input ---------------------------------------------------------------------------------------
def test_bad_input_errors(tiny, tokenizer):
    eng = tiny("llama")
    conv = conversation()
    with pytest.raises(SpanError, match=r"block_message=7 is outside the conversation \(4 messages"):
        ko.option_logprobs(eng, [conv], OPTS, 7)
    with pytest.raises(SpanError, match=r"outside message 2's content"):
        ko.option_logprobs(eng, [conv], OPTS, (2, 5, 10_000))
    with pytest.raises(SpanError, match="covers the readout position"):
        ko.option_logprobs(eng, [conv], OPTS, 3)
    with pytest.raises(fam.LayerError, match=r"out of range.*4 decoder layers \(valid 0..3\)"):
        ko.option_logprobs(eng, [conv], OPTS, target(conv), layers=[1, 4])
    with pytest.raises(fam.LayerError, match="must be 'all'"):
        ko.option_logprobs(eng, [conv], OPTS, target(conv), layers="some")
    with pytest.raises(ValueError, match="queries must be one of"):
        ko.option_logprobs(eng, [conv], OPTS, target(conv), queries="before")
    with pytest.raises(SpanError, match="not found"):
        find_range(conv[2]["content"], "no such text")
    from transformers import GPT2Config, GPT2LMHeadModel
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2)).eval()
    with pytest.raises(fam.FamilyError, match=r"model type 'gpt2' .* no known attention module names"):
        ko.option_logprobs(engine_from_model(gpt2, tokenizer), [conv], OPTS, target(conv))

    class NotHF:
        backend = type("B", (), {"name": "vllm"})()
    with pytest.raises(ko.KnockoutError, match="needs the transformers backend"):
        ko.option_logprobs(NotHF(), [conv], OPTS, target(conv))


# -- effect accounting (exact) ----------------------------------------------------------------------
def test_share_removed_hand_computed():
    from chorus.interventions.knockout_pairs import summarize_knockout
    t = pd.DataFrame({"qid": ["q1", "q2", "q1", "q2"], "family": ["f1", "f2", "f1", "f2"],
                      "kind": ["all"] * 4, "layer": [-1] * 4, "queries": ["after", "after", "decision", "decision"],
                      "margin_full": [2.0, 4.0, 2.0, 4.0], "margin_no_message": [0.0, 0.0, 0.0, 0.0],
                      "margin_knockout": [1.0, 0.0, -1.0, -2.0], "n_masked": [30] * 4, "unmaskable": [""] * 4})
    s = summarize_knockout(t, n_boot=0, seed=0, ci=0.95)
    assert s["all_layers"]["after"]["share_removed"] == pytest.approx((1.0 + 4.0) / 2 / 3.0)
    dec = s["all_layers"]["decision"]
    assert dec["share_removed"] == pytest.approx((3.0 + 6.0) / 2 / 3.0)  # 150%: reported, read as all
    assert dec["reading"] == "all of the effect"
    assert s["message_effect"]["mean"] == pytest.approx(3.0)


# -- the embedded model ------------------------------------------------------------------------------
@pytest.mark.slow
def test_embedded_plain_equals_engine_and_knockout_cuts(hf_engine):
    eng = hf_engine
    convs = [conversation(), conversation(question="Is the sky green? A. yes B. no")]
    ref = eng.option_logprobs(convs, OPTS)
    assert ko.option_logprobs(eng, convs, OPTS, None) == ref
    mine = ko.run_rows(eng, ko.prepare_rows(eng, convs, OPTS, None))  # the same code path as knockouts
    assert [dict(zip(OPTS, v)) for v in mine] == ref                  # bitwise: same batching as the backend
    rows = ko.prepare_rows(eng, convs, OPTS, [target(c) for c in convs])
    for r in rows:
        r.layers = frozenset(range(30))
    rows_sw = _swap_span(rows)
    a, b = ko.run_rows(eng, rows), ko.run_rows(eng, rows_sw)
    assert np.allclose(a, b, atol=1e-5)
    assert ko.plan(eng)["masked"] == list(range(30))
    with pytest.raises(fam.LayerError, match=r"valid 0..29"):
        ko.option_logprobs(eng, convs, OPTS, target(convs[0]), layers=30)


@pytest.fixture()
def source_run(tmp_path):
    """A finished debate run directory with round-0 turns written by hand (no generation)."""
    from conftest import hand_debate_run

    from chorus.simulate.debate.questions import Item
    qs = [("q-cap", "geo", "Which city is the capital of France?", ["Paris", "Rome"]),
          ("q-num", "math", "Which number is even?", ["7", "12"]),
          ("q-col", "colour", "Which colour is the sky on a clear day?", ["blue", "red"])]
    return hand_debate_run(tmp_path, [Item(id=i, domain="knowledge", subdomain="test", family=f, question=q, options=o,
                                           labels=["A", "B"], reference="A") for i, f, q, o in qs])


@pytest.mark.slow
def test_cli_knockout_patch_probe_on_a_debate_run(hf_engine, source_run, tmp_path):
    from chorus.interventions.internals.config import load
    from chorus.serving.store import CallStore
    cfg = load("internals_smoke", {"source_run": str(source_run), "knockout.layers": [0, 29],
                                   "patch.layers": [0, 29], "patch.max_pairs": 2, "probe.layers": [0, 29],
                                   "probe.n_perm": 5, "probe.n_splits": 3, "analysis.n_boot": 50})
    hf_engine.store = CallStore(tmp_path / "calls.sqlite")  # resumability goes through the store
    try:
        _check_runs(cfg, hf_engine, tmp_path)
    finally:
        hf_engine.store.close()
        hf_engine.store = None


def _check_runs(cfg, hf_engine, tmp_path):
    from chorus.interventions.internals.experiment import report, run_internals
    run, s = run_internals(cfg, "knockout", tmp_path / "ko", engine=hf_engine)
    t = pd.read_parquet(run.path / "tables" / "knockout.parquet")
    assert s["n_pairs"] == 3 and len(t) == 3 * (2 + 2 + 2)  # all x2 queries, single x2, cumulative x2
    assert set(t["kind"]) == {"all", "single", "cumulative"} and (t["span_tokens"] > 5).all()
    assert {c["kind"] for c in s["curves"]} == {"all", "single", "cumulative"}
    assert (run.path / "plots" / "knockout_curves.png").is_file()
    assert json.loads((run.path / "summary.json").read_text())["all_layers"]["after"]["n"] == 3
    assert s["knockout_route"] == "nnsight" and json.loads((run.path / "provenance.json").read_text())["knockout_route"] == "nnsight"
    assert s["cross_check"]["contexts"] == 2 and s["cross_check"]["max_abs_diff"] == 0.0  # the routes agree bitwise
    assert report(run.path)["all_layers"] == s["all_layers"]  # the report is rebuilt from the files alone
    before = hf_engine.model_calls
    run_internals(cfg, "knockout", tmp_path / "ko", engine=hf_engine)  # resumable: all from the store
    assert hf_engine.model_calls == before

    run, s = run_internals(cfg, "patch", tmp_path / "patch", engine=hf_engine)
    assert s["n_pairs"] + s["n_skipped"] == 2 and (run.path / "tables" / "patch.parquet").is_file()
    if s["n_pairs"]:
        assert [c["layer"] for c in s["curve"]] == [0, 29]

    run, s = run_internals(cfg, "probe", tmp_path / "probe", engine=hf_engine)
    assert [r["layer"] for r in s["layers"]] == [0, 29] and all("null_p90" in r for r in s["layers"])
    assert (run.path / "plots" / "probe_auroc.png").is_file()


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3", "qwen3_5"])
def test_shared_prefix_sweep_agrees_with_full_recompute(tiny, family):
    eng = tiny(family)  # llama/qwen3 reuse the prefix cache; gemma3 (sliding) and qwen3_5 (recurrent) fall back
    lm = ko.layer_map(eng)
    convs = [conversation(), conversation(question="Which one? A. x B. y")]
    rows = []
    for b in ko.prepare_rows(eng, convs, OPTS, [target(c) for c in convs]):
        for layers in [[x] for x in lm.maskable] + [lm.maskable, []]:
            for q in ko.QUERIES:
                rows.append(ko.Row(b.prompt, b.options, b.span, frozenset(layers), q))
    assert np.allclose(ko.run_rows(eng, rows), ko.run_rows_shared_prefix(eng, rows), atol=1e-5, rtol=0)


def test_config_errors_name_the_field():
    from chorus.core.config import ConfigError
    from chorus.interventions.internals.config import load
    with pytest.raises(ConfigError, match="backend: hf"):
        load("internals_smoke", {"model.backend": "vllm"})
    with pytest.raises(ConfigError, match="knockout.queries"):
        load("internals_smoke", {"knockout.queries": ["after", "after"]})
    with pytest.raises(ConfigError, match="probe.n_perm"):
        load("internals_smoke", {"probe.n_perm": 0})
    with pytest.raises(ConfigError, match="config not found"):
        load("no_such_config")
    assert load("internals").knockout.layers == "all"


def test_cli_bad_config_fails_before_any_model_call(tmp_path):
    from typer.testing import CliRunner

    from chorus.cli import app
    for verb in ("knockout", "patch", "probe"):
        res = CliRunner().invoke(app, ["influence", verb, "internals_smoke", "--out", str(tmp_path / verb),
                                       "--set", "model.backend=openai"])
        assert res.exit_code == 2 and "backend: hf" in res.output, res.output
        assert not (tmp_path / verb).exists()


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3", "gemma4", "qwen3_5"])
def test_nnsight_and_interface_routes_bitwise_equal(tiny, family):
    """The two knockout routes (``knockout.route``) give the same floats: single-token readouts, the
    shared-prefix sweep and multi-token options, one layer, every layer and none, both query sets."""
    eng = tiny(family)
    lm = ko.layer_map(eng)
    convs = [conversation(), conversation(question="Q? A. x B. y")]  # different lengths: left padding
    rows = [ko.Row(b.prompt, b.options, b.span, frozenset(layers), q)
            for b in ko.prepare_rows(eng, convs, OPTS, [target(c) for c in convs])
            for layers in ([lm.maskable[0]], lm.maskable, []) for q in ko.QUERIES]
    assert ko.run_rows(eng, rows, "nnsight") == ko.run_rows(eng, rows, "interface")
    assert ko.run_rows_shared_prefix(eng, rows, "nnsight") == ko.run_rows_shared_prefix(eng, rows, "interface")
    multi = ko.prepare_rows(eng, convs, [" Paris", " Rome is"], [target(c) for c in convs])
    for r in multi:
        r.layers = frozenset(lm.maskable)
    assert ko.run_rows(eng, multi, "nnsight") == ko.run_rows(eng, multi, "interface")
    with pytest.raises(ValueError, match="route must be one of"):
        ko.run_rows(eng, rows, "hooks")


def test_nnsight_recipe_runs_on_the_embedded_model(hf_engine):
    """interventions/nnsight_recipe.py: with no layer chosen the trace is the engine's readout; mean-ablating
    the peer's residual in every layer moves it."""
    from chorus.interventions.nnsight_recipe import mean_ablate
    none = mean_ablate(hf_engine, layers=[])
    assert none["span_tokens"] > 5
    for o, v in none["plain"].items():
        assert none["mean_ablated"][o] == pytest.approx(v, abs=1e-4)
    every = mean_ablate(hf_engine)
    assert max(abs(every["mean_ablated"][o] - v) for o, v in every["plain"].items()) > 1e-3
    assert every["attention_knockout"] == ko.option_logprobs(hf_engine, *_recipe_args(), layers="all", route="interface")[0]


def _recipe_args():
    from chorus.interventions.nnsight_recipe import context
    conv, block, opts = context()
    return [conv], opts, block


def test_cross_check_fails_the_run_on_a_route_disagreement(tiny, monkeypatch):
    """A context recomputed by the other route that differs beyond the tolerance is one KnockoutError
    naming both routes (the disagreement is made by a double: the routes themselves agree)."""
    from chorus.interventions.knockout_pairs import _cross_check
    eng = tiny("llama")
    b = ko.prepare_rows(eng, [conversation()], OPTS, [target(conversation())])[0]
    rows = [ko.Row(b.prompt, b.options, b.span, frozenset([0]), "after")]
    got = ko.run_rows_shared_prefix(eng, rows, "nnsight")
    res = [{"logprobs": dict(zip(OPTS, got[0]))}]
    ctx = [(("A", "B"), OPTS, [0], lambda chunk: rows, None, res)]
    ok = _cross_check(eng, ctx, "nnsight", 1, 1e-4, 0)
    assert ok["max_abs_diff"] == 0.0 and ok["other_route"] == "interface" and ok["rows"] == 1
    real = ko.run_rows_shared_prefix
    monkeypatch.setattr(ko, "run_rows_shared_prefix", lambda e, r, route: [[v + 0.01 for v in x] for x in real(e, r, route)])
    with pytest.raises(ko.KnockoutError, match="routes nnsight and interface differ by 0.01"):
        _cross_check(eng, ctx, "nnsight", 1, 1e-4, 0)


def test_best_single_layer_is_family_wise_beside_its_unadjusted_interval():
    """Thirty layers, one planted: the best layer's family-wise band is wider than its own interval and
    contains it; its p-value is family-wise; a message effect whose interval reaches 0 gives unbounded shares."""
    from chorus.core.stats import UNBOUNDED
    from chorus.interventions.knockout_pairs import summarize_knockout
    rng = np.random.default_rng(0)
    n, L = 40, 30
    rows = []
    for i in range(n):
        full = 2.0 + rng.normal(0, 1)
        for layer in range(L):
            removed = (0.8 if layer == 7 else 0.0) + rng.normal(0, 1)
            rows.append({"qid": f"q{i}", "family": f"f{i // 2}", "kind": "single", "layer": layer, "queries": "after",
                         "mixer": "attention", "margin_full": full, "margin_no_message": 0.0,
                         "margin_knockout": full - removed, "n_masked": 1, "n_recurrent": 0, "unmaskable": ""})
    t = pd.DataFrame(rows)
    s = summarize_knockout(t, n_boot=300, seed=1, ci=0.95)
    (b,) = s["best_single_layer"]
    assert b["n_layers_searched"] == L and b["n_clusters"] == n // 2 and b["n_boot"] == 300
    own = b["unadjusted"]
    assert b["ci_low"] < own["ci_low"] < own["ci_high"] < b["ci_high"] and own["interval"] == "fieller"
    assert 0 <= b["p_value"] <= 1 and b["critical_t"] > 2.5   # 30 layers: well past the one-layer 1.96
    e = rng.normal(0.0, 1.0, n)
    e -= e.mean()   # the message effect's mean exactly 0: its interval contains 0
    bad = t.assign(margin_no_message=t["margin_full"] - t["qid"].map({f"q{i}": v for i, v in enumerate(e)}))
    s2 = summarize_knockout(bad, n_boot=50, seed=1, ci=0.95)
    assert all(c["unbounded"].startswith(UNBOUNDED) and c["ci_low"] is None for c in s2["curves"])
    assert s2["best_single_layer"][0]["ci_low"] is None and s2["best_single_layer"][0]["unbounded"]
