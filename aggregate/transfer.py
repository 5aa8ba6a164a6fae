"""Cross-domain transfer to a target of another K (BDA paper App. E.2 / E.4: the binary claim sets -> PubMedQA, K = 3).

``lodo`` needs one K across its sets; here the sources (K = 2 claim sets, say) are pooled, every method is fitted
on them (hyperparameters by inner CV there only) and the target is predicted as is. What crosses K:

* the one-coin arms: r_i, mu_i and the prior strength are scalars per seat, and Eq. 1-3 read them at any K (the
  (K - 1) factor is the target's), so the fitted seats are well defined on the target (any reliability key);
* the unsupervised arms (plurality, Dawid-Skene) fit nothing from the sources; best member, gated vote, the stacker
  and isotonic maps fit per-seat or per-(task, candidate) quantities that do not name labels;
* not the confusion model, nor anything that needs one shared label set: its K x K rows and candidate prior are over
  the sources' labels, and the target's labels are others. Such a method gets a ``skipped`` row naming why.

Beside each transferred row the target's own in-domain nested CV is reported (every method, the confusion included),
so the cost of transfer reads against fitting where one deploys.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from chorus.aggregate.counts import Pool
from chorus.aggregate.errors import TraceError
from chorus.aggregate.experiments import cell_metrics, run_cell
from chorus.aggregate.methods import make_method
from chorus.aggregate.metrics import summarize
from chorus.aggregate.selection import KEY_DECIDE, KEY_FIT, name_key, seed_int
from chorus.aggregate.trace import Trace
from chorus.core.seeding import rng as make_rng


def _seats(trs: Sequence[Trace]) -> list[str]:
    return sorted({m.agent for tr in trs for m in tr.moves})


def skip_reason(method: Any, source: Pool, target: Pool) -> str | None:
    """Why ``method`` cannot be carried from ``source`` to ``target`` (None when it can)."""
    if method.needs_shared_labels and source.shared_candidates != target.shared_candidates:
        return (f"needs one label set: fitted over the sources' K={source.K} labels {list(source.shared_candidates or [])}, "
                f"the target has K={target.K} ({list(target.shared_candidates or [])}); confusion rows do not cross K")
    return None


def cross_domain_transfer(sources: Mapping[str, Sequence[Trace]], target: Sequence[Trace], methods: Sequence[str], *,
                          target_name: str = "target", grids: dict | None = None, protocol: str = "strict",
                          on_violation: str = "error", seed: int = 0, inner_folds: int = 5, outer_folds: int = 5,
                          in_domain: bool = True) -> pd.DataFrame:
    """One row per (method, evaluation): ``transfer`` (fitted on the pooled sources, predicting ``target``; a
    method that cannot cross is ``skipped`` with its ``reason``) and, with ``in_domain``, the target's nested CV."""
    if not sources:
        raise TraceError("cross-domain transfer needs at least one source trace set")
    train = [tr for trs in sources.values() for tr in trs]
    test = list(target)
    if not test:
        raise TraceError(f"target {target_name!r} has no traces")
    if _seats(train) != _seats(test):
        raise TraceError(f"target {target_name!r} has seats {_seats(test)}, the sources {_seats(train)}: "
                         f"reliabilities transfer only between the same seats")
    ids = {tr.task_id for tr in train}
    clash = [tr.task_id for tr in test if tr.task_id in ids]
    if clash:
        raise TraceError(f"task {clash[0]!r} is in the target and in a source: the sets must be disjoint")
    src = Pool.from_traces(train, protocol=protocol, on_violation=on_violation)
    tgt = Pool.from_traces(test, protocol=protocol, on_violation=on_violation, agents=src.agents)
    tgt.require_labels(np.arange(tgt.T), f"scoring the target {target_name!r}")
    base = {"target": target_name, "sources": ",".join(sources), "K_sources": src.K, "K_target": tgt.K}
    rows: list[dict[str, Any]] = []
    fit_seed = seed_int(seed, KEY_FIT, 0)   # as selection.fit_predict_split: one calibrate / deploy split
    for name in methods:
        est = make_method(name, grids, protocol=protocol, on_violation=on_violation).clone(
            random_state=fit_seed, inner_folds=inner_folds)
        why = skip_reason(est, src, tgt)
        row = {**base, "method": name, "evaluation": "transfer", "n_train": src.T}
        if why is not None:
            rows.append({**row, "skipped": True, "reason": why})
            continue
        if est.supervised:
            src.require_labels(np.arange(src.T), f"fitting {name} on the sources")
        est._fit(src, np.arange(src.T))
        a, p = est._decide(tgt, np.arange(tgt.T), make_rng(seed, KEY_DECIDE, 0, name_key(name)))
        rows.append({**row, "skipped": False, "reason": None, **summarize(a, p, tgt.gold),
                     **{k: v for k, v in est.fitted_summary().items() if k.startswith("hp_")}})
    if in_domain:
        _, cv = run_cell(test, methods, grids=grids or {}, protocol=protocol, on_violation=on_violation, seed=seed,
                         outer_folds=outer_folds, inner_folds=inner_folds)
        n_in = round(sum(f["n_train"] for f in cv.fitted) / len(cv.fitted))
        for m, v in cell_metrics(cv).items():
            rows.append({**base, "method": m, "evaluation": "in_domain", "n_train": n_in, "skipped": False,
                         "reason": None, **v})
    return pd.DataFrame(rows)


def transfer_summary(table: pd.DataFrame, metrics: Sequence[str] = ("accuracy", "ece_ew", "brier")) -> pd.DataFrame:
    """Per method: each metric under transfer and in domain side by side (NaN where skipped)."""
    t = table[~table["skipped"].astype(bool)]
    w = t.pivot_table(index="method", columns="evaluation", values=list(metrics))
    w.columns = [f"{m}_{e}" for m, e in w.columns]
    order = list(dict.fromkeys(table["method"]))
    return w.reindex(order).reset_index()


def table_records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows as JSON records, a field left out where it has no value (a skipped method's metrics, the
    hyperparameters of arms without any) rather than written as NaN."""
    return [{k: v for k, v in r.items() if not (isinstance(v, float) and np.isnan(v))} for r in table.to_dict("records")]
