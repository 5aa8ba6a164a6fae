"""The one results file (``RUN/results.json``), its markdown rendering, and ``verify``.

Every number of a run lives in ``results.json``; ``results.md`` is rendered from it (verify
re-renders and compares, so a hand edit is caught). ``verify`` recomputes from the stored
traces: trace hashes and counts, the move inventory, every metric, every per-fold fitted
value and the bootstrap, plus an independent plain-Python recount of the plurality arm, and
fails on any mismatch beyond the tolerance.

The file and its rendering live in ``chorus.aggregate.results_file`` (below ``chorus.aggregate.experiments``,
which writes them) and are re-exported here; ``verify`` sits above the pipelines it reruns.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from chorus.aggregate.results_file import METRIC_COLS, RESULTS, read_results, render_markdown, write_results
from chorus.core.progress import Progress
from chorus.core.stats import check_tolerance
from chorus.aggregate.trace import load_traces, traces_sha256

__all__ = ["RESULTS", "METRIC_COLS", "write_results", "read_results", "render_markdown", "Check",
           "independent_plurality", "select_cells", "verify"]


# -- verify ---------------------------------------------------------------------------------------
@dataclass
class Check:
    cell: str
    what: str
    stored: Any
    recomputed: Any
    ok: bool

    @property
    def diff(self) -> float | None:
        try:
            return abs(float(self.stored) - float(self.recomputed))
        except (TypeError, ValueError):
            return None


def _same(a: Any, b: Any, tol: float) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None or isinstance(a, str) \
            or isinstance(b, str):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if math.isnan(a) and math.isnan(b):
            return True
        return abs(float(a) - float(b)) <= tol
    return a == b


def _compare(cell: str, prefix: str, stored: Any, recomputed: Any, tol: float, out: list[Check]) -> None:
    if isinstance(stored, dict) and isinstance(recomputed, dict):
        for k in sorted(set(stored) | set(recomputed), key=str):
            _compare(cell, f"{prefix}.{k}", stored.get(k), recomputed.get(k), tol, out)
    elif isinstance(stored, list) and isinstance(recomputed, list) and len(stored) == len(recomputed):
        for j, (a, b) in enumerate(zip(stored, recomputed)):
            _compare(cell, f"{prefix}[{j}]", a, b, tol, out)
    else:
        out.append(Check(cell, prefix, stored, recomputed, _same(stored, recomputed, tol)))


def independent_plurality(traces) -> list[tuple[set[str], float]]:
    """Plain-Python recount of round-0 proposals: (tied winners, winning fraction) per task."""
    out = []
    for tr in traces:
        seen, votes = set(), Counter()
        for m in tr.moves:
            if m.round == 0 and m.force == "propose" and m.agent not in seen:
                seen.add(m.agent)
                votes[m.answer] += 1
        total = sum(votes.values())
        if total == 0:
            out.append((set(tr.candidates), 1.0 / len(tr.candidates)))
            continue
        top = max(votes.values())
        out.append(({c for c, v in votes.items() if v == top}, top / total))
    return out


def _plain_ece(conf: Sequence[float], correct: Sequence[bool], n_bins: int = 10) -> float:
    """ECE in plain Python, on purpose apart from ``chorus.core.stats.ece``: verify recounts with code
    that shares nothing with the pipeline it checks."""
    gaps = [0.0] * n_bins
    for c, ok in zip(conf, correct):
        b = min(int(c * n_bins), n_bins - 1)
        gaps[b] += (1.0 if ok else 0.0) - c
    return sum(abs(g) for g in gaps) / len(conf)


def _check_plurality(run_dir: Path, cell: dict, traces, tol: float, out: list[Check]) -> None:
    import pandas as pd

    p = run_dir / "tables" / "predictions.parquet"
    if "plurality" not in cell["metrics"] or not p.is_file():
        return
    pred = pd.read_parquet(p)
    if "cell" in pred.columns:
        pred = pred[pred["cell"] == cell["id"]]
    pred = pred[pred["method"] == "plurality"].set_index("task_id")
    n_cal = cell["params"].get("n_calibration")
    evaluated = traces[n_cal:] if n_cal else traces
    legal = True
    conf, correct = [], []
    for tr, (winners, frac) in zip(evaluated, independent_plurality(evaluated)):
        row = pred.loc[tr.task_id]
        if row["answer"] not in winners or abs(row["confidence"] - frac) > tol:
            legal = False
        conf.append(frac)
        correct.append(row["answer"] == tr.gold)
    out.append(Check(cell["id"], "plurality.answers_are_plain_recount_winners", True, legal, legal))
    acc = sum(correct) / len(correct)
    m = cell["metrics"]["plurality"]
    out.append(Check(cell["id"], "plurality.accuracy(plain)", m["accuracy"], acc, _same(m["accuracy"], acc, tol)))
    e = _plain_ece(conf, correct)
    out.append(Check(cell["id"], "plurality.ece_ew(plain)", m["ece_ew"], e, _same(m["ece_ew"], e, tol)))


def select_cells(cells: list[dict], which: "str | int | None") -> list[dict]:
    """'all', an int n (first, last and evenly spaced cells), or None (all for <= 4 cells)."""
    if which == "all" or (which is None and len(cells) <= 4):
        return cells
    n = 4 if which is None else int(which)
    if n >= len(cells):
        return cells
    pos = sorted(set(np.linspace(0, len(cells) - 1, n).round().astype(int).tolist()))
    return [cells[j] for j in pos]


def verify(run_dir: str | Path, *, cells: "str | int | None" = None, tolerance: float = 1e-6,
           bootstrap: bool = True, progress: Progress | None = None) -> list[Check]:
    """Recompute a subset of the results file from the stored traces; returns every check
    (``ok`` False where a number does not recompute)."""
    from chorus.aggregate.config import RunConfig, SweepConfig
    from chorus.aggregate.experiments import evaluate_run, evaluate_sweep_cell, move_inventory

    tolerance = check_tolerance(tolerance)
    run_dir = Path(run_dir)
    res = read_results(run_dir)
    checks: list[Check] = []
    md = run_dir / "results.md"
    if md.is_file():
        same = md.read_text() == render_markdown(res)
        checks.append(Check("-", "results.md == render(results.json)", True, same, same))
    kind = res["kind"]
    chosen = select_cells(res["cells"], cells)
    if kind == "run":
        cfg = RunConfig.model_validate(res["config"])
        per_cell = cfg.outer_folds * len(cfg.all_methods())
    else:
        cfg = SweepConfig.model_validate(res["config"])
        per_cell = (cfg.outer_folds if kind == "dose_response" else 1) * len(cfg.methods)
    if progress is not None:
        progress(len(chosen) * per_cell, 0)
    for cell in chosen:
        cid = cell["id"]
        tpath = run_dir / cell["traces"]
        if not tpath.is_file():
            checks.append(Check(cid, "traces file", str(tpath), None, False))
            continue
        traces = load_traces(tpath)
        checks.append(Check(cid, "traces_sha256", cell["traces_sha256"], traces_sha256(traces),
                            cell["traces_sha256"] == traces_sha256(traces)))
        checks.append(Check(cid, "n_traces", cell["n_traces"], len(traces), cell["n_traces"] == len(traces)))
        _compare(cid, "move_inventory", cell["move_inventory"], move_inventory(traces), 0, checks)
        if kind == "run":
            new = evaluate_run(cfg, traces, progress, bootstrap=bootstrap).record
            if not bootstrap:  # not recomputed: not compared
                new["bootstrap"], new["bootstrap_clustered"] = cell["bootstrap"], cell["bootstrap_clustered"]
                new["bootstrap_seed_clustered"] = cell.get("bootstrap_seed_clustered")
        else:
            params = {k: v for k, v in cell["params"].items() if k != "n_calibration"}
            new = evaluate_sweep_cell(cfg, params, traces, cell["params"].get("n_calibration"), progress).record
        for key in ("n_evaluated", "K", "agents", "candidates", "n_questions", "protocol", "metrics",
                    "metrics_by_seed", "folds", "bootstrap", "bootstrap_clustered", "bootstrap_seed_clustered"):
            # results written before them lack the per-seed metrics and the seed-clustered bootstrap
            if key in cell or (key in new and key not in ("metrics_by_seed", "bootstrap_seed_clustered")):
                _compare(cid, key, cell.get(key), new.get(key), tolerance, checks)
        _check_plurality(run_dir, cell, traces, tolerance, checks)
    return checks
