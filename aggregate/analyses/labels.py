"""``chorus aggregate labels``: label efficiency (math: ``chorus.aggregate.label_efficiency``)."""
from __future__ import annotations

from pydantic import Field

from chorus.aggregate.analyses.fields import Protocol, checked_methods
from chorus.core.analyses import AnalysisConfig, Csv, Result, TraceFile, analysis


class LabelsConfig(AnalysisConfig):
    traces: TraceFile = Field(description="A labelled trace file (.jsonl / .jsonl.gz).")
    budgets: Csv[int] = Field([10, 20, 50, 100], description="Label budgets, comma-separated.")
    seeds: Csv[int] = Field([0, 1, 2], description="Calibration draws, comma-separated.")
    methods: Csv[str] = Field(["best_member", "stacker", "gated", "bda_shared", "bda_per_agent", "bda_confusion",
                               "plurality"], description="Methods, comma-separated.")
    protocol: Protocol = "strict"


def show(console, result: Result) -> None:
    import pandas as pd
    from rich.table import Table

    s = result.summary
    curve = pd.DataFrame(s["curve"])
    t = Table(title=f"label efficiency: hold-out accuracy, mean +- SD over {len(s['seeds'])} seeds")
    t.add_column("method")
    for n in s["budgets"]:
        t.add_column(f"n={n}")
    for m in s["methods"]:
        c = curve[curve["method"] == m].set_index("budget")
        t.add_row(m, *(f"{c.at[n, 'mean']:.3f} +- {c.at[n, 'sd']:.3f}" for n in s["budgets"]))
    console.print(t)


def brief(summary: dict) -> dict:
    """Per method: mean hold-out accuracy at the largest budget."""
    top = max(summary["budgets"])
    return {r["method"]: r["mean"] for r in summary["curve"] if r["budget"] == top}


@analysis("aggregate", config=LabelsConfig, show=show, brief=brief, plots=True)
def labels():
    """Label efficiency (BDA paper E.6, Table 11): every method fitted on n labelled tasks, scored on the
    disjoint rest, over seeds."""
    from chorus.aggregate.label_efficiency import efficiency_curve, label_efficiency, plot_curve
    from chorus.aggregate.trace import load_traces

    def compute(cfg: LabelsConfig) -> Result:
        ms = checked_methods(cfg.methods)
        table = label_efficiency(load_traces(cfg.traces), ms, cfg.budgets, seeds=cfg.seeds, protocol=cfg.protocol)
        curve = efficiency_curve(table)
        return Result(summary={"traces": str(cfg.traces), "budgets": cfg.budgets, "seeds": cfg.seeds, "methods": ms,
                               "protocol": cfg.protocol, "curve": curve.to_dict("records")},
                      tables={"labels": table}, plots={"label_efficiency": lambda path: plot_curve(curve, path)})
    return compute
