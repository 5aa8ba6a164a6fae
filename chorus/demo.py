"""``chorus demo``: the main job. One small study across every part on the embedded model(s):

    serving       batched generation, a forced-choice readout and structured output
    belief        the three regimes and kappa recovery, oracle mode (exact) and LLM mode
    debate        debate vs matched reflection on bench questions, collective metrics
    readout       forced-choice readouts over the debate run (committed-at-read)
    knockout      attention knockout, residual interchange and probes (interventions/)
    council       a live council on claims, aggregated by BDA against the baselines
    roleplay      role-play groups on the synthetic fixture, both setups, alignment metrics

Each stage writes its own run directory under OUT (the shared layout of ``chorus.runs``) with its
own call store, so a killed demo resumes where it stopped: completed model calls are read back.
A stage that fails is recorded (status, error) and the others still run. OUT/summary.json holds
the headline numbers of every stage (no timings, so a resumed demo gives the same summary);
OUT/timing.json the wall time per stage and how many model calls were computed vs read back.
"""
from __future__ import annotations

import math
import os
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml
from pydantic import BaseModel, Field

from chorus.config import validate
from chorus.runs import RunDir, write_json

Progress = Callable[[int, int], None]

# Stage sizes. "tiny" is the CI / first-look size (minutes); "full" the README's main job
# (target: under 15 minutes on a 2-core CPU with a warm install).
SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"serving_items": 8, "belief_seeds": 1, "belief_agents": 4, "belief_rounds": 2,
             "belief_gen_tokens": 40, "debate_questions": 12, "debate_rounds": 2, "debate_max_tokens": 96,
             "readout_fractions": [0.0, 0.5, 1.0]},
    # full: the README's main job, one cold run under 15 minutes on a 2-core CPU and 8 GB of memory
    # (bench/bench_demo.py measures it). Model time is dense matrix products at this machine's peak
    # (measured), so the sizes are the budget: 14 questions x 3 agents, round 0 and two debate rounds
    # of up to 96 tokens (210 generations), readouts at f = 0 and 1 on round-1 receivers, one belief
    # seed with 6 agents over 2 rounds of 40-token utterances.
    "full": {"serving_items": 16, "belief_seeds": 1, "belief_agents": 6, "belief_rounds": 2,
             "belief_gen_tokens": 40, "debate_questions": 14, "debate_rounds": 2, "debate_max_tokens": 96,
             "readout_fractions": [0.0, 1.0], "readout_rounds": [1]},
}
# Every stage that generates shares the main engine (vLLM, float32: exact readouts, batch-invariant
# results); knockout (transformers + nnsight) comes last, after the vLLM engine is released, so that
# no two engines are held at once (memory).
STAGES = ("serving", "belief_oracle", "belief_llm", "debate", "readout", "roleplay", "council", "knockout")


class DemoConfig(BaseModel, extra="forbid"):
    size: str = Field(pattern="^(tiny|full)$")
    profile: str = "smollm2-135m-instruct"
    backend: str = Field("auto", pattern="^(auto|hf|vllm|openai)$")
    seed: int = Field(0, ge=0)
    stages: list[str] = list(STAGES)
    sizes: dict[str, Any] = Field(default_factory=dict, description="the size table used (recorded)")


@dataclass
class Stage:
    name: str
    title: str
    run: Callable[[Path, DemoConfig, Progress], dict[str, Any]]
    unit: str = "calls"
    keys: tuple[str, ...] = ()  # '/'-separated paths into the stage summary shown in the report's overview
    # the engines it loads, as (profile, backend, dtype); None = the demo's profile, backend, default dtype.
    # An engine that no later stage declares is released after a stage (memory).
    engines: tuple[tuple[str | None, str | None, str | None], ...] = ((None, None, None),)




# -- stages ------------------------------------------------------------------------------------
def _serving(out: Path, cfg: DemoConfig, progress: Progress) -> dict[str, Any]:
    import pandas as pd

    from chorus.cliutil import engine_callback
    from serving import load_engine

    n = cfg.sizes["serving_items"]
    items = yaml.safe_load((Path(__file__).parent / "data" / "demo_items.yaml").read_text())[:n]
    run = RunDir.create(out, part="serving", config=cfg, seeds={"root": cfg.seed}, command="demo serving")
    eng = load_engine(cfg.profile, cfg.backend, store=run.store_path)
    run.update_provenance(model=eng.provenance())
    convs = [[{"role": "user", "content": it["question"]}] for it in items]
    outs = eng.chat(convs, temperature=0.0, max_tokens=48, progress=engine_callback(progress))
    run.write_table("generations", pd.DataFrame({
        "question": [it["question"] for it in items], "reply": [o.text for o in outs],
        "prompt_tokens": [o.prompt_tokens for o in outs], "completion_tokens": [o.completion_tokens for o in outs],
        "finish_reason": [o.finish_reason for o in outs]}))
    rows = []
    for it, lp in zip(items, eng.option_logprobs(convs, ["Yes", "No"])):
        z = math.exp(lp["Yes"]) + math.exp(lp["No"])
        p_yes = math.exp(lp["Yes"]) / z
        rows.append({"question": it["question"], "logp_yes": lp["Yes"], "logp_no": lp["No"], "p_yes": p_yes,
                     "mass_on_options": z, "choice": "Yes" if p_yes >= 0.5 else "No", "answer": it["answer"]})
    rd = pd.DataFrame(rows)
    run.write_table("readouts", rd)
    schema = {"type": "object", "properties": {"answer": {"enum": ["Yes", "No"]},
                                               "confidence": {"type": "integer", "minimum": 0, "maximum": 100}},
              "required": ["answer", "confidence"], "additionalProperties": False}
    js = eng.chat(convs, json_schema=schema, temperature=0.7, max_tokens=40,
                  seed=[cfg.seed * 1000 + i for i in range(len(convs))])
    run.write_table("structured", pd.DataFrame({"question": [it["question"] for it in items],
                                                "text": [o.text for o in js], "conformed": [o.conformed for o in js]}))
    _bar_plot(rd, cfg.profile, run.plot_path("readout_p_yes"))
    summary = {"generations": len(outs), "new_tokens": sum(o.completion_tokens for o in outs),
               "readout_items": len(rd), "readout_accuracy": float((rd.choice == rd.answer).mean()),
               "readout_mean_mass_on_options": float(rd.mass_on_options.mean()),
               "structured_requests": len(js), "structured_conformed": sum(bool(o.conformed) for o in js)}
    run.write_summary(summary)
    run.finish()
    eng.close()
    return summary


def _bar_plot(rd, profile: str, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.bar(range(len(rd)), rd.p_yes, color=["#4c72b0" if a == "Yes" else "#dd8452" for a in rd.answer])
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("item (blue: answer Yes, orange: answer No)")
    ax.set_ylabel("P(Yes | Yes or No)")
    ax.set_title(f"forced-choice readout, {profile}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _belief(mode: str) -> Callable[[Path, DemoConfig, Progress], dict[str, Any]]:
    def stage(out: Path, cfg: DemoConfig, progress: Progress) -> dict[str, Any]:
        from simulate.belief.config import load_belief_config
        from simulate.belief.experiment import run_experiment
        s = cfg.sizes
        over = {"mode": mode, "seed": cfg.seed, "seeds": s["belief_seeds"], "llm.model": cfg.profile,
                "llm.backend": cfg.backend}
        if mode == "llm":  # the language round-trip is the slow part: a smaller population
            over.update({"n_agents": s["belief_agents"], "rounds": s["belief_rounds"],
                         "llm.generator.max_tokens": s["belief_gen_tokens"]})
        bcfg = load_belief_config("all_small", over)
        _, summary = run_experiment(bcfg, out, sweep=True, progress=progress, source="demo")
        return summary
    return stage


def _debate(out: Path, cfg: DemoConfig, progress: Progress) -> dict[str, Any]:
    from simulate.debate.config import DebateConfig, load
    from simulate.debate.experiment import run_debate
    s = cfg.sizes
    dcfg = load("default", DebateConfig, {
        "name": "demo", "seed": cfg.seed, "rounds": s["debate_rounds"], "bench.limit": s["debate_questions"],
        "generation.max_tokens": s["debate_max_tokens"], "model.profile": cfg.profile, "model.backend": cfg.backend,
        "analysis.n_boot": 500, "analysis.n_perm": 500})
    _, summary = run_debate(dcfg, out, progress=progress)
    return summary


def _readout(out: Path, cfg: DemoConfig, progress: Progress) -> dict[str, Any]:
    from simulate.debate.config import InfluenceConfig, load
    from simulate.debate.experiment import run_influence
    src = out.parent / "debate"
    if not (src / "tables" / "turns.parquet").is_file():
        raise RuntimeError("needs the debate stage's turns (debate/tables/turns.parquet): run the debate stage first")
    icfg = load("influence_smoke", InfluenceConfig, {
        "name": "demo", "seed": cfg.seed, "source_run": str(src), "model.profile": cfg.profile,
        "model.backend": cfg.backend, "model.dtype": None, "analysis.n_boot": 500, "analysis.n_perm": 500,
        "readout.fractions": cfg.sizes["readout_fractions"], "readout.rounds": cfg.sizes.get("readout_rounds")})
    _, summary = run_influence(icfg, "readout", out, progress=progress)
    return summary


def _external(module: str) -> Callable[[Path, DemoConfig, Progress], dict[str, Any]]:
    """A part's own demo hook ``run_demo(out, size=, progress=)``; hooks that take ``backend=``
    get the demo's backend, hooks that take ``source_run=`` the debate stage's run when it has turns."""
    def stage(out: Path, cfg: DemoConfig, progress: Progress) -> dict[str, Any]:
        import importlib
        import inspect
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            raise StageUnavailable(f"{module} is not installed in this chorus ({e})") from e
        if not hasattr(mod, "run_demo"):
            raise StageUnavailable(f"{module} has no run_demo()")
        params = inspect.signature(mod.run_demo).parameters
        kw: dict[str, Any] = {"backend": cfg.backend} if "backend" in params else {}
        debate = out.parent / "debate"
        if "source_run" in params and (debate / "tables" / "turns.parquet").is_file():
            kw["source_run"] = debate  # the debate stage's turns: no second generation pass
        return mod.run_demo(out, size=cfg.size, progress=progress, **kw)
    return stage


class StageUnavailable(RuntimeError):
    """The part this stage shows is not available in this installation."""


REGISTRY: dict[str, Stage] = {s.name: s for s in [
    Stage("serving", "Serving: batched generation, readouts, structured output", _serving, "requests",
          ("readout_accuracy", "structured_conformed", "structured_requests")),
    Stage("belief_oracle", "Belief layer, oracle mode (exact): regimes and kappa recovery", _belief("oracle"), "utterances",
          ("headline/degroot_final_variance", "headline/fj_r2", "headline/kappa_spearman",
           "headline/kappa_exact_max_rel_error"), engines=()),
    Stage("belief_llm", "Belief layer, LLM mode: the language round-trip", _belief("llm"), "utterances",
          ("headline/appraisal_failure_rate", "headline/channel_pearson", "headline/kappa_spearman")),
    Stage("debate", "Debate vs matched reflection: collective outcomes", _debate, "turns",
          ("n_questions", "parse_rate", "conditions/debate/wrong_unanimity", "conditions/reflection/wrong_unanimity",
           "conditions/debate/n_eff_final", "conditions/reflection/n_eff_final")),
    Stage("readout", "Forced-choice readouts over the debate: committed-at-read", _readout, "readouts",
          ("n_readouts", "committed_at_read/by_condition/debate/0.0/share",
           "committed_at_read/by_condition/reflection/0.0/share", "committed_at_read/debate_minus_reflection_f0/delta",
           "message_effect_round1/shift")),
    Stage("knockout", "Inside the model: attention knockout, residual interchange, probes",
          _external("interventions.internals_demo"), "passes",
          ("knockout/all_layers/after/share_removed", "knockout/all_layers/decision/share_removed",
           "patch/cue_effect_x_minus_y/mean", "probe/n_layers_above_null_p90"),
          engines=((None, "hf", "float32"),)),
    Stage("council", "Live council aggregated by BDA vs baselines", _external("simulate.council.demo"), "calls",
          ("cells/truthfulqa_claims__clean/n_traces", "cells/truthfulqa_claims__clean/move_parse_rate",
           "cells/truthfulqa_claims__attack-k1/move_parse_rate", "cells/truthfulqa_claims__clean/n_abstentions")),
    Stage("roleplay", "Role-play groups vs humans (synthetic fixture)", _external("simulate.roleplay.demo"),
          "turns", ("n_groups", "classifier/stance_parse_rate", "classifier/on_topic_parse_rate", "mask/n_excluded")),
]}


# -- orchestration ---------------------------------------------------------------------------
# wall-clock fields go to timing.json, not the summary: a resumed demo must give the same summary
_TIMING_KEYS = {"timing", "wall_s", "model_s", "tokens_per_s", "seconds", "elapsed_s", "load_s"}


def _json_safe(x: Any) -> Any:
    """Plain JSON values (NaN as None), wall-clock fields dropped."""
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items() if k not in _TIMING_KEYS}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        try:
            x = x.item()
        except (ValueError, AttributeError):
            return str(x)
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


def _store_counts(stage_dir: Path) -> int:
    """Rows in every call store of a stage (what a rerun reads back instead of computing)."""
    import sqlite3
    n = 0
    for db in stage_dir.rglob("*.sqlite"):
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
                tabs = [r[0] for r in c.execute("select name from sqlite_master where type='table'")]
                n += sum(c.execute(f"select count(*) from {t}").fetchone()[0] for t in tabs if t == "calls")
        except sqlite3.Error:
            pass
    return n


def _stage_timing(sdir: Path, record: dict[str, Any] | None = None) -> dict[str, Any]:
    """The stage's own timing record ``<stage>/demo_timing.json``: every invocation (wall time,
    status, calls stored before/after) and the cold time, the wall time of the invocations up to
    and including the first that completed the stage (later ones read back what it stored)."""
    import json
    p = sdir / "demo_timing.json"
    try:
        rec = json.loads(p.read_text())
    except (OSError, ValueError):
        rec = {"invocations": []}
    if record is not None:
        rec["invocations"].append(record)
        cold, done = 0.0, False
        for inv in rec["invocations"]:
            if not done:
                cold += inv["wall_s"]
                done = inv["status"] == "done"
        rec["cold_wall_s"] = round(cold, 2) if done else None
        sdir.mkdir(parents=True, exist_ok=True)
        write_json(p, rec)
    return rec


def run_demo(size: str, out: Path, profile: str = "smollm2-135m-instruct", backend: str = "auto",
             *, stages: list[str] | None = None, seed: int = 0, console: Any = None) -> Path:
    """Run the demo stages into ``out`` and render ``out/report.html``; returns its path."""
    import datetime as dt

    from chorus.cliutil import progress as progress_bar
    from chorus.report import render_report
    from serving import engine_pool
    from serving.engine import default_dtype, release_pooled, resolve_backend

    unknown = [s for s in (stages or []) if s not in REGISTRY]
    if unknown:
        raise ValueError(f"unknown demo stage(s) {unknown}: choose from {', '.join(STAGES)}")
    cfg = validate(DemoConfig, {"size": size, "profile": profile, "backend": backend, "seed": seed,
                                "stages": list(stages or STAGES), "sizes": SIZES.get(size, {})},
                   source="demo options")
    out = Path(out)
    # the demo's workloads are small: vLLM's graph compilation (about a minute per start on a CPU)
    # would cost more than it saves; an explicit CHORUS_VLLM_EAGER=0 keeps it
    os.environ.setdefault("CHORUS_VLLM_EAGER", "1")
    run = RunDir.create(out, part="demo", config=cfg, seeds={"root": cfg.seed}, stages=cfg.stages)
    old = run.summary().get("stages", {}) if (out / "summary.json").exists() else {}
    summary: dict[str, Any] = {"size": cfg.size, "profile": cfg.profile, "stages": {}}
    timing: dict[str, Any] = {}
    for name in STAGES:  # stages not selected this time keep what an earlier invocation recorded
        if name not in cfg.stages and name in old:
            summary["stages"][name] = old[name]
    main_backend, main_dtype = resolve_backend(cfg.backend), default_dtype()
    t_all = time.perf_counter()
    with engine_pool():
        for k, name in enumerate(cfg.stages):
            st = REGISTRY[name]
            sdir = out / name
            before = _store_counts(sdir)
            t0 = time.perf_counter()
            started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
            rec: dict[str, Any] = {"title": st.title, "dir": name}
            try:
                with progress_bar(f"{name}", st.unit) as update:
                    res = st.run(sdir, cfg, update)
                rec.update(status="done", summary=_json_safe(res))
                (sdir / "error.txt").unlink(missing_ok=True)  # an earlier failure is history now
            except StageUnavailable as e:
                rec.update(status="unavailable", error=str(e))
            except Exception as e:  # one failed stage must not hide the others
                rec.update(status="failed", error=f"{type(e).__name__}: {e}")
                sdir.mkdir(parents=True, exist_ok=True)
                (sdir / "error.txt").write_text(traceback.format_exc())
                if console is not None:
                    console.print(f"[red]stage {name} failed[/red]: {type(e).__name__}: {e} (see {sdir / 'error.txt'})")
            inv = {"started": started, "wall_s": round(time.perf_counter() - t0, 2), "status": rec["status"],
                   "stored_calls_before": before, "stored_calls_after": _store_counts(sdir)}
            own = _stage_timing(sdir, inv)
            timing[name] = {**inv, "cold_wall_s": own.get("cold_wall_s"), "invocations": len(own["invocations"])}
            summary["stages"][name] = rec
            run.write_summary(summary)  # after every stage: an interrupted demo still reports what it did
            write_json(out / "timing.json", {"stages": timing, "total_wall_s": round(time.perf_counter() - t_all, 2)})
            # memory: an engine that no later stage declares is released
            needed = {(p or cfg.profile, b or main_backend, d or main_dtype)
                      for s in cfg.stages[k + 1:] for p, b, d in REGISTRY[s].engines}
            release_pooled(lambda key: (key[0], key[2], key[3]) not in needed)
    run.finish()
    return render_report(out)
