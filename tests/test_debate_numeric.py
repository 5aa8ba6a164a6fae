"""Numeric questions (no option set): the candidate-free parser, the tolerance rule, the item
fields, the opt-in bench subdomain and the numeric rows of a run, against hand-computed cases."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from chorus.simulate.debate.numeric import NUMERIC_TURN_COLUMNS, agree, group_agrees, is_correct, numeric_summary, tolerance_of
from chorus.simulate.debate.parse import parse_numeric, read_number
from chorus.simulate.debate.questions import BenchError, build_bench, validate_item


@pytest.mark.parametrize("text,expected", [
    ("Answer: 42", 42.0),
    ("I first thought 10, but the final answer is 12.", 12.0),
    ("Adding 3 and 4 gives 7.\nAnswer: **-3.5**", -3.5),
    ("The total comes to $1,200 after tax.", 1200.0),
    ("So the answer is four.", 4.0),
    ("It is 50% of the class; Answer: 50%", 50.0),
    ("Answer: 3/4", 0.75),
    ("We get **17** apples, since 20 - 3 = 17. Maybe 18?", 17.0),   # bold beats a later bare number
    ("x = 2, y = 5, so 7", 7.0),
    ("Answer: approximately 3.14", 3.14),
    ("the list is 3,5", 5.0),                                       # a comma is not a decimal comma
])
def test_parse_numeric_commitments(text, expected):
    assert parse_numeric(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", [None, "", "   ", "I cannot tell.", "Answer: 1/0"])
def test_parse_numeric_unreadable(text):
    assert parse_numeric(text) is None


@pytest.mark.parametrize("text,expected", [("1,200", 1200.0), ("-3.5", -3.5), ("$40", 40.0), ("50%", 50.0),
                                           ("3/4", 0.75), (" 7 ", 7.0), (".5", 0.5)])
def test_read_number_strict(text, expected):
    assert read_number(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["about 7", "7 apples", "12,34", "x", "", None])
def test_read_number_rejects_prose(text):
    assert read_number(text) is None


def test_tolerance_rule_by_hand():
    assert tolerance_of(12.0) == 0.0 and tolerance_of(2.5) == pytest.approx(0.025)
    assert tolerance_of(12.0, 0.5) == 0.5 and tolerance_of(2.5, float("nan")) == pytest.approx(0.025)
    assert is_correct(12, 12) and not is_correct(12.01, 12)          # whole reference: exact
    assert is_correct(2.52, 2.5) and not is_correct(2.53, 2.5)       # 1 % of 2.5 = 0.025
    assert is_correct(12.4, 12, tolerance=0.5) and not is_correct(12.6, 12, tolerance=0.5)
    assert agree(2.5, 2.52) and not agree(2.0, 2.02)                  # min(tol(a), tol(b)): 2 is whole
    assert group_agrees([3.0, 3.0, 3.0]) and not group_agrees([3.0, 3.0, None]) and not group_agrees([])


def test_numeric_item_fields():
    base = {"id": "n1", "domain": "knowledge", "subdomain": "numeric", "family": "n1", "question": "2 + 2?",
            "options": None}
    it = validate_item({**base, "reference": "1,200", "tolerance": 5})
    assert it.numeric and it.tolerance == 5.0 and it.to_dict()["tolerance"] == 5.0
    assert "tolerance" not in validate_item({**base, "reference": 4}).to_dict()   # files stay as they were
    with pytest.raises(BenchError, match="reference' of a numeric item must be a number.*'about four'"):
        validate_item({**base, "reference": "about four"})
    with pytest.raises(BenchError, match="tolerance' must be a finite number >= 0, got -1"):
        validate_item({**base, "reference": 4, "tolerance": -1})
    with pytest.raises(BenchError, match="tolerance' given for an item with options"):
        validate_item({**base, "options": ["a", "b"], "reference": "A", "tolerance": 1})


def test_numeric_subdomain_is_opt_in_with_provenance():
    default, man = build_bench(counts={"misconceptions": 5, "disciplinary": 5, "strategy": 0, "biomedical": 0,
                                       "moral_scenarios": 0, "moral_disputes": 0, "contested": 0})
    assert man["n_numeric"] == 0 and not any(it.numeric for it in default)
    items, man = build_bench(counts={"misconceptions": 5, "disciplinary": 5, "strategy": 0, "biomedical": 0,
                                     "moral_scenarios": 0, "moral_disputes": 0, "contested": 0, "numeric": 6})
    num = [it for it in items if it.numeric]
    assert len(num) == man["n_numeric"] == 6 and man["available"]["numeric"] >= 6
    # the earlier subdomains keep their items when numeric ones are added
    assert [it.id for it in items if not it.numeric] == [it.id for it in default] or \
        {it.id for it in items if not it.numeric} == {it.id for it in default}
    for it in num:
        assert it.subdomain == "numeric" and it.labels is None and read_number(it.reference) is not None
        assert it.provenance["dataset"] == "MMLU" and it.provenance["sha256"] and "gold option" in it.provenance["setting"]


def _nrow(qid, agent, rnd, cond, value, ref=12.0, tol=None, shared=False):
    return {"qid": qid, "family": qid, "domain": "knowledge", "subdomain": "numeric", "agent": agent, "round": rnd,
            "condition": cond, "shared": shared, "response": "", "value": value, "parsed": value is not None,
            "truncated": False, "reference": ref, "tolerance": tol, "correct": None, "prompt_tokens": 1,
            "completion_tokens": 1, "cached": False, "seed": 0}


def test_numeric_summary_by_hand():
    rows = []
    for cond in ("debate", "reflection"):  # round 0 shared: the same three replies in both conditions
        rows += [_nrow("q1", a, 0, cond, v, shared=True) for a, v in enumerate([12.0, 11.0, None])]
        rows += [_nrow("q2", a, 0, cond, v, ref=None, shared=True) for a, v in enumerate([2.5, 2.51, 2.52])]
    rows += [_nrow("q1", a, 1, "debate", v) for a, v in enumerate([12.0, 12.0, 12.0])]
    rows += [_nrow("q2", a, 1, "debate", v, ref=None) for a, v in enumerate([2.5, 3.0, 2.5])]
    rows += [_nrow("q1", a, 1, "reflection", v) for a, v in enumerate([12.0, 11.0, 13.0])]
    rows += [_nrow("q2", a, 1, "reflection", v, ref=None) for a, v in enumerate([2.5, 2.5, None])]
    s, tab = numeric_summary(pd.DataFrame(rows, columns=NUMERIC_TURN_COLUMNS))
    assert s["n_questions"] == 2 and s["n_replies"] == 6 + 12 and s["n_unreadable"] == 1 + 1
    d, r = s["conditions"]["debate"], s["conditions"]["reflection"]
    # round 0: q1 read answers 12, 11 against 12 -> 1/2; q2 unlabelled; q1 has an unread reply (no agreement),
    # q2 2.5 / 2.51 / 2.52 agree pairwise within min(1 %): |2.5 - 2.52| = 0.02 <= 0.025 -> agree
    assert d["accuracy_by_round"][0] == pytest.approx(0.5) and d["agreement_by_round"][0] == pytest.approx(0.5)
    assert d["accuracy_by_round"][1] == pytest.approx(1.0) and d["agreement_by_round"][1] == pytest.approx(0.5)
    assert r["accuracy_by_round"][1] == pytest.approx(1 / 3) and r["agreement_by_round"][1] == 0.0
    assert d["n_scored_by_round"] == {0: 2, 1: 3}
    row = tab[(tab["condition"] == "reflection") & (tab["round"] == 1)].iloc[0]
    assert (row["n_turns"], row["n_unreadable"], row["n_groups"]) == (6, 1, 2)
    assert math.isnan(numeric_summary(pd.DataFrame([_nrow("q", 0, 0, "debate", None, ref=None)],
                                                   columns=NUMERIC_TURN_COLUMNS))[1]["accuracy"].iloc[0])
