"""Seed 002 §C.2 collective outcomes (simulate/debate/outcomes.py) on hand-built turns tables:
curves by round, initially split 2-1 groups, turn-12 contested wrong agreement, wrong initial majority."""
import json
import math

import numpy as np
import pandas as pd
import pytest

from chorus.simulate.debate import effective_voters
from chorus.simulate.debate.metrics import collective_summary, question_table
from chorus.simulate.debate.outcomes import (COLUMNS, by_round, c2_summary, contested_wrong_agreement, initially_split,
                                      n_eff_stack, split_outcomes, wrong_majority_outcomes)

NB = dict(n_boot=100, seed=0)


def _turns(spec):
    """spec: {(cond, qid): (reference, family, [[round0 answers], [round1], ...])}"""
    rows = []
    for (cond, qid), (ref, fam, rounds) in spec.items():
        for r, answers in enumerate(rounds):
            for a, ans in enumerate(answers):
                rows.append({"qid": qid, "family": fam, "domain": "d", "subdomain": "s", "agent": a, "round": r,
                             "condition": cond, "shared": r == 0, "response": str(ans), "answer": ans,
                             "parsed": ans is not None, "truncated": False, "reference": ref,
                             "correct": None if ref is None or ans is None else ans == ref,
                             "prompt_tokens": 1, "completion_tokens": 1, "cached": False, "seed": 0})
    return pd.DataFrame(rows)


def _both(spec):
    """{qid: (ref, round0, debate rounds 1.., reflection rounds 1..)}: round 0 shared, one family per question."""
    out = {}
    for qid, (ref, r0, deb, ref_rounds) in spec.items():
        out[("debate", qid)] = (ref, f"f_{qid}", [r0, *deb])
        out[("reflection", qid)] = (ref, f"f_{qid}", [r0, *ref_rounds])
    return _turns(out)


def _get(tab, cond, metric, col="estimate"):
    row = tab[(tab["condition"] == cond) & (tab["metric"] == metric)]
    assert len(row) == 1, (cond, metric)
    return row[col].iloc[0]


def _inside(tab):
    ok = tab.dropna(subset=["estimate", "ci_low", "ci_high"])
    assert len(ok)
    assert ((ok["ci_low"] <= ok["estimate"] + 1e-12) & (ok["estimate"] <= ok["ci_high"] + 1e-12)).all()


def test_split_definition_is_two_one_for_three_agents_and_unique_plurality_otherwise():
    t = _turns({("debate", "q21"): ("A", "f", [["A", "A", "B"]]),       # 2-1: split
                ("debate", "q111"): ("A", "f", [["A", "B", "C"]]),      # 1-1-1: no unique plurality
                ("debate", "q3"): ("A", "f", [["A", "A", "A"]]),        # unanimous
                ("debate", "qnone"): ("A", "f", [["A", None, "B"]]),    # not all parsed
                ("debate", "i4_211"): ("A", "f", [["A", "A", "B", "C"]]),  # I = 4: 2-1-1 kept
                ("debate", "i4_31"): ("A", "f", [["A", "A", "A", "B"]]),   # 3-1 kept
                ("debate", "i4_22"): ("A", "f", [["A", "A", "B", "B"]])})  # 2-2 tie dropped
    q = question_table(t).set_index("qid")
    s = initially_split(q)
    assert s.to_dict() == {"i4_211": True, "i4_22": False, "i4_31": True, "q111": False, "q21": True, "q3": False,
                           "qnone": False}


SPLIT = {  # ref, round 0, debate rounds 1-2, reflection rounds 1-2
    "s1": ("A", ["A", "A", "B"], [["A", "A", "A"], ["A", "A", "A"]], [["A", "A", "B"], ["A", "A", "A"]]),
    "s2": ("A", ["B", "B", "A"], [["B", "B", "B"], ["B", "B", "B"]], [["B", "B", "A"], ["A", "B", "B"]]),
    "s3": ("A", ["A", "A", "C"], [["A", "C", "C"], ["C", "C", "C"]], [["A", "A", "C"], ["A", "A", "C"]]),
    "s4": ("A", ["A", "B", "B"], [["A", "B", "B"], ["A", "B", "B"]], [["A", "B", "B"], ["A", "B", "B"]]),
    "t1": ("A", ["A", "B", "C"], [["A", "A", "A"], ["A", "A", "A"]], [["A", "B", "C"], ["A", "B", "C"]]),  # 1-1-1
    "u1": ("A", ["A", "A", "A"], [["A", "A", "A"], ["A", "A", "A"]], [["A", "A", "A"], ["A", "A", "A"]]),
}


def test_split_outcomes_by_hand():
    q = question_table(_both(SPLIT))
    tab = split_outcomes(q, **NB)
    assert list(tab.columns) == COLUMNS and (tab["round"] == 2).all()
    # debate: s1, s2, s3 unanimous at round 2 of the four 2-1 groups; reflection: s1 only
    assert _get(tab, "debate", "unanimity") == pytest.approx(3 / 4)
    assert _get(tab, "debate", "unanimity", "n_groups") == 4 and _get(tab, "debate", "unanimity", "n_events") == 3
    assert _get(tab, "reflection", "unanimity") == pytest.approx(1 / 4)
    assert _get(tab, "debate/reflection", "unanimity_ratio") == pytest.approx(3.0)
    assert _get(tab, "debate/reflection", "unanimity_ratio", "n_groups") == 4
    # settled on the initial plurality: s1 (A) and s2 (B) yes, s3 (C, the minority) no
    assert _get(tab, "debate", "settled_on_initial_plurality") == pytest.approx(2 / 3)
    assert _get(tab, "debate", "settled_on_initial_plurality", "n_groups") == 3
    assert _get(tab, "debate", "settled_on_initial_plurality", "n_events") == 2
    assert _get(tab, "reflection", "settled_on_initial_plurality") == pytest.approx(1.0)
    # n_eff at round 2 on the split groups, correctness [[1,1,1],[0,0,0],[0,0,0],[1,0,0]]:
    # r(a0,a1) = r(a0,a2) = 1/sqrt(3), r(a1,a2) = 1
    rho = (2 / math.sqrt(3) + 1) / 3
    assert _get(tab, "debate", "n_eff") == pytest.approx(3 / (1 + 2 * rho))
    assert _get(tab, "debate", "n_eff") == pytest.approx(effective_voters(np.array([[1, 1, 1], [0, 0, 0], [0, 0, 0],
                                                                                   [1, 0, 0]])))
    assert _get(tab, "debate", "n_eff", "n_groups") == 4 and pd.isna(_get(tab, "debate", "n_eff", "n_events"))
    _inside(tab)
    # the existing lock-in metric (all split groups with a unique plurality) agrees
    s, _ = collective_summary(_both(SPLIT), n_boot=0, n_perm=0)
    assert s["conditions"]["debate"]["lockin_initial_plurality"] == pytest.approx(2 / 3)


def _long(final, r0):
    """12 rounds: round-0 answers held to round 11, ``final`` at round 12."""
    return [r0] * 12 + [final]


def test_contested_wrong_agreement_at_turn_12():
    spec = {}
    for qid, ref, r0, deb, refl in [
        ("c1", "A", ["A", "A", "B"], ["B", "B", "B"], ["A", "A", "B"]),   # debate agrees on a wrong answer
        ("c2", "A", ["A", "B", "C"], ["A", "A", "A"], ["C", "C", "C"]),   # 1-1-1 is contested too
        ("c3", "A", ["B", "B", "A"], ["B", "B", "B"], ["B", "B", "A"]),
        ("u1", "A", ["B", "B", "B"], ["B", "B", "B"], ["B", "B", "B"]),   # wrong but never contested: excluded
        ("n1", None, ["A", "B", "B"], ["B", "B", "B"], ["B", "B", "B"]),  # unlabelled: excluded
    ]:
        spec[("debate", qid)] = (ref, f"f_{qid}", _long(deb, r0=r0))
        spec[("reflection", qid)] = (ref, f"f_{qid}", _long(refl, r0=r0))
    q = question_table(_turns(spec))
    tab = contested_wrong_agreement(q, **NB)
    assert (tab["round"] == 12).all()
    assert _get(tab, "debate", "wrong_agreement") == pytest.approx(2 / 3)
    assert _get(tab, "reflection", "wrong_agreement") == pytest.approx(1 / 3)
    assert list(tab["n_groups"]) == [3, 3] and list(tab["n_events"]) == [2, 1]
    _inside(tab)
    # contested groups are by definition not unanimous at round 0
    assert (contested_wrong_agreement(q, at_round=0, **NB)["estimate"] == 0).all()
    with pytest.raises(ValueError, match="at_round"):
        contested_wrong_agreement(q, at_round=13)
    # curves by round: round 12 over all fully parsed labelled groups includes u1
    cur = by_round(q, n_boot=20)  # 13 rounds: few resamples keep it fast
    wa = cur[(cur["metric"] == "wrong_agreement") & (cur["round"] == 12)].set_index("condition")
    assert wa.loc["debate", "estimate"] == pytest.approx(3 / 4) and wa.loc["debate", "n_groups"] == 4
    assert sorted(cur["round"].unique()) == list(range(13))


WRONG = {  # ref, round 0, debate round 1, reflection round 1
    "w1": ("A", ["B", "B", "A"], [["B", "B", "B"]], [["B", "B", "A"]]),
    "w2": ("A", ["C", "C", "A"], [["A", "A", "A"]], [["C", "C", "C"]]),
    "w3": ("A", ["B", "B", "B"], [["B", "B", "B"]], [["B", "A", "B"]]),
    "r1": ("A", ["A", "A", "B"], [["B", "B", "B"]], [["B", "B", "B"]]),  # right initial majority: excluded
    "p1": ("A", ["B", None, "B"], [["B", "B", "B"]], [["B", "B", "B"]]),  # not fully parsed: excluded
    "t1": ("A", ["A", "B", "C"], [["B", "B", "B"]], [["C", "C", "C"]]),  # tie: in iff the seeded draw is not A
}


def test_wrong_initial_majority_by_hand_and_as_in_metrics():
    turns = _both(WRONG)
    q = question_table(turns)
    tab = wrong_majority_outcomes(q, **NB)
    t1_in = not q[(q["qid"] == "t1") & (q["condition"] == "debate")]["majority_correct_0"].iloc[0]
    n = 3 + t1_in
    # debate: w1 and w3 end unanimously wrong (+ t1); reflection: w2 (+ t1)
    assert _get(tab, "debate", "unanimous_wrong") == pytest.approx((2 + t1_in) / n)
    assert _get(tab, "reflection", "unanimous_wrong") == pytest.approx((1 + t1_in) / n)
    assert _get(tab, "debate", "unanimous_wrong", "n_groups") == n
    assert _get(tab, "debate-reflection", "unanimous_wrong_delta") == pytest.approx(1 / n)
    assert _get(tab, "debate-reflection", "unanimous_wrong_delta", "n_groups") == n
    _inside(tab)
    s, _ = collective_summary(turns, n_boot=0, n_perm=0)  # the same definition as the headline metric
    for cond in ("debate", "reflection"):
        assert _get(tab, cond, "unanimous_wrong") == pytest.approx(
            s["conditions"][cond]["wrong_unanimity_given_wrong_initial"])


def test_by_round_curves_by_hand_and_as_in_metrics():
    turns = _both(SPLIT)
    q = question_table(turns)
    cur = by_round(q, **NB)
    assert set(cur["metric"]) == {"unanimity", "wrong_agreement", "n_eff"} and len(cur) == 2 * 3 * 3
    d = cur[cur["condition"] == "debate"].set_index(["metric", "round"])
    # debate unanimity over the 6 groups: round 0 u1; round 1 s1 s2 t1 u1; round 2 s1 s2 s3 t1 u1
    assert [d.loc[("unanimity", r), "estimate"] for r in range(3)] == pytest.approx([1 / 6, 4 / 6, 5 / 6])
    assert [d.loc[("wrong_agreement", r), "estimate"] for r in range(3)] == pytest.approx([0, 1 / 6, 2 / 6])
    assert d.loc[("unanimity", 2), "n_groups"] == 6 and d.loc[("unanimity", 2), "n_events"] == 5
    s, _ = collective_summary(turns, n_boot=0, n_perm=0)
    for cond in ("debate", "reflection"):
        c = cur[cur["condition"] == cond].set_index(["metric", "round"])
        m = s["conditions"][cond]
        for r in range(3):
            assert c.loc[("unanimity", r), "estimate"] == pytest.approx(m["unanimity_by_round"][r])
            assert c.loc[("n_eff", r), "estimate"] == pytest.approx(m["n_eff_by_round"][r], nan_ok=True)
    _inside(cur[cur["metric"] != "n_eff"])


def test_n_eff_stack_is_effective_voters():
    rng = np.random.default_rng(0)
    X = rng.integers(0, 2, (6, 30, 4)).astype(float)
    X[1, :, 2] = 1.0            # a constant agent: its pairs are left out
    X[2, :, 1] = X[2, :, 0]     # identical agents
    X[3] = 1.0                  # no defined pair: NaN
    got = n_eff_stack(X)
    for t in range(6):
        assert got[t] == pytest.approx(effective_voters(X[t]), rel=1e-12, nan_ok=True)
    assert np.isnan(got[3])
    assert n_eff_stack(np.array([[[1, 0], [0, 1]]], float))[0] == np.inf  # rho = -1/(I-1)
    assert np.isnan(n_eff_stack(np.ones((2, 1, 3)))).all()              # one question


def test_empty_cells_are_nan_with_zero_counts():
    # every group unanimous at round 0 and unlabelled: no split, contested or wrong-majority group
    spec = {qid: (None, ["A", "A", "A"], [["A", "A", "A"]], [["A", "A", "A"]]) for qid in ("a", "b")}
    q = question_table(_both(spec))
    summ, tabs = c2_summary(q, **NB)
    for name in ("c2_split", "c2_contested_wrong_agreement", "c2_wrong_initial_majority"):
        tab = tabs[name]
        assert len(tab) and tab["estimate"].isna().all() and (tab["n_groups"] == 0).all(), name
    cur = tabs["outcomes_by_round"]
    assert cur[cur["metric"] == "unanimity"]["estimate"].eq(1.0).all()
    assert cur[cur["metric"] != "unanimity"]["estimate"].isna().all()
    json.dumps(summ, allow_nan=True)  # summary.json-ready: plain types, None for missing counts
    assert summ["final_round"] == 1 and summ["split"][0]["n_events"] == 0
    # an empty question table: empty tables with the same columns, no error
    summ0, tabs0 = c2_summary(q.iloc[:0], **NB)
    assert all(list(t.columns) == COLUMNS and not len(t) for t in tabs0.values())
    # one condition only: no paired rows
    one = split_outcomes(question_table(_both(SPLIT)).query("condition == 'debate'"), **NB)
    assert set(one["condition"]) == {"debate"}


def test_report_writes_c2_tables_summary_and_plots(tmp_path):
    from chorus.core.runs import RunDir
    from chorus.simulate.debate.config import DebateConfig
    from chorus.simulate.debate.experiment import report
    cfg = DebateConfig(name="c2", rounds=2, analysis={"n_boot": 50, "n_perm": 50})
    run = RunDir.create(tmp_path / "run", part="debate", config=cfg)
    run.write_table("turns", _both(SPLIT))
    s = report(run.path)
    assert s["c2"]["final_round"] == 2 and "conditions" in s and "paired" in s  # existing keys kept
    split = {(r["condition"], r["metric"]): r for r in s["c2"]["split"]}
    assert split[("debate/reflection", "unanimity_ratio")]["estimate"] == pytest.approx(3.0)
    for name in ("outcomes_by_round", "c2_split", "c2_contested_wrong_agreement", "c2_wrong_initial_majority"):
        assert (run.path / "tables" / f"{name}.parquet").is_file() and (run.path / "plots" / f"{name}.png").is_file()
    back = run.read_table("c2_split")
    assert _get(back, "debate", "unanimity", "n_events") == 3
    from chorus.report import render_report
    html = render_report(run.path).read_text()
    assert "c2.split" in html and "unanimity_ratio" in html


def test_rows_count_the_families_their_intervals_resample(tmp_path):
    """Issue 51 item 5: ``n_groups`` counts questions; ``n_clusters`` the question families resampled (here two
    questions to a family), and the plots caption with it, never with the question count."""
    from chorus.simulate.debate.plots import curves_with_bands, estimates
    spec = {}
    for qid, (ref, r0, deb, refl) in SPLIT.items():
        fam = "f_s" if qid.startswith("s") else f"f_{qid}"   # s1-s4: one family
        spec[("debate", qid)] = (ref, fam, [r0, *deb])
        spec[("reflection", qid)] = (ref, fam, [r0, *refl])
    q = question_table(_turns(spec))
    tab = split_outcomes(q, **NB)
    assert _get(tab, "debate", "unanimity", "n_groups") == 4 and _get(tab, "debate", "unanimity", "n_clusters") == 1
    assert (tab["resampled"] == "question family").all()
    curves = by_round(q, **NB)
    u = curves[(curves["metric"] == "unanimity") & (curves["condition"] == "debate")]
    assert (u["n_groups"] == 6).all() and (u["n_clusters"] == 3).all()
    svg = lambda p: " ".join(p.with_suffix(".svg").read_text().split())
    text = svg(curves_with_bands(curves, tmp_path / "c.png"))
    assert "bands: 95%, 3 question families resampled; under 10 units the tables refuse" in text
    text = svg(estimates(tab, tmp_path / "e.png", title="t"))
    assert "error bars (the ratio's: Fieller): 95%, 1 question family resampled" in text   # s1-s4 only
    assert "count not recorded" not in text
    from chorus.core.stats import record_level   # a table row's level cell (Table 14): families, not questions
    why, refused = record_level(tab[(tab["condition"] == "debate") & (tab["metric"] == "unanimity")].iloc[0].to_dict())
    assert refused and "only 1 question family to resample" in why
