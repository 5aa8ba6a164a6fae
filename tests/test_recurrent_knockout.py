"""Recurrent-state knockout (issue 33 part 2): in chosen Gated DeltaNet layers the blocked
message writes nothing into the state and convolution window the blocked queries read. Checked
against an independent token-by-token float64 recomputation, identity when no layer is chosen,
the message's content unreadable once every route is cut, the two knockout routes equal, bad
input in one line, and the one-command attention vs recurrent vs both run on a Qwen3.5 dummy."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from test_knockout import OPTS, _full_logprobs, _swap_span, conversation, target

from chorus.interventions import families as fam
from chorus.interventions import knockout as ko
from chorus.interventions import recurrent as rc


def _blocked(T: int) -> torch.Tensor:
    """Two rows: "after" queries of a mid-sequence span; a "decision" query at the end of another span that
    ends two tokens before it. Why that close: the random tiny layers' decay gates forget fast, so a span
    twelve tokens back moved the decision by 2e-10 to 2e-9 (under float32 noise) and the row's check passed
    on the other row alone; two tokens back it moves by 3e-3 to 4e-3, the scale of the output itself."""
    b = torch.zeros(2, T, T, dtype=torch.bool)
    b[0, 12:, 5:9] = True
    b[1, T - 1:, T - 6:T - 2] = True
    return b


def _rel(a, b) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


@pytest.mark.parametrize("layer", [0, 2])
def test_cut_layer_equals_the_independent_recomputation(tiny, layer):
    eng = tiny("qwen3_5")
    lm = ko.layer_map(eng)
    mod = rc.modules(lm)[layer]
    torch.manual_seed(layer)
    h = torch.randn(2, 20, 64)
    blk = _blocked(20)
    keys, queries = blk.any(1), blk.any(2)
    with torch.no_grad():
        plain = mod(h)
        assert _rel(plain, rc.recompute_layer(mod, h)) < 1e-5  # the reference is the layer itself
        with rc.severed(lm, blk, {layer: torch.tensor([True, True])}):
            cut = mod(h)
    ref = rc.recompute_layer(mod, h, keys, queries)
    assert _rel(cut, ref) < 1e-5
    assert torch.equal(cut[~queries], plain[~queries])  # everything but the blocked queries is the usual output
    for row, least in ((0, 1e-6), (1, 1e-4)):  # each row's queries lost the message, each on its own
        assert (cut[row][queries[row]] - plain[row][queries[row]]).abs().max() > least, row
    # a row left out of the cut is untouched
    with torch.no_grad(), rc.severed(lm, blk, {layer: torch.tensor([True, False])}):
        one = mod(h)
    assert torch.equal(one[1], plain[1]) and torch.equal(one[0], cut[0])


def test_no_layer_chosen_is_the_plain_readout(tiny):
    eng = tiny("qwen3_5")
    convs = [conversation(), conversation(question="Which one? A. x B. y")]
    rows = ko.prepare_rows(eng, convs, OPTS, [target(c) for c in convs])
    plain = ko.run_rows(eng, rows)
    assert ko.run_rows(eng, [ko.Row(r.prompt, r.options, r.span, frozenset(), "after", frozenset()) for r in rows]) == plain
    assert plain == [list(d.values()) for d in eng.option_logprobs(convs, OPTS)]


def test_every_route_cut_makes_the_message_unreadable(tiny):
    eng = tiny("qwen3_5")
    lm = ko.layer_map(eng)
    convs = [conversation(), conversation(question="Which is larger? A. 3 B. 4 (answer with the letter)")]
    rows = ko.prepare_rows(eng, convs, OPTS, [target(c) for c in convs])
    sw = _swap_span(rows)
    out = {}
    for mixer, att, rec in (("attention", lm.maskable, []), ("recurrent", [], lm.unmaskable),
                            ("both", lm.maskable, lm.unmaskable)):
        for r in rows + sw:
            r.layers, r.recurrent = frozenset(att), frozenset(rec)
        a, b = _full_logprobs(eng, rows), _full_logprobs(eng, sw)
        out[mixer] = float((a[:, -1] - b[:, -1]).abs().max())
    assert out["both"] == 0.0  # the replaced tokens reach the decision by no route
    assert out["attention"] > 1e-5 and out["recurrent"] > 1e-5  # each route alone still carries them
    # the public entry point, both routes, bitwise the same
    got = {rt: ko.option_logprobs(eng, convs, OPTS, [target(c) for c in convs], mixer="both", route=rt)
           for rt in ko.ROUTES}
    assert got["nnsight"] == got["interface"]
    p = ko.plan(eng, "all", "recurrent")
    assert p["masked"] == [] and p["recurrent"] == lm.unmaskable and p["unmaskable"] == []


def test_bad_input_is_one_line(tiny):
    llama, hyb = tiny("llama"), tiny("qwen3_5")
    conv = conversation()
    with pytest.raises(rc.RecurrentError, match=r"recurrent knockout asked of llama, which has no recurrent layers"):
        ko.option_logprobs(llama, [conv], OPTS, target(conv), mixer="recurrent")
    with pytest.raises(fam.LayerError, match=r"none of the requested layers \[3\] is recurrent"):
        ko.option_logprobs(hyb, [conv], OPTS, target(conv), layers=[3], mixer="recurrent")
    with pytest.raises(fam.LayerError, match=r"out of range.*valid 0..3"):
        ko.option_logprobs(hyb, [conv], OPTS, target(conv), layers=[7], mixer="both")
    with pytest.raises(ValueError, match="mixer must be one of"):
        ko.plan(hyb, "all", "gdn")
    row = ko.prepare_rows(hyb, [conv], OPTS, target(conv))[0]
    with pytest.raises(fam.LayerError, match=r"layer\(s\) \[3\] are not recurrent"):
        ko.run_rows(hyb, [ko.Row(row.prompt, row.options, row.span, frozenset(), "after", frozenset([3]))])
    lm = ko.layer_map(hyb)
    with pytest.raises(rc.RecurrentError, match="lfm2: recurrent knockout supports the Gated DeltaNet layers"):
        rc.supported(fam.LayerMap("lfm2", 2, "model.layers", "self_attn", [], {1: None}, [0]))
    mod = rc.modules(lm)[0]
    with pytest.raises(rc.RecurrentError, match="without a KV cache"), torch.no_grad():
        with rc.severed(lm, _blocked(20), {0: torch.tensor([True, True])}):
            mod(torch.randn(2, 20, 64), cache_params=object())


@pytest.fixture(scope="module")
def hybrid_folder(tmp_path_factory):
    from chorus.serving.dummy import PATTERN_PERIOD, build_dummy
    return build_dummy("qwen3.5-9b", tmp_path_factory.mktemp("hyb") / "qwen", layers=PATTERN_PERIOD["qwen3.5-9b"],
                       narrow_by=16, dtype="float32")


@pytest.mark.slow
def test_mixers_run_on_a_hybrid_dummy_folder(hybrid_folder, tmp_path):
    """The one command: attention vs recurrent vs both over a debate run's pairs, on a Qwen3.5
    dummy folder loaded through the serving door; the report rebuilds it; a rerun calls nothing."""
    from conftest import hand_debate_run

    from chorus.interventions.internals.config import load
    from chorus.interventions.internals.experiment import report, run_internals
    from chorus.simulate.debate.questions import Item
    qs = [("q-cap", "geo", "Which city is the capital of France?", ["Paris", "Rome"]),
          ("q-num", "math", "Which number is even?", ["7", "12"]),
          ("q-col", "colour", "Which colour is the sky on a clear day?", ["blue", "red"])]
    src = hand_debate_run(tmp_path, [Item(id=i, domain="knowledge", subdomain="test", family=f, question=q, options=o,
                                          labels=["A", "B"], reference="A") for i, f, q, o in qs])
    cfg = load("internals_hybrid", {"source_run": str(src), "model.profile": str(hybrid_folder),
                                    "model.dtype": "float32", "knockout.layers": [0, 3], "analysis.n_boot": 50})
    run, s = run_internals(cfg, "knockout", tmp_path / "ko")
    t = pd.read_parquet(run.path / "tables" / "knockout.parquet")
    # per mixer: all layers x 2 queries + cumulative from layers 0 and 3 ("recurrent" from 3 cuts nothing: skipped)
    assert s["n_pairs"] == 3 and set(t["mixer"]) == {"attention", "recurrent", "both"}
    assert len(t) == 3 * (4 + 3 + 4)
    assert t.loc[t["mixer"] == "both", "unmaskable"].eq("").all()
    ms = s["mixer_shares"]["after"]
    assert {"attention", "recurrent", "both", "interaction"} <= set(ms) and ms["n"] == 3
    assert np.isclose(ms["recurrent_inferred"], 1 - ms["attention"]["share_removed"])
    assert (run.path / "plots" / "knockout_mixers.png").is_file()
    # a condition equal to another (all layers = cumulative from 0) is stored once, from a batch of
    # another make-up than the cross-check's: float32 batch rounding, inside the run's tolerance
    assert s["knockout_route"] == "nnsight" and s["cross_check"]["max_abs_diff"] < cfg.knockout.cross_check_tol
    assert report(run.path)["mixer_shares"] == s["mixer_shares"]
    saved = json.loads((run.path / "summary.json").read_text())
    assert saved["all_layers_by_mixer"]["both"]["after"]["n_recurrent"] == 3
    from chorus.serving.store import CallStore
    stored = lambda: len(CallStore(run.path / "calls.sqlite"))
    before = stored()
    run2, s2 = run_internals(cfg, "knockout", tmp_path / "ko")  # resumed: every readout from the store
    assert s2["mixer_shares"] == s["mixer_shares"] and stored() == before > 0


def test_cli_recurrent_mixer_on_an_all_attention_model_is_one_line(tmp_path):
    from typer.testing import CliRunner

    from chorus.cli import app
    res = CliRunner().invoke(app, ["influence", "knockout", "internals_smoke", "--out", str(tmp_path / "ko"),
                                   "--set", "knockout.mixers=[attention,recurrent]"])
    assert res.exit_code == 2, res.output
    assert "recurrent knockout asked of llama, which has no recurrent layers" in res.output
