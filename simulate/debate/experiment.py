"""Run directories for ``chorus debate``: load the question set, run the protocol through the
engine, write tables / summary / plots; ``report`` recomputes the summary and plots from the run
directory's files alone. ``interventions`` reads these runs (``source_run``)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from chorus import serving  # chorus.serving.build_engine looked up per call: tests replace it
from chorus.core.config import ConfigError, load_config
from chorus.core.progress import Progress
from chorus.core.runs import RunDir, amends_run, run_dir_path
from chorus.core.stats import MIN_UNITS
from chorus.core.undefined import reasons
from chorus.serving.plan import DevicePlanError
from chorus.serving.roles import plan_roles
from chorus.simulate.debate import plots
from chorus.simulate.debate.config import DebateConfig
from chorus.simulate.debate.metrics import collective_summary, frame_dynamics
from chorus.simulate.debate.numeric import numeric_summary
from chorus.simulate.debate.outcomes import c2_summary  # seed 002 §C.2: long-debate curves, split / contested groups
from chorus.simulate.debate.prompts import load_prompts
from chorus.simulate.debate.protocol import run_protocol
from chorus.simulate.debate.questions import Item, build_bench, load_bench, load_items, save_items  # noqa: F401 (re-exported)
from chorus.simulate.debate.questions import item_frames
from chorus.simulate.debate.domains import domain_table
from chorus.simulate.debate.voting import report_votes, run_voting
from chorus.simulate.debate.judged import debate_judged
from chorus.simulate.judge import read_ledger


def select_items(spec) -> tuple[list[Item], dict[str, Any]]:
    if spec.path:
        items = load_bench(spec.path)
        info: dict[str, Any] = {"source": str(spec.path)}
    else:
        items, manifest = build_bench(spec.data_dir, seed=spec.build_seed, counts=spec.counts or None,
                                      scenario_frames=spec.scenario_frames)
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


def plan_engines(cfg, phase: str = "debate", roles: dict[str, Any] | None = None):
    """The device plan of the run's engine (role "model", the config's ``model`` block; the vote arm
    uses the same engine), before it loads: one phase, ``phase``. ``roles``: other roles held beside it
    (e.g. a transfer's sender), by role name -> ``ModelSpec``. A plan that cannot fit raises
    ``chorus.serving.plan.DevicePlanError`` (one line naming role, sizes and device); so does one that would
    swap, since these runs hold every engine of the phase at once."""
    gen = getattr(cfg, "generation", None)   # the interventions plan their reading model here too
    new_tokens = {"model": (gen.max_tokens, "generation.max_tokens")} if gen is not None else None
    plan = plan_roles({"model": cfg.model, **(roles or {})}, phase_of=lambda role: phase, new_tokens=new_tokens)
    swapped = [p for p in plan.phases if p.mode == "swap"]
    if swapped:
        raise DevicePlanError(f"the engines of this run are held together and do not fit: {swapped[0].reason}")
    return plan


def check_run(cfg):
    """``--check``: the prompts and the question set read and checked as the run will, then the device plan."""
    load_prompts(cfg.prompts)
    select_items(cfg.bench)
    return plan_engines(cfg)


def engine_for(cfg, run: RunDir, plan=None):
    """The engine a run's ``model`` block names; its store is RUN/calls.sqlite unless the config shares one.
    ``plan``: the run's device plan (``plan_engines``), whose share of the device it is started with."""
    return serving.build_engine(cfg.model, store=run.store_path, plan=plan)


def run_debate(cfg: DebateConfig, out: Path | None = None, *, progress: Progress | None = None,
               make_plots: bool = True, engine: Any = None) -> tuple[RunDir, dict[str, Any]]:
    P = load_prompts(cfg.prompts)
    items, binfo = select_items(cfg.bench)  # fails before any model call
    plan = plan_engines(cfg) if engine is None else None  # a plan that cannot fit fails here too
    run = RunDir.create(run_dir_path(out, "debate", cfg.name), part="debate", config=cfg, seeds={"root": cfg.seed},
                        command="debate run", prompts={"name": P["_name"], "sha256": P["_sha256"]}, bench=binfo)
    save_items(run, items)
    if plan is not None:
        run.update_provenance(device_plan=plan.to_dict())
    eng = engine or engine_for(cfg, run, plan)
    run.record_engines("model", eng)
    turns, info = run_protocol(eng, items, agents=cfg.agents, rounds=cfg.rounds, conditions=cfg.conditions,
                               temperature=cfg.generation.temperature, top_p=cfg.generation.top_p,
                               max_tokens=cfg.generation.max_tokens, seed=cfg.seed, prompts=P, progress=progress,
                               numeric=True)  # numeric items run too; their turns go to their own table
    run.write_table("turns", turns)
    nturns = info.pop("numeric_turns")
    if len(nturns):
        run.write_table("numeric_turns", nturns)
    run.write_table("exclusions", pd.DataFrame(info["excluded"], columns=["qid", "condition", "round", "reason"]))
    run.write_table("batches", pd.DataFrame(info["batches"]))
    (run.path / "protocol.json").write_text(json.dumps({k: v for k, v in info.items() if k != "excluded"}, indent=2))
    if cfg.voting.enabled:  # the compute-matched vote arm: spends, per question, the tokens debate spent
        g, v = cfg.generation, cfg.voting
        votes, vinfo = run_voting(eng, items, turns, agents=cfg.agents, temperature=g.temperature, top_p=g.top_p,
                                  max_tokens=g.max_tokens, seed=cfg.seed, prompts=P, max_samples=v.max_samples,
                                  per_wave=v.per_wave, progress=progress)
        run.write_table("votes", votes)
        (run.path / "voting.json").write_text(json.dumps(vinfo, indent=2))
    summary = report(run.path, make_plots=make_plots)
    run.finish()
    return run, summary


# When each number of a debate summary is undefined (chorus.core.undefined): the condition, in the
# order of the first matching pattern. Only the rules matching a value undefined in a run are recorded.
_NEFF = ("n_eff = I / (1 + (I - 1) rho) needs at least two scored questions and at least two agents whose "
         "correctness varies across them (otherwise the pairwise correlation rho is undefined)")
_CI = (f"no interval: a cluster bootstrap is refused below {MIN_UNITS} question families, and there is none "
       "around an undefined estimate")
UNDEFINED_WHY = {
    "conditions.*.n_eff*": _NEFF,
    "paired.n_eff_delta.ci_*": _CI + "; or n_eff is undefined in the resampled questions",
    "paired.n_eff_delta.*": _NEFF,
    "conditions.*.lockin_initial_plurality": "no question split at round 0 ended unanimous (n_lockin_groups = 0)",
    "conditions.*.wrong_unanimity_given_wrong_initial": ("no scored question had a wrong initial majority "
                                                         "(n_wrong_initial_majority = 0)"),
    "conditions.*.acc_*": "no fully parsed, labelled question reached the final round (n_scored = 0)",
    "conditions.*.wrong_unanimity": "no fully parsed, labelled question reached the final round (n_scored = 0)",
    "conditions.*.unanimity_by_round_split.*": "no fully parsed question was split at round 0 (n_split_0 = 0)",
    "conditions.*.unanimity_by_round.*": "no fully parsed question reached the final round",
    "*parse_rate": "no turns", "*truncated_rate": "no turns",
    "c2.*[].estimate": ("no question in this cell (n_groups = 0); for n_eff also fewer than two agents whose "
                        "correctness varies"),
    "c2.*[].ci_*": _CI,
    "c2.*[].n_events": "not a share: n_eff and ratios count no events",
    "paired.by_subdomain[].p_perm": "no paired question of this subdomain has the metric in both conditions (n = 0)",
    "paired.by_subdomain[].*": "no paired question of this subdomain has the metric in both conditions (n = 0)",
    "*.ci_low": _CI, "*.ci_high": _CI,
    "*p_perm": "no permutation p-value: fewer than two question families or no paired question",
    "*q_bh": "no BH q-value: its p-value is undefined",
}


@amends_run
def report(run_dir: str | Path, *, make_plots: bool = True) -> dict[str, Any]:
    """summary.json and plots from RUN/config.yaml, RUN/tables/*.parquet and RUN/protocol.json."""
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
    summary["by_domain"] = domain_table(q, turns, seed=cfg.seed, n_boot=a.n_boot, ci=a.ci)   # Table 13 by domain
    c2, c2_tables = c2_summary(q, seed=cfg.seed, n_boot=a.n_boot, ci=a.ci)
    for name, tab in c2_tables.items():
        run.write_table(name, tab)
    summary["c2"] = c2
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
    if (run.path / "tables" / "numeric_turns.parquet").is_file():  # numeric items: their own rows (numeric.py)
        summary["numeric"], ntab = numeric_summary(run.read_table("numeric_turns"))
        run.write_table("numeric_by_round", ntab)
    if (run.path / "bench.jsonl").is_file():  # constructed scenarios: stance change by frame / stakes level
        frames = item_frames(load_items(run.path).values())
        if frames:
            summary["by_frame"], ftab = frame_dynamics(turns, frames)
            run.write_table("by_frame", ftab)
    if (run.path / "tables" / "judge_ledger.parquet").is_file():  # the judge pass: parse rates before / after
        summary["judge"] = debate_judged(turns, read_ledger(run.path), seed=cfg.seed)
    if (run.path / "tables" / "votes.parquet").is_file():  # the compute-matched vote arm (voting.py)
        summary["vote"] = report_votes(run, cfg, turns, q, make_plots=make_plots)
    if make_plots:
        plots.by_round(summary, "unanimity_by_round", run.plot_path("unanimity_by_round"), ylabel="unanimous groups",
                       title="unanimity by round", extra_key="unanimity_by_round_split")
        plots.by_round(summary, "n_eff_by_round", run.plot_path("n_eff_by_round"),
                       ylabel="effective independent voters n_eff", title="n_eff by round")
        plots.curves_with_bands(c2_tables["outcomes_by_round"], run.plot_path("outcomes_by_round"),
                                title="unanimity, wrong agreement and n_eff by round (fully parsed groups)")
        for name, title in (("c2_split", "initially split groups (2-1 for 3 agents), final round"),
                            ("c2_contested_wrong_agreement", "contested labelled groups: wrong agreement, final round"),
                            ("c2_wrong_initial_majority", "wrong initial majority: ending unanimously wrong")):
            plots.estimates(c2_tables[name], run.plot_path(name), title=title)
    summary["undefined"] = reasons(summary, UNDEFINED_WHY)   # why each undefined number is (report, all numbers)
    run.write_summary(summary)
    return summary
