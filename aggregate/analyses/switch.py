"""``chorus aggregate switch``: the K = 2 label-switching demonstration (math: ``chorus.aggregate.label_switching``)."""
from __future__ import annotations

from pydantic import Field

from chorus.aggregate.analyses.fields import InnerFolds, OuterFolds, Protocol, Seed, load_all, sources
from chorus.core.analyses import AnalysisConfig, Csv, Result, TraceFiles, analysis


class SwitchConfig(AnalysisConfig):
    traces: TraceFiles = Field(description="Trace files (.jsonl / .jsonl.gz); labelled K = 2 traces are read.")
    methods: Csv[str] = Field(["bda_per_agent", "plurality"], description="Arms compared under nested CV, comma-separated.")
    seed: Seed = 0
    outer_folds: OuterFolds = 5
    inner_folds: InnerFolds = 5
    protocol: Protocol = "strict"


def show(console, result: Result) -> None:
    from rich.table import Table

    res, t = result.summary, result.tables["switch"]
    tab = Table(title=f"label switching at K = 2 ({res['n_tasks']} labelled tasks; seat accuracy "
                      + ", ".join(f"{a} {v:.3f}" for a, v in res["seat_accuracy"].items()) + ")")
    for c in t.columns:
        tab.add_column(c)
    for row in t.to_dict("records"):
        tab.add_row(*(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row.values()))
    console.print(tab)


def brief(summary: dict) -> dict:
    return {"tasks": summary["n_tasks"],
            "unsupervised_accuracy": {m: r["accuracy"] for m, r in summary["unsupervised"].items()},
            "cross_validated_accuracy": {m: r["accuracy"] for m, r in summary["cross_validated"].items()}}


@analysis("aggregate", config=SwitchConfig, show=show, brief=brief, plots=True)
def switch():
    """The K = 2 label-switching demonstration (BDA paper App. F.10): unsupervised Dawid-Skene, majority- and
    spectral-initialised, beside its mirror image (equal likelihood) and the supervised arms under nested CV."""
    from chorus.aggregate.label_switching import demonstrate, plot, table

    def compute(cfg: SwitchConfig) -> Result:
        res = demonstrate(load_all(cfg.traces), compared=cfg.methods, seed=cfg.seed, outer_folds=cfg.outer_folds,
                          inner_folds=cfg.inner_folds, protocol=cfg.protocol)
        return Result(summary={"sources": sources(cfg.traces), "seed": cfg.seed, "protocol": cfg.protocol, **res},
                      tables={"switch": table(res)}, plots={"label_switching": lambda path: plot(res, path)})
    return compute
