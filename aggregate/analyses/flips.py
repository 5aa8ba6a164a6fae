"""``chorus aggregate flips``: the decision-flip diagnostic over trace files (math: ``chorus.aggregate.flips``)."""
from __future__ import annotations

from pydantic import Field

from chorus.aggregate.analyses.fields import Protocol, load_all, sources
from chorus.core.analyses import AnalysisConfig, Result, TraceFiles, analysis

COLUMNS = ["K", "n_tasks", "changed", "fixed", "broken", "swapped", "net", "ratio", "accuracy_round0", "accuracy_full"]


class FlipsConfig(AnalysisConfig):
    traces: TraceFiles = Field(description="Trace files (.jsonl / .jsonl.gz); labelled traces are read.")
    b: float = Field(0.58, description="The neutral prior's mean reliability (every seat the same).")
    s: float = Field(16.0, description="The neutral prior's strength.")
    seed: int = Field(0, description="Tie-break seed.")
    protocol: Protocol = "strict"


def show(console, result: Result) -> None:
    from rich.table import Table

    s = result.summary
    t = Table(title=f"decision flips, round 0 -> full trace (neutral prior b={s['b']}, s={s['s']}; "
                    f"{len(result.tables['flips'])} labelled tasks)")
    for c in COLUMNS:
        t.add_column(c)
    for row in s["by_K"]:
        t.add_row(*(f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c]) for c in COLUMNS))
    console.print(t)


def brief(summary: dict) -> dict:
    rows = summary["by_K"]
    fixed, broken = sum(r["fixed"] for r in rows), sum(r["broken"] for r in rows)
    return {"tasks": sum(r["n_tasks"] for r in rows), "fixed": fixed, "broken": broken, "net": fixed - broken}


@analysis("aggregate", config=FlipsConfig, show=show, brief=brief, plots=True)
def flips():
    """The decision-flip diagnostic (BDA paper E.4, Fig. 6): round 0 against the full trace under a neutral
    prior, as fixes and breaks by K."""
    from chorus.aggregate.flips import decision_flips, flip_summary, plot_ratios

    def compute(cfg: FlipsConfig) -> Result:
        per_task = decision_flips(load_all(cfg.traces), b=cfg.b, s=cfg.s, seed=cfg.seed, protocol=cfg.protocol)
        summ = flip_summary(per_task)
        return Result(summary={"b": cfg.b, "s": cfg.s, "seed": cfg.seed, "protocol": cfg.protocol,
                               "sources": sources(cfg.traces), "by_K": summ.to_dict("records")},
                      tables={"flips": per_task}, plots={"flip_ratios": lambda path: plot_ratios(summ, path)})
    return compute
