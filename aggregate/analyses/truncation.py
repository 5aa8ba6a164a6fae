"""``chorus aggregate truncation``: round-0-truncated against full-trace aggregation (math: ``chorus.aggregate.truncation``)."""
from __future__ import annotations

from pydantic import Field

from chorus.aggregate.analyses.fields import (InnerFolds, OuterFolds, Protocol, Seed, checked_methods, load_all,
                                              sources)
from chorus.core.analyses import AnalysisConfig, Csv, Result, TraceFiles, analysis


class TruncationConfig(AnalysisConfig):
    traces: TraceFiles = Field(description="Trace files (.jsonl / .jsonl.gz), attacked or not.")
    methods: Csv[str] = Field(["plurality", "stacker", "bda_per_agent", "bda_confusion"],
                              description="Methods, comma-separated.")
    seed: Seed = 0
    outer_folds: OuterFolds = 5
    inner_folds: InnerFolds = 5
    n_boot: int = Field(2000, description="Paired bootstrap resamples.")
    protocol: Protocol = "strict"


def show(console, result: Result) -> None:
    from rich.table import Table

    from chorus.core.stats import record_interval_text

    metrics, deltas = result.tables["truncation"], result.tables["truncation_deltas"]
    t = Table(title=f"round 0 against the full trace ({result.summary['n_traces']} traces, nested CV per basis)")
    for c in ("method", "acc round0", "acc full", "delta [CI] (level)", "brier round0", "brier full"):
        t.add_column(c)
    for m in result.summary["methods"]:
        r0 = metrics[(metrics.basis == "round0") & (metrics.method == m)].iloc[0]
        fu = metrics[(metrics.basis == "full") & (metrics.method == m)].iloc[0]
        d = deltas[(deltas.method == m) & (deltas.metric == "accuracy")].iloc[0]
        # the interval names what it resamples (questions, and how many), or why it is refused (issue 51)
        t.add_row(m, f"{r0.accuracy:.3f}", f"{fu.accuracy:.3f}", f"{d.delta:+.3f} {record_interval_text(d.to_dict(), fmt='+.3f')}",
                  f"{r0.brier:.3f}", f"{fu.brier:.3f}")
    console.print(t)


def brief(summary: dict) -> dict:
    """Per method: full - round0 accuracy with its interval."""
    return {d["method"]: {"delta": d["delta"], "ci": [d["ci_low"], d["ci_high"]]}
            for d in summary["deltas"] if d["metric"] == "accuracy"}


@analysis("aggregate", config=TruncationConfig, show=show, brief=brief)
def truncation():
    """Round-0-truncated against full-trace aggregation (BDA paper Table 14): each basis its own leak-free
    nested CV on the same folds; per method, full - round0 with a question-clustered paired interval."""
    from chorus.aggregate.truncation import truncation_table

    def compute(cfg: TruncationConfig) -> Result:
        ms = checked_methods(cfg.methods)
        trs = load_all(cfg.traces)
        metrics, deltas = truncation_table(trs, ms, outer_folds=cfg.outer_folds, inner_folds=cfg.inner_folds,
                                           seed=cfg.seed, protocol=cfg.protocol, n_boot=cfg.n_boot)
        return Result(summary={"sources": sources(cfg.traces), "methods": ms, "seed": cfg.seed,
                               "outer_folds": cfg.outer_folds, "inner_folds": cfg.inner_folds, "n_traces": len(trs),
                               "metrics": metrics.to_dict("records"), "deltas": deltas.to_dict("records")},
                      tables={"truncation": metrics, "truncation_deltas": deltas})
    return compute
