"""``chorus council run``: tasks -> lockstep councils (clean and attacked) -> trace JSONL -> LLM
baselines; ``report``: every table from the run directory's stored traces and baseline rows
alone (each trace file handed to ``aggregate``'s nested CV in memory; its records beside the tables).

Run directory::

    RUN/config.yaml, provenance.json, calls.sqlite     (every model call; reruns recompute nothing)
    RUN/traces/<dataset>__<condition>.jsonl            (spec trace format; chorus aggregate run reads it)
    RUN/aggregate.json                                 (BDA per trace file: the records of ``chorus aggregate run``)
    RUN/tables/aggregate_{metrics,predictions,bootstrap}.parquet  (those records' metrics, per-task posteriors, CIs)
    RUN/tables/turns.parquet                           (every seat-turn request: free text, legality, tokens)
    RUN/tables/baselines.parquet                       (MoA, MoA-Lite, Self-MoA, ArgLLMs per task)
    RUN/tables/results.parquet, results.md             (every arm x dataset x condition)
    RUN/tables/seats.parquet                           (who sat where per condition, swaps included: r0, r_hat)
    RUN/summary.json, plots/*.png
"""
from __future__ import annotations

import json
import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

from chorus.aggregate.metrics import reliability_overlay
from chorus.aggregate.trace import Trace, dump_traces, load_traces
from chorus.core.config import ConfigError, load_config
from chorus.core.progress import Progress
from chorus.core.runs import RunDir, amends_run, run_dir_path, write_json
from chorus.core.undefined import reasons

# When a number of a council summary is undefined (chorus.core.undefined), first matching pattern first.
UNDEFINED_WHY = {
    "results[].accuracy_all": ("an LLM baseline's accuracy with unparsed answers counted wrong: an aggregation "
                               "arm (BDA, plurality) scores the council's parsed traces and has none"),
    "results[].*_judged": "no judge pass on this arm (only LLM baselines' unparsed answers are judged)",
    "results[].n_judge_mapped": "no judge pass on this arm (only LLM baselines' unparsed answers are judged)",
    "results[].accuracy": "no task of this arm was scored (no label, or every answer unparsed)",
    "results[].ece_*": "no task of this arm was scored (no label, or every answer unparsed)",
    "results[].brier": "no task of this arm was scored (no label, or every answer unparsed)",
    "results[].tokens_per_task": "no generation was recorded for this arm",
    "timing.*": "not recorded by this run (an earlier chorus, or a phase that did not run)",
}
from chorus.serving.standing import standing
from chorus.serving.roles import close_engines, hold_engines, plan_roles
from chorus.simulate.council import plots
from chorus.simulate.council.adversary import compliance
from chorus.simulate.council.config import CouncilConfig
from chorus.simulate.council.data import MissingSet, load_tasks
from chorus.simulate.council.llm_baselines import baseline_metrics, run_baselines
from chorus.simulate.council.prompts import load_prompts
from chorus.simulate.council.runner import Seat, make_councils, run_councils
from chorus.simulate.council.seats import render as render_swaps
from chorus.simulate.council.seats import seat_rows, seats_frame
from chorus.simulate.council.judged import council_judge, council_judged
from chorus.simulate.judge import read_ledger


def load_engines(cfg: CouncilConfig, store, plan=None) -> Any:
    """Each distinct profile's engine (its roles share it), all sharing one call store, keyed by
    profile as the protocol addresses seats and baselines: all held at once, or one at a time when
    the device plan (``plan_engines``) swaps or ``models.hold`` is swap."""
    return hold_engines(cfg.engines(), store=store, hold=cfg.models.hold, plan=plan)


def plan_engines(cfg: CouncilConfig):
    """The device plan over every role the run declares (seats, baselines, then the judge in its own
    phase: it runs after the council and the baselines are done); checked before any engine loads."""
    roles = cfg.roles()
    new_tokens = {r: (cfg.generation.max_tokens, "generation.max_tokens") for r in roles if r != "judge"}
    if cfg.judge is not None:
        new_tokens["judge"] = (cfg.judge.max_tokens, "judge.max_tokens")
    return plan_roles(roles, phase_of=lambda role: "judge" if role == "judge" else "council", new_tokens=new_tokens)


def select_tasks(cfg: CouncilConfig, skipped: list[str] | None = None):
    """The tasks of every data entry. An optional set that is not supplied (the ArgLLMs claims) is
    named in one line and left out while other sets remain (its reason appended to ``skipped``)."""
    import sys

    out, missing = [], []
    for d in cfg.data:
        try:
            tasks, info = load_tasks(d.dataset, d.n, seed=cfg.seed, data_dir=cfg.data_dir, balanced=d.balanced,
                                     subjects=d.subjects, max_context_chars=d.max_context_chars)
        except MissingSet as err:
            if not err.optional:
                raise
            missing.append(err)
            continue
        out.append((d.dataset, tasks, info))
    if missing and not out:
        raise missing[0]
    for err in missing:
        print(f"chorus council: skipping {err.name}: {err}", file=sys.stderr)
        if skipped is not None:
            skipped.append(str(err))
    return out


def trace_file(run_dir: Path, dataset: str, condition: str) -> Path:
    return Path(run_dir) / "traces" / f"{dataset}__{condition}.jsonl"


def run_council_experiment(cfg: CouncilConfig, out: Path | None = None, *, progress: Progress | None = None,
                           engines: dict[str, Any] | None = None, make_plots: bool = True,
                           aggregate: bool = True) -> tuple[RunDir, dict[str, Any]]:
    P, data = check_inputs(cfg)  # fails before any model call
    owned = engines is None
    plan = plan_engines(cfg) if owned else None  # a plan that cannot fit fails here, before the run directory
    run = RunDir.create(run_dir_path(out, "council", cfg.name), part="council", config=cfg,
                        seeds={"root": cfg.seed, "generation": cfg.gen_seeds}, command="council run",
                        prompts={"name": P["_name"], "sha256": P["_sha256"]},
                        data={d: info for d, _, info in data})
    store = cfg.models.store or run.store_path
    if owned:
        run.update_provenance(device_plan=plan.to_dict())
        engines = load_engines(cfg, store, plan)
    try:
        return _run(cfg, run, engines, P, data, progress, make_plots, aggregate)
    finally:
        if owned:
            close_engines(engines if not isinstance(engines, dict) else engines.values())


def check_inputs(cfg: CouncilConfig) -> tuple[dict, list]:
    """The prompts, the tasks of every data entry and the personas the seats name: every input the run
    reads before its models, checked (``--check`` too). Returns (prompts, tasks by data entry)."""
    P = load_prompts(cfg.prompts)
    data = select_tasks(cfg)
    for s in cfg.seats:
        if s.persona not in P["personas"]:
            raise ConfigError(f"seats: persona {s.persona!r} is not defined in prompts {cfg.prompts!r} "
                              f"({', '.join(P['personas'])})")
    for role, s in cfg.swap_roles().items():
        if s.persona not in P["personas"]:
            agent, cond = role.split("@", 1)
            raise ConfigError(f"conditions ({cond}): swap.{agent}.persona {s.persona!r} is not defined in prompts "
                              f"{cfg.prompts!r} ({', '.join(P['personas'])})")
    return P, data


def check_run(cfg: CouncilConfig):
    """``--check``: every input (``check_inputs``), then the device plan it prints."""
    check_inputs(cfg)
    return plan_engines(cfg)


def _run(cfg: CouncilConfig, run: RunDir, engines: Any, P: dict, data: list, progress: Progress | None,
         make_plots: bool, aggregate: bool) -> tuple[RunDir, dict[str, Any]]:
    run.record_engines("models", engines)
    roles = cfg.roles()
    run.update_provenance(seats=[{"agent": a, "persona": s.persona, **roles[a].model_dump()}
                                 for a, s in zip(cfg.agent_names(), cfg.seats)])
    swaps = cfg.swap_roles()   # which model sits where in each swap condition
    if swaps:
        run.update_provenance(swaps=[{"condition": r.split("@", 1)[1], "agent": r.split("@", 1)[0],
                                      "persona": s.persona, **roles[r].model_dump()} for r, s in swaps.items()])
    seats = [Seat(agent=a, profile=s.profile, persona=s.persona) for a, s in zip(cfg.agent_names(), cfg.seats)]
    conds = [(c.name, c.adversaries, {a: Seat(agent=a, profile=s.profile, persona=s.persona)
                                      for a, s in zip(cfg.agent_names(), cfg.condition_seats(c)) if a in c.swap})
             for c in cfg.conditions]
    g = cfg.generation
    turns, batches, base_rows, gen_info = [], [], [], {}
    t_start = time.perf_counter()
    for dataset, tasks, _info in data:
        councils = make_councils(tasks, conds, cfg.gen_seeds)
        t0 = time.perf_counter()
        stats = run_councils(councils, seats, engines, rounds=cfg.rounds, P=P, root_seed=cfg.seed,
                             temperature=g.temperature, top_p=g.top_p, max_tokens=g.max_tokens,
                             max_chars=g.max_chars, max_retries=g.max_retries, progress=progress)
        council_s = time.perf_counter() - t0
        turns += stats.turns
        batches += [{"dataset": dataset, **b} for b in stats.batches]
        for name, *_ in conds:
            recs = [c.to_trace() for c in councils if c.condition == name]
            dump_traces([Trace.from_dict(r) for r in recs], trace_file(run.path, dataset, name))
        t1 = time.perf_counter()
        b = cfg.baselines
        if b.methods:
            base_rows += run_baselines(councils, seats, engines, stats.turns, P, methods=b.methods,
                                       synthesizer=roles["synthesizer"].profile,
                                       self_moa_profile=roles["self_moa"].profile,
                                       argllms_generator=roles["argllms_generator"].profile,
                                       samples=b.self_moa_samples, claim_base=b.claim_base,
                                       fair_attack=b.fair_attack, root=cfg.seed, gen=g)
        gen_info[dataset] = {**stats.to_dict(), "n_councils": len(councils), "n_tasks": len(tasks),
                             "council_wall_s": council_s, "baselines_wall_s": time.perf_counter() - t1}
    gen_info["_total_wall_s"] = time.perf_counter() - t_start
    run.write_table("turns", pd.DataFrame(turns))
    run.write_table("batches", pd.DataFrame(batches))
    bdf = pd.DataFrame(base_rows)
    if "strengths" in bdf:
        bdf["strengths"] = bdf["strengths"].map(lambda v: json.dumps(v) if isinstance(v, dict) else None)
    run.write_table("baselines", bdf)
    write_json(run.path / "generation.json", gen_info)
    if cfg.judge is not None:  # the frozen judge pass (BDA paper D.3); report() below reads its ledger
        js = roles["judge"]
        if getattr(engines, "swapped", False):
            engines.release()  # the judge's phase: nothing of the council's stays on the device
        held = cfg.engines().get(js.profile)  # a seat's engine with the judge's settings serves it
        council_judge(run.path, profile=js, backend=js.backend, max_tokens=cfg.judge.max_tokens,
                      engine=engines.get(js.profile) if held is not None and held.engine_key() == js.engine_key() else None)
    summary = report(run.path, make_plots=make_plots, aggregate=aggregate)
    run.finish()
    return run, summary


# -- report -------------------------------------------------------------------------------------------
def aggregate_traces(name: str, traces: list, cfg: CouncilConfig):
    """BDA over one trace file's traces, in memory: ``aggregate``'s nested CV of every method with its
    bootstrap (the record ``chorus aggregate run`` writes; abstentions are the only moves STRICT
    rejects, and ``on_violation: skip`` drops and counts them). Returns ``aggregate``'s ``Cell``."""
    from chorus.aggregate.config import RunConfig  # lazy: pulls in scipy
    from chorus.aggregate.experiments import evaluate_run  # lazy: pulls in scipy

    a = cfg.aggregate
    acfg = RunConfig(name=name, seed=cfg.seed, traces=f"traces/{name}.jsonl", protocol="strict",
                     on_violation="skip", methods=a.methods, outer_folds=a.outer_folds, inner_folds=a.inner_folds,
                     recalibrate=a.recalibrate,
                     bootstrap={"n_resamples": a.n_resamples, "reference": "plurality" if "plurality" in a.methods
                                else a.methods[0]})
    return evaluate_run(acfg, traces)


def _write_aggregates(run: RunDir, agg: dict[str, Any], make_plots: bool) -> None:
    """The BDA records of every trace file beside the council's own tables (no nested run directory)."""
    from chorus.aggregate.experiments import per_task  # lazy: pulls in scipy

    write_json(run.path / "aggregate.json", {name: c.record for name, c in agg.items()})
    metrics, preds, boot = [], [], []
    for name, c in agg.items():
        metrics += [{"cell": name, "method": m, **v} for m, v in c.record["metrics"].items()]
        preds.append(c.cv.predictions_frame().assign(cell=name))
        boot += [{"cell": name, **b} for b in c.record["bootstrap"] or []]
        if make_plots:
            curves = {m: (d["confidence"], d["correct"]) for m in c.cv.methods for d in [per_task(c.cv, m)]}
            reliability_overlay(curves, run.plot_path(f"reliability_{name}"), title=f"reliability, {name}")
    run.write_table("aggregate_metrics", pd.DataFrame(metrics))
    run.write_table("aggregate_predictions", pd.concat(preds, ignore_index=True) if preds else pd.DataFrame())
    run.write_table("aggregate_bootstrap", pd.DataFrame(boot))


def _producers(cfg: CouncilConfig, run_dir: Path, ledger: pd.DataFrame | None) -> list[str]:
    """The profiles behind a council run's numbers: the seats, the baselines' models, and the judge
    when its pass ran (its ledger names it)."""
    out = list(cfg.profiles())
    if ledger is not None and "judge_profile" in ledger:
        out += [str(p) for p in ledger["judge_profile"].dropna().unique()]
    if ledger is not None and (Path(run_dir) / "judge.json").is_file():
        out.append(json.loads((Path(run_dir) / "judge.json").read_text()).get("judge_profile"))
    return out


def _council_costs(turns: pd.DataFrame) -> pd.DataFrame:
    g = turns.assign(tokens=turns["prompt_tokens"] + turns["completion_tokens"])
    per = g.groupby(["dataset", "condition", "trace_id"])["tokens"].sum().reset_index()
    return per.groupby(["dataset", "condition"])["tokens"].mean().rename("tokens_per_task").reset_index()


@amends_run
def report(run_dir: str | Path, *, make_plots: bool = True, aggregate: bool = True) -> dict[str, Any]:
    """Recompute every table, summary.json and the plots from RUN's stored files alone."""
    run = RunDir(run_dir)
    if not (run.path / "tables" / "turns.parquet").is_file():
        raise FileNotFoundError(f"{run.path}: no tables/turns.parquet (not a council run directory?)")
    cfg = load_config(run.path / "config.yaml", CouncilConfig)
    turns = run.read_table("turns")
    bpath = run.path / "tables" / "baselines.parquet"
    base = pd.read_parquet(bpath) if bpath.is_file() else pd.DataFrame()
    gen = json.loads((run.path / "generation.json").read_text()) if (run.path / "generation.json").is_file() else {}
    costs = _council_costs(turns) if len(turns) else pd.DataFrame(columns=["dataset", "condition", "tokens_per_task"])
    rows: list[dict[str, Any]] = []
    cells: dict[str, Any] = {}
    loaded: dict[Path, list] = {}  # trace files read once (the clean one also serves as the control)
    agg: dict[str, Any] = {}       # BDA per trace file (aggregate's Cell)
    for d in cfg.data:
        for c in cfg.conditions:
            path = trace_file(run.path, d.dataset, c.name)
            if not path.is_file():
                raise FileNotFoundError(f"{path}: trace file missing")
            if path not in loaded:
                loaded[path] = load_traces(path)
            traces = loaded[path]
            n_moves = sum(len(t.moves) for t in traces)
            n_abst = sum(m.force == "abstain" for t in traces for m in t.moves)
            t_sel = turns[(turns["dataset"] == d.dataset) & (turns["condition"] == c.name)]
            cell: dict[str, Any] = {
                "n_traces": len(traces), "n_moves": n_moves, "n_abstentions": int(n_abst),
                "move_parse_rate": 1.0 - n_abst / n_moves if n_moves else math.nan,
                "turn_requests": int(len(t_sel)),
                "illegal_requests": int((~t_sel["legal"]).sum()) if len(t_sel) else 0,
                "nonconforming_requests": int((~t_sel["conformed"]).sum()) if len(t_sel) else 0,
                "round0_accuracy_by_agent": {
                    a: float(sum(m.answer == t.gold for t in traces for m in t.moves
                                 if m.agent == a and m.round == 0 and m.force == "propose")
                             / max(1, sum(1 for t in traces for m in t.moves
                                          if m.agent == a and m.round == 0 and m.force == "propose")))
                    for a in cfg.agent_names()}}
            cell["moves_by_force"] = dict(sorted(Counter(m.force for t in traces for m in t.moves).items()))
            cell["seats"] = seat_rows(traces, cfg, c)   # who sat where, r0 and aggregate's r_hat
            if c.adversaries:
                cell["compliance"] = compliance(traces)
                # the control: the same seats without the role (the unattacked condition with the same swaps)
                clean = next((k.name for k in cfg.conditions if not k.adversaries and k.swap == c.swap), None)
                cpath = trace_file(run.path, d.dataset, clean) if clean else None
                if cpath is not None and cpath.is_file():
                    if cpath not in loaded:
                        loaded[cpath] = load_traces(cpath)
                    cell["compliance_same_seats_clean"] = compliance(loaded[cpath], adversaries=c.adversaries)
            tok = costs[(costs["dataset"] == d.dataset) & (costs["condition"] == c.name)]["tokens_per_task"]
            council_tok = float(tok.iloc[0]) if len(tok) else math.nan
            if aggregate:
                try:
                    agg[path.stem] = aggregate_traces(path.stem, traces, cfg)
                    rec = agg[path.stem].record
                    cell["aggregate"] = {"protocol": rec["protocol"], "n_evaluated": rec["n_evaluated"]}
                    for arm, m in rec["metrics"].items():
                        rows.append({"dataset": d.dataset, "condition": c.name, "arm": arm, "reads_council": True,
                                     **{k: m.get(k) for k in ("n", "accuracy", "ece_ew", "ece_em", "brier")},
                                     "parse_rate": cell["move_parse_rate"], "tokens_per_task": council_tok})
                except Exception as err:  # reported, never hidden: tiny pools can defeat stratified CV
                    cell["aggregate_error"] = f"{type(err).__name__}: {err}"
            cells[f"{d.dataset}__{c.name}"] = cell
    ledger = read_ledger(run.path)  # parse rate / accuracy after the judge pass, beside the originals
    judged = ({(j.pop("dataset"), j.pop("condition"), j.pop("method")): j for j in
               council_judged(base, ledger)[["dataset", "condition", "method", "parse_rate_judged",
                                             "accuracy_all_judged", "n_judge_mapped"]].to_dict(orient="records")}
              if ledger is not None else {})
    note = standing(_producers(cfg, run.path, ledger)).caveat
    for r in baseline_metrics(base.to_dict(orient="records")) if len(base) else []:
        rows.append({"dataset": r["dataset"], "condition": r["condition"], "arm": r["method"],
                     **judged.get((r["dataset"], r["condition"], r["method"]), {}),
                     "reads_council": r["method"] in ("moa", "moa_lite"),
                     **{k: r.get(k) for k in ("n", "accuracy", "ece_ew", "ece_em", "brier")},
                     "parse_rate": r["parse_rate"], "tokens_per_task": r["tokens_per_task"],
                     "accuracy_all": r.get("accuracy_all")})
    table = pd.DataFrame(rows)
    run.write_table("results", table)
    run.write_table("seats", seats_frame(cells))
    if agg:
        _write_aggregates(run, agg, make_plots)
    (run.path / "results.md").write_text(render_markdown(table, cells, cfg, run.provenance().get("data", {}), note=note))
    summary = {"experiment": cfg.name, "seats": [f"{a}={s.profile}/{s.persona}" for a, s in
                                                 zip(cfg.agent_names(), cfg.seats)],
               "rounds": cfg.rounds, "gen_seeds": cfg.gen_seeds, "datasets": [d.dataset for d in cfg.data],
               "conditions": {c.name: c.adversaries for c in cfg.conditions},
               "swaps": {c.name: {a: f"{s.profile}/{s.persona}" for a, s in zip(cfg.agent_names(), cfg.condition_seats(c))
                                  if a in c.swap} for c in cfg.conditions if c.swap},
               "data": run.provenance().get("data", {}), "cells": cells,
               "results": table.to_dict(orient="records"),
               "timing": {k: {kk: v.get(kk) for kk in ("council_wall_s", "baselines_wall_s", "model_s", "new_tokens",
                                                       "computed_new_tokens", "n_councils")}
                          for k, v in gen.items() if isinstance(v, dict)},
               "note": note}
    summary["undefined"] = reasons(summary, UNDEFINED_WHY)   # why each undefined number is (the report says it)
    if make_plots and len(table):
        plots.accuracy_bars(table, run.plot_path("accuracy"), note=note)
        plots.cost_accuracy(table, run.plot_path("cost_accuracy"))
    run.write_summary(summary)
    return summary


def _f(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def render_markdown(table: pd.DataFrame, cells: dict[str, Any], cfg: CouncilConfig,
                    data: dict[str, Any] | None = None, note: str | None = None) -> str:
    lines = [f"# council run {cfg.name}", ""] + ([f"Note: {note}.", ""] if note else [])
    for ds, info in (data or {}).items():
        lines.append(f"- {ds}: {info.get('n')} tasks drawn of {info.get('available')} usable (gold counts "
                     f"{info.get('gold_counts')}); {info.get('excluded')} rows excluded {info.get('excluded_by_reason')}")
    lines.append("")
    cols = ["arm", "n", "accuracy", "ece_ew", "ece_em", "brier", "parse_rate", "tokens_per_task"]
    if "parse_rate_judged" in table:  # the judge pass ran: parse rate and accuracy (unparsed = wrong) after it
        cols[7:7] = ["parse_rate_judged", "accuracy_all", "accuracy_all_judged"]
        lines += ["parse_rate_judged, accuracy_all_judged: after the frozen judge pass on the baselines' unparsed "
                  "answers (judge.json, tables/judge_ledger.parquet); accuracy_all counts unparsed answers as wrong. "
                  "Baselines only: the council arms read typed moves, which the judge does not touch.",
                  ""]
    for key, cell in cells.items():
        ds, cond = key.split("__", 1)
        forces = ", ".join(f"{k} {v}" for k, v in cell.get("moves_by_force", {}).items())
        r0 = ", ".join(f"{a} {_f(v)}" for a, v in cell.get("round0_accuracy_by_agent", {}).items())
        lines += [f"## {ds} / {cond}", "",
                  f"traces {cell['n_traces']}, moves {cell['n_moves']} ({forces}), abstentions {cell['n_abstentions']}, "
                  f"illegal requests {cell['illegal_requests']} of {cell['turn_requests']}; round-0 accuracy by seat: {r0}",
                  ""]
        if "compliance" in cell:
            cp = cell["compliance"]
            lines += [f"adversary compliance: anti-correct round 0 {_f(cp['anti_correct_r0'])} "
                      f"(n={cp['n_proposals_r0']}), maintained {_f(cp['anti_correct_maintained'])} "
                      f"(n={cp['n_seat_tasks']}); challenges truth/ally {cp['challenge_truth']}/{cp['challenge_ally']}, "
                      f"concedes ally/truth {cp['concede_ally']}/{cp['concede_truth']}", ""]
            if "compliance_same_seats_clean" in cell:
                cc = cell["compliance_same_seats_clean"]
                lines += [f"the same seats without the role (clean condition): anti-correct round 0 "
                          f"{_f(cc['anti_correct_r0'])}, maintained {_f(cc['anti_correct_maintained'])}", ""]
        if "aggregate_error" in cell:
            lines += [f"aggregation failed: {cell['aggregate_error']}", ""]
        sub = table[(table["dataset"] == ds) & (table["condition"] == cond)] if len(table) else table
        if len(sub):
            lines.append(f"Paired bootstrap intervals of every arm against plurality: `aggregate/{key}/results.md`.")
            lines.append("")
            lines.append("| " + " | ".join(cols) + " |")
            lines.append("|" + "---|" * len(cols))
            for _, r in sub.iterrows():
                lines.append("| " + " | ".join(_f(r.get(c)) for c in cols) + " |")
            lines.append("")
    lines += render_swaps(table, cells, cfg)
    return "\n".join(lines)
