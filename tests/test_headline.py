"""Each part's declared headline (chorus.core.headline) on summaries its own code computes from small
hand-made tables or the belief layer's oracle mode; where a run's numbers come from, decided once
(chorus.serving.standing); undefined values and single-cluster intervals said as such in the report,
the demo overview and the console. No model is loaded."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

import chorus.registry  # noqa: F401  (every part declares its headline when its CLI module is imported)
import chorus.stages  # noqa: F401  (the demo's serving stage declares its own)
from chorus.core.headline import HEADLINES, Row, row, rows
from chorus.core.runs import RunDir
from chorus.core.stats import bootstrap_ci
from chorus.serving.standing import print_headline, run_standing, standing

BIG = ["llama-3.1-8b-instruct", "qwen3.5-9b"]


@pytest.fixture(autouse=True)
def _no_user_profiles(tmp_path, monkeypatch):
    monkeypatch.setenv("CHORUS_MODELS_FILE", str(tmp_path / "none.yaml"))


def _names(found: list[Row]) -> list[str]:
    return [r.name for r in found]


# -- headline rows per part --------------------------------------------------------------------------
def _debate_turns(spec):
    """spec: {(cond, qid): (reference, family, [[round0 answers], [round1], ...])}"""
    return pd.DataFrame([{"qid": q, "family": fam, "domain": "d", "subdomain": "s", "agent": a, "round": r,
                          "condition": c, "shared": r == 0, "response": str(ans), "answer": ans, "parsed": True,
                          "truncated": False, "reference": ref, "correct": ans == ref, "prompt_tokens": 1,
                          "completion_tokens": 1, "cached": False, "seed": 0}
                         for (c, q), (ref, fam, rounds) in spec.items()
                         for r, answers in enumerate(rounds) for a, ans in enumerate(answers)])


def _debate_summary(families):
    """Three questions, debate right on q1 and q2, reflection right on q1 only; ``families`` their clusters."""
    from chorus.simulate.debate.metrics import collective_summary
    spec = {}
    for q, fam, deb, ref in zip(("q1", "q2", "q3"), families, ("A", "A", "B"), ("A", "B", "B")):
        spec[("debate", q)] = ("A", fam, [["A", "B", "A"], [deb] * 3])
        spec[("reflection", q)] = ("A", fam, [["A", "B", "A"], [ref] * 3])
    s, _ = collective_summary(_debate_turns(spec), n_boot=200, n_perm=50)
    return s


def test_debate_headline_is_accuracy_by_condition_and_their_paired_delta():
    found = rows("debate", _debate_summary(["f1", "f2", "f3"]))
    assert _names(found) == ["accuracy, debate (final majority)", "accuracy, reflection (final majority)",
                             "accuracy, debate - reflection (paired)", "wrong unanimity, debate - reflection (paired)"]
    deb, refl, delta = found[:3]
    assert deb.estimate == pytest.approx(2 / 3) and refl.estimate == pytest.approx(1 / 3) and deb.n == 3
    lo, hi = deb.interval   # a Wilson interval around the share, at the level it declares
    assert deb.level == 0.95 and 0 < lo < 2 / 3 < hi < 1
    assert delta.estimate == pytest.approx(1 / 3) and delta.clusters == 3 and not delta.single_cluster
    assert delta.level == 0.95 and delta.interval[0] <= 1 / 3 <= delta.interval[1]


def test_debate_delta_from_one_cluster_is_marked_not_an_interval():
    found = rows("debate", _debate_summary(["f1", "f1", "f1"]))   # one question family: one cluster
    delta = found[2]
    assert delta.clusters == 1 and delta.single_cluster
    assert "no interval (only 1 question family to resample" in delta.text()   # refused below MIN_UNITS


def test_readout_headline_is_committed_at_read_by_condition():
    from chorus.interventions.readout import committed_at_read

    def rows_(qid, fam, cond, hits, f=0.0):
        return [{"qid": qid, "family": fam, "condition": cond, "f": f, "changed": True, "answer": "A",
                 "argmax": "A" if h else "B"} for h in hits]
    t = pd.DataFrame(rows_("q1", "fa", "debate", [True, True]) + rows_("q2", "fb", "debate", [False])
                     + rows_("q1", "fa", "reflection", [True, False]) + rows_("q2", "fb", "reflection", [False])
                     + rows_("q1", "fa", "debate", [True, True, True], f=1.0))
    s = {"verb": "readout", "committed_at_read": committed_at_read(t, n_boot=100)}
    found = rows("influence", s)
    assert _names(found) == ["committed at read, debate, f=0", "committed at read, debate, f=1",
                             "committed at read, reflection, f=0", "committed at read, debate - reflection, f=0"]
    assert found[0].estimate == pytest.approx(2 / 3) and found[0].n == 3 and found[0].level == 0.95
    assert found[3].estimate == pytest.approx(2 / 3 - 1 / 3)
    # issue 51 item 5: each row names its level (two families here: refused, not printed as bounds)
    assert found[0].resampled == "question family" and found[0].clusters == 2
    assert "no interval (only 2 question families to resample" in found[0].text()
    assert "no interval (only 2 question families to resample" in found[3].text()
    many = pd.DataFrame([r for i in range(12) for r in rows_(f"q{i}", f"f{i}", "debate", [i % 3 > 0])])
    one = rows("influence", {"committed_at_read": committed_at_read(many, n_boot=100)})[0]
    assert "] 95% (12 question families resampled)" in one.text() and one.text().count("[") == 1


def test_knockout_headline_is_share_removed_all_layers_then_by_band():
    from chorus.interventions.knockout_pairs import summarize_knockout
    base = {"qid": ["q1", "q2"], "family": ["f1", "f2"], "margin_full": [2.0, 4.0], "margin_no_message": [0.0, 0.0],
            "unmaskable": [""] * 2}
    parts = [pd.DataFrame({**base, "kind": "all", "layer": -1, "queries": "after", "margin_knockout": [1.0, 0.0],
                           "n_masked": 30}),
             pd.DataFrame({**base, "kind": "cumulative", "layer": 10, "queries": "after",
                           "margin_knockout": [2.0, 2.0], "n_masked": 20}),
             pd.DataFrame({**base, "kind": "single", "layer": 3, "queries": "after", "margin_knockout": [2.0, 4.0],
                           "n_masked": 1})]
    k = summarize_knockout(pd.concat(parts), n_boot=50, seed=0, ci=0.9)
    found = rows("influence", {"knockout": k})           # the demo's internals stage nests it
    assert _names(found) == ["share removed, all layers (queries: after)", "share removed, layers 10-29 (queries: after)"]
    assert found[0].estimate == pytest.approx(5 / 6) and found[0].level == 0.9 and found[0].n == 2
    assert found[1].estimate == pytest.approx(2 / 6)
    # issue 51 item 5: a Fieller share names its method and the families its variances count
    assert found[0].method == "Fieller" and found[0].resampled == "question family" and found[0].clusters == 2
    assert "90% (Fieller, 2 question families)" in found[0].text() or "unbounded" in found[0].text(), found[0].text()
    assert _names(rows("influence", {"verb": "knockout", **k})) == _names(found)   # influence knockout: top level


def test_council_headline_is_bda_vs_plurality_and_baselines_with_calibration():
    results = [{"dataset": "d", "condition": c, "arm": a, "n": 10, "accuracy": acc, "ece_ew": 0.1, "brier": 0.2}
               for c in ("clean", "attack-k1") for a, acc in (("plurality", 0.6), ("verbalized", 0.5),
                                                              ("bda_per_agent", 0.7), ("ds_em", float("nan")))]
    found = rows("council", {"results": results})
    assert _names(found)[:4] == ["accuracy, bda_per_agent (clean)", "accuracy, plurality (clean)",
                                 "accuracy, ds_em (clean)", "accuracy, verbalized (clean)"]
    assert len(found) == 8 and found[0].estimate == 0.7 and found[0].n == 10 and "ECE 0.100, Brier 0.200" in found[0].detail
    nan = found[2]
    assert not nan.defined and "no task of this arm was scored" in nan.text()


def test_roleplay_headline_is_stance_errors_against_humans():
    one, three = bootstrap_ci([0.2]), bootstrap_ci([0.1, 0.2, 0.4], n_boot=200)
    s = {"cells": {"base/full_dynamics/public": {"single_error": three, "update_error": three, "convergence_error": one},
                   "human/human/public": {"single_error": three}}}
    found = rows("roleplay", s)
    assert _names(found) == [f"{k} vs humans, base/full_dynamics/public"
                             for k in ("single error", "update error", "convergence error")]
    assert found[0].interval is not None and found[0].n == 3
    assert found[2].estimate == pytest.approx(0.2) and found[2].interval is None
    assert "from 1 group" in found[2].text()   # a bootstrap over one group is said, not printed as [x, x]


def test_belief_oracle_headline_console_and_standing(tmp_path):
    from typer.testing import CliRunner

    from chorus.simulate.belief.cli import app
    out = tmp_path / "k"
    r = CliRunner().invoke(app, ["sweep", "kappa_recovery", "--set", "mode=oracle", "--set", "seeds=1",
                                 "--set", "n_agents=6", "--set", "rounds=4", "--out", str(out), "--no-plots"])
    assert r.exit_code == 0, r.output
    s = json.loads((out / "summary.json").read_text())
    found = rows("belief", s)
    assert _names(found)[0] == "kappa recovery, Spearman (recovered vs prescribed)"
    assert found[0].estimate == pytest.approx(1.0) and found[0].n == s["headline"]["kappa_levels"]
    assert run_standing(out).kind == "oracle"
    flat = " ".join(r.output.split())
    assert "kappa recovery, Spearman" in flat and "oracle mode: no language model is called" in flat


def test_every_part_declares_a_headline():
    assert {"debate", "influence", "council", "belief", "roleplay", "serving"} <= set(HEADLINES)
    assert rows("no-such-part", {"x": 1}) is None


# -- undefined values --------------------------------------------------------------------------------
def test_undefined_estimate_carries_its_reason():
    r = row("r", float("nan"), why="the appraiser returned one value")
    assert not r.defined and r.text() == "undefined: the appraiser returned one value"
    assert "undefined: " in row("r", None).text()   # a generic reason, never a bare blank
    r = row("r", 0.5, float("nan"), float("nan"), level=0.95)
    assert r.interval is None and "interval undefined" in r.text()


def test_belief_records_why_channel_pearson_is_undefined():
    from chorus.simulate.belief.analysis import pearson, pearson_undefined
    s, e = [0.1, 0.5, 0.9, 0.3], [0.7] * 4    # the appraiser read one value from every utterance
    assert np.isnan(pearson(s, e))
    assert "e is constant" in pearson_undefined(s, e, ("s", "e"))
    assert "fewer than 3" in pearson_undefined([1, 2], [3, 4])
    assert pearson_undefined(s, [0.2, 0.4, 0.8, 0.3]) is None


def _belief_llm_run(tmp_path, profile):
    run = RunDir.create(tmp_path / "b", part="belief", seeds={"root": 0})
    run.update_provenance(mode="llm", engine={"profile": profile})
    run.write_summary({"experiment": "x", "mode": "llm", "events": 10, "utterances": 8,
                       "headline": {"kappa_spearman": 0.9, "kappa_levels": 4, "kappa_median_rel_error": 0.3,
                                    "kappa_retained": 0.8, "channel_pearson": None, "fj_r2": None},
                       "undefined": {"channel_pearson": "appraised evidence e is constant (0.5 on all 8 pairs)"}})
    run.finish()
    return run.path


def test_report_shows_undefined_with_its_reason_and_headline_first(tmp_path):
    from chorus.report import render_report
    html = render_report(_belief_llm_run(tmp_path, "smollm2-135m-instruct")).read_text()
    head = html.index("id='headline'")
    assert head < html.index("id='details'") < html.index("id='plots'")   # the finding above the bookkeeping
    top = html[head:html.index("id='details'")]
    assert "kappa recovery, Spearman" in top and "channel alignment" in top
    assert "undefined: appraised evidence e is constant (0.5 on all 8 pairs)" in top
    assert "Numbers from" in top and "plumbing" in top   # the embedded model said where the numbers are
    # a value without a recorded reason is still shown as undefined in the details, never dropped
    details = html[html.index("id='details'"):html.index("id='plots'")]
    assert "fj_r2" in details and "undefined" in details


def test_undefined_reasons_rules_paths_and_beside():
    from chorus.core.undefined import NO_REASON, match, reasons, undefined_paths, why_undefined
    s = {"a": {"x": float("nan"), "y": 1.0}, "rows": [{"est": 1.0, "lo": float("nan")}, {"est": None}],
         "undefined": {"ignored": "its own entries are not values"}}
    assert list(undefined_paths(s)) == ["a.x", "rows[].lo", "rows[].est"]
    assert list(undefined_paths(s, none=False)) == ["a.x", "rows[].lo"]
    rules = {"*.y": "never undefined here", "rows[].lo": "too few rows", "*.x": "x needs two", "*": "anything"}
    assert reasons(s, rules) == {"rows[].lo": "too few rows", "*.x": "x needs two", "*": "anything"}
    assert match("a.x", {"a.x": "exact", "*": "pattern"}) == "exact" and match("b", {"*": "p"}) == "p"
    assert why_undefined("r.lo", {}, {"interval_why": "1 unit", "why": "w"}) == "1 unit"
    assert why_undefined("r.mean", {}, {"interval_why": "1 unit", "why": "w"}) == "w"
    assert why_undefined("r.mean", None, None) == NO_REASON


def test_every_undefined_number_of_a_debate_run_is_shown_with_its_reason(tmp_path):
    """The debate's declared rules explain every NaN its summary can hold, and "all numbers" shows each
    one as undefined with that reason (never bare, never "–")."""
    from chorus.core.undefined import NO_REASON, match, reasons, undefined_paths
    from chorus.report import render_report
    from chorus.simulate.debate.experiment import UNDEFINED_WHY
    s = _debate_summary(["f1", "f2", "f3"])
    nan = list(undefined_paths(s, none=False))
    assert "conditions.reflection.n_eff_initial" in nan or "paired.n_eff_delta.ci_low" in nan, nan
    s["undefined"] = reasons(s, UNDEFINED_WHY)
    assert all(match(p, s["undefined"]) for p in nan), [p for p in nan if not match(p, s["undefined"])]
    run = RunDir.create(tmp_path / "d", part="debate", seeds={"root": 0})
    run.write_summary({"experiment": "x", "model": BIG[0], **s})
    run.finish()
    html = render_report(run.path).read_text()
    every = html[html.index("all numbers of this run"):html.index("id='plots'")]
    assert NO_REASON not in every and "undefined: n_eff = I / (1 + (I - 1) rho) needs" in every


def test_console_headline_and_standing(tmp_path):
    path = _belief_llm_run(tmp_path, BIG[0])
    con = Console(record=True, width=200)
    print_headline(con, "belief", path, json.loads((path / "summary.json").read_text()))
    text = con.export_text()
    assert "kappa recovery, Spearman" in text and "undefined: appraised evidence e is constant" in text
    assert f"numbers from {BIG[0]}" in text and "plumbing" not in text   # a user's model is never "plumbing"


def test_single_cluster_interval_marked_in_report(tmp_path):
    from chorus.report import render_report
    run = RunDir.create(tmp_path / "d", part="debate", seeds={"root": 0})
    run.write_summary({"experiment": "x", "model": BIG[0], **_debate_summary(["f1", "f1", "f1"])})
    run.finish()
    html = render_report(run.path).read_text()
    top = html[html.index("id='headline'"):html.index("id='details'")]
    assert "no interval (only 1 question family to resample" in top
    assert "this model&#x27;s results as run" in top and "plumbing" not in html
    # the same bootstrap rows under "all numbers" carry the mark too
    assert html.count("only 1 question family to resample") > 1


# -- where the numbers come from ------------------------------------------------------------------------
def test_standing_embedded_model_oracle_synthetic_unrecorded(tmp_path):
    assert standing(["smollm2-135m-instruct"]).kind == "embedded"
    assert "plumbing" in standing(["smollm2-135m-instruct", BIG[0]]).text
    m = standing([BIG[0], None, ""])
    assert m.kind == "model" and m.models == (BIG[0],) and "plumbing" not in m.text
    # a mode that calls no model wins over whatever model a config names
    assert standing(["smollm2-135m-instruct"], mode="oracle").kind == "oracle"
    assert standing([], mode="synthetic").kind == "synthetic"
    assert standing([]).kind == "unrecorded"
    assert "not human behaviour" in standing([BIG[0]], data="SYNTHETIC fixture data: not human behaviour").text


def test_run_standing_from_the_run_files(tmp_path):
    from conftest import hand_debate_run
    from chorus.simulate.debate.questions import Item
    hand = hand_debate_run(tmp_path, [Item("q1", "d", "s", "f", "Q?", ["x", "y"], ["A", "B"], "A")])
    assert run_standing(hand).kind == "unrecorded"      # hand-written turns: no engine recorded
    path = _belief_llm_run(tmp_path, BIG[1])
    assert run_standing(path).kind == "model" and run_standing(path).models == (BIG[1],)
    demo = RunDir.create(tmp_path / "rp", part="roleplay")
    demo.update_provenance(model={"profile": "smollm2-135m-instruct"}, data={"synthetic": True})
    st = run_standing(demo.path)
    assert st.kind == "embedded" and "not human behaviour" in st.text


def test_an_analysis_stands_where_its_sources_stand(tmp_path):
    """An analysis records no model: its numbers stand where its sources do (a trace file where the run it
    lies in stands), sources of different standings are said one by one, and no record reads unrecorded."""
    from chorus.aggregate.trace import dump_traces
    from chorus.aggregate.synthetic_councils import CouncilSpec, generate_council
    from chorus.simulate.council.campaign_synthetic import write_store
    from chorus.serving.standing import combined, source_standing, sources_standing
    store = tmp_path / "store"
    write_store(store, n_questions=10, seeds=1, datasets=(("claims_a", 2, (0.8, 0.7, 0.65)),))
    syn = next((store / "traces").glob("*.jsonl.gz"))
    live = RunDir.create(tmp_path / "live", part="council")
    live.update_provenance(engines={"A1": {"profile": "smollm2-135m-instruct"}, "A2": {"profile": BIG[0]}})
    (live.path / "traces").mkdir()
    emb = dump_traces(generate_council(CouncilSpec(n_tasks=10, K=2, reliabilities=(0.8, 0.7, 0.6)), seed=0),
                      live.path / "traces" / "x__clean.jsonl.gz")
    bare = dump_traces(generate_council(CouncilSpec(n_tasks=10, K=2, reliabilities=(0.8, 0.7, 0.6)), seed=1),
                       tmp_path / "bare.jsonl.gz")
    assert source_standing(syn).kind == "synthetic" and source_standing(emb).kind == "embedded"
    assert source_standing(bare).kind == "unrecorded"
    one = RunDir.create(tmp_path / "flips", part="aggregate")
    one.update_provenance(analysis="aggregate flips", sources=[{"path": str(emb), "resolved": str(emb.resolve())}])
    assert run_standing(one.path).kind == "embedded" and "plumbing" in run_standing(one.path).text
    mixed = sources_standing([{"path": str(syn)}, {"path": str(emb)}])
    assert mixed.kind == "mixed" and mixed.embedded and mixed.kinds == ("synthetic", "embedded")
    assert str(syn) in mixed.text and str(emb) in mixed.text and mixed.caveat == mixed.text
    assert combined([source_standing(syn), source_standing(syn)]).kind == "synthetic"


def test_demo_overview_shows_each_stage_headline_and_standing(tmp_path):
    from chorus.report import render_report
    demo = RunDir.create(tmp_path / "demo", part="demo", stages=["serving", "belief_oracle"])
    serving = {"readout_items": 8, "readout_accuracy": 0.625, "structured_requests": 8, "structured_conformed": 8}
    oracle = {"experiment": "o", "mode": "oracle", "events": 20, "utterances": 6,
              "headline": {"kappa_spearman": None, "kappa_levels": 2, "kappa_median_rel_error": 0.0, "kappa_retained": 1.0},
              "undefined": {"kappa_spearman": "needs at least 3 kappa levels with a recovered estimate (2)"}}
    demo.write_summary({"size": "tiny", "profile": "smollm2-135m-instruct", "stages": {
        "serving": {"status": "done", "title": "Serving", "summary": serving},
        "belief_oracle": {"status": "done", "title": "Belief oracle", "summary": oracle}}})
    for name, part, summ, prov in (("serving", "serving", serving, {"model": {"profile": "smollm2-135m-instruct"}}),
                                   ("belief_oracle", "belief", oracle, {"mode": "oracle"})):
        st = RunDir.create(demo.path / name, part=part)
        st.update_provenance(**prov)
        st.write_summary(summ)
        st.finish()
    demo.finish()
    html = render_report(demo.path).read_text()
    over = html[html.index("id='overview'"):html.index("id='stage-serving'")]
    assert "forced-choice readout accuracy: 0.625" in over and "n=8" in over
    assert "undefined: needs at least 3 kappa levels" in over    # shown with its reason, not dropped
    assert "plumbing" in over and "oracle mode: no language model is called" in over


def test_belief_headline_prints_no_interval_without_its_level():
    """Issue 51 item 5: the belief headline's rows are point values (Spearman, median error, shares) and print
    no bounds; the per-kappa intervals, with their level, live in the kappa table."""
    from conftest import assert_intervals_name_levels
    s = json.loads(json.dumps({"mode": "llm", "events": 10, "utterances": 8,
                               "headline": {"kappa_spearman": 0.9, "kappa_levels": 4, "kappa_median_rel_error": 0.3,
                                            "kappa_retained": 0.8, "channel_pearson": 0.5,
                                            "kappa_spearman_seeds": 3, "kappa_spearman_by_seed_min": 0.8}}))
    found = rows("belief", s)
    assert len(found) == 5 and all(r.interval is None and r.level is None for r in found)
    assert assert_intervals_name_levels("\n".join(r.text() for r in found)) == 0
