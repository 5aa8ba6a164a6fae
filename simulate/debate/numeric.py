"""Numeric questions (no option set): the tolerance rule and their own rows of a debate run. Pure:
numpy / pandas only. These rows are kept apart from the paper's label-scored comparisons
(``metrics.py`` never sees a numeric turn: they live in ``tables/numeric_turns.parquet``).

Tolerance rule (one place, used by accuracy and agreement):

* an item's ``tolerance`` field, when given, is an absolute tolerance: |a - b| <= tolerance;
* otherwise a whole number must match exactly and any other number within a relative
  ``REL_TOL`` of itself: tol(x) = 0 if x is whole, else REL_TOL * |x|;
* accuracy: |answer - reference| <= tol(reference) (the reference is the yardstick);
* agreement of two agents: |a - b| <= min(tol(a), tol(b)) (symmetric; two whole numbers must be
  equal); a group agrees at a round when every agent's answer was read and every pair agrees.

A reply with no readable number (``parse.parse_numeric`` gives None) is counted (``n_unreadable``)
and never scored: it is left out of accuracy, and its group does not agree at that round.
"""
from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pandas as pd

REL_TOL = 1e-2

NUMERIC_TURN_COLUMNS = ["qid", "family", "domain", "subdomain", "agent", "round", "condition", "shared", "response",
                        "value", "parsed", "truncated", "reference", "tolerance", "correct", "prompt_tokens",
                        "completion_tokens", "cached", "seed"]


def _given(tolerance: float | None) -> bool:
    return tolerance is not None and not (isinstance(tolerance, float) and math.isnan(tolerance))


def tolerance_of(x: float, tolerance: float | None = None) -> float:
    """The absolute tolerance around ``x``: the item's own, else 0 for a whole number, else REL_TOL |x|."""
    if _given(tolerance):
        return float(tolerance)
    return 0.0 if float(x).is_integer() else REL_TOL * abs(float(x))


def is_correct(answer: float, reference: float, tolerance: float | None = None) -> bool:
    return abs(float(answer) - float(reference)) <= tolerance_of(reference, tolerance) + 1e-12


def agree(a: float, b: float, tolerance: float | None = None) -> bool:
    return abs(float(a) - float(b)) <= min(tolerance_of(a, tolerance), tolerance_of(b, tolerance)) + 1e-12


def group_agrees(values: list[float | None], tolerance: float | None = None) -> bool:
    """Every answer read and every pair within tolerance of each other."""
    if not values or any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values):
        return False
    return all(agree(a, b, tolerance) for a, b in itertools.combinations(values, 2))


def _num(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def numeric_by_round(nturns: pd.DataFrame) -> pd.DataFrame:
    """One row per (condition, round): accuracy (share of read answers on labelled questions within
    tolerance of the reference; ``n_scored`` answers), agreement (share of questions whose agents all
    agree; ``n_groups`` questions) and ``n_unreadable`` replies."""
    rows = []
    for (cond, r), g in nturns.groupby(["condition", "round"], sort=True):
        read = g[g["parsed"].astype(bool)]
        lab = read.loc[read["reference"].map(lambda x: _num(x) is not None).astype(bool)]  # .loc: an empty mask stays a mask
        # recomputed from value / reference / tolerance (the rule above), not read from a stored column
        hits = [is_correct(v, ref, _num(t)) for v, ref, t in zip(lab["value"], lab["reference"], lab["tolerance"])]
        groups = [group_agrees([_num(v) for v in q.sort_values("agent")["value"]], _num(q["tolerance"].iloc[0]))
                  for _, q in g.groupby("qid", sort=True)]
        rows.append({"condition": cond, "round": int(r), "n_turns": int(len(g)),
                     "n_unreadable": int((~g["parsed"].astype(bool)).sum()),
                     "accuracy": float(np.mean(hits)) if hits else float("nan"),
                     "n_scored": int(len(lab)),
                     "agreement": float(np.mean(groups)) if groups else float("nan"), "n_groups": len(groups)})
    return pd.DataFrame(rows, columns=["condition", "round", "n_turns", "n_unreadable", "accuracy", "n_scored",
                                       "agreement", "n_groups"])


def numeric_summary(nturns: pd.DataFrame) -> tuple[dict[str, Any], pd.DataFrame]:
    """(summary["numeric"], the by-round table). ``n_unreadable`` counts every reply with no readable
    number once (a shared round-0 reply once, not once per condition)."""
    tab = numeric_by_round(nturns)
    uniq = nturns.drop_duplicates(["qid", "agent", "round"]) if len(nturns) else nturns
    gen = pd.concat([nturns[~nturns["shared"].astype(bool)], uniq[uniq["shared"].astype(bool)]]) if len(nturns) else nturns
    out: dict[str, Any] = {
        "n_questions": int(nturns["qid"].nunique()) if len(nturns) else 0,
        "n_replies": int(len(gen)),
        "n_unreadable": int((~gen["parsed"].astype(bool)).sum()) if len(gen) else 0,
        "rule": (f"|answer - reference| <= the item's tolerance, else exact for a whole reference, else "
                 f"relative {REL_TOL:g}; agents agree when within min(tol(a), tol(b)) of each other"),
        "rel_tol": REL_TOL,
        "conditions": {}}
    for cond, g in tab.groupby("condition", sort=True):
        out["conditions"][cond] = {
            "accuracy_by_round": {int(r): float(a) for r, a in zip(g["round"], g["accuracy"])},
            "agreement_by_round": {int(r): float(a) for r, a in zip(g["round"], g["agreement"])},
            "n_scored_by_round": {int(r): int(n) for r, n in zip(g["round"], g["n_scored"])},
            "n_unreadable": int(g["n_unreadable"].sum())}
    return out, tab
