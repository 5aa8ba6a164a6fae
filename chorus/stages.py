"""The demo's stages, one function each, in the order ``chorus demo`` runs them, with the sizes
of ``--size tiny|full``. ``chorus.demo`` runs them; ``chorus.report`` reads their titles (the numbers
a stage shows in the overview are its part's declared headline, ``chorus.core.headline``; the
serving stage, a part of the demo alone, declares its own here). Each stage imports the part it shows inside its
function, so importing this module stays cheap."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar

import yaml
from pydantic import Field

from chorus.core.config import Strict
from chorus.core.headline import Row, declare, proportion
from chorus.core.plots import figure, save
from chorus.core.progress import Progress
from chorus.core.runs import RunDir
from chorus.serving.profiles import DEFAULT_PROFILE
from chorus.serving.spec import Backend
from chorus.registry import run_verb

# Stage sizes. "tiny" is the CI / first-look size (minutes); "full" the README's main job
# (target: under 15 minutes on a 2-core CPU with a warm install).
SIZES: dict[str, dict[str, Any]] = {
    # tiny: CI's check of the main job; the readouts as in full (f = 0 and 1, round-1 receivers)
    "tiny": {"serving_items": 8, "belief_seeds": 1, "belief_agents": 4, "belief_rounds": 2,
             "belief_gen_tokens": 40, "debate_questions": 6, "debate_rounds": 2, "debate_max_tokens": 96,
             "readout_fractions": [0.0, 1.0], "readout_rounds": [1]},
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


class DemoConfig(Strict):
    # a rerun into the same demo may run other stages (--stage): the rest is the record
    RECORD_EXEMPT: ClassVar[tuple[str, ...]] = ("stages",)
    size: str = Field(pattern="^(tiny|full)$")
    profile: str = DEFAULT_PROFILE
    backend: Backend = "auto"
    seed: int = Field(0, ge=0)
    stages: list[str] = list(STAGES)
    sizes: dict[str, Any] = Field(default_factory=dict, description="the size table used (recorded)")


@dataclass
class Stage:
    name: str
    title: str
    run: Callable[[Path, DemoConfig, Progress], dict[str, Any]]
    unit: str = "calls"
    # the engines it loads, as (profile, backend, dtype); None = the demo's profile, backend, default dtype.
    # An engine that no later stage declares is released after a stage (memory).
    engines: tuple[tuple[str | None, str | None, str | None], ...] = ((None, None, None),)




# -- stages ------------------------------------------------------------------------------------
# each stage's imports stay inside it, deliberately (module docstring): importing this module stays cheap
def _serving(out: Path, cfg: DemoConfig, progress: Progress) -> dict[str, Any]:
    import pandas as pd

    from chorus.serving import build_engine  # at call time: the seam tests patch

    n = cfg.sizes["serving_items"]
    items = yaml.safe_load((Path(__file__).parent / "data" / "demo_items.yaml").read_text())[:n]
    run = RunDir.create(out, part="serving", config=cfg, seeds={"root": cfg.seed}, command="demo serving")
    eng = build_engine({"profile": cfg.profile, "backend": cfg.backend}, store=run.store_path)
    run.record_engines("model", eng)
    convs = [[{"role": "user", "content": it["question"]}] for it in items]
    outs = eng.chat(convs, temperature=0.0, max_tokens=48, progress=progress)
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


def serving_headline(summary: dict[str, Any]) -> list[Row]:
    """The serving stage's headline (``chorus.core.headline``): the forced-choice readout's accuracy on the
    demo items and the share of structured requests that conformed to their schema."""
    if "readout_items" not in summary:
        return []
    return [proportion("forced-choice readout accuracy", summary.get("readout_accuracy"), summary.get("readout_items")),
            proportion("structured output conformed", summary["structured_conformed"] / summary["structured_requests"]
                       if summary.get("structured_requests") else None, summary.get("structured_requests"),
                       why="no structured request was made")]


declare("serving", serving_headline)


def _bar_plot(rd, profile: str, path: Path) -> None:
    fig = figure(7, 3.2)
    ax = fig.add_subplot(111)
    ax.bar(range(len(rd)), rd.p_yes, color=["#4c72b0" if a == "Yes" else "#dd8452" for a in rd.answer])
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("item (blue: answer Yes, orange: answer No)")
    ax.set_ylabel("P(Yes | Yes or No)")
    ax.set_title(f"forced-choice readout, {profile}")
    fig.tight_layout()
    save(fig, path)


def _belief(mode: str) -> Callable[[Path, DemoConfig, Progress], dict[str, Any]]:
    def stage(out: Path, cfg: DemoConfig, progress: Progress) -> dict[str, Any]:
        s = cfg.sizes
        over = {"mode": mode, "seed": cfg.seed, "seeds": s["belief_seeds"], "llm.model": {"profile": cfg.profile,
                                                                                  "backend": cfg.backend}}
        if mode == "llm":  # the language round-trip is the slow part: a smaller population
            over.update({"n_agents": s["belief_agents"], "rounds": s["belief_rounds"],
                         "llm.generator.max_tokens": s["belief_gen_tokens"]})
        _, summary = run_verb(("belief", "sweep"), "all_small", over, out, progress=progress, source="demo")
        return summary
    return stage


def _debate(out: Path, cfg: DemoConfig, progress: Progress) -> dict[str, Any]:
    s = cfg.sizes
    _, summary = run_verb(("debate", "run"), "default", {
        "name": "demo", "seed": cfg.seed, "rounds": s["debate_rounds"], "bench.limit": s["debate_questions"],
        "generation.max_tokens": s["debate_max_tokens"], "model.profile": cfg.profile, "model.backend": cfg.backend,
        "analysis.n_boot": 500, "analysis.n_perm": 500}, out, progress=progress)
    return summary


def _readout(out: Path, cfg: DemoConfig, progress: Progress) -> dict[str, Any]:
    src = out.parent / "debate"
    if not (src / "tables" / "turns.parquet").is_file():
        raise RuntimeError("needs the debate stage's turns (debate/tables/turns.parquet): run the debate stage first")
    _, summary = run_verb(("influence", "readout"), "influence_smoke", {
        "name": "demo", "seed": cfg.seed, "source.run": str(src), "model.profile": cfg.profile,
        "model.backend": cfg.backend, "model.dtype": None, "analysis.n_boot": 500, "analysis.n_perm": 500,
        "readout.fractions": cfg.sizes["readout_fractions"], "readout.rounds": cfg.sizes.get("readout_rounds")},
        out, progress=progress)
    return summary


def _knockout(out: Path, cfg: DemoConfig, progress: Progress) -> dict[str, Any]:
    from chorus.interventions.internals.demo import run_demo
    debate = out.parent / "debate"  # the debate stage's turns, when present: no second generation pass
    src = debate if (debate / "tables" / "turns.parquet").is_file() else None
    return run_demo(out, profile=cfg.profile, size=cfg.size, progress=progress, source_run=src)


def _council(out: Path, cfg: DemoConfig, progress: Progress) -> dict[str, Any]:
    from chorus.simulate.council.demo import run_demo
    return run_demo(out, size=cfg.size, progress=progress, backend=cfg.backend, profile=cfg.profile)


def _roleplay(out: Path, cfg: DemoConfig, progress: Progress) -> dict[str, Any]:
    from chorus.simulate.roleplay.demo import run_demo
    return run_demo(out, size=cfg.size, progress=progress, backend=cfg.backend, profile=cfg.profile)


REGISTRY: dict[str, Stage] = {s.name: s for s in [
    Stage("serving", "Serving: batched generation, readouts, structured output", _serving, "requests"),
    Stage("belief_oracle", "Belief layer, oracle mode (exact): regimes and kappa recovery", _belief("oracle"), "utterances",
          engines=()),
    Stage("belief_llm", "Belief layer, LLM mode: the language round-trip", _belief("llm"), "utterances"),
    Stage("debate", "Debate vs matched reflection: collective outcomes", _debate, "turns"),
    Stage("readout", "Forced-choice readouts over the debate: committed-at-read", _readout, "readouts"),
    Stage("knockout", "Inside the model: attention knockout, residual interchange, probes",
          _knockout, "passes", engines=((None, "hf", "float32"),)),
    Stage("council", "Live council aggregated by BDA vs baselines", _council, "calls"),
    Stage("roleplay", "Role-play groups vs humans (synthetic fixture)", _roleplay, "turns"),
]}
