"""The K = 2 label-switching demonstration (the BDA paper, App. F.10): unsupervised one-coin
Dawid-Skene cannot tell a council from its mirror image, and a supervised prior can.

On the binary (K = 2) labelled traces: the unsupervised estimator (``DawidSkeneEM``, majority- and
spectral-initialised) is fitted on every task's round-0 votes; for each fit we report its
accuracy against gold, the fitted reliabilities, its marginal log-likelihood and that of its mirror
image (every p -> 1 - p, truths flipped: equal, to float rounding), and whether it landed on the
truth's orientation. Beside them, the supervised arms (BDA per-agent by default, and plurality)
under the usual nested CV: the labels orient the seats. A council whose seats are mostly worse than
chance is where the unsupervised orientation fails (``chorus aggregate generate --reliabilities
0.2,0.2,0.2,0.7,0.7``).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from chorus.aggregate.counts import Pool
from chorus.aggregate.errors import LabelError
from chorus.aggregate.experiments import cell_metrics
from chorus.aggregate.methods import make_method
from chorus.aggregate.selection import nested_cv
from chorus.aggregate.trace import Trace
from chorus.aggregate.spectral import mirrored, one_coin_loglik
from chorus.core.plots import save, subplots

UNSUPERVISED = {"ds_em": "majority", "ds_em_spectral": "spectral"}


def demonstrate(traces: Sequence[Trace], *, compared: Sequence[str] = ("bda_per_agent", "plurality"),
                outer_folds: int = 5, inner_folds: int = 5, seed: int = 0, protocol: str = "strict",
                on_violation: str = "error") -> dict[str, Any]:
    """The demonstration's numbers (module docstring) on the labelled K = 2 traces of ``traces``."""

    binary = [t for t in traces if len(t.candidates) == 2 and t.gold is not None]
    if len(binary) < 2 * outer_folds:
        raise LabelError(f"label switching needs labelled K = 2 traces: {len(binary)} of {len(traces)} are "
                         f"(at least {2 * outer_folds} for {outer_folds} outer folds)")
    pool = Pool.from_traces(binary, protocol=protocol, on_violation=on_violation)
    idx = np.arange(pool.T)
    votes = pool.r0_answer
    gold = pool.gold
    out: dict[str, Any] = {"n_tasks": int(pool.T), "seats": list(pool.agents), "unsupervised": {}, "cross_validated": {}}
    observed = (votes >= 0) & (gold[:, None] >= 0)
    out["seat_accuracy"] = {a: float((votes[:, i] == gold)[observed[:, i]].mean()) if observed[:, i].any() else None
                            for i, a in enumerate(pool.agents)}
    for name, init in UNSUPERVISED.items():
        ds = make_method(name, protocol=protocol, on_violation=on_violation)
        ds._fit(pool, idx)  # unsupervised: every task's votes, no label
        P = ds._proba(pool, idx)
        skill = np.array([ds.skills_.get(a, 0.5) for a in pool.agents], float)
        prior = P.mean(0)
        ll = one_coin_loglik(votes, skill, prior)
        ms, mp = mirrored(skill, prior)
        acc = float((P.argmax(1) == gold).mean())
        out["unsupervised"][name] = {
            "init": init, "accuracy": acc, "skills": dict(zip(pool.agents, skill.tolist())),
            "loglik": ll, "mirror_loglik": one_coin_loglik(votes, ms, mp), "mirror_accuracy": 1.0 - acc,
            "oriented": acc >= 0.5, **({"init_skills": ds.init_skills_.to_dict()} if init == "spectral" else {}),
            # every start's fixed point (DawidSkeneEM runs them all): which was kept, and whether they differed
            "start_kept": ds.start_kept_, "fixed_points": ds.n_fixed_points_,
            "starts": [{k: r[k] for k in ("start", "loglik", "fixed_point", "mirror_of_kept")} for r in ds.starts_],
            "starts_warning": ds.starts_warning()}
    arms = {m: make_method(m, protocol=protocol, on_violation=on_violation) for m in compared}
    cv = nested_cv(pool, arms, outer_folds=outer_folds, inner_folds=inner_folds, seed=seed)
    for m, v in cell_metrics(cv).items():
        out["cross_validated"][m] = {"supervised": bool(arms[m].supervised), "accuracy": v["accuracy"],
                                     "ece_ew": v.get("ece_ew"), "brier": v.get("brier")}
    return out


def table(result: dict[str, Any]) -> pd.DataFrame:
    """One row per arm: how it was fitted, its accuracy, and (Dawid-Skene) its log-likelihood beside
    its mirror image's and whether it landed on the truth's orientation."""
    rows = [{"method": m, "fitted": f"unsupervised, {r['init']} start, all tasks", "accuracy": r["accuracy"],
             "loglik": r["loglik"], "mirror_loglik": r["mirror_loglik"], "oriented": r["oriented"],
             "fixed_points": r.get("fixed_points"), "start_kept": r.get("start_kept")}
            for m, r in result["unsupervised"].items()]
    rows += [{"method": m, "fitted": ("supervised" if r["supervised"] else "unsupervised") + ", nested CV",
              "accuracy": r["accuracy"], "loglik": np.nan, "mirror_loglik": np.nan, "oriented": None,
              "fixed_points": None, "start_kept": None}
             for m, r in result["cross_validated"].items()]
    return pd.DataFrame(rows)


def plot(result: dict[str, Any], path) -> None:
    """Accuracy of each arm, with every seat's own accuracy for reference."""
    t = table(result)
    fig, (a1, a2) = subplots(1, 2, figsize=(10.0, 3.6))
    a1.bar(range(len(result["seat_accuracy"])), list(result["seat_accuracy"].values()), color="0.6")
    a1.axhline(0.5, color="k", lw=0.8, ls=":")
    a1.set_xticks(range(len(result["seat_accuracy"])), list(result["seat_accuracy"]))
    a1.set_ylabel("round-0 accuracy")
    a1.set_title("the seats (K = 2)", fontsize=9)
    colors = ["C3" if o is False else "C0" for o in t["oriented"]]
    a2.bar(range(len(t)), t["accuracy"], color=colors)
    a2.axhline(0.5, color="k", lw=0.8, ls=":")
    a2.set_xticks(range(len(t)), t["method"], rotation=20, ha="right", fontsize=8)
    a2.set_ylabel("accuracy")
    a2.set_title(f"unsupervised fits upside down in red ({result['n_tasks']} tasks)", fontsize=9)
    fig.tight_layout()
    save(fig, path)
