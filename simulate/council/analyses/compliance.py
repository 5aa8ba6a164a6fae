"""``chorus council compliance``: the stealth adversaries' compliance per trace file (math:
``chorus.simulate.council.adversary.compliance``), as a sealed analysis run."""
from __future__ import annotations

import json

from pydantic import Field

from chorus.core.analyses import AnalysisConfig, Result, TraceFiles, analysis
from chorus.core.undefined import reasons

UNDEFINED_WHY = {
    "files[].anti_correct_r0": "no round-0 proposal by an adversarial seat in this file (none, or n_proposals_r0 = 0)",
    "files[].anti_correct_maintained": "no adversarial seat held a position in this file (n_seat_tasks = 0)",
}


class ComplianceConfig(AnalysisConfig):
    traces: TraceFiles = Field(description="A council run directory (its traces/) or trace files; each file's "
                                           "adversarial seats are read from its traces.")


def show(console, result: Result) -> None:
    # one line per file, as the command printed before it wrote a run (scripts grep these lines)
    for row in result.summary["files"]:
        c = {k: v for k, v in row.items() if k != "file"}
        console.print(f"{row['file']}: {json.dumps(c)}" if c["n_traces"] else f"{row['file']}: no adversarial seats",
                      highlight=False, soft_wrap=True, markup=False)


def brief(summary: dict) -> dict:
    rows = [r for r in summary["files"] if r["n_traces"]]
    out: dict = {"files": len(summary["files"]), "files_with_adversaries": len(rows)}
    for k, n in (("anti_correct_r0", "n_proposals_r0"), ("anti_correct_maintained", "n_seat_tasks")):
        num = sum(r[k] * r[n] for r in rows if r[n] and r[k] is not None and r[k] == r[k])
        den = sum(r[n] for r in rows if r[k] is not None and r[k] == r[k])
        out[k] = num / den if den else float("nan")   # pooled over files: events over opportunities
    return out


@analysis("council", config=ComplianceConfig, show=show, brief=brief)
def compliance():
    """Adversary compliance per trace file: anti-correct proposals at round 0 and positions maintained,
    and whom the adversarial seats challenged or conceded to (BDA paper, the live stealth coalition)."""
    import pandas as pd

    from chorus.aggregate.trace import load_traces
    from chorus.simulate.council.adversary import compliance as measure

    def compute(cfg: ComplianceConfig) -> Result:
        rows = [{"file": p.name, **measure(load_traces(p))} for p in cfg.traces]
        summary = {"sources": [str(p) for p in cfg.traces], "files": rows}
        summary["undefined"] = reasons(summary, UNDEFINED_WHY)
        return Result(summary=summary,
                      tables={"compliance": pd.DataFrame(rows)})
    return compute
