"""``chorus demo``: the main job. For now the serving stage only (batched generation, forced-choice
readouts, structured output on the embedded model); later parts add their stages here."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field

from chorus.config import validate
from chorus.runs import RunDir

SIZES = {"tiny": 8, "full": 16}


class DemoConfig(BaseModel, extra="forbid"):
    size: str = Field(pattern="^(tiny|full)$")
    profile: str = "smollm2-135m-instruct"
    backend: str = "auto"
    seed: int = 0
    max_tokens: int = Field(48, ge=1)


def _items(n: int) -> list[dict[str, Any]]:
    data = yaml.safe_load((Path(__file__).parent / "data" / "demo_items.yaml").read_text())
    return data[:n]


def run_demo(size: str, out: Path, profile: str, backend: str, console: Any = None) -> Path:
    from serving import load_engine
    from chorus.cliutil import engine_callback, progress

    cfg = validate(DemoConfig, {"size": size, "profile": profile, "backend": backend}, source="demo options")
    run = RunDir.create(out, part="demo", config=cfg, seeds={"root": cfg.seed})
    items = _items(SIZES[cfg.size])
    eng = load_engine(cfg.profile, cfg.backend, store=run.store_path)
    run.update_provenance(model=eng.provenance())
    convs = [[{"role": "user", "content": it["question"]}] for it in items]
    summary: dict[str, Any] = {"stages": {}}

    import pandas as pd

    with progress("serving: generate", "requests") as update:
        t0 = time.perf_counter()
        outs = eng.chat(convs, temperature=0.0, max_tokens=cfg.max_tokens, progress=engine_callback(update))
        dt = time.perf_counter() - t0
    new_tokens = sum(o.completion_tokens for o in outs)
    computed = sum(o.completion_tokens for o in outs if not o.cached)
    run.write_table("generations", pd.DataFrame({
        "question": [it["question"] for it in items], "reply": [o.text for o in outs],
        "prompt_tokens": [o.prompt_tokens for o in outs], "completion_tokens": [o.completion_tokens for o in outs],
        "finish_reason": [o.finish_reason for o in outs], "from_store": [o.cached for o in outs]}))
    summary["stages"]["generate"] = {"requests": len(outs), "new_tokens": new_tokens, "seconds": round(dt, 2),
                                     "from_store": sum(o.cached for o in outs),
                                     # throughput only of what the model computed in this invocation (store hits excluded)
                                     "tokens_per_s": round(computed / dt, 1) if computed else None}

    lps = eng.option_logprobs(convs, ["Yes", "No"])
    import math
    rows = []
    for it, lp in zip(items, lps):
        z = math.exp(lp["Yes"]) + math.exp(lp["No"])
        p_yes = math.exp(lp["Yes"]) / z
        rows.append({"question": it["question"], "logp_yes": lp["Yes"], "logp_no": lp["No"],
                     "p_yes_renormalised": p_yes, "mass_on_options": z,
                     "choice": "Yes" if p_yes >= 0.5 else "No", "answer": it["answer"]})
    rd = pd.DataFrame(rows)
    run.write_table("readouts", rd)
    summary["stages"]["readout"] = {"items": len(rd), "accuracy": float((rd.choice == rd.answer).mean()),
                                    "mean_mass_on_options": float(rd.mass_on_options.mean())}

    schema = {"type": "object", "properties": {"answer": {"enum": ["Yes", "No"]},
                                               "confidence": {"type": "integer", "minimum": 0, "maximum": 100}},
              "required": ["answer", "confidence"], "additionalProperties": False}
    js = eng.chat(convs, json_schema=schema, temperature=0.7, max_tokens=40, seed=[cfg.seed * 1000 + i for i in range(len(convs))])
    run.write_table("structured", pd.DataFrame({"question": [it["question"] for it in items], "text": [o.text for o in js],
                                                "conformed": [o.conformed for o in js]}))
    summary["stages"]["structured"] = {"requests": len(js), "conformed": sum(bool(o.conformed) for o in js)}

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.bar(range(len(rd)), rd.p_yes_renormalised, color=["#4c72b0" if a == "Yes" else "#dd8452" for a in rd.answer])
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("item (blue: answer Yes, orange: answer No)")
    ax.set_ylabel("P(Yes | Yes or No)")
    ax.set_title(f"forced-choice readout, {cfg.profile}")
    fig.tight_layout()
    fig.savefig(run.plot_path("readout_p_yes"), dpi=110)
    plt.close(fig)

    summary["model_calls"] = eng.model_calls
    run.write_summary(summary)
    run.finish()
    eng.close()
    from chorus.report import render_report
    return render_report(run.path)
