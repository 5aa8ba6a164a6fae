"""Who sat where in each condition, and how well: each seat's measured round-0 accuracy and the
reliability r that ``aggregate`` estimates from the same traces (``chorus.aggregate.posterior.reliabilities``:
the share of the seat's informative moves, every round, consistent with gold), beside each arm's
accuracy and ECE. A swap condition (a weak or near-chance stand-in in one seat) reads against the
clean one: how each method degrades next to the measured r of the swapped seat."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import pandas as pd

from chorus.simulate.council.config import ConditionSpec, CouncilConfig
from chorus.aggregate.counts import Pool


def estimated_r(traces: Sequence, agents: Sequence[str]) -> dict[str, float]:
    """r_i over every labelled trace, as the BDA arms fit it (STRICT, rejected moves skipped); nan for
    a seat with no informative move (``reliabilities`` would give it the others' mean)."""
    from chorus.aggregate.posterior import reliabilities

    pool = Pool.from_traces(traces, protocol="strict", on_violation="skip", agents=agents)
    idx = np.flatnonzero(pool.gold >= 0)
    if not len(idx):
        return {a: math.nan for a in agents}
    r = reliabilities(pool, idx)
    seen = pool.N[idx].sum(0) > 0
    return {a: float(r[i]) if seen[i] else math.nan for i, a in enumerate(pool.agents)}


def seat_rows(traces: Sequence, cfg: CouncilConfig, condition: ConditionSpec) -> list[dict[str, Any]]:
    """One row per seat of ``condition``: its model and persona (the stand-in's when swapped), its
    round-0 accuracy (correct proposals / proposals; ``n_r0`` proposals of ``n_traces`` tasks) and r_hat."""
    agents = cfg.agent_names()
    try:
        r_hat = estimated_r(traces, agents) if traces else {}
        err = None
    except Exception as e:  # reported beside the table, never hidden
        r_hat, err = {}, f"{type(e).__name__}: {e}"
    rows = []
    for a, s in zip(agents, cfg.condition_seats(condition)):
        hits = [m.answer == t.gold for t in traces for m in t.moves
                if m.agent == a and m.round == 0 and m.force == "propose"]
        rows.append({"agent": a, "profile": s.profile, "persona": s.persona, "swapped": a in condition.swap,
                     "adversary": a in condition.adversaries, "n_traces": len(traces), "n_r0": len(hits),
                     "r0_accuracy": sum(hits) / len(hits) if hits else math.nan,
                     "r_estimated": r_hat.get(a, math.nan), **({"r_error": err} if err else {})})
    return rows


def seats_frame(cells: dict[str, Any]) -> pd.DataFrame:
    """tables/seats.parquet: every cell's seat rows."""
    rows = [{"dataset": key.split("__", 1)[0], "condition": key.split("__", 1)[1], **r}
            for key, cell in cells.items() for r in cell.get("seats", [])]
    return pd.DataFrame(rows)


def _f(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def render(table: pd.DataFrame, cells: dict[str, Any], cfg: CouncilConfig) -> list[str]:
    """results.md's swap section (only when a condition swaps a seat): per data set, each condition's
    seats with r0 and r_hat, then each arm's accuracy and ECE per condition side by side."""
    if not any(c.swap for c in cfg.conditions):
        return []
    lines = ["## Swapped seats: seat reliability and each arm per condition", "",
             "r0: the seat's round-0 accuracy (correct proposals / proposals, n_r0 of the tasks); r_hat: the "
             "reliability aggregate estimates from the same traces (moves of every round consistent with gold). "
             "swapped: a stand-in sits in that seat in this condition.", ""]
    conds = [c.name for c in cfg.conditions]
    for d in cfg.data:
        keys = [(c, f"{d.dataset}__{c}") for c in conds if f"{d.dataset}__{c}" in cells]
        if not keys:
            continue
        lines += [f"### {d.dataset}", "", "| condition | seat | profile | persona | swapped | adversary | r0 | n_r0 | r_hat |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for c, key in keys:
            for r in cells[key].get("seats", []):
                lines.append(f"| {c} | {r['agent']} | {r['profile']} | {r['persona']} | {'yes' if r['swapped'] else ''} | "
                             f"{'yes' if r['adversary'] else ''} | {_f(r['r0_accuracy'])} | {r['n_r0']} | "
                             f"{_f(r['r_estimated'])} |")
        lines.append("")
        sub = table[table["dataset"] == d.dataset] if len(table) else table
        if len(sub):
            cols = [(c, m) for c, _ in keys for m in ("accuracy", "ece_ew")]
            lines += ["| arm | " + " | ".join(f"{c} {'acc' if m == 'accuracy' else 'ECE'}" for c, m in cols) + " |",
                      "|---|" + "---|" * len(cols)]
            for arm in dict.fromkeys(sub["arm"]):
                by = {c: sub[(sub["arm"] == arm) & (sub["condition"] == c)] for c, _ in keys}
                vals = [_f(float(by[c][m].iloc[0])) if len(by[c]) and by[c][m].iloc[0] is not None else "-"
                        for c, m in cols]
                lines.append(f"| {arm} | " + " | ".join(vals) + " |")
            lines.append("")
    return lines
