"""``chorus aggregate check``: a trace file through the protocol automaton (``chorus.aggregate.moves``); a check
whose record says what it rejected, exit 1 when it rejected any move."""
from __future__ import annotations

import json
from typing import Optional

from pydantic import Field

from chorus.aggregate.analyses.fields import Protocol
from chorus.core.analyses import AnalysisConfig, Result, TraceFile, analysis


class CheckConfig(AnalysisConfig):
    traces: TraceFile = Field(description="Trace file (.jsonl / .jsonl.gz).")
    protocol: Protocol = "strict"


def show(console, result: Result) -> None:
    console.print(json.dumps(result.summary, indent=2), markup=False, highlight=False, soft_wrap=True, emoji=False)


def brief(summary: dict) -> dict:
    return {k: summary[k] for k in ("traces", "moves", "rejected")}


def fails(summary: dict) -> Optional[str]:
    return f"{summary['rejected']} of {summary['moves']} moves rejected" if summary["rejected"] else None


@analysis("aggregate", config=CheckConfig, show=show, brief=brief, fails=fails)
def check():
    """Validate a trace file and run the protocol automaton; report rejected moves (exit 1 if any)."""
    from chorus.aggregate.moves import check_all
    from chorus.aggregate.trace import load_traces

    def compute(cfg: CheckConfig) -> Result:
        return Result(summary=check_all(load_traces(cfg.traces), cfg.protocol).to_dict())
    return compute
