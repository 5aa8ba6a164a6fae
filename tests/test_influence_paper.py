"""``chorus.papers.influence`` on hand-made run directories: each section reads its runs' summary numbers
as written, knows a long debate from a short one, and refuses what is not a run. The real-model path:
tests/test_debate_e2e.py::test_influence_paper_from_real_runs."""
from __future__ import annotations

import json

import pytest

from chorus.papers.influence import PaperError, SECTIONS, build_paper, export


def _run(root, name, part, summary):
    d = root / name
    (d / "plots").mkdir(parents=True)
    (d / "provenance.json").write_text(json.dumps({"part": part}))
    (d / "summary.json").write_text(json.dumps(summary))
    return d


KNOCK = {"verb": "knockout", "model": "m1", "n_pairs": 4, "message_effect": {"mean": 2.0, "ci_low": 1.0, "ci_high": 3.0},
         "curves": [{"kind": "all", "layer": -1, "queries": "decision", "mixer": "attention", "share_removed": 0.8,
                     "ci_low": 0.5, "ci_high": 1.1, "n": 4},
                    {"kind": "single", "layer": 3, "queries": "decision", "mixer": "attention", "share_removed": 0.1,
                     "ci_low": 0.0, "ci_high": 0.2, "n": 4},
                    {"kind": "single", "layer": 5, "queries": "decision", "mixer": "attention", "share_removed": 0.3,
                     "ci_low": 0.1, "ci_high": 0.4, "n": 4}]}
TRANSFER = {"verb": "transfer", "model": "m1", "curve": [], "by_sender": [
    {"sender_right": False, "arm": "transfer", "layer_s": 2, "layer_r": 2, "shift": 0.4, "ci_low": 0.1, "ci_high": 0.7,
     "n": 6}]}
LONG = {"model": "m2", "rounds": 12, "conditions": {}, "c2": {"final_round": 12, "final_round_curves": [
    {"condition": "debate", "round": 12, "unanimity": 0.99}]}, "stance_dynamics": {}}


def test_sections_read_the_numbers_as_written(tmp_path):
    k = _run(tmp_path, "knock", "influence", KNOCK)
    t = _run(tmp_path, "transfer", "influence", TRANSFER)
    lg = _run(tmp_path, "long", "debate", LONG)
    (k / "plots" / "knockout_curves.png").write_bytes(b"png")
    nb = export([k, t, lg])
    assert list(nb["sections"]) == [s.key for s in SECTIONS] and nb["models"] == ["m1", "m2"]
    # no embedded model made these numbers: the page says whose they are, never "plumbing"
    assert "numbers from m1, m2" in nb["note"] and "plumbing" not in nb["note"]
    rows = nb["sections"]["s44_knockout"]["rows"]
    assert [(r["condition"], r["value"]) for r in rows] == [
        ("message effect (logits)", 2.0), ("all / decision / attention", 0.8),
        ("best single layer / decision / attention (unadjusted: as if chosen in advance; resume the run with "
         "`chorus influence knockout` for the family-wise interval)", 0.3)]
    assert rows[2]["layer"] == 5 and all(r["run"] == "knock" for r in rows)
    assert rows[2]["interval"] == "percentile bootstrap (run made before Fieller intervals)"
    tr = nb["sections"]["fig8_transfer"]["rows"]
    assert tr == [{"run": "transfer", "model": "m1", "arm": "transfer", "sender": "wrong", "layers": "2->2",
                   "share": None, "shift": 0.4, "ci_low": 0.1, "ci_high": 0.7, "level": "95%, level not recorded", "n": 6}]
    assert nb["sections"]["table14_long"]["rows"][0] == {"run": "long", "model": "m2", "round": 12,
                                                        "condition": "debate", "unanimity": 0.99}
    assert "chorus debate run default" in nb["sections"]["s5_outcomes"]["missing"]   # no 3-round debate given
    # a given run that holds none of a section says so, with the command
    assert nb["sections"]["numeric"]["missing"].startswith("the runs given (long) hold none of it")
    p, _ = build_paper([k, t, lg], tmp_path / "out")
    md = p.read_text()
    assert "![knock__knockout_curves.png](figures/knock__knockout_curves.png)" in md
    assert (tmp_path / "out" / "figures" / "knock__knockout_curves.png").read_bytes() == b"png"
    assert md.index("§4.4") < md.index("Figure 8") < md.index("Table 14")
    from conftest import assert_intervals_name_levels   # issue 51 item 5: every interval names its level
    assert assert_intervals_name_levels(md) > 0


def test_bad_inputs_name_the_directory(tmp_path):
    with pytest.raises(PaperError, match="no run directory given"):
        export([])
    with pytest.raises(PaperError, match=r"nope: not a run directory \(no provenance.json\)"):
        export([tmp_path / "nope"])
    b = _run(tmp_path, "belief", "belief", {"model": "x"})
    with pytest.raises(PaperError, match="belief: neither a debate run nor an influence run .*'belief'"):
        export([b])
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "provenance.json").write_text("{}")
    with pytest.raises(PaperError, match="half: no summary.json"):
        export([tmp_path / "half"])


def test_knockout_rows_show_the_family_wise_best_layer_and_unbounded_shares(tmp_path):
    """A summary with ``best_single_layer`` gives two rows (family-wise with its p-value, then the
    unadjusted one, labelled); an unbounded share prints UNBOUNDED, never a finite interval."""
    from chorus.core.stats import UNBOUNDED
    why = UNBOUNDED + ": the denominator's 95% interval is [-0.2, 1.1]"
    best = {"mixer": "attention", "queries": "decision", "layer": 5, "share_removed": 0.3, "ci_low": -0.05,
            "ci_high": 0.65, "p_value": 0.2, "unbounded": None, "interval": "family-wise over 2 layers", "n": 4,
            "unadjusted": {"ci_low": 0.1, "ci_high": 0.4, "interval": "fieller", "unbounded": None}}
    s = {**KNOCK, "curves": [{**KNOCK["curves"][0], "ci_low": None, "ci_high": None, "unbounded": why,
                              "interval": "fieller"}] + KNOCK["curves"][1:], "best_single_layer": [best]}
    k = _run(tmp_path, "knock", "influence", s)
    rows = export([k])["sections"]["s44_knockout"]["rows"]
    assert [r["condition"] for r in rows] == [
        "message effect (logits)", "all / decision / attention", "best single layer / decision / attention",
        "best single layer / decision / attention (unadjusted: as if chosen in advance)"]
    assert (rows[1]["ci_low"], rows[1]["ci_high"], rows[1]["interval"]) == (UNBOUNDED, UNBOUNDED, why)
    assert (rows[2]["ci_low"], rows[2]["ci_high"], rows[2]["p_value"]) == (-0.05, 0.65, 0.2)
    assert (rows[3]["ci_low"], rows[3]["ci_high"], rows[3]["interval"]) == (0.1, 0.4, "fieller")
    p, _ = build_paper([k], tmp_path / "out")
    assert f"| {UNBOUNDED} | {UNBOUNDED} |" in p.read_text()


# -- §5.1 debate vs the compute-matched vote, and Table 13 by domain, from a scripted debate run --------
def _scripted_debate(tmp_path):
    """A real (tiny) debate run with the vote arm: an engine double whose answers are a function of the
    call's seed, over four questions in two domains (two families each)."""
    from types import SimpleNamespace

    from chorus.serving.types import Completion
    from chorus.simulate.debate.config import DebateConfig
    from chorus.simulate.debate.experiment import run_debate
    from chorus.simulate.debate.questions import validate_item, write_bench

    class Script:
        max_model_len = 10 ** 6

        def render(self, messages):
            return SimpleNamespace(ids=[0] * 10)

        def provenance(self):
            return {"profile": "script"}

        def chat(self, convs, *, temperature, top_p, max_tokens, seed, progress=None):
            return [Completion(text=f"So the answer is {'ABC'[s % 3]}.", prompt_tokens=10, completion_tokens=5 + s % 17,
                               finish_reason="stop") for s in seed]

    items = [validate_item({"id": f"q{i}", "domain": ("knowledge", "values")[i % 2], "subdomain": "toy",
                            "family": f"f{i % 4}", "question": f"Question {i}?", "options": ["x", "y", "z"],
                            "reference": "A"}) for i in range(8)]
    write_bench(items, tmp_path / "bench.jsonl")
    cfg = DebateConfig(name="vote", rounds=1, bench={"path": str(tmp_path / "bench.jsonl")},
                       generation={"max_tokens": 100}, analysis={"n_boot": 50, "n_perm": 20}, voting={"enabled": True})
    run, s = run_debate(cfg, tmp_path / "run", engine=Script(), make_plots=False)
    return run.path, s


def _bounds_or_refused(r, d, key="value", est="estimate"):
    """The row's interval is the record's, or refused (bounds cells say so, level says why) where the
    record's bootstrap resampled fewer than MIN_UNITS units (issue 51)."""
    from chorus.core.stats import MIN_UNITS
    n = d.get("n_units", d.get("n_clusters"))
    assert r[key] == d[est]
    if n is not None and n < MIN_UNITS:
        assert (r["ci_low"], r["ci_high"]) == ("refused", "refused") and f"only {n} question famil" in r["level"]
    else:
        assert (r["ci_low"], r["ci_high"]) == (d["ci_low"], d["ci_high"]) and "question famil" in r["level"]


def test_vote_and_domain_sections_read_the_runs_own_summary(tmp_path):
    from chorus.core.runs import file_sha256
    path, s = _scripted_debate(tmp_path)
    nb = export([path])
    sec = nb["sections"]["s51_vote"]
    assert sec["runs"][0]["summary_sha256"] == file_sha256(path / "summary.json")
    rows = {(r["comparison"], r["metric"]): r for r in sec["rows"]}
    v = s["vote"]
    for arm, m in v["arms"].items():
        r = rows[(arm, "accuracy (final majority)")]
        _bounds_or_refused(r, m["accuracy"])
        assert rows[(arm, "wrong unanimity")]["value"] == m["wrong_unanimity"]["estimate"]
    d = next(d for d in v["deltas"] if (d["a"], d["b"]) == ("debate_final_majority", "vote_majority"))
    r = rows[("debate - vote", "accuracy (final majority)")]
    assert (r["p_perm"], r["n"]) == (d["p_perm"], d["n"])
    _bounds_or_refused(r, d, est="delta")
    # the interval says what it resampled: the question families of the paired questions
    assert r["interval"] == f"paired bootstrap over {d['n_clusters']} question families (50 resamples)"
    assert rows[("compute matching", "questions matched / cap hits")]["value"] == f"{v['n_matched']} / {v['n_cap_hits']}"
    # Table 13 by domain: each domain's block as the summary holds it
    t13 = nb["sections"]["table13_domain"]["rows"]
    assert {r["domain"] for r in t13} == {"knowledge", "values"} == set(s["by_domain"])
    for r in t13:
        b = s["by_domain"][r["domain"]]
        if r["row"] in b["conditions"]:
            assert {k: r[k] for k in b["conditions"][r["row"]]} == b["conditions"][r["row"]]
        else:
            d = next(d for d in b["deltas"] if d["comparison"] == r["row"])
            _bounds_or_refused(r, d, key="delta", est="delta")
    md = build_paper([path], tmp_path / "out")[0].read_text()
    assert md.index("§5.1: debate vs the compute-matched") < md.index("Table 13 (§C.2) by domain")
    from conftest import assert_intervals_name_levels   # issue 51 item 5: every interval names its level
    assert assert_intervals_name_levels(md) > 0


def test_domain_numbers_are_the_domain_alone():
    """A domain's block equals condition_metrics on that domain's questions alone (the same definitions)."""
    import pandas as pd

    from chorus.simulate.debate.domains import domain_table
    from chorus.simulate.debate.metrics import condition_metrics, question_table
    rows = []
    for i in range(6):
        for cond in ("debate", "reflection"):
            for rnd in (0, 1):
                for a in range(3):
                    ans = "A" if (i + a + rnd * (cond == "debate")) % 3 else "B"
                    rows.append({"qid": f"q{i}", "family": f"f{i}", "domain": "d1" if i < 3 else "d2", "subdomain": "s",
                                 "agent": a, "round": rnd, "condition": cond, "answer": ans, "parsed": True,
                                 "truncated": False, "reference": "A"})
    turns = pd.DataFrame(rows)
    q = question_table(turns)
    t = domain_table(q, turns, n_boot=20)
    for dom in ("d1", "d2"):
        alone = condition_metrics(q[q["domain"] == dom], turns[turns["domain"] == dom], "debate")
        assert t[dom]["conditions"]["debate"]["acc_final_majority"] == alone["acc_final_majority"]
        assert t[dom]["conditions"]["debate"]["wrong_unanimity"] == alone["wrong_unanimity"]
        assert t[dom]["n_paired"] == 3
