"""Round-0-truncated against full-trace aggregation (the BDA paper's Table 14): how much the later
rounds' moves help or hurt each method, under attack or not.

Each basis is its own leak-free nested CV: the traces truncated to round 0 (``Trace.truncate(0)``:
the proposals alone) and the full traces, every method refitted per basis with its hyperparameters
chosen by inner CV on that basis's training part. Both use the same outer folds (same tasks, gold and
seed), so the per-task differences are paired: full - round0 per method, with a question-clustered
paired bootstrap interval (``chorus.core.stats.paired_bootstrap``).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from chorus.aggregate.experiments import cell_metrics, per_task, run_cell
from chorus.aggregate.trace import Trace
from chorus.core.stats import paired_bootstrap

BASES = ("round0", "full")


def truncation_table(traces: Sequence[Trace], methods: Sequence[str], *, outer_folds: int = 5,
                     inner_folds: int = 5, seed: int = 0, protocol: str = "strict", on_violation: str = "error",
                     grids: dict | None = None, n_boot: int = 2000, ci: float = 0.95) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(metrics: one row per (basis, method), accuracy, Brier and ECE; deltas: per method and metric,
    full - round0 in accuracy and Brier with a question-clustered paired bootstrap interval)."""
    cvs = {}
    for basis in BASES:
        trs = [t.truncate(0) for t in traces] if basis == "round0" else list(traces)
        _, cvs[basis] = run_cell(trs, methods, grids=grids or {}, protocol=protocol, on_violation=on_violation,
                                 seed=seed, outer_folds=outer_folds, inner_folds=inner_folds)
    rows = [{"basis": b, "method": m, **v} for b in BASES for m, v in cell_metrics(cvs[b]).items()]
    a, f = cvs["round0"], cvs["full"]
    if not np.array_equal(a.fold, f.fold):  # same tasks, gold and seed: the folds must be the same
        raise RuntimeError("the truncated and full traces were split into different outer folds")
    data = {f"{b}:{m}": per_task(cvs[b], m) for b in BASES for m in methods}
    clusters = np.asarray(f.pool.question_ids)[f.fold >= 0]
    d = paired_bootstrap(data, [(f"full:{m}", f"round0:{m}") for m in methods], metrics=("accuracy", "brier"),
                         clusters=clusters, n_resamples=n_boot, seed=seed, ci=ci)
    d["method"] = [x.split(":", 1)[1] for x in d["a"]]
    return pd.DataFrame(rows), d.drop(columns=["a", "b"])


def per_round_table(traces: Sequence[Trace], methods: Sequence[str], *, outer_folds: int = 5, inner_folds: int = 5,
                    seed: int = 0, protocol: str = "strict", on_violation: str = "error", grids: dict | None = None,
                    n_boot: int = 2000, ci: float = 0.95) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The BDA paper's Table 8 rounds diagnostic: the traces truncated to at most round r, for every round the
    traces hold, each basis its own leak-free nested CV (every method refitted on the truncated evidence: a
    prior fitted on full traces and applied to truncated ones would leak the later rounds into the fit).
    (metrics: one row per (max_round, method); deltas: per method and r below the last, last - r in accuracy
    and Brier with a question-clustered paired interval, all on the same outer folds.)"""
    last = max(m.round for t in traces for m in t.moves)
    cvs = {}
    for r in range(last + 1):
        trs = [t.truncate(r) for t in traces] if r < last else list(traces)
        _, cvs[r] = run_cell(trs, methods, grids=grids or {}, protocol=protocol, on_violation=on_violation,
                             seed=seed, outer_folds=outer_folds, inner_folds=inner_folds)
    rows = [{"max_round": r, "method": m, **v} for r in cvs for m, v in cell_metrics(cvs[r]).items()]
    full = cvs[last]
    if any(not np.array_equal(cv.fold, full.fold) for cv in cvs.values()):
        raise RuntimeError("the truncated and full traces were split into different outer folds")
    data = {f"{r}:{m}": per_task(cvs[r], m) for r in cvs for m in methods}
    pairs = [(f"{last}:{m}", f"{r}:{m}") for r in range(last) for m in methods]
    if not pairs:
        return pd.DataFrame(rows), pd.DataFrame()
    d = paired_bootstrap(data, pairs, metrics=("accuracy", "brier"),
                         clusters=np.asarray(full.pool.question_ids)[full.fold >= 0], n_resamples=n_boot, seed=seed, ci=ci)
    d["method"] = [x.split(":", 1)[1] for x in d["a"]]
    d["max_round"] = [int(x.split(":", 1)[0]) for x in d["b"]]
    d["full_round"] = last
    return pd.DataFrame(rows), d.drop(columns=["a", "b"])
