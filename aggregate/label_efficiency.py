"""Label efficiency (BDA paper App. E.6, Table 11 / Fig. 3): how many labelled tasks each supervised
arm needs.

For each label budget n and seed: a stratified random calibration set of n labelled tasks (seeded by
(seed, n)), every method fitted on it alone (hyperparameters by inner CV inside it), and predictions on
all the other tasks, a disjoint hold-out. With few labels the inner folds shrink to the rarest class's
count in the calibration set (at least 2; a budget that cannot give two per class is an error naming
it). Unsupervised arms are fitted the same way, as the reference they are.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from chorus.aggregate.counts import Pool
from chorus.aggregate.errors import LabelError
from chorus.aggregate.experiments import cell_metrics
from chorus.aggregate.methods import make_method
from chorus.aggregate.selection import budget_subsample, fit_predict_split, seed_int
from chorus.aggregate.trace import Trace
from chorus.core.plots import save, subplots

KEY_LABELS = 23  # the calibration draw's seed stream (seed, KEY_LABELS, n)


def label_efficiency(traces: Sequence[Trace], methods: Sequence[str], budgets: Sequence[int], *,
                     seeds: Sequence[int] = (0, 1, 2), grids: dict | None = None, protocol: str = "strict",
                     on_violation: str = "error", inner_folds: int = 5) -> pd.DataFrame:
    """One row per (budget, seed, method): metrics on the hold-out, the calibration size and its inner folds."""
    pool = Pool.from_traces(list(traces), protocol=protocol, on_violation=on_violation)
    labelled = np.flatnonzero(pool.gold >= 0)
    ms = {m: make_method(m, grids, protocol=protocol, on_violation=on_violation) for m in methods}
    rows = []
    for n in budgets:
        if not 2 <= n < len(labelled):
            raise LabelError(f"label budget {n}: needs 2 <= n < {len(labelled)} (the labelled tasks, leaving a hold-out)")
        for sd in seeds:
            cal = budget_subsample(pool, labelled, n, seed_int(sd, KEY_LABELS, n))
            counts = np.bincount(pool.gold[cal], minlength=pool.K)
            k = int(min(inner_folds, counts[counts > 0].min()))
            if k < 2:
                raise LabelError(f"label budget {n}, seed {sd}: a class has one labelled task; inner CV needs two")
            hold = np.setdiff1d(labelled, cal)
            cv = fit_predict_split(pool, ms, cal, hold, inner_folds=k, seed=sd)
            for m, v in cell_metrics(cv).items():
                rows.append({"budget": int(n), "seed": int(sd), "method": m, "n_calibration": int(len(cal)),
                             "inner_folds": k, **v})
    return pd.DataFrame(rows)


def efficiency_curve(table: pd.DataFrame, metric: str = "accuracy") -> pd.DataFrame:
    """Per (budget, method): mean and SD (ddof = 1) of ``metric`` across seeds."""
    g = table.groupby(["budget", "method"])[metric]
    return pd.DataFrame({"mean": g.mean(), "sd": g.std(ddof=1), "n_seeds": g.size()}).reset_index()


def plot_curve(curve: pd.DataFrame, path, *, metric: str = "accuracy") -> None:
    fig, ax = subplots(figsize=(5.5, 3.8))
    for m, g in curve.groupby("method", sort=False):
        ax.errorbar(g["budget"], g["mean"], yerr=g["sd"].fillna(0.0), marker="o", capsize=3, label=m)
    ax.set_xscale("log")
    ax.set_xlabel("labelled tasks (calibration)")
    ax.set_ylabel(f"{metric} on the hold-out")
    ax.legend(fontsize=7)
    ax.set_title("label efficiency (mean +- SD over seeds)", fontsize=9)
    fig.tight_layout()
    save(fig, path)
