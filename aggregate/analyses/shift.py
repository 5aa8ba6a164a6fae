"""``chorus aggregate shift``: policy shift between fit and deployment (math: ``chorus.aggregate.policy_shift``)."""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from chorus.aggregate.analyses.fields import (CoalitionSeats, InnerFolds, Protocol, PWrong, Seed, checked_methods,
                                              load_all, sources)
from chorus.core.analyses import AnalysisConfig, Csv, Result, TraceFiles, analysis

COLUMNS = ["kind", "method", "acc_no_shift", "acc_shift", "delta_acc", "edge_no_shift", "edge_shift", "brier_no_shift",
           "brier_shift"]


class ShiftConfig(AnalysisConfig):
    traces: TraceFiles = Field(description="Clean labelled trace files sharing one candidate list.")
    methods: Csv[str] = Field(["plurality", "bda_per_agent", "bda_confusion", "stacker"],
                              description="Methods, comma-separated.")
    kinds: Optional[Csv[str]] = Field(None, description="Shifts, comma-separated: permute (K >= 3), classes, honest, "
                                                        "sleeper (default: all that exist at K).")
    n_calibration: int = Field(200, description="Calibration window (whole questions).")
    k: CoalitionSeats = 2
    p_wrong: PWrong = 1.0
    seed: Seed = 0
    inner_folds: InnerFolds = 5
    protocol: Protocol = "strict"


def show(console, result: Result) -> None:
    from rich.table import Table

    s = result.summary
    t = Table(title=f"policy shift: deployment accuracy without / with the shift (coalition {s['coalition']}, "
                    f"p_wrong={s['p_wrong']}; calibration {int(result.tables['shift'].n_calibration.iloc[0])} tasks; "
                    f"edge = vs bda_per_agent)")
    for c in COLUMNS:
        t.add_column(c)
    for row in s["before_after"]:
        t.add_row(*(f"{row[c]:+.3f}" if c.startswith(("delta", "edge")) else f"{row[c]:.3f}"
                    if isinstance(row[c], float) else str(row[c]) for c in COLUMNS))
    console.print(t)


def brief(summary: dict) -> dict:
    """Per shift kind and method: the change in deployment accuracy under the shift."""
    return {f"{r['kind']}/{r['method']}": r["delta_acc"] for r in summary["before_after"]}


@analysis("aggregate", config=ShiftConfig, show=show, brief=brief, plots=True)
def shift():
    """Policy shift (BDA paper §8 / App. F): every method fitted on the old policy's calibration window, scored
    on the same deployment tasks without and with the coalition's policy shift."""
    from chorus.aggregate.policy_shift import before_after, coalition, plot, shift_table

    def compute(cfg: ShiftConfig) -> Result:
        ms = checked_methods(cfg.methods)
        trs = load_all(cfg.traces)
        adv = coalition(trs, k=cfg.k, p_wrong=cfg.p_wrong)
        tab = shift_table(trs, ms, kinds=cfg.kinds, adversary=adv, n_calibration=cfg.n_calibration, seed=cfg.seed,
                          protocol=cfg.protocol, inner_folds=cfg.inner_folds)
        return Result(summary={"sources": sources(cfg.traces), "methods": ms, "seed": cfg.seed,
                               "coalition": list(adv.seats), "p_wrong": cfg.p_wrong, "protocol": cfg.protocol,
                               "inner_folds": cfg.inner_folds, "rows": tab.to_dict("records"),
                               "before_after": before_after(tab).to_dict("records")},
                      tables={"shift": tab}, plots={"policy_shift": lambda path: plot(tab, path)})
    return compute
