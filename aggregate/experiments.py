"""The pipelines behind ``chorus aggregate run`` and ``sweep``: traces -> pool -> nested CV
(or a calibrate/deploy split) of every method -> metrics, bootstrap -> one results file.

Each *cell* is one pool of traces stored under ``RUN/traces/<cell>.jsonl.gz``; ``verify``
re-runs exactly ``run_cell`` on the stored traces and compares every stored number.
"""
from __future__ import annotations

import datetime as _dt
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from chorus.aggregate.config import RunConfig, SweepConfig
from chorus.aggregate.corrupt import corrupt_traces, corruption_counts, sleeper_from_traces, split_by_question
from chorus.aggregate.counts import Pool
from chorus.aggregate.errors import TraceError
from chorus.aggregate.methods import make_method
from chorus.aggregate.metrics import (brier_per_task, line_plot, paired_bootstrap, reliability_diagram,
                               reliability_overlay, summarize)
from chorus.aggregate.results_file import render_markdown, write_results
from chorus.aggregate.selection import KEY_BOOT, CVResult, fit_predict_split, nested_cv, seed_int
from chorus.aggregate.synthetic_councils import (Adversary, generate_council, permute_labels, sleeper_traces,
                                                 truncate_traces)
from chorus.aggregate.trace import FORCES, Trace, dump_traces, load_traces, traces_sha256
from chorus.core.progress import Progress
from chorus.core.runs import RunDir, library_versions, run_dir_path
from chorus.core.config import InputError

SCHEMA = "chorus.aggregate.results/1"
_DETERMINISM = ("every random stream (folds, label budget, tie-breaks, synthetic councils, bootstrap) "
                "is spawned from the config seed with numpy SeedSequence; no global random state")


# -- one cell ------------------------------------------------------------------------------------
@dataclass
class Cell:
    """One evaluated pool: its JSON record plus the objects the tables are built from."""

    record: dict[str, Any]
    pool: Pool
    cv: CVResult


def move_inventory(traces: Sequence[Trace]) -> dict[str, int]:
    c = Counter(m.force for tr in traces for m in tr.moves)
    return {f: int(c.get(f, 0)) for f in FORCES}


def _mask(cv: CVResult) -> np.ndarray:
    return cv.fold >= 0


def cell_metrics(cv: CVResult) -> dict[str, dict[str, float]]:
    m = _mask(cv)
    gold = cv.pool.gold[m]
    return {name: summarize(cv.answer[name][m], cv.proba[name][m], gold) for name in cv.methods}


def per_task(cv: CVResult, name: str) -> dict[str, np.ndarray]:
    m = _mask(cv)
    p = cv.proba[name][m]
    a = cv.answer[name][m]
    g = cv.pool.gold[m]
    return {"correct": (a == g).astype(float), "confidence": p[np.arange(len(a)), a],
            "brier": brier_per_task(p, g)}


def cell_bootstrap(cv: CVResult, pairs: Sequence[tuple[str, str]], *, n_resamples: int, seed: int,
                   metrics: Sequence[str], ci: float, clustered: bool,
                   seeds: np.ndarray | None = None) -> list[dict[str, Any]]:
    """The paired bootstrap over tasks, questions (``clustered``) or, with ``seeds`` (one generation seed
    per trace of the pool), generation seeds x questions (``chorus.core.stats.paired_bootstrap``). The
    seed-clustered variant draws its questions from the question-clustered variant's stream."""
    data = {name: per_task(cv, name) for name in cv.methods}
    clusters = np.asarray(cv.pool.question_ids)[_mask(cv)] if clustered else None
    df = paired_bootstrap(data, pairs, metrics=metrics, clusters=clusters, n_resamples=n_resamples,
                          seed=seed_int(seed, KEY_BOOT, int(clustered)), ci=ci,
                          seeds=None if seeds is None else np.asarray(seeds, dtype=object)[_mask(cv)])
    return df.to_dict(orient="records")


def generation_seeds(traces: Sequence[Trace]) -> np.ndarray | None:
    """Every trace's ``gen_seed`` when all carry one and there are at least two; else None (no
    seed-clustered bootstrap: a trace without a seed has no seed cluster to go to)."""
    seeds = [tr.extra.get("gen_seed") for tr in traces]
    for tr, s in zip(traces, seeds):
        if s is not None and (isinstance(s, bool) or not isinstance(s, (int, str))):
            raise TraceError(f"task {tr.task_id!r}: gen_seed must be an integer or a string, got {s!r}")
    if any(s is None for s in seeds) or len({str(s) for s in seeds}) < 2:
        return None
    return np.asarray(seeds, dtype=object)


def run_cell(traces: Sequence[Trace], method_names: Sequence[str], *, grids: dict, protocol: str,
             on_violation: str, seed: int, outer_folds: int = 5, inner_folds: int = 5,
             label_budget: int | None = None, n_calibration: int | None = None,
             progress: Progress | None = None) -> tuple[Pool, CVResult]:
    """Nested CV over ``traces`` (or, with ``n_calibration``, fit on the first
    ``n_calibration`` traces and predict the rest)."""
    pool = Pool.from_traces(traces, protocol=protocol, on_violation=on_violation)
    methods = {n: make_method(n, grids, protocol=protocol, on_violation=on_violation)
               for n in method_names}
    if n_calibration is None:
        cv = nested_cv(pool, methods, outer_folds=outer_folds, inner_folds=inner_folds, seed=seed,
                       label_budget=label_budget, progress=progress)
    else:
        train = np.arange(n_calibration)
        test = np.arange(n_calibration, pool.T)
        cv = fit_predict_split(pool, methods, train, test, inner_folds=inner_folds, seed=seed)
        if progress is not None:
            progress(len(methods), len(methods))
    return pool, cv


def _fold_records(cv: CVResult) -> list[dict[str, Any]]:
    out = []
    for row in cv.fitted:
        out.append({k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()})
    return out


def cell_record(cell_id: str, params: dict[str, Any], traces: Sequence[Trace], pool: Pool,
                cv: CVResult, traces_file: str) -> dict[str, Any]:
    repeats = len(set(pool.question_ids)) < pool.T
    return {
        "id": cell_id, "params": params, "traces": traces_file,
        "traces_sha256": traces_sha256(traces), "n_traces": len(traces), "K": pool.K,
        "agents": list(pool.agents),
        "candidates": None if pool.shared_candidates is None else list(pool.shared_candidates),
        "n_questions": len(set(pool.question_ids)), "tasks_repeat": repeats,
        "move_inventory": move_inventory(traces), "protocol": pool.report.to_dict(),
        "n_evaluated": int(_mask(cv).sum()),
        "metrics": cell_metrics(cv), "metrics_by_seed": seed_metrics(cv, traces), "folds": _fold_records(cv),
    }


def seed_metrics(cv: CVResult, traces: Sequence[Trace]) -> dict[str, Any] | None:
    """BDA paper Fig. 5 / Table 6: every method's metrics in each generation seed's tasks (a trace's
    ``gen_seed``, as live councils write it) and their mean and SD across seeds (ddof = 1); None unless
    the traces carry at least two seeds. The folds are the cell's own: a seed's numbers are its tasks'
    held-out predictions."""
    seeds = np.array([tr.extra.get("gen_seed") for tr in traces], dtype=object)
    present = sorted({s for s in seeds if s is not None}, key=str)
    if len(present) < 2:
        return None
    m = _mask(cv)
    gold = cv.pool.gold
    by = {}
    for sd in present:
        sel = m & (seeds == sd)
        by[str(sd)] = {name: summarize(cv.answer[name][sel], cv.proba[name][sel], gold[sel]) for name in cv.methods}
    across = {name: {k: {"mean": float(np.mean(v := [by[s][name][k] for s in by])), "sd": float(np.std(v, ddof=1))}
                     for k in ("accuracy", "ece_ew", "ece_em", "brier")} for name in cv.methods}
    return {"seeds": by, "across_seeds": across}


# -- run ----------------------------------------------------------------------------------------
def prepare_traces(cfg: RunConfig, config_dir: Path | None = None) -> list[Trace]:
    """Load or synthesise the traces of a run, then apply the controls it asks for."""
    if cfg.synthetic is not None:
        adv = None
        if cfg.synthetic.adversary is not None:
            a = cfg.synthetic.adversary
            adv = Adversary(kind=a.kind, k=a.k, p_wrong=a.p_wrong,
                            seats=None if a.seats is None else tuple(a.seats), target=a.target)
        traces = generate_council(cfg.synthetic.spec(), adversary=adv, seed=cfg.seed)
    else:
        traces = load_traces(cfg.traces_path(config_dir))
    if cfg.permute_labels:
        traces = permute_labels(traces, seed=cfg.seed)
    if cfg.truncate_round is not None:
        traces = truncate_traces(traces, cfg.truncate_round)
    return traces


def evaluate_run(cfg: RunConfig, traces: Sequence[Trace], progress: Progress | None = None,
                 bootstrap: bool = True) -> Cell:
    seeds = generation_seeds(traces)  # checked before the work: >= 2 seeds add the seed-clustered bootstrap
    pool, cv = run_cell(traces, cfg.all_methods(), grids=cfg.grids.as_dict(), protocol=cfg.protocol,
                        on_violation=cfg.on_violation, seed=cfg.seed, outer_folds=cfg.outer_folds,
                        inner_folds=cfg.inner_folds, label_budget=cfg.label_budget, progress=progress)
    params = {"label_budget": cfg.label_budget, "truncate_round": cfg.truncate_round,
              "permute_labels": cfg.permute_labels, "source": cfg.traces or "synthetic"}
    rec = cell_record("main", params, traces, pool, cv, "traces/main.jsonl.gz")
    bs = cfg.bootstrap
    if not bootstrap:
        rec["bootstrap"] = rec["bootstrap_clustered"] = rec["bootstrap_seed_clustered"] = None
        return Cell(rec, pool, cv)
    pairs = [tuple(p) for p in bs.pairs] if bs.pairs else \
        [(m, bs.reference) for m in cfg.all_methods() if m != bs.reference]
    rec["bootstrap"] = cell_bootstrap(cv, pairs, n_resamples=bs.n_resamples, seed=cfg.seed,
                                      metrics=bs.metrics, ci=bs.ci, clustered=False)
    rec["bootstrap_clustered"] = cell_bootstrap(cv, pairs, n_resamples=bs.n_resamples, seed=cfg.seed,
                                                metrics=bs.metrics, ci=bs.ci, clustered=True) \
        if rec["tasks_repeat"] else None
    # >= 2 generation seeds: seeds x questions resampled (the BDA paper §7)
    rec["bootstrap_seed_clustered"] = None if seeds is None else \
        cell_bootstrap(cv, pairs, n_resamples=bs.n_resamples, seed=cfg.seed, metrics=bs.metrics, ci=bs.ci,
                       clustered=True, seeds=seeds)
    return Cell(rec, pool, cv)


def _results_header(kind: str, cfg) -> dict[str, Any]:
    return {"schema": SCHEMA, "kind": kind, "name": cfg.name,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "versions": library_versions(), "config": cfg.model_dump(mode="json", by_alias=True)}


def run_experiment(cfg: RunConfig, out: Path, *, config_dir: Path | None = None,
                   progress: Progress | None = None) -> Path:
    """Write a complete run directory under ``out`` and return the results file path."""
    run = RunDir.create(out, part="aggregate", config=cfg, seeds={"seed": cfg.seed},
                        command="run", backend="numpy/scipy (no model calls)",
                        determinism=_DETERMINISM)
    traces = prepare_traces(cfg, config_dir)
    dump_traces(traces, run.path / "traces" / "main.jsonl.gz")
    n_methods = len(cfg.all_methods())
    if progress is not None:
        progress(cfg.outer_folds * n_methods, 0)  # one unit per (outer fold, method)
    cell = evaluate_run(cfg, traces, progress)
    results = _results_header("run", cfg)
    results["cells"] = [cell.record]
    _write_run_tables(run, cell)
    _run_plots(run, cell)
    path = write_results(run.path, results)
    (run.path / "results.md").write_text(render_markdown(results))
    run.write_summary(_run_summary(cell.record))
    run.finish()
    return path


def fit_warnings(folds: list[dict[str, Any]]) -> list[str]:
    """One line per fitted arm and fold whose fit reported a warning (``ds_starts_warning``: Dawid-Skene
    starts that reached different fixed points), so the run's summary says a number rests on a choice."""
    return [f"{r['method']} fold {r['fold']}: {r['ds_starts_warning']}" for r in folds if r.get("ds_starts_warning")]


def _run_summary(rec: dict[str, Any]) -> dict[str, Any]:
    out = {"kind": "run", "n_traces": rec["n_traces"], "K": rec["K"], "metrics": rec["metrics"],
           "bootstrap_accuracy": [b for b in rec["bootstrap"] if b["metric"] == "accuracy"]}
    warns = fit_warnings(rec.get("folds", []))
    if warns:
        out["warnings"] = warns
    return out


def _write_run_tables(run, cell: Cell) -> None:
    cv = cell.cv
    run.write_table("predictions", cv.predictions_frame())
    run.write_table("posteriors", cv.posteriors_frame())
    run.write_table("folds", cv.fitted_frame())
    rows = [{"method": m, **v} for m, v in cell.record["metrics"].items()]
    run.write_table("metrics", pd.DataFrame(rows))
    run.write_table("bootstrap", pd.DataFrame(cell.record["bootstrap"]))
    run.write_table("counts", cell.pool.counts_frame())


def _run_plots(run, cell: Cell) -> None:
    cv = cell.cv
    curves = {}
    for name in cv.methods:
        d = per_task(cv, name)
        curves[name] = (d["confidence"], d["correct"])
        reliability_diagram(d["confidence"], d["correct"], run.plot_path(f"reliability_{_safe(name)}"),
                            title=name)
    reliability_overlay(curves, run.plot_path("reliability"))


def _safe(name: str) -> str:
    return name.replace("+", "_")


# -- sweeps -------------------------------------------------------------------------------------
def sweep_cells(cfg: SweepConfig) -> list[dict[str, Any]]:
    """The deterministic list of cells (their parameters) of a sweep."""
    if cfg.kind == "dose_response":
        return [{"regime": reg, "k": k, "p_wrong": float(p)}
                for reg in cfg.regimes for k in cfg.ks for p in cfg.p_wrong]
    return [{"f": float(f)} for f in cfg.f]


def cell_id(params: dict[str, Any]) -> str:
    return "_".join(f"{k}={v}" for k, v in params.items())


def sweep_cell_traces(cfg: SweepConfig, params: dict[str, Any],
                      source: Sequence[Trace] | None = None) -> tuple[list[Trace], int | None]:
    """A cell's traces: a synthetic council, or (``cfg.traces``; ``source`` = the file's traces)
    the real traces corrupted by the cell's adversary (``chorus.aggregate.corrupt``)."""
    if cfg.traces is not None and source is None:
        raise ValueError("a sweep over a trace file needs the file's traces (source)")
    if cfg.kind == "dose_response":
        adv = Adversary(kind=params["regime"], k=params["k"], p_wrong=params["p_wrong"])
        if source is not None:
            return corrupt_traces(source, adv, seed=cfg.seed, protocol=cfg.protocol), None
        return generate_council(cfg.synthetic.spec(), adversary=adv, seed=cfg.seed), None
    a = cfg.adversary
    adv = Adversary(kind=a.kind, k=a.k, p_wrong=a.p_wrong,
                    seats=None if a.seats is None else tuple(a.seats), target=a.target)
    if source is not None:
        cal, dep = sleeper_from_traces(source, n_calibration=cfg.n_calibration, f=params["f"], adversary=adv,
                                       seed=cfg.seed, protocol=cfg.protocol)
        return cal + dep, len(cal)
    cal, dep = sleeper_traces(cfg.synthetic.spec(), n_calibration=cfg.n_calibration, n_deploy=cfg.n_deploy,
                              f=params["f"], adversary=adv, seed=cfg.seed)
    return cal + dep, cfg.n_calibration


def sweep_source(cfg: SweepConfig) -> tuple[SweepConfig, list[Trace] | None]:
    """Read a sweep's trace file (None for a synthetic sweep). A sleeper's calibration window is
    made of whole questions, so the config is returned with ``n_calibration`` / ``n_deploy`` set to
    the window and deployment sizes it gets (what results.json and results.md state)."""
    if cfg.traces is None:
        return cfg, None

    source = load_traces(cfg.traces)
    if cfg.kind == "sleeper":
        cal, dep = split_by_question(source, cfg.n_calibration, seed=cfg.seed)
        cfg = cfg.model_copy(update={"n_calibration": len(cal), "n_deploy": len(dep)})
    return cfg, source


def evaluate_sweep_cell(cfg: SweepConfig, params: dict[str, Any], traces: Sequence[Trace],
                        n_calibration: int | None, progress: Progress | None = None) -> Cell:
    pool, cv = run_cell(traces, cfg.methods, grids=cfg.grids.as_dict(), protocol=cfg.protocol,
                        on_violation=cfg.on_violation, seed=cfg.seed, outer_folds=cfg.outer_folds,
                        inner_folds=cfg.inner_folds, n_calibration=n_calibration, progress=progress)
    cid = cell_id(params)
    rec = cell_record(cid, dict(params, n_calibration=n_calibration), traces, pool, cv,
                      f"traces/{cid}.jsonl.gz")
    if cfg.traces is not None:

        rec["corruption"] = corruption_counts(traces)  # read back from the stored traces' records
    return Cell(rec, pool, cv)


def run_sweep(cfg: SweepConfig, out: Path, *, progress: Progress | None = None) -> Path:
    cfg, source = sweep_source(cfg)
    if source:   # an adversary the traces cannot hold: refused before a run directory is made
        seats = min(len(tr.agents) for tr in source)
        bad = [k for k in getattr(cfg, "ks", []) if k > seats]
        if bad:
            raise InputError(f"adversary k={bad[0]} exceeds the {seats} seats of the traces ({cfg.traces})")
    run = RunDir.create(out, part="aggregate", config=cfg, seeds={"seed": cfg.seed},
                        command=f"sweep {cfg.kind}", backend="numpy/scipy (no model calls)",
                        determinism=_DETERMINISM)
    cells = sweep_cells(cfg)
    per_cell = cfg.outer_folds * len(cfg.methods) if cfg.kind == "dose_response" else len(cfg.methods)
    if progress is not None:
        progress(len(cells) * per_cell, 0)
    records, metric_rows, preds = [], [], []
    for params in cells:
        traces, n_cal = sweep_cell_traces(cfg, params, source)
        cell = evaluate_sweep_cell(cfg, params, traces, n_cal, progress)
        dump_traces(traces, run.path / cell.record["traces"])
        records.append(cell.record)
        for m, v in cell.record["metrics"].items():
            metric_rows.append({**params, "cell": cell.record["id"], "method": m, **v,
                                **cell.record.get("corruption", {})})
        p = cell.cv.predictions_frame()
        p = p[p["fold"] >= 0]
        preds.append(p.assign(cell=cell.record["id"]))
    results = _results_header(cfg.kind, cfg)
    if source is not None:
        results["source_traces"] = {"path": cfg.traces, "n_traces": len(source),
                                    "sha256": traces_sha256(source)}
    results["cells"] = records
    metrics = pd.DataFrame(metric_rows)
    run.write_table("metrics", metrics)
    run.write_table("predictions", pd.concat(preds, ignore_index=True))
    _sweep_plots(run, cfg, metrics)
    path = write_results(run.path, results)
    (run.path / "results.md").write_text(render_markdown(results))
    run.write_summary({"kind": cfg.kind, "cells": len(records), "source_traces": results.get("source_traces"),
                       "accuracy": metrics.pivot_table(index="cell", columns="method",
                                                       values="accuracy").to_dict(orient="index")})
    run.finish()
    return path


def _sweep_plots(run, cfg: SweepConfig, metrics: pd.DataFrame) -> None:
    what = "synthetic count-level adversary" if cfg.traces is None else \
        f"count-level adversary on {Path(cfg.traces).name}"
    if cfg.kind == "dose_response":
        m = metrics.assign(panel=metrics["regime"] + ", k=" + metrics["k"].astype(str))
        line_plot(m, "p_wrong", "accuracy", "method", run.plot_path("dose_response"), panels="panel",
                  title=f"{what}: accuracy")
        line_plot(m, "p_wrong", "ece_ew", "method", run.plot_path("dose_response_ece"), panels="panel",
                  title=f"{what}: ECE (10 equal-width bins)")
    else:
        line_plot(metrics, "f", "accuracy", "method", run.plot_path("sleeper"),
                  title=f"sleeper ({'synthetic' if cfg.traces is None else Path(cfg.traces).name}): "
                        "deployment accuracy vs contaminated calibration fraction f")


# -- verbs (chorus.core.verbs): the run directory and its summary -----------------------------------------
def run_to_dir(cfg: RunConfig, out: Path | None = None, *, progress: Progress | None = None,
               source: str | None = None):
    """``chorus aggregate run``: ``run_experiment`` into ``out`` (default runs/aggregate/NAME-run-TIME);
    ``source`` is the config file, whose folder relative trace paths are read from."""
    out = run_dir_path(out, "aggregate", f"{cfg.name}-run")
    run_experiment(cfg, out, config_dir=Path(source).parent if source else None, progress=progress)
    run = RunDir(out)
    return run, run.summary()


def sweep_to_dir(cfg: SweepConfig, out: Path | None = None, *, progress: Progress | None = None):
    """``chorus aggregate sweep``: ``run_sweep`` into ``out`` (default runs/aggregate/NAME-sweep-TIME)."""
    out = run_dir_path(out, "aggregate", f"{cfg.name}-sweep")
    run_sweep(cfg, out, progress=progress)
    run = RunDir(out)
    return run, run.summary()
