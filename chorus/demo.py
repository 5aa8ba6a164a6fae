"""``chorus demo``: the main job. One small study across every part on the embedded model(s):

    serving       batched generation, a forced-choice readout and structured output
    belief_oracle the three regimes and kappa recovery, oracle mode (exact)
    belief_llm    the same through the language round-trip (LLM mode)
    debate        debate vs matched reflection on bench questions, collective metrics
    readout       forced-choice readouts over the debate run (committed-at-read)
    roleplay      role-play groups on the synthetic fixture, both setups, alignment metrics
    council       a live council on claims, aggregated by BDA against the baselines
    knockout      attention knockout, residual interchange and probes (interventions/)

The stages themselves are ``chorus.stages``; this module runs them.
Each stage writes its own run directory under OUT (the shared layout of ``chorus.core.runs``) with its
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
from pathlib import Path
from typing import Any

from chorus.report import render_report
from chorus.serving.profiles import DEFAULT_PROFILE
from chorus.stages import REGISTRY, SIZES, STAGES, DemoConfig, Stage
from chorus.core.config import InputError, validate
from chorus.core.progress import progress as progress_bar
from chorus.core.runs import RunDir, write_json
from chorus.serving import engine_pool
from chorus.serving.engine import default_dtype, pool_plans, release_pooled, resolve_backend

__all__ = ["run_demo", "REGISTRY", "STAGES", "SIZES", "DemoConfig", "Stage"]


# -- orchestration ---------------------------------------------------------------------------
# wall-clock fields and per-invocation counts (calls this process computed rather than read back
# from the store) go to timing.json, not the summary: a resumed demo must give the same summary
_TIMING_KEYS = {"timing", "wall_s", "model_s", "tokens_per_s", "seconds", "elapsed_s", "load_s",
                "computed_by_engine"}


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


def run_demo(size: str, out: Path, profile: str = DEFAULT_PROFILE, backend: str = "auto",
             *, stages: list[str] | None = None, seed: int = 0, console: Any = None) -> Path:
    """Run the demo stages into ``out`` and render ``out/report.html``; returns its path."""
    import datetime as dt


    unknown = [s for s in (stages or []) if s not in REGISTRY]
    if unknown:
        raise InputError(f"unknown demo stage(s) {unknown}: choose from {', '.join(STAGES)}")
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
    expect = [(p or cfg.profile, b or main_backend, d or main_dtype) for s in cfg.stages for p, b, d in REGISTRY[s].engines]
    with engine_pool(expect=expect):  # on a GPU: vLLM and a transformers copy planned to fit (chorus.serving.plan)
        run.update_provenance(memory_plans=pool_plans())
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
