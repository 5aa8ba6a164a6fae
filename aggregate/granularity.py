"""Table 7 of the BDA paper as one table: the reliability-key granularity and the reliability-estimator ablation.

* **granularity** (upper half): the one-coin posterior over each reliability key of ``chorus.aggregate.keys``
  (``shared``, ``agent``, ``agent_round``, ``agent_force``) under one *fixed* prior, (b, kappa, s) =
  (0.58, 2, 16) by default, so the key alone moves the numbers (no inner CV: ``OneCoinBDA(hyperparams=)``);
* **estimator** (lower half): per-agent BDA with r_i read from all informative moves, proposals only or
  round-0 proposals only (``bda_per_agent``, ``bda_rel_proposals``, ``bda_rel_round0``), hyperparameters by
  inner CV on Brier.

Every arm runs in one ``nested_cv`` over one pool: the same outer folds, training parts and inner folds, so
the rows differ only by the arm. ``n_seats`` and ``moves_per_seat`` (informative moves per pseudo-seat over
the whole pool) show how thin each key's counts are.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from chorus.aggregate.counts import Pool
from chorus.aggregate.estimators import OneCoinBDA
from chorus.aggregate.experiments import cell_metrics
from chorus.aggregate.keys import KEYS, check_key, keyed_pool
from chorus.aggregate.methods import make_method
from chorus.aggregate.selection import nested_cv
from chorus.aggregate.trace import Trace
from chorus.core.plots import save, subplots
from chorus.core.config import InputError

FIXED_PRIOR = {"b": 0.58, "kappa": 2.0, "s": 16.0}  # the BDA paper's Table 7 granularity prior
ESTIMATOR_ARMS = {"all": "bda_per_agent", "proposals": "bda_rel_proposals", "round0": "bda_rel_round0"}


def check_prior(prior: Mapping[str, float]) -> dict[str, float]:
    """The fixed prior, validated: b in (0, 1), kappa >= 0, s > 0."""
    p = {k: float(prior[k]) for k in ("b", "kappa", "s")}
    if not 0 < p["b"] < 1:
        raise InputError(f"fixed prior b must lie in (0, 1), got {p['b']!r}")
    if not (np.isfinite(p["kappa"]) and p["kappa"] >= 0):
        raise InputError(f"kappa must be >= 0, got {p['kappa']!r}")
    if not (np.isfinite(p["s"]) and p["s"] > 0):
        raise InputError(f"s must be > 0, got {p['s']!r}")
    return p


def key_arm(key: str) -> str:
    return f"key={key}"


def ablation_table(traces: Sequence[Trace], *, keys: Sequence[str] = KEYS, prior: Mapping[str, float] = FIXED_PRIOR,
                   estimators: Sequence[str] = tuple(ESTIMATOR_ARMS), outer_folds: int = 5, inner_folds: int = 5,
                   seed: int = 0, protocol: str = "strict", on_violation: str = "error") -> pd.DataFrame:
    """One row per arm: half (granularity | estimator), arm, method, n_seats, moves_per_seat, the held-out
    accuracy, ECEs, Brier and n, and (estimator half) the hyperparameters chosen per outer fold."""
    prior = check_prior(prior)
    for k in keys:
        check_key(k)
    unknown = [e for e in estimators if e not in ESTIMATOR_ARMS]
    if unknown:
        raise InputError(f"reliability estimator must be one of {', '.join(ESTIMATOR_ARMS)}, got {unknown[0]!r}")
    pool = Pool.from_traces(traces, protocol=protocol, on_violation=on_violation)
    arms: dict[str, Any] = {key_arm(k): OneCoinBDA("per_agent", hyperparams=dict(prior), key=k, protocol=protocol,
                                                   on_violation=on_violation) for k in keys}
    arms.update({ESTIMATOR_ARMS[e]: make_method(ESTIMATOR_ARMS[e], protocol=protocol, on_violation=on_violation)
                 for e in estimators})
    cv = nested_cv(pool, arms, outer_folds=outer_folds, inner_folds=inner_folds, seed=seed)
    met = cell_metrics(cv)
    fitted = pd.DataFrame(cv.fitted)

    def per_fold(m: str) -> dict[str, list[float]]:  # the prior each outer fold used (fixed, or chosen)
        hp = fitted[fitted["method"] == m]
        return {f"hp_{h}": [float(v) for v in hp[f"hp_{h}"]] for h in ("b", "kappa", "s")}
    rows = []
    for k in keys:
        kp = keyed_pool(pool, k)
        rows.append({"half": "granularity", "arm": k, "method": key_arm(k), "n_seats": kp.I,
                     "moves_per_seat": float(kp.N.sum() / kp.I), "prior": "fixed", **met[key_arm(k)],
                     **per_fold(key_arm(k))})
    for e in estimators:
        m = ESTIMATOR_ARMS[e]
        rows.append({"half": "estimator", "arm": e, "method": m, "n_seats": pool.I,
                     "moves_per_seat": float(_basis_moves(pool, e) / pool.I), "prior": "inner CV",
                     **met[m], **per_fold(m)})
    return pd.DataFrame(rows)


def _basis_moves(pool: Pool, basis: str) -> int:
    """The moves a reliability estimator reads (all informative moves, proposals, or round-0 proposals)."""
    if basis == "all":
        return int(pool.N.sum())
    if basis == "proposals":
        return int(pool.prop_pos.sum())
    return int((pool.r0_answer >= 0).sum())


def plot(table: pd.DataFrame, path: "str | Path", title: str = "") -> Path:
    """Accuracy, Brier and ECE (equal-width) per arm, the two halves side by side in each panel."""

    fig, axes = subplots(1, 3, figsize=(12.0, 3.8))
    colors = ["C0" if h == "granularity" else "C1" for h in table["half"]]
    labels = [f"{a}\n({'fixed' if h == 'granularity' else 'CV'})" for a, h in zip(table["arm"], table["half"])]
    for ax, (col, name) in zip(axes, (("accuracy", "accuracy"), ("brier", "Brier"), ("ece_ew", "ECE (10 equal-width)"))):
        ax.bar(range(len(table)), table[col], color=colors)
        ax.set_xticks(range(len(table)), labels, rotation=30, ha="right", fontsize=7)
        ax.set_title(name, fontsize=10)
        lo, hi = float(table[col].min()), float(table[col].max())
        pad = max(0.02, 0.25 * (hi - lo))
        ax.set_ylim(max(0.0, lo - pad) if col == "accuracy" else 0.0, hi + pad)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title or "reliability key (blue: fixed prior) and estimator (orange: inner CV)", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    save(fig, path)
    return path
