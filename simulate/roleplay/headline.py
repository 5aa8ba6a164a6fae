"""The role-play run's headline (``chorus.core.headline``): alignment against humans, the paper's lead
comparison, compactly: for each stance error against the human groups (one participant's stance,
single; its change between rounds, update; the group's convergence) the closest simulated cell (model,
setup, channel) with its bootstrap interval over groups, the range over every simulated cell beside it,
then the DeGroot rollout (the no-language baseline) on the same measure. Every cell's own numbers stay
in the summary's cells, below the headline ("all numbers"); bookkeeping (classifier parse rates,
exclusions, topics) too."""
from __future__ import annotations

from typing import Any

from chorus.core.headline import Row, num, row

ERRORS = ("single_error", "update_error", "convergence_error")   # lower is closer to the humans
WHY = "no group of this cell has both simulated and human stances"


def _row(name: str, v: dict[str, Any], level: Any, detail: str | None = None) -> Row:
    n = v.get("n")
    return row(name, v.get("mean"), v.get("lo"), v.get("hi"), level=level, n=n, clusters=n, why=WHY, detail=detail,
               resampled=v.get("resampled") if v.get("resampled") not in (None, "unit") else "group",
               interval_why=(f"from {n} group: a bootstrap over groups needs at least two"
                             if isinstance(n, int) and n < 2 else None))


def _mean(v: dict[str, Any]) -> float:
    m = v.get("mean")
    return float(m) if isinstance(m, (int, float)) and m == m else float("inf")


def headline(summary: dict[str, Any]) -> list[Row]:
    cells = summary.get("cells")
    if not isinstance(cells, dict):
        return []
    level = summary.get("ci_level")
    out = []
    for k in ERRORS:
        label = k.replace("_", " ")
        sims = {c: m[k] for c, m in cells.items() if isinstance(m, dict) and isinstance(m.get(k), dict)
                and not c.startswith("human") and not c.startswith("degroot")}
        base = {c: m[k] for c, m in cells.items() if isinstance(m, dict) and isinstance(m.get(k), dict)
                and c.startswith("degroot")}
        if sims:
            best = min(sims, key=lambda c: _mean(sims[c]))
            means = [_mean(v) for v in sims.values() if _mean(v) != float("inf")]
            detail = (f"over {len(sims)} cells: {num(min(means))} to {num(max(means))}; each cell under cells"
                      if len(sims) > 1 and means else None)
            name = f"{label} vs humans, closest cell: {best}" if len(sims) > 1 else f"{label} vs humans, {best}"
            out.append(_row(name, sims[best], level, detail))
        for c, v in base.items():
            out.append(_row(f"{label} vs humans, {c} (no-language baseline)", v, level))
    return out
