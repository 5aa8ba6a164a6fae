"""Run directories for ``chorus debate`` and ``chorus influence``: load the bench, run the
protocol through the engine, write tables / summary / plots; ``report`` recomputes the
summary and plots from the run directory's files alone."""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from chorus.config import ConfigError
from chorus.runs import RunDir
from simulate.debate.bench import Item, build_bench, load_bench, write_bench
from simulate.debate.config import DebateConfig, InfluenceConfig
from simulate.debate.prompts import load_prompts

Progress = Callable[[int, int], None]


def select_items(spec) -> tuple[list[Item], dict[str, Any]]:
    if spec.path:
        items = load_bench(spec.path)
        info: dict[str, Any] = {"source": str(spec.path)}
    else:
        items, manifest = build_bench(spec.data_dir, seed=spec.build_seed, counts=spec.counts or None)
        info = {"source": "built", "manifest": manifest}
    if spec.domains:
        items = [it for it in items if it.domain in spec.domains]
    if spec.subdomains:
        items = [it for it in items if it.subdomain in spec.subdomains]
    if spec.limit:
        items = items[:spec.limit]
    if not items:
        raise ConfigError("bench: no questions left after the domain/subdomain/limit filters")
    info["n_selected"] = len(items)
    return items, info


def _out_dir(out: Path | None, part: str, name: str) -> Path:
    return Path(out) if out else Path("runs") / part / f"{name}-{_dt.datetime.now():%Y%m%d-%H%M%S}"


def _engine(cfg, run: RunDir):
    from serving import load_engine
    return load_engine(cfg.model.profile, backend=cfg.model.backend, store=cfg.model.store or run.store_path,
                       dtype=cfg.model.dtype, **cfg.model.options)


def _save_items(run: RunDir, items: list[Item]) -> None:
    write_bench(items, run.path / "bench.jsonl")


def _load_items(run_dir: Path) -> dict[str, Item]:
    return {it.id: it for it in load_bench(Path(run_dir) / "bench.jsonl")}


def run_debate(cfg: DebateConfig, out: Path | None = None, *, progress: Progress | None = None,
               make_plots: bool = True, engine: Any = None) -> tuple[RunDir, dict[str, Any]]:
    from simulate.debate.protocol import run_protocol
    P = load_prompts(cfg.prompts)
    items, binfo = select_items(cfg.bench)  # fails before any model call
    run = RunDir.create(_out_dir(out, "debate", cfg.name), part="debate", config=cfg, seeds={"root": cfg.seed},
                        command="debate run", prompts={"name": P["_name"], "sha256": P["_sha256"]}, bench=binfo)
    _save_items(run, items)
    eng = engine or _engine(cfg, run)
    run.update_provenance(model=eng.provenance())
    turns, info = run_protocol(eng, items, agents=cfg.agents, rounds=cfg.rounds, conditions=cfg.conditions,
                               temperature=cfg.generation.temperature, top_p=cfg.generation.top_p,
                               max_tokens=cfg.generation.max_tokens, seed=cfg.seed, prompts=P, progress=progress)
    run.write_table("turns", turns)
    run.write_table("exclusions", pd.DataFrame(info["excluded"], columns=["qid", "condition", "round", "reason"]))
    run.write_table("batches", pd.DataFrame(info["batches"]))
    (run.path / "protocol.json").write_text(json.dumps({k: v for k, v in info.items() if k != "excluded"}, indent=2))
    summary = report(run.path, make_plots=make_plots)
    run.finish()
    return run, summary


def report(run_dir: str | Path, *, make_plots: bool = True) -> dict[str, Any]:
    """summary.json and plots from RUN/config.yaml, RUN/tables/*.parquet and RUN/protocol.json."""
    from simulate.debate.metrics import collective_summary
    from chorus.config import load_config
    run = RunDir(run_dir)
    if not (run.path / "tables" / "turns.parquet").is_file():
        raise FileNotFoundError(f"{run.path}: no tables/turns.parquet (not a debate run directory?)")
    cfg = load_config(run.path / "config.yaml", DebateConfig)
    turns = run.read_table("turns")
    excl = run.read_table("exclusions") if (run.path / "tables" / "exclusions.parquet").is_file() else pd.DataFrame()
    proto = json.loads((run.path / "protocol.json").read_text()) if (run.path / "protocol.json").is_file() else {}
    a = cfg.analysis
    summary, q = collective_summary(turns, seed=cfg.seed, n_boot=a.n_boot, n_perm=a.n_perm, ci=a.ci, fdr_q=a.fdr_q)
    run.write_table("questions", q)
    summary.update({"experiment": cfg.name, "model": cfg.model.profile, "agents": cfg.agents, "rounds": cfg.rounds,
                    "n_questions": int(turns["qid"].nunique()), "n_turns": int(len(turns)),
                    "n_generated": int((~turns["shared"]).sum() + len(turns[turns["shared"]].drop_duplicates(["qid", "agent", "round"]))),
                    "parse_rate": float(turns["parsed"].mean()) if len(turns) else float("nan"),
                    "n_truncated": int(turns["truncated"].sum()),
                    "exclusions": {"n": int(len(excl)),
                                   "by_reason": (excl["reason"].value_counts().to_dict() if len(excl) else {})},
                    "timing": {k: proto.get(k) for k in ("wall_s", "model_s", "new_tokens")}})
    if proto.get("model_s"):
        summary["timing"]["tokens_per_s"] = proto["new_tokens"] / proto["model_s"]
    if make_plots:
        from simulate.debate import plots
        plots.by_round(summary, "unanimity_by_round", run.plot_path("unanimity_by_round"), ylabel="unanimous groups",
                       title="unanimity by round", extra_key="unanimity_by_round_split")
        plots.by_round(summary, "n_eff_by_round", run.plot_path("n_eff_by_round"),
                       ylabel="effective independent voters n_eff", title="n_eff by round")
    run.write_summary(summary)
    return summary


# -- influence -------------------------------------------------------------------------------
def _source_turns(cfg: InfluenceConfig, run: RunDir, eng: Any, rounds: int,
                  progress: Progress | None) -> tuple[pd.DataFrame, dict[str, Item]]:
    """Turns from ``source_run`` or generated here (``rounds`` rounds, both conditions)."""
    if cfg.source_run:
        src = RunDir(cfg.source_run)
        if not (src.path / "tables" / "turns.parquet").is_file():
            raise ConfigError(f"source_run = {cfg.source_run!r}: no tables/turns.parquet there")
        items = _load_items(src.path)
        turns = src.read_table("turns")
        write_bench(items.values(), run.path / "bench.jsonl")
        return turns, items
    from simulate.debate.protocol import run_protocol
    items, _ = select_items(cfg.bench)
    _save_items(run, items)
    P = load_prompts(cfg.prompts)
    turns, info = run_protocol(eng, items, agents=cfg.agents, rounds=rounds, conditions=cfg.conditions,
                               temperature=cfg.generation.temperature, top_p=cfg.generation.top_p,
                               max_tokens=cfg.generation.max_tokens, seed=cfg.seed, prompts=P, progress=progress)
    run.write_table("turns", turns)
    return turns, {it.id: it for it in items}


def run_influence(cfg: InfluenceConfig, verb: str, out: Path | None = None, *, progress: Progress | None = None,
                  make_plots: bool = True, engine: Any = None) -> tuple[RunDir, dict[str, Any]]:
    """verb: readout | ablate | cues."""
    from interventions import ablations as ab
    from interventions import readout as ro
    if verb not in ("readout", "ablate", "cues"):
        raise ConfigError(f"unknown influence verb {verb!r}")
    P = load_prompts(cfg.prompts)
    if not cfg.source_run:
        select_items(cfg.bench)  # validate the bench before any model call
    run = RunDir.create(_out_dir(out, "influence", f"{cfg.name}-{verb}"), part="influence", config=cfg,
                        seeds={"root": cfg.seed}, command=f"influence {verb}",
                        prompts={"name": P["_name"], "sha256": P["_sha256"]}, source_run=cfg.source_run)
    eng = engine or _engine(cfg, run)
    run.update_provenance(model=eng.provenance())
    a = cfg.analysis
    summary: dict[str, Any] = {"experiment": cfg.name, "verb": verb, "model": cfg.model.profile}
    if verb == "readout":
        turns, items = _source_turns(cfg, run, eng, cfg.rounds, progress)
        table = ro.run_readouts(eng, items, turns, P, fractions=cfg.readout.fractions, rounds=cfg.readout.rounds,
                                seed=cfg.seed, progress=progress if cfg.source_run else None)
        run.write_table("readouts", table)
        if len(table):
            summary["n_readouts"] = int(len(table))
            summary["n_changed"] = {c: int(g[g["f"] == cfg.readout.fractions[0]]["changed"].sum())
                                    for c, g in table.groupby("condition")}
            summary["committed_at_read"] = ro.committed_at_read(table, n_boot=a.n_boot, seed=cfg.seed, ci=a.ci)
            summary["message_effect_round1"] = ro.message_effects(table, n_boot=a.n_boot, seed=cfg.seed, ci=a.ci)
            if make_plots:
                from simulate.debate import plots
                plots.committed(summary["committed_at_read"], run.plot_path("committed_at_read"))
    else:
        turns, items = _source_turns(cfg, run, eng, 0, progress)
        pairs = ab.select_pairs(items, turns, seed=cfg.seed, max_pairs=cfg.interventions.max_pairs,
                                require_disagreement=cfg.interventions.require_disagreement)
        summary["n_pairs"] = len(pairs)
        if pairs:
            if verb == "ablate":
                meta, convs = ab.ablation_contexts(items, pairs, P, eng.tokenizer, seed=cfg.seed)
            else:
                meta, convs = ab.cue_contexts(items, pairs, P)
            table = ab.score_margins(eng, meta, convs)
            run.write_table("margins", table)
            w = ab.effects(table)
            run.write_table("effects", w)
            summary.update(ab.summarize_effects(w, n_boot=a.n_boot, seed=cfg.seed, ci=a.ci))
            if make_plots and summary.get("effects"):
                from simulate.debate import plots
                plots.effect_bars(summary["effects"], run.plot_path(f"{verb}_effects"),
                                  title="message ablations" if verb == "ablate" else "source cues / attribution")
    run.write_summary(summary)
    run.finish()
    return run, summary
