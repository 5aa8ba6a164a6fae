"""The council run's headline (``chorus.core.headline``): the aggregation paper's lead comparison, the
accuracy of BDA (each variant) beside plurality and the other baselines on the same councils, each with
its Wilson interval over the tasks scored (labelled so: "Wilson, 120 tasks"; with several generation
seeds the councils of one task are counted as independent, and the label says the seeds are not
resampled) and its calibration (ECE, equal-width bins, and Brier) beside
it, per dataset and condition (clean, then under attack). Bookkeeping (seats, parse rates, protocol
rejections) stays in the summary's cells, below the headline."""
from __future__ import annotations

from typing import Any

from chorus.core.headline import Row, num, proportion


def _order(arm: str) -> tuple[int, str]:
    """BDA variants first, then plurality (the comparison's anchor), then the other baselines by name."""
    return (0 if arm.startswith("bda") else 1 if arm == "plurality" else 2, arm)


def _calibration(r: dict[str, Any]) -> str:
    return f"ECE {num(_f(r.get('ece_ew')))}, Brier {num(_f(r.get('brier')))}"


def _f(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v == v else None


def headline(summary: dict[str, Any]) -> list[Row]:
    results = [r for r in summary.get("results") or [] if isinstance(r, dict) and r.get("arm")]
    datasets = list(dict.fromkeys(r.get("dataset") for r in results))
    conds = list(dict.fromkeys(r.get("condition") for r in results))
    seeds = summary.get("gen_seeds")
    several = isinstance(seeds, list) and len(seeds) > 1
    unit, method = ("task-seed council", "Wilson (seeds not resampled)") if several else ("task", "Wilson")
    out = []
    for d in datasets:
        for c in conds:
            cell = sorted((r for r in results if r.get("dataset") == d and r.get("condition") == c),
                          key=lambda r: _order(r["arm"]))
            for r in cell:
                where = f"{c}" if len(datasets) == 1 else f"{d}, {c}"
                out.append(proportion(f"accuracy, {r['arm']} ({where})", r.get("accuracy"), r.get("n"),
                                      why="no task of this arm was scored (no label, or every trace unparsed)",
                                      detail=_calibration(r), unit=unit, method=method))
    return out
