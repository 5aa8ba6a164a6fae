"""``chorus aggregate verify``: the numbers of an aggregation run's results.json recomputed from its stored
traces (``chorus.aggregate.results.verify``); a check whose record lists every comparison, exit 1 on any
mismatch, or when the run's other files are not the ones it wrote (its record is the precondition)."""
from __future__ import annotations

from typing import Optional

from pydantic import Field, field_validator

from chorus.core.analyses import AnalysisConfig, Result, analysis, run_dir


class VerifyConfig(AnalysisConfig):
    run: run_dir("aggregate") = Field(description="A run directory holding results.json (chorus aggregate run | sweep).")
    all: bool = Field(False, description="Recompute every cell of a sweep.")
    cells: Optional[int] = Field(None, description="Recompute N evenly spaced cells (sweeps; default 4).")
    tolerance: float = Field(1e-6, description="Largest allowed absolute difference.")
    bootstrap: bool = Field(True, description="Recompute the bootstrap (--no-bootstrap: skip it).")
    quiet: bool = Field(False, description="No progress bar.")

    @field_validator("tolerance")
    @classmethod
    def _not_negative(cls, v: float) -> float:   # (NaN and infinity, which would pass every difference, the
        if v < 0:                                # config refuses as numbers that are not finite)
            raise ValueError("must be a finite number >= 0")
        return v


def show(console, result: Result) -> None:
    from rich.table import Table
    s = result.summary
    if s.get("record"):
        return
    bad = s["mismatches"]
    if bad:
        t = Table(title="mismatches")
        for col in ("cell", "quantity", "stored", "recomputed"):
            t.add_column(col, overflow="fold")
        from rich.markup import escape
        for c in bad[:50]:   # (values are data, not markup)
            t.add_row(*(escape(x) for x in (str(c["cell"]), str(c["quantity"]), repr(c["stored"]), repr(c["recomputed"]))))
        console.print(t)
        return
    console.print(f"[bold green]OK[/]: {s['checks']} checks over {len(s['cells'])} cell(s) "
                  f"({', '.join(s['cells'])}) recompute within {s['tolerance']} (largest difference "
                  f"{s['largest_difference']:.3g}) for {s['results']}")


def brief(summary: dict) -> dict:
    return {k: summary.get(k) for k in ("checks", "n_mismatches", "largest_difference")}


def fails(summary: dict) -> Optional[str]:
    if summary.get("record"):
        return summary["record"]
    if summary["n_mismatches"]:
        return (f"{summary['n_mismatches']} of {summary['checks']} checks differ (tolerance {summary['tolerance']}) "
                f"in {summary['results']}")
    return None


@analysis("aggregate", config=VerifyConfig, show=show, brief=brief, fails=fails)
def verify():
    """Recompute numbers of results.json from the stored traces; exit 1 on any mismatch (the run's record
    is checked first: a run whose other files changed, or with no record, fails too)."""
    import pandas as pd

    from chorus.aggregate.results import verify as recompute
    from chorus.core.progress import progress
    from chorus.core.runs import RecordError, require_sealed

    def compute(cfg: VerifyConfig) -> Result:
        results = cfg.run / "results.json"
        try:
            require_sealed(cfg.run, exempt=("results.json",))   # the rest as written; results.json recomputed below
        except RecordError as err:   # an edited or missing record: the verification failed (exit 1), said so
            return Result(summary={"results": str(results), "record": str(err), "checks": 0, "n_mismatches": None,
                                   "largest_difference": None, "tolerance": cfg.tolerance, "cells": [],
                                   "mismatches": []})
        with progress("verify", "fold x method", enabled=not cfg.quiet) as update:
            checks = recompute(cfg.run, cells="all" if cfg.all else cfg.cells, tolerance=cfg.tolerance,
                               bootstrap=cfg.bootstrap, progress=update)
        rows = [{"cell": c.cell, "quantity": c.what, "stored": repr(c.stored), "recomputed": repr(c.recomputed),
                 "difference": c.diff, "ok": c.ok} for c in checks]
        bad = [c for c in checks if not c.ok]
        return Result(summary={
            "results": str(results), "checks": len(checks), "n_mismatches": len(bad), "tolerance": cfg.tolerance,
            "cells": sorted({c.cell for c in checks if c.cell != "-"}),
            "largest_difference": max((c.diff for c in checks if c.diff is not None), default=0.0),
            "mismatches": [{"cell": c.cell, "quantity": c.what, "stored": c.stored, "recomputed": c.recomputed}
                           for c in bad]},
            tables={"checks": pd.DataFrame(rows)})
    return compute
