"""``chorus aggregate contagion``: contagion under attack, per trace file (math: ``chorus.aggregate.contagion``)."""
from __future__ import annotations

import json

from pydantic import Field

from chorus.aggregate.analyses.fields import Protocol
from chorus.core.analyses import AnalysisConfig, Result, TraceFiles, analysis


class ContagionConfig(AnalysisConfig):
    traces: TraceFiles = Field(description="Attacked trace files that name their adversarial seats.")
    protocol: Protocol = "strict"


def show(console, result: Result) -> None:
    console.print(json.dumps(result.summary, indent=2), markup=False, highlight=False, soft_wrap=True, emoji=False)


def brief(summary: dict) -> dict:
    """Per trace file: the effective corrupted fraction beside the nominal one."""
    return {path: {"nominal": s["nominal_corrupted_fraction"], "effective": s["effective_corrupted_fraction"]}
            for path, s in summary.items()}


@analysis("aggregate", config=ContagionConfig, show=show, brief=brief)
def contagion():
    """Contagion under attack (BDA paper G / F.14): genuine seats flipped by the coalition and the effective
    corrupted fraction against the nominal one."""
    from chorus.aggregate.contagion import contagion_summary
    from chorus.aggregate.trace import load_traces

    def compute(cfg: ContagionConfig) -> Result:
        return Result(summary={str(p): contagion_summary(load_traces(p), cfg.protocol) for p in cfg.traces})
    return compute
