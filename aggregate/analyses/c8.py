"""``chorus aggregate c8``: the BDA paper's §C.8 numerical checks (math: ``chorus.aggregate.c8``), the
confidence-invariance check over the given traces; exit 1 when any check fails."""
from __future__ import annotations

from typing import Optional

from chorus.aggregate.analyses.fields import InnerFolds, Protocol, Seed, load_all, sources
from chorus.core.analyses import AnalysisConfig, Result, TraceFiles, analysis
from pydantic import Field

CHECKS = ("symmetric", "k_minus_1", "invariance", "ceiling", "weighted_majority")


class C8Config(AnalysisConfig):
    traces: TraceFiles = Field(description="Trace files (.jsonl / .jsonl.gz) for the confidence-invariance check "
                                           "(labelled; the paper uses every clean binary trace).")
    seed: Seed = 0
    inner_folds: InnerFolds = 5
    protocol: Protocol = "strict"


def show(console, result: Result) -> None:
    from rich.table import Table

    s = result.summary
    t = Table(title="BDA paper §C.8: implementation against closed forms")
    for c in ("check", "max |implemented - closed form|", "holds"):
        t.add_column(c)
    for k in CHECKS:
        t.add_row(k, f"{s[k]['max_abs_diff']:.3g}", "yes" if s[k]["holds"] else "NO")
    console.print(t)
    sym = {(r["N"], r["K"]): r["posterior"] for r in s["symmetric"]["rows"]}
    t = Table(title="Beta(1, 1), N seats unanimous: posterior on their answer")
    for c in ("N", *(f"K={K}" for K in sorted({k for _, k in sym}))):
        t.add_column(c)
    for N in sorted({n for n, _ in sym}):
        t.add_row(str(N), *(f"{sym[(N, K)]:.4f}" for K in sorted({k for _, k in sym})))
    console.print(t)


def brief(summary: dict) -> dict:
    return {k: {"holds": summary[k]["holds"], "max_abs_diff": summary[k]["max_abs_diff"]} for k in CHECKS}


def fails(summary: dict) -> Optional[str]:
    bad = [k for k in CHECKS if not summary[k]["holds"]]
    return f"§C.8 checks failed: {', '.join(bad)}" if bad else None


@analysis("aggregate", config=C8Config, show=show, brief=brief, fails=fails)
def c8():
    """The BDA paper's §C.8 numerical checks: the symmetric-prior table (K = 2 pinned, K > 2 concentrating), the
    (K - 1) factor on the reference trace, confidence invariance over the given traces, the K = 2 ceiling and the
    weighted-majority form, each against its closed form (exit 1 if any fails)."""
    from chorus.aggregate.c8 import c8_checks as checks

    def compute(cfg: C8Config) -> Result:
        s = checks(load_all(cfg.traces), seed=cfg.seed, protocol=cfg.protocol, inner_folds=cfg.inner_folds)
        return Result(summary={"sources": sources(cfg.traces), "seed": cfg.seed, **s})
    return compute
