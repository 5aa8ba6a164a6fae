"""``chorus aggregate keys``: Table 7, reliability keys and estimators (math: ``chorus.aggregate.granularity``)."""
from __future__ import annotations

from pydantic import Field

from chorus.aggregate.analyses.fields import InnerFolds, OuterFolds, Protocol, Seed, load_all, sources
from chorus.core.analyses import AnalysisConfig, Result, TraceFiles, analysis

COLUMNS = {"half": "half", "arm": "arm", "n_seats": "seats", "moves_per_seat": "moves/seat", "accuracy": "acc",
           "brier": "Brier", "ece_ew": "ECE ew", "ece_em": "ECE em"}


class KeysConfig(AnalysisConfig):
    traces: TraceFiles = Field(description="Labelled trace files (.jsonl / .jsonl.gz), read as one pool.")
    b: float = Field(0.58, description="The granularity half's fixed prior: mean reliability.")
    kappa: float = Field(2.0, description="The fixed prior's spread of the key reliabilities.")
    s: float = Field(16.0, description="The fixed prior's strength.")
    seed: Seed = 0
    outer_folds: OuterFolds = 5
    inner_folds: InnerFolds = 5
    protocol: Protocol = "strict"


def show(console, result: Result) -> None:
    from rich.table import Table

    s, p = result.summary, result.summary["fixed_prior"]
    t = Table(title=f"Table 7: reliability key (fixed prior b={p['b']}, kappa={p['kappa']}, s={p['s']}) and estimator "
                    f"(inner CV); {s['n_traces']} traces, {s['outer_folds']} outer folds")
    for c in COLUMNS.values():
        t.add_column(c)
    for row in result.tables["keys"].to_dict("records"):
        t.add_row(*(f"{row[c]:.{1 if c == 'moves_per_seat' else 4}f}" if isinstance(row[c], float) else str(row[c])
                    for c in COLUMNS))
    console.print(t)


def brief(summary: dict) -> dict:
    """Per half and arm: accuracy."""
    return {f"{r['half']}/{r['arm']}": r["accuracy"] for r in summary["rows"]}


@analysis("aggregate", config=KeysConfig, show=show, brief=brief, plots=True)
def keys():
    """Table 7 (BDA paper E.2) in one command: reliability-key granularity (shared, agent, agent x round,
    agent x force) under a fixed prior, and the reliability estimator (all moves, proposals, round 0) by inner
    CV, every arm on the same nested-CV outer folds."""
    from chorus.aggregate.granularity import ablation_table, plot

    def compute(cfg: KeysConfig) -> Result:
        trs = load_all(cfg.traces)
        prior = {"b": cfg.b, "kappa": cfg.kappa, "s": cfg.s}
        tab = ablation_table(trs, prior=prior, outer_folds=cfg.outer_folds, inner_folds=cfg.inner_folds,
                             seed=cfg.seed, protocol=cfg.protocol)
        return Result(summary={"sources": sources(cfg.traces), "n_traces": len(trs), "fixed_prior": prior,
                               "seed": cfg.seed, "outer_folds": cfg.outer_folds, "inner_folds": cfg.inner_folds,
                               "protocol": cfg.protocol, "rows": tab.to_dict("records")},
                      tables={"keys": tab}, plots={"keys": lambda path: plot(tab, path)})
    return compute
