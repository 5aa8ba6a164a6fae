"""The role-play run's headline (``chorus.core.headline``): alignment against humans, the paper's lead
comparison, for each simulated cell (model, setup, channel; the DeGroot rollout is the no-language
baseline): the stance errors against the human groups, one participant's stance (single), its change
between rounds (update) and the group's convergence, each a mean over groups with its bootstrap interval
over groups. Bookkeeping (classifier parse rates, exclusions, topics) stays in the summary below."""
from __future__ import annotations

from typing import Any

from chorus.core.headline import Row, row

ERRORS = ("single_error", "update_error", "convergence_error")   # lower is closer to the humans


def headline(summary: dict[str, Any]) -> list[Row]:
    cells = summary.get("cells")
    if not isinstance(cells, dict):
        return []
    out = []
    for cell, m in cells.items():
        if not isinstance(m, dict) or cell.startswith("human"):
            continue
        for k in ERRORS:
            v = m.get(k)
            if not isinstance(v, dict):
                continue
            n = v.get("n")
            out.append(row(f"{k.replace('_', ' ')} vs humans, {cell}", v.get("mean"), v.get("lo"), v.get("hi"),
                           level=summary.get("ci_level"), n=n, clusters=n,
                           why="no group of this cell has both simulated and human stances",
                           interval_why=(f"from {n} group: a bootstrap over groups needs at least two"
                                         if isinstance(n, int) and n < 2 else None)))
    return out
