"""``chorus aggregate lodo``: leave-one-dataset-out transfer (math: ``chorus.aggregate.lodo``)."""
from __future__ import annotations

from pydantic import Field

from chorus.aggregate.analyses.fields import InnerFolds, Protocol, Seed, checked_methods
from chorus.core.analyses import AnalysisConfig, Csv, NamedTraceFiles, Result, analysis, split_named


class LodoConfig(AnalysisConfig):
    sets: NamedTraceFiles = Field(description="NAME=FILE trace sets (two or more), e.g. truthfulqa=RUN/traces/a.jsonl.")
    methods: Csv[str] = Field(["plurality", "best_member", "ds_em", "bda_shared", "bda_per_agent", "bda_confusion"],
                              description="Methods, comma-separated (aggregate method names).")
    seed: Seed = 0
    inner_folds: InnerFolds = 5
    outer_folds: int = Field(5, description="Folds of the in-domain comparison.")
    protocol: Protocol = "strict"


def show(console, result: Result) -> None:
    from rich.table import Table

    from chorus.aggregate.lodo import transfer_gap

    t = Table(title="leave-one-dataset-out: accuracy under transfer vs in domain")
    for c in ("held_out", "method", "transfer", "in_domain", "gap"):
        t.add_column(c)
    for row in transfer_gap(result.tables["lodo"]).to_dict("records"):
        t.add_row(str(row["held_out"]), str(row["method"]), *(f"{row[c]:.3f}" for c in ("transfer", "in_domain", "gap")))
    console.print(t)


def brief(summary: dict) -> dict:
    """Per held-out set and method: accuracy under transfer."""
    return {f"{r['held_out']}/{r['method']}": r["accuracy"] for r in summary["rows"] if r["evaluation"] == "transfer"}


@analysis("aggregate", config=LodoConfig, show=show, brief=brief)
def lodo():
    """Leave-one-dataset-out transfer (BDA paper E.2 / E.4): fit on every set but one, predict the one left
    out, beside the in-domain nested CV of that set."""
    from chorus.aggregate.lodo import leave_one_dataset_out
    from chorus.aggregate.trace import load_traces

    def compute(cfg: LodoConfig) -> Result:
        paths = dict(split_named(s, "a trace set") for s in cfg.sets)
        named = {name: load_traces(path) for name, path in paths.items()}
        ms = checked_methods(cfg.methods)
        table = leave_one_dataset_out(named, ms, seed=cfg.seed, inner_folds=cfg.inner_folds,
                                      outer_folds=cfg.outer_folds, protocol=cfg.protocol)
        return Result(summary={"sets": paths, "methods": ms, "seed": cfg.seed, "inner_folds": cfg.inner_folds,
                               "outer_folds": cfg.outer_folds, "protocol": cfg.protocol,
                               "rows": table.to_dict("records")},
                      tables={"lodo": table})
    return compute
