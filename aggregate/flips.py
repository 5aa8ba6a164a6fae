"""The decision-flip diagnostic (BDA paper App. E.4, Fig. 6): does deliberation fix or break decisions?

Each trace is decided twice by the one-coin posterior under one *neutral* prior (every seat
Beta(b s, (1 - b) s): the per-agent prior with kappa = 0, so nothing is fitted and no label is
read): once on its round-0 moves only, once on the full trace. A task whose decision changes is a
*fix* (round 0 wrong, full trace right), a *break* (round 0 right, full trace wrong) or a *swap*
(wrong to another wrong, K > 2). Counted per K with the fix / break ratio (the paper: binary
185:168, 1.10; PubMedQA 48:40, 1.20; MMLU 82:51, 1.61). Ties are broken by seeded draws, the
same draws for both decisions, so a tie that persists is never counted as a flip.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from chorus.aggregate.counts import Pool
from chorus.aggregate.errors import TraceError
from chorus.aggregate.posterior import beta_params, one_coin_proba
from chorus.aggregate.selection import argmax_random
from chorus.aggregate.trace import Trace
from chorus.core.seeding import rng as make_rng
from chorus.core.plots import save, subplots
from chorus.core.config import InputError

NEUTRAL_B = 0.58  # the base of the BDA paper's fixed prior (b, kappa, s) = (0.58, 2, 16), kappa set to 0
NEUTRAL_S = 16.0


def decision_flips(traces: Sequence[Trace], *, b: float = NEUTRAL_B, s: float = NEUTRAL_S, seed: int = 0,
                   protocol: str = "strict", on_violation: str = "error") -> pd.DataFrame:
    """One row per labelled trace: its K, gold, the round-0 and full-trace decisions, and the flip kind
    (``fix``, ``break``, ``swap`` or ``none``). Unlabelled traces are left out (a flip needs gold)."""
    if not 0.0 < b < 1.0 or not s > 0:
        raise InputError(f"the neutral prior needs 0 < b < 1 and s > 0, got b={b!r}, s={s!r}")
    traces = [tr for tr in traces if tr.gold is not None]
    if not traces:
        raise TraceError("the decision-flip diagnostic needs labelled traces (gold); none of these has one")
    rows: list[pd.DataFrame] = []
    for K in sorted({tr.K for tr in traces}):
        trs = [tr for tr in traces if tr.K == K]
        r0 = [tr.truncate(0) for tr in trs]
        full = Pool.from_traces(trs, protocol=protocol, on_violation=on_violation)
        first = Pool.from_traces(r0, protocol=protocol, on_violation=on_violation, agents=full.agents)
        alpha, beta = beta_params(np.full(full.I, b), s)
        idx = np.arange(full.T)
        p_full, p_r0 = one_coin_proba(full, idx, alpha, beta), one_coin_proba(first, idx, alpha, beta)
        # two identically seeded streams: both decisions see the same tie-break draws
        a_full, a_r0 = argmax_random(p_full, make_rng(seed, 17, K)), argmax_random(p_r0, make_rng(seed, 17, K))
        g = full.gold
        ok0, ok1 = a_r0 == g, a_full == g
        kind = np.where(a_r0 == a_full, "none", np.where(ok1, "fix", np.where(ok0, "break", "swap")))
        rows.append(pd.DataFrame({
            "task_id": list(full.task_ids), "question_id": list(full.question_ids), "K": K,
            "gold": [full.candidates[t][g[t]] for t in idx],
            "answer_round0": [full.candidates[t][a_r0[t]] for t in idx],
            "answer_full": [full.candidates[t][a_full[t]] for t in idx],
            "confidence_round0": p_r0[idx, a_r0], "confidence_full": p_full[idx, a_full],
            "correct_round0": ok0, "correct_full": ok1, "flip": kind}))
    return pd.concat(rows, ignore_index=True)


def flip_summary(per_task: pd.DataFrame) -> pd.DataFrame:
    """Per K: tasks, changed decisions, fixes, breaks, swaps, net (fixes - breaks), the fix / break
    ratio (NaN without a break) and the accuracies of both decisions."""
    out = []
    for K, g in per_task.groupby("K", sort=True):
        n = {k: int((g["flip"] == k).sum()) for k in ("fix", "break", "swap")}
        out.append({"K": int(K), "n_tasks": int(len(g)), "changed": int((g["flip"] != "none").sum()),
                    "fixed": n["fix"], "broken": n["break"], "swapped": n["swap"], "net": n["fix"] - n["break"],
                    "ratio": n["fix"] / n["break"] if n["break"] else float("nan"),
                    "accuracy_round0": float(g["correct_round0"].mean()),
                    "accuracy_full": float(g["correct_full"].mean())})
    return pd.DataFrame(out)


def plot_ratios(summary: pd.DataFrame, path: Any, *, title: str = "decision flips: fix / break by K") -> None:
    """Fig. 6: the fix / break ratio by K, with the counts written on each bar."""
    fig, ax = subplots(figsize=(4.5, 3.2))
    x = np.arange(len(summary))
    ax.bar(x, summary["ratio"].fillna(0.0), color="#4c72b0")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    for k, row in enumerate(summary.itertuples()):
        ax.text(k, (0.0 if row.ratio != row.ratio else row.ratio) + 0.02, f"{row.fixed}:{row.broken}",
                ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [f"K={k}" for k in summary["K"]])
    ax.set_ylabel("fixes / breaks")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    save(fig, path)
