"""Experiments end to end, for any number of concepts: config -> runs -> lockstep engine -> run
directory (tables, summary, plots). ``report`` recomputes summary and plots from a run directory
alone. One config (``BeliefConfig``), its topic deciding: a two-stance topic runs its conditions
(``chorus belief sweep``: the sweep grid) x seeds; a multi-concept topic runs its seeds over the
topic's concepts (provenance ``kind: multi``); both go through the same engine, roles, run
directory and model ownership."""
from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from chorus.core.config import ConfigError, load_config
from chorus.core.runs import RunDir, amends_run, run_dir_path

from . import analysis, concept_analysis, correction, correction_measure, correction_plots, plots
from .calibration import find_fit, fit_path, load_fit
from .config import BeliefConfig, Condition, expand
from .lockstep import RunSpec, prepare, run_group
from .lockstep import plan as plan_concepts
from .channel import LLMAppraiser, LLMGenerator, LLMProbe, MultiLLMAppraiser, OracleProbe
from .tables import all_tables, concept_tables
from .topics import TOPICS_DIR, list_multi_topics, list_topics, load_multi_topic, load_topic, topic_kind
from chorus.serving.roles import plan_roles

NOT_SWEEPABLE = ("mode", "seed", "name", "llm", "analysis", "sweep", "oracle")
TABLES = ("events", "utterances", "beliefs", "runs", "agents", "edges", "conditions")
MULTI = concept_analysis.KIND


def plan_engines(cfg: BeliefConfig):
    """The device plan of an LLM-mode run (the one role "model": generator, appraiser and probe share
    it), before it loads; None in oracle mode, which calls no model."""
    if cfg.mode != "llm":
        return None
    return plan_roles({"model": cfg.llm.model})


def plan(cfg: BeliefConfig, sweep: bool) -> tuple[list[Condition], list[RunSpec]]:
    """Conditions and runs of a Beta config, all validated (configs, topics, populations,
    graphs) up front."""
    if sweep and not cfg.sweep:
        raise ConfigError(f"{cfg.name}: 'sweep' needs a config with a sweep: section "
                          f"(use 'chorus belief run' for a single condition)")
    for key in cfg.sweep:
        if key.split(".")[0] in NOT_SWEEPABLE:
            raise ConfigError(f"sweep.{key}: {key.split('.')[0]!r} is shared by every run and "
                              f"cannot be swept")
    conditions = expand(cfg, use_sweep=sweep)
    specs, k = [], 0
    for c in conditions:
        if c.config.multi:   # a sweep grid is a two-stance topic's (the config refuses it for concepts)
            raise ConfigError(f"{cfg.name} condition {c.index} ({c.label}): topic {c.config.topic!r} has concepts; "
                              f"a sweep grid runs two-stance topics")
        load_topic(c.config.topic)
        for s in c.config.seed_list:
            specs.append(RunSpec(run=k, condition=c.index, seed=s, config=c.config))
            k += 1
    return conditions, specs


def resolve_taus(cfg: BeliefConfig, conditions: list[Condition]) -> dict[str, dict[str, Any]]:
    """Appraiser tau per topic for LLM mode: the config's value or the stored fit."""
    out: dict[str, dict[str, Any]] = {}
    for c in conditions:
        t = load_topic(c.config.topic)
        if t.id in out:
            continue
        if cfg.llm.appraiser.tau is not None:
            out[t.id] = {"tau": float(cfg.llm.appraiser.tau), "source": "config"}
            continue
        fit = load_fit(t.id, cfg.llm.model.profile)
        if fit is None:
            raise ConfigError(
                f"llm.appraiser.tau = None and no stored calibration for model "
                f"{cfg.llm.model.profile!r} on topic {t.id!r} (none at {fit_path(t.id, cfg.llm.model.profile)} "
                f"nor shipped with the package): run "
                f"'chorus belief calibrate --model {cfg.llm.model.profile} --topic {t.id}' or set "
                f"llm.appraiser.tau explicitly (1.0 = uncalibrated)")
        out[t.id] = {"tau": float(fit["tau"]), "source": str(find_fit(t.id, cfg.llm.model.profile))}
    return out


def default_out(cfg: BeliefConfig) -> Path:
    return run_dir_path(None, "belief", cfg.name)


def plan_run(cfg: BeliefConfig, sweep: bool = False):
    """Everything a run checks before its first model call, in the order it runs: the topic, the
    conditions and runs (a two-stance topic's sweep grid when ``sweep``), the appraiser's tau, the
    channel correction, every population and graph. Returns (conditions, specs, taus, corrections,
    provenance extras, lockstep groups); ``--check`` stops here."""
    if topic_kind(cfg.topic) is None and not any(k == "topic" for k in cfg.sweep):
        raise ConfigError(f"topic = {cfg.topic!r}: no such topic file (neither a file nor a shipped name in "
                          f"{TOPICS_DIR}; two-stance topics: {', '.join(list_topics())}; multi-concept topics: "
                          f"{', '.join(list_multi_topics())})")
    if cfg.multi:
        if sweep:
            raise ConfigError(f"{cfg.name}: 'sweep' runs a two-stance topic's sweep grid; topic {cfg.topic!r} has "
                              f"concepts (use 'chorus belief run' or 'chorus belief multi')")
        conditions, corrections = None, {}
        specs = plan_concepts(cfg)
        t = load_multi_topic(cfg.topic)
        taus = {t.id: {"tau": float(cfg.llm.appraiser.tau) if cfg.mode == "llm" else 1.0, "source": "config"}}
        extra = dict(kind=MULTI, topics_sha256={t.id: t.sha256},
                     determinism={"per_request_seeds": "call_seed(root, run seed, round, turn, role, attempt)",
                                  "streams": "rng(root, run seed, stream[, concept])"})
    else:
        conditions, specs = plan(cfg, sweep)
        taus = resolve_taus(cfg, conditions) if cfg.mode == "llm" else {}
        corrections = correction.resolve_corrections(cfg, conditions, taus)  # refused here, before any run
        extra = dict(sweep=sweep, conditions=[{"index": c.index, "label": c.label, "overrides": c.overrides}
                                              for c in conditions],
                     topics_sha256={load_topic(c.config.topic).id: load_topic(c.config.topic).sha256 for c in conditions},
                     channel=correction.channel_id(cfg), channel_correction=correction.describe(corrections),
                     determinism={"per_request_seeds": "call_seed(root, run seed, round, turn|agent, role, attempt)",
                                  "streams": "rng(root, run seed, stream)"})
    groups = prepare(specs, cfg.seed, {k: v["tau"] for k, v in taus.items()})
    return conditions, specs, taus, corrections, extra, groups


def check_run(cfg: BeliefConfig):
    """``chorus belief run | multi --check``: the run's plan validated, then its device plan (None in oracle mode)."""
    plan_run(cfg, sweep=False)
    return plan_engines(cfg)


def check_sweep(cfg: BeliefConfig):
    """``chorus belief sweep --check``: the sweep grid validated, then its device plan."""
    plan_run(cfg, sweep=True)
    return plan_engines(cfg)


def run_experiment(cfg: BeliefConfig, out: str | Path | None = None, *, sweep: bool = False,
                   engine: Any = None, progress: Callable[[int, int], Any] | None = None,
                   make_plots: bool = True, source: str | None = None) -> tuple[RunDir, dict]:
    """Run ``cfg`` (a Beta config's sweep grid when ``sweep``) and write a complete run directory.

    ``engine``: a serving engine for LLM mode (loaded from ``cfg.llm`` when None).
    ``progress(total, advance)``: called with (total utterances, 0) once, then with the number
    of utterances each lockstep turn produced.
    """
    conditions, specs, taus, corrections, extra, groups = plan_run(cfg, sweep)
    out = Path(out) if out is not None else default_out(cfg)
    owned = cfg.mode == "llm" and engine is None
    if owned:   # the one model role, planned before the run directory is made
        dplan = plan_engines(cfg)
    run = RunDir.create(out, part="belief", config=cfg, seeds={"root": cfg.seed, "replicates": cfg.seed_list},
                        mode=cfg.mode, source_config=source, engine_code_sha256=code_hash(), **extra)
    if owned:
        from chorus.serving import build_engine
        run.update_provenance(device_plan=dplan.to_dict())
        engine = build_engine(cfg.llm.model, store=run.store_path, plan=dplan)
    try:
        return _simulate_and_write(cfg, run, conditions, specs, groups, taus, engine, progress,
                                   make_plots, corrections)
    finally:
        if owned and hasattr(engine, "close"):
            engine.close()


def _roles(cfg, engine, run, taus):
    """(generator, appraiser, probe) of the run's mode; LLM roles share the one engine."""
    multi = cfg.multi
    if cfg.mode != "llm":
        return None, None, (None if multi else OracleProbe())
    lc = cfg.llm
    gen = LLMGenerator(engine, lc.generator.temperature, lc.generator.top_p, lc.generator.max_tokens)
    app = (MultiLLMAppraiser if multi else LLMAppraiser)(engine, lc.appraiser.temperature, lc.appraiser.max_tokens,
                                                         lc.appraiser.max_retries, lc.appraiser.retry_temperature)
    prb = None if multi or not lc.probe.enabled else LLMProbe(
        engine, lc.probe.temperature, lc.probe.max_tokens, lc.probe.max_retries, lc.probe.retry_temperature)
    if callable(getattr(engine, "provenance", None)):
        run.record_engines("engine", engine)  # rewritten at finish: final fault counts
    else:
        run.update_provenance(engine=getattr(engine, "identity", None))
    if multi:
        run.update_provenance(model=lc.model, appraiser_tau=lc.appraiser.tau, store=str(run.store_path))
    else:
        tau_vals = sorted({v["tau"] for v in taus.values()})
        run.update_provenance(model=lc.model, appraiser_tau=tau_vals[0] if len(tau_vals) == 1 else None,
                              appraiser_taus=taus, store=str(run.store_path))
    return gen, app, prb


def _simulate_and_write(cfg, run, conditions, specs, groups, taus, engine, progress, make_plots,
                        corrections=None):
    multi = cfg.multi
    gen, app, prb = _roles(cfg, engine, run, taus)
    total = sum(g.R * g.rounds * g.N for g in groups)  # utterances
    if progress:
        progress(total, 0)
    t0 = time.perf_counter()
    used = app if multi else correction.appraiser_for(cfg, app, corrections or {})  # synthetic channel, correction
    results = [run_group(g, gen, used, prb, (lambda _k, r=g.R: progress(total, r)) if progress else None)
               for g in groups]
    wall = time.perf_counter() - t0
    stats: dict[str, Any] = {"wall_s": wall, "runs": len(specs), "utterances": int(total)}
    if multi:
        res, = results
        tabs = concept_tables(res)
        failed = ~np.isfinite(res.e_appraised).all(-1)
        stats.update({"listener_events": int(res.listen.any(-1).sum()), "concept_updates": int(res.listen.sum()),
                      "appraisal_failures": int(failed.sum()),
                      "appraisal_failures_by_concept": dict(zip(res.group.topic.concept_ids,
                                                                failed.sum((0, 1)).tolist()))})
        tokens = int(res.gen_tokens.sum()) if res.gen_tokens is not None else 0
    else:
        tabs = all_tables(results, conditions)
        ut = tabs["utterances"]
        stats.update({"listener_events": int(len(tabs["events"])), "appraisal_failures": int(ut.failed.sum()),
                      "probe_failures": int(sum(r.probe_failures for r in results))})
        tokens = int(ut.completion_tokens.sum()) if cfg.mode == "llm" else 0
    for name in (concept_analysis.TABLES if multi else TABLES):
        run.write_table(name, tabs[name])
    if cfg.mode == "llm":
        stats["model_calls"] = {"generator": gen.requests, "appraiser": app.requests,
                                **({} if multi else {"probe": prb.requests if prb is not None else 0}),
                                "computed_by_engine": getattr(engine, "model_calls", None),
                                "generated_tokens": tokens}
    run.update_provenance(stats=stats)
    summary = report(run.path, make_plots=make_plots, tables=tabs)
    run.finish()
    return run, summary


def code_hash() -> str:
    """Hash of the belief package's code (recorded in provenance)."""
    h = hashlib.sha256()
    for p in sorted(Path(__file__).parent.glob("*.py")):
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


@amends_run
def report(path: str | Path, make_plots: bool = True, tables: dict | None = None) -> dict:
    """Summary JSON and plots recomputed from a run directory's files alone (a Beta or a
    multi-concept run, told apart by its provenance)."""
    run = RunDir(path)
    if not (run.path / "config.yaml").is_file():
        raise ConfigError(f"{run.path}: not a belief run directory (no config.yaml)")
    prov = run.provenance()
    multi = prov.get("kind") == MULTI
    cfg = load_config(run.path / "config.yaml", BeliefConfig)
    tabs = tables or {name: run.read_table(name) for name in (concept_analysis.TABLES if multi else TABLES)}
    if multi:
        summary, derived = concept_analysis.analyse(tabs, cfg, prov)
        figures = plots.CONCEPT_PLOTS
    else:
        summary, derived = analysis.analyse(tabs, cfg, prov)
        if correction_measure.applies(tabs, cfg):
            summary["channel_correction"], extra = correction_measure.measure(tabs, cfg, derived, prov)
            summary["headline"].update(correction_measure.headline(summary["channel_correction"]))
            derived.update(extra)
        figures = {name: fn for name, fn in {**plots.PLOTS, **correction_plots.PLOTS}.items()
                   if name != "probe" or cfg.mode == "llm"}
    summary["stats"] = prov.get("stats")
    summary["plots"] = []
    for name, df in derived.items():
        run.write_table(name, df)
    if make_plots:
        for name, fn in figures.items():
            p = fn(tabs, derived, run.plot_path(name))
            if p is not None:
                summary["plots"].append(str(Path(p).relative_to(run.path)))
    run.write_summary(summary)
    return summary


def headline_rows(summary: dict) -> list[tuple[str, str]]:
    """(name, value) pairs for printing."""
    def fmt(v):
        if v is None:
            return "-"
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, float):
            return f"{v:.4g}" if np.isfinite(v) else "nan"
        return str(v)
    return [(k, fmt(v)) for k, v in summary.get("headline", {}).items()]
