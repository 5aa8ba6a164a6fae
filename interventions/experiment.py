"""Run directories for ``chorus influence readout|ablate|cues``: turns come from a finished debate
run (``source.run``) or are generated here with the debate protocol; readouts, ablations and
source cues are scored on them; tables, summary and plots are written beside the config."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from chorus.core.config import ConfigError
from chorus.core.progress import Progress
from chorus.core.runs import RunDir, require_record, run_dir_path
from chorus.interventions import ablations as ab
from chorus.interventions import plots
from chorus.interventions import readout as ro
from chorus.interventions.config import InfluenceConfig, SourcedConfig
from chorus.simulate.debate.experiment import engine_for, load_items, plan_engines, save_items, select_items
from chorus.simulate.debate.prompts import load_prompts
from chorus.simulate.debate.protocol import run_protocol
from chorus.simulate.debate.questions import Item, write_bench


def source_turns(cfg: SourcedConfig, run: RunDir, eng: Any, rounds: int,
                  progress: Progress | None) -> tuple[pd.DataFrame, dict[str, Item]]:
    """Turns from the source run (``source.run``) or generated here with the source's debate
    settings (``rounds`` rounds)."""
    s = cfg.source
    if s.run:
        src = RunDir(s.run)
        if not (src.path / "tables" / "turns.parquet").is_file():
            raise ConfigError(f"source.run = {s.run!r}: no tables/turns.parquet there")
        items = load_items(src.path)
        turns = src.read_table("turns")
        write_bench(items.values(), run.path / "bench.jsonl")
        return turns, items
    items, _ = select_items(s.bench)
    save_items(run, items)
    P = load_prompts(cfg.prompts)
    g = s.generation
    turns, info = run_protocol(eng, items, agents=s.agents, rounds=rounds, conditions=s.conditions,
                               temperature=g.temperature, top_p=g.top_p, max_tokens=g.max_tokens, seed=cfg.seed,
                               prompts=P, progress=progress)
    run.write_table("turns", turns)
    return turns, {it.id: it for it in items}


def start_run(cfg: SourcedConfig, verb: str, out: Path | None, engine: Any = None,
              backend: str | None = None, *, roles: dict[str, Any] | None = None) -> tuple[RunDir, Any, dict]:
    """The run directory of one influence verb, its engine (``backend`` overrides the config's)
    and the prompts; the question set is validated before any model call. An engine built here is
    planned first (``chorus.simulate.debate.experiment.plan_engines``: the one engine generates the turns
    a verb needs and then reads them, so one phase, named after the verb; ``roles``: other engines
    the verb holds beside it, e.g. a transfer's sender) and the plan is written to provenance
    (``device_plan``); a plan that cannot fit fails before the run directory is made."""
    P = load_prompts(cfg.prompts)
    if not cfg.source.run:
        select_items(cfg.source.bench)
    else:   # the run it reads: there, and as that run wrote it, before this one is made
        src = Path(cfg.source.run)
        if not (src / "tables" / "turns.parquet").is_file():
            raise ConfigError(f"source.run = {cfg.source.run!r}: no tables/turns.parquet there "
                              f"({'no such directory' if not src.is_dir() else 'not a debate run directory?'})")
        require_record(src)
    ecfg = cfg if backend is None else cfg.model_copy(
        update={"model": cfg.model.model_copy(update={"backend": backend})})  # the engine's, not the record's
    plan = plan_engines(ecfg, verb, roles) if engine is None else None
    run = RunDir.create(run_dir_path(out, "influence", f"{cfg.name}-{verb}"), part="influence", config=cfg,
                        seeds={"root": cfg.seed}, command=f"influence {verb}",
                        prompts={"name": P["_name"], "sha256": P["_sha256"]}, source_run=cfg.source.run)
    if engine is None:
        run.update_provenance(device_plan=plan.to_dict())
        engine = engine_for(ecfg, run, plan)
    run.record_engines("model", engine)
    return run, engine, P


def _readout(cfg: InfluenceConfig, verb: str, run: RunDir, eng: Any, P: dict, summary: dict[str, Any],
             progress: Progress | None, make_plots: bool) -> None:
    """Forced-choice readouts of every debate receiver turn at each fraction of its reasoning."""
    a = cfg.analysis
    turns, items = source_turns(cfg, run, eng, cfg.source.rounds, progress)
    table = ro.run_readouts(eng, items, turns, P, fractions=cfg.readout.fractions, rounds=cfg.readout.rounds,
                            seed=cfg.seed, controls=cfg.readout.controls,
                            progress=progress if cfg.source.run else None)
    run.write_table("readouts", table)
    if len(table):
        summary["n_readouts"] = int(len(table))
        summary["n_changed"] = {c: int(g[g["f"] == cfg.readout.fractions[0]]["changed"].sum())
                                for c, g in table.groupby("condition")}
        summary["committed_at_read"] = ro.committed_at_read(table, n_boot=a.n_boot, seed=cfg.seed, ci=a.ci)
        if 0.0 in cfg.readout.fractions:  # seed 002 Table 9: paired by question, both conditions changed
            paired = ro.paired_committed_at_read(table, n_boot=a.n_boot, seed=cfg.seed, ci=a.ci)
            run.write_table("committed_paired", pd.DataFrame(paired.pop("questions", []), columns=[
                "qid", "family", "debate", "reflection", "difference"]))
            summary["committed_at_read"]["paired_f0"] = paired
            ctl = [c for c in ro.gap_conditions(table["condition"]) if c != "debate"]
            if ctl:  # the same pairing with the peers' content replaced (paper §4.1 controls)
                summary["committed_at_read"]["paired_f0_controls"] = {
                    c: {k: v for k, v in ro.paired_committed_at_read(
                        table, n_boot=a.n_boot, seed=cfg.seed, ci=a.ci, condition=c).items() if k != "questions"}
                    for c in ctl}
        summary["message_effect_round1"] = ro.message_effects(table, n_boot=a.n_boot, seed=cfg.seed, ci=a.ci)
        if make_plots:
            plots.committed(summary["committed_at_read"], run.plot_path("committed_at_read"))
            if len(summary["committed_at_read"].get("gaps_f0", {})) > 1:
                plots.committed_gaps(summary["committed_at_read"]["gaps_f0"], run.plot_path("committed_gaps"),
                                     ci=summary["committed_at_read"].get("ci_level") or a.ci)


def _margins(cfg: InfluenceConfig, verb: str, run: RunDir, eng: Any, P: dict, summary: dict[str, Any],
             progress: Progress | None, make_plots: bool) -> None:
    """Answer margins of round-0 receiver contexts under message ablations (``ablate``) or source
    cues (``cues``), paired by context."""
    a = cfg.analysis
    turns, items = source_turns(cfg, run, eng, 0, progress)
    pairs = ab.select_pairs(items, turns, seed=cfg.seed, max_pairs=cfg.interventions.max_pairs,
                            require_disagreement=cfg.interventions.require_disagreement)
    summary["n_pairs"] = len(pairs)
    if not pairs:
        return
    if verb == "ablate":
        meta, convs = ab.ablation_contexts(items, pairs, P, eng.tokenizer, seed=cfg.seed)
    else:
        meta, convs = ab.cue_contexts(items, pairs, P, sets=cfg.cues.sets)
    table = ab.score_margins(eng, meta, convs)
    run.write_table("margins", table)
    w = ab.effects(table)
    run.write_table("effects", w)
    summary.update(ab.summarize_effects(w, n_boot=a.n_boot, seed=cfg.seed, ci=a.ci))
    for cs, d in summary.get("cue_sets", {}).items():   # the wording's length match, in this model's tokens
        d["phrase_tokens"] = ab.phrase_tokens(P, cs, eng.tokenizer)
    if make_plots and summary.get("effects"):
        plots.effect_bars(summary["effects"], run.plot_path(f"{verb}_effects"),
                          title="message ablations" if verb == "ablate" else "source cues / attribution", ci=a.ci)
        if summary.get("cue_sets"):
            plots.cue_sets(summary["cue_sets"], run.plot_path("cue_sets"), ci=a.ci)


# the behavioural verbs: each fills the summary (and writes its tables) in a started run
MEASURES: dict[str, Callable[..., None]] = {"readout": _readout, "ablate": _margins, "cues": _margins}


def run_influence(cfg: InfluenceConfig, verb: str, out: Path | None = None, *, progress: Progress | None = None,
                  make_plots: bool = True, engine: Any = None) -> tuple[RunDir, dict[str, Any]]:
    """verb: readout | ablate | cues (``MEASURES``)."""
    if verb not in MEASURES:
        raise ConfigError(f"unknown influence verb {verb!r}")
    run, eng, P = start_run(cfg, verb, out, engine)
    summary: dict[str, Any] = {"experiment": cfg.name, "verb": verb, "model": cfg.model.profile}
    MEASURES[verb](cfg, verb, run, eng, P, summary, progress, make_plots)
    run.write_summary(summary)
    run.finish()
    return run, summary
