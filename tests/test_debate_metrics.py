"""Collective metrics on small hand-built tables; n_eff on constructed cases."""
import numpy as np
import pandas as pd
import pytest

from chorus.simulate.debate import effective_voters
from chorus.simulate.debate.metrics import (benjamini_hochberg, collective_summary, permutation_pvalue, plurality,
                                     question_table)


def test_neff_identical_agents_is_one():
    rng = np.random.default_rng(0)
    col = rng.integers(0, 2, 200)
    assert effective_voters(np.stack([col] * 3, 1)) == pytest.approx(1.0)
    assert np.isnan(effective_voters(np.ones((10, 3))))  # correlation undefined: no variance


def test_neff_independent_agents_about_I():
    rng = np.random.default_rng(1)
    for I in (3, 5):
        X = rng.integers(0, 2, (20000, I))
        assert effective_voters(X) == pytest.approx(I, rel=0.05)


def test_neff_formula():
    X = np.array([[1, 1, 0], [0, 0, 1], [1, 0, 1], [0, 1, 0]])
    r = [np.corrcoef(X[:, i], X[:, j])[0, 1] for i, j in ((0, 1), (0, 2), (1, 2))]
    rho = np.mean(r)
    assert effective_voters(X) == pytest.approx(3 / (1 + 2 * rho))


def test_neff_rejects_nan():
    with pytest.raises(ValueError):
        effective_voters(np.array([[1, np.nan], [0, 1]]))


def test_plurality_ties_seeded():
    assert plurality(["A", "A", "B"]) == ("A", True)
    assert plurality(["A", "B", "C"]) == (None, False)
    a = plurality(["A", "B", "C"], np.random.default_rng(3))[0]
    assert a in ("A", "B", "C") and a == plurality(["A", "B", "C"], np.random.default_rng(3))[0]
    assert plurality([None, None, "B"]) == ("B", True)


def _turns(spec):
    """spec: {(cond, qid): (reference, family, subdomain, [[round0 answers], [round1], ...])}"""
    rows = []
    for (cond, qid), (ref, fam, sub, rounds) in spec.items():
        for r, answers in enumerate(rounds):
            for a, ans in enumerate(answers):
                rows.append({"qid": qid, "family": fam, "domain": "d", "subdomain": sub, "agent": a, "round": r,
                             "condition": cond, "shared": r == 0, "response": str(ans), "answer": ans,
                             "parsed": ans is not None, "truncated": ans == "T", "reference": ref,
                             "correct": None if ref is None or ans is None else ans == ref,
                             "prompt_tokens": 1, "completion_tokens": 1, "cached": False, "seed": 0})
    return pd.DataFrame(rows)


SPEC = {
    # q1: split 2-1 right majority; debate -> unanimous right; reflection stays split
    ("debate", "q1"): ("A", "f1", "s1", [["A", "A", "B"], ["A", "A", "A"]]),
    ("reflection", "q1"): ("A", "f1", "s1", [["A", "A", "B"], ["A", "A", "B"]]),
    # q2: split, wrong plurality B; debate locks in wrong unanimity, reflection ends right majority
    ("debate", "q2"): ("A", "f2", "s1", [["B", "B", "A"], ["B", "B", "B"]]),
    ("reflection", "q2"): ("A", "f2", "s1", [["B", "B", "A"], ["A", "A", "B"]]),
    # q3: unanimous right throughout
    ("debate", "q3"): ("C", "f3", "s2", [["C", "C", "C"], ["C", "C", "C"]]),
    ("reflection", "q3"): ("C", "f3", "s2", [["C", "C", "C"], ["C", "C", "C"]]),
    # q4: an unparsed answer -> not fully parsed, excluded from accuracy metrics
    ("debate", "q4"): ("A", "f4", "s2", [["A", None, "B"], ["A", "A", "A"]]),
    ("reflection", "q4"): ("A", "f4", "s2", [["A", None, "B"], ["A", "B", "B"]]),
    # q5: unlabelled, split -> unanimous in debate
    ("debate", "q5"): (None, "f5", "s2", [["A", "B", "B"], ["B", "B", "B"]]),
    ("reflection", "q5"): (None, "f5", "s2", [["A", "B", "B"], ["A", "B", "B"]]),
}


def test_question_table_and_condition_metrics():
    turns = _turns(SPEC)
    s, q = collective_summary(turns, n_boot=200, n_perm=200)
    d, r = s["conditions"]["debate"], s["conditions"]["reflection"]
    assert d["n_questions"] == 5 and d["n_fully_parsed"] == 4 and d["n_scored"] == 3
    assert d["parse_rate"] == pytest.approx(29 / 30) and d["n_unparsed"] == 1
    # initial majority: q1 A right, q2 B wrong, q3 C right -> 2/3 (same in both conditions)
    assert d["acc_initial_majority"] == pytest.approx(2 / 3) == r["acc_initial_majority"]
    assert d["acc_final_majority"] == pytest.approx(2 / 3)
    assert r["acc_final_majority"] == pytest.approx(1.0)
    assert d["wrong_unanimity"] == pytest.approx(1 / 3) and r["wrong_unanimity"] == 0
    assert d["wrong_unanimity_given_wrong_initial"] == 1.0 and r["wrong_unanimity_given_wrong_initial"] == 0.0
    assert d["acc_final_individual"] == pytest.approx((1 + 0 + 1) / 3)
    # unanimity by round over fully parsed q1, q2, q3, q5
    assert d["unanimity_by_round"][0] == pytest.approx(1 / 4) and d["unanimity_by_round"][1] == 1.0
    assert r["unanimity_by_round"][1] == pytest.approx(1 / 4)
    assert d["unanimity_by_round_split"][1] == 1.0 and d["n_split_0"] == 3
    # lock-in: debate split groups q1 (A->A), q2 (B->B), q5 (B->B) all end on initial plurality
    assert d["lockin_initial_plurality"] == 1.0 and d["n_lockin_groups"] == 3
    assert np.isnan(r["lockin_initial_plurality"])
    # n_eff at the end of debate: correctness columns [1,0,1] for all agents -> identical -> 1
    assert d["n_eff_final"] == pytest.approx(1.0)
    # reflection end: q1 [1,1,0], q2 [1,1,0], q3 [1,1,1]: agents 0,1 identical, agent 2 varies
    X = np.array([[1, 1, 0], [1, 1, 0], [1, 1, 1]])
    assert np.isnan(r["n_eff_final"]) == np.isnan(effective_voters(X))
    p = s["paired"]
    assert p["n_paired"] == 3
    deltas = {(x["a"], x["b"]): x for x in p["deltas"]}
    assert deltas[("debate_wrong_unanimous", "reflection_wrong_unanimous")]["delta"] == pytest.approx(1 / 3)
    assert deltas[("debate_final_majority", "reflection_final_majority")]["delta"] == pytest.approx(-1 / 3)
    assert {c["subdomain"] for c in p["wrong_unanimity_by_subdomain"]} == {"s1", "s2"}
    # seed 002 Fig. 11: every metric by subdomain (paired q1, q2 in s1; q3 in s2), BH over all the cells
    cells = {(c["metric"], c["subdomain"]): c for c in p["by_subdomain"]}
    assert {k: (c["n"], c["delta"]) for k, c in cells.items() if c["n"]} == {
        ("unanimity_gain", "s1"): (2, 1.0), ("unanimity_gain", "s2"): (1, 0.0),
        ("accuracy_gain", "s1"): (2, -0.5), ("accuracy_gain", "s2"): (1, 0.0),
        ("wrong_unanimity", "s1"): (2, 0.5), ("wrong_unanimity", "s2"): (1, 0.0),
        ("wrong_majority_lockin", "s1"): (1, 1.0)}            # only q2 starts from a wrong majority
    assert cells[("wrong_majority_lockin", "s2")]["n"] == 0 and np.isnan(cells[("wrong_majority_lockin", "s2")]["q_bh"])
    assert all(c["q_bh"] >= c["p_perm"] for c in p["by_subdomain"] if c["n"])
    # seed 002 §A.8: q5 (unlabelled) is reported apart; debate: A, B, B -> B, B, B
    sd = s["stance_dynamics"]
    u = sd["unlabelled"]["debate"]
    assert u["n_questions"] == 1 and u["final_distribution"] == {"B": 1.0}
    assert u["persistence"] == pytest.approx(2 / 3) and u["n_steps"] == 3
    assert {(t["from"], t["to"]): t["n"] for t in u["transitions"]} == {("A", "B"): 1, ("B", "B"): 2}
    assert sd["unlabelled"]["reflection"]["persistence"] == 1.0
    assert sd["labelled"]["debate"]["n_questions"] == 4 and "q5" not in set(turns[turns["reference"].notna()]["qid"])
    row = q[(q["condition"] == "debate") & (q["qid"] == "q2")].iloc[0]
    assert row["plurality_0"] == "B" and row["wrong_unanimous"] and row["split_0"]


def test_truncated_counted():
    spec = {("debate", "q1"): ("A", "f", "s", [["A", "T", "A"], ["A", "A", "A"]])}
    s, _ = collective_summary(_turns(spec), n_boot=0, n_perm=0)
    assert s["conditions"]["debate"]["n_truncated"] == 1


def test_unparsed_never_counted_as_option():
    spec = {("debate", "q1"): ("A", "f", "s", [["A", None, None], ["A", None, None]])}
    q = question_table(_turns(spec))
    assert not q.iloc[0]["fully_parsed"]
    assert not q.iloc[0]["unanimous_0"]  # one parsed answer is not unanimity


def test_bh_and_permutation():
    q = benjamini_hochberg([0.01, 0.04, 0.03, np.nan, 0.5])
    np.testing.assert_allclose(q[[0, 1, 2, 4]], [0.04, 0.16 / 3, 0.16 / 3, 0.5])
    assert np.isnan(q[3])
    np.testing.assert_allclose(benjamini_hochberg([0.01, 0.02, 0.03]), [0.03, 0.03, 0.03])
    a = np.ones(40)
    b = np.zeros(40)
    assert permutation_pvalue(a, b, np.arange(40), n_perm=999) < 0.01
    assert permutation_pvalue(a, a, np.arange(40), n_perm=999) == 1.0


def test_effective_voters_at_the_most_anticorrelated_group_is_infinite():
    # two agents, always one right and one wrong: rho = -1 = -1/(I-1), 1 + (I-1) rho = 0
    assert effective_voters(np.array([[1, 0], [0, 1], [1, 0], [0, 1]])) == float("inf")


def test_effective_voters_with_a_constant_agent_keeps_the_bound():
    """Hand-computed: agents 1 and 2 perfectly anti-correlated (r = -1), agent 3 always right.
    Skipping agent 3's pairs gave rho = -1 < -1/2 and an infinite n_eff; counted as 0, rho =
    (-1 + 0 + 0) / 3 = -1/3 and n_eff = 3 / (1 + 2 * (-1/3)) = 9."""
    X = np.array([[1, 0, 1], [0, 1, 1], [1, 0, 1], [0, 1, 1]])
    assert effective_voters(X) == pytest.approx(9.0)
    assert np.isnan(effective_voters(np.array([[1, 1, 0], [0, 1, 0], [1, 1, 0]])))  # one agent varies
