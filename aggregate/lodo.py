"""Leave-one-dataset-out transfer (BDA paper App. E.2 / E.4): fit every method on all trace sets but one,
predict the one left out, for each set in turn.

The held-out set never informs anything fitted for it: reliabilities, hyperparameters (inner CV on the
training sets only), the confusion rows and the candidate prior all come from the other sets (the
calibrate / deploy split of ``selection.fit_predict_split``). The sets must share K and, for methods
that need it, one candidate set; the seats must be the same agents (their reliabilities are what
transfers). Beside each transfer cell the in-domain nested CV of the held-out set is reported, so the
cost of transfer is read against fitting where one deploys.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import pandas as pd

from chorus.aggregate.errors import TraceError
from chorus.aggregate.experiments import cell_metrics, run_cell
from chorus.aggregate.trace import Trace


def leave_one_dataset_out(sets: Mapping[str, Sequence[Trace]], methods: Sequence[str], *, grids: dict | None = None,
                          protocol: str = "strict", on_violation: str = "error", seed: int = 0,
                          inner_folds: int = 5, outer_folds: int = 5, in_domain: bool = True) -> pd.DataFrame:
    """One row per (held-out set, method, evaluation): ``transfer`` (fit on the other sets) and, with
    ``in_domain``, ``in_domain`` (nested CV within the held-out set), with accuracy, ECEs, Brier, n."""
    if len(sets) < 2:
        raise TraceError(f"leave-one-dataset-out needs at least two trace sets, got {len(sets)}")
    agents = {name: sorted({m.agent for tr in trs for m in tr.moves}) for name, trs in sets.items()}
    first = next(iter(agents.values()))
    for name, a in agents.items():
        if a != first:
            raise TraceError(f"trace set {name!r} has seats {a}, another has {first}: reliabilities transfer "
                             f"only between the same seats")
    rows: list[dict[str, Any]] = []
    for held, test in sets.items():
        train = [tr for name, trs in sets.items() if name != held for tr in trs]
        ids = {tr.task_id for tr in train}
        clash = [tr.task_id for tr in test if tr.task_id in ids]
        if clash:
            raise TraceError(f"task {clash[0]!r} is in {held!r} and in another trace set: the sets must be disjoint")
        _, cv = run_cell(list(train) + list(test), methods, grids=grids or {}, protocol=protocol,
                         on_violation=on_violation, seed=seed, inner_folds=inner_folds, n_calibration=len(train))
        for m, v in cell_metrics(cv).items():
            rows.append({"held_out": held, "n_train": len(train), "method": m, "evaluation": "transfer", **v})
        if in_domain:
            _, cv_in = run_cell(list(test), methods, grids=grids or {}, protocol=protocol, on_violation=on_violation,
                                seed=seed, outer_folds=outer_folds, inner_folds=inner_folds)
            n_in = round(sum(f["n_train"] for f in cv_in.fitted) / len(cv_in.fitted))  # mean training part of the folds
            for m, v in cell_metrics(cv_in).items():
                rows.append({"held_out": held, "n_train": n_in, "method": m, "evaluation": "in_domain", **v})
    return pd.DataFrame(rows)


def transfer_gap(table: pd.DataFrame, metric: str = "accuracy") -> pd.DataFrame:
    """Per (held-out set, method): the metric under transfer, in domain, and transfer - in domain."""
    w = table.pivot_table(index=["held_out", "method"], columns="evaluation", values=metric).reset_index()
    if "in_domain" in w:
        w["gap"] = w["transfer"] - w["in_domain"]
    return w.sort_values(["held_out", "method"]).reset_index(drop=True)

