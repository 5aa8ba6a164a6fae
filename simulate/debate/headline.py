"""The debate run's headline (``chorus.core.headline``): the peer-influence paper's lead comparison,
final-majority accuracy of debate and of the matched reflection control, each with its Wilson interval
over the questions scored, then their paired difference (debate minus reflection) with its
question-family clustered bootstrap interval, and the same paired difference of wrong unanimity.
Bookkeeping (model, turns, parse rate) stays in the summary, below the headline."""
from __future__ import annotations

from typing import Any

from chorus.core.headline import Row, proportion, row

LEAD_PAIRS = {("debate_final_majority", "reflection_final_majority"): "accuracy, debate - reflection (paired)",
              ("debate_wrong_unanimous", "reflection_wrong_unanimous"): "wrong unanimity, debate - reflection (paired)"}


def headline(summary: dict[str, Any]) -> list[Row]:
    conds = summary.get("conditions") or {}
    if not isinstance(conds, dict) or not conds:
        return []
    out = []
    for c in ("debate", "reflection"):
        m = conds.get(c)
        if isinstance(m, dict):
            out.append(proportion(f"accuracy, {c} (final majority)", m.get("acc_final_majority"), m.get("n_scored"),
                                  why="no question of this condition was fully parsed and labelled", unit="question"))
    paired = summary.get("paired") or {}
    deltas = {(d.get("a"), d.get("b")): d for d in paired.get("deltas") or [] if isinstance(d, dict)}
    for key, name in LEAD_PAIRS.items():
        d = deltas.get(key)
        if d is None:
            out.append(row(name, None, n=paired.get("n_paired"),
                           why="no question fully parsed and labelled in both conditions"))
            continue
        out.append(row(name, d.get("delta"), d.get("ci_low"), d.get("ci_high"), level=paired.get("ci_level"),
                       n=d.get("n"), clusters=d.get("n_clusters") if d.get("clustered", True) else None,
                       resampled=d.get("resampled") or ("question family" if d.get("clustered", True) else "question")))
    return out
