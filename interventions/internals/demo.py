"""Demo hook for ``chorus demo``: a small knockout sweep, a patching curve and a probe on the
embedded model (hf backend, fp32, CPU), in one standard run directory.

    from interventions.internals.demo import run_demo
    summary = run_demo(Path("runs/demo/knockout"), size="tiny")

tiny: up to 4 debate-style contexts (round 0 of 6 questions generated here), knockout in 4
layers (single and cumulative) plus all layers for both query variants, 2 cue pairs patched at
the same 4 layers, a 'record' probe at those layers with a 20-permutation null. full: 6 contexts,
every fourth layer, 3 cue pairs, 20 permutations (sized for the demo's 15 minutes). With
``source_run`` (the demo's debate stage) the contexts come from that run's round 0 instead of a
generation pass here. Every model call goes through the run's store
(resumable). SmolLM2-135M numbers test the plumbing; they are not findings.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"questions": 6, "pairs": 4, "cue_pairs": 2, "layers": [0, 10, 20, 29], "n_perm": 20,
             "max_tokens": 32},
    "full": {"questions": 12, "pairs": 6, "cue_pairs": 3, "layers": list(range(0, 30, 4)) + [29], "n_perm": 20,
             "max_tokens": 48},
}


def run_demo(out: Path, *, size: str = "tiny", progress: Callable[[int, int], None] | None = None,
             source_run: Path | None = None) -> dict:
    """``source_run``: a debate run whose round-0 turns supply the contexts (the demo passes its
    debate stage: no second generation pass on transformers); else round 0 is generated here."""
    from core.runs import RunDir
    from interventions import ablations as ab
    from interventions import plots as ip
    from interventions.experiment import source_turns
    from interventions.internals import experiment as ix
    from interventions.internals.config import InternalsConfig
    from interventions.probes import probe_layers
    from serving import load_engine
    from simulate.debate.prompts import load_prompts

    if size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}, got {size!r}")
    z = SIZES[size]
    cfg = InternalsConfig.model_validate({
        "name": f"internals_demo_{size}", "seed": 0, "agents": 3,
        "generation": {"temperature": 0.7, "max_tokens": z["max_tokens"]},
        "model": {"profile": "smollm2-135m-instruct", "backend": "hf", "dtype": "float32"},
        "bench": {"build_seed": 0, "limit": z["questions"]}, "analysis": {"n_boot": 200, "n_perm": 200},
        "interventions": {"max_pairs": z["pairs"]},
        "knockout": {"queries": ["after", "decision"], "sweep_queries": ["after"], "layers": z["layers"]},
        "patch": {"contrast": "record", "layers": z["layers"], "max_pairs": z["cue_pairs"]},
        "probe": {"concept": "record", "layers": z["layers"], "n_perm": z["n_perm"], "n_splits": 4},
        "source_run": str(source_run) if source_run is not None else None})
    P = load_prompts(cfg.prompts)
    run = RunDir.create(out, part="influence", config=cfg, seeds={"root": cfg.seed}, command=f"demo internals {size}",
                        prompts={"name": P["_name"], "sha256": P["_sha256"]})
    eng = load_engine(cfg.model.profile, backend="hf", store=run.store_path, dtype="float32")
    try:
        run.record_engines("model", eng)
        turns, items = source_turns(cfg, run, eng, 0, progress)
        pairs = ab.select_pairs(items, turns, seed=cfg.seed, max_pairs=cfg.interventions.max_pairs)
        a = cfg.analysis
        summary: dict[str, Any] = {"experiment": cfg.name, "model": cfg.model.profile, "size": size,
                                   "n_pairs": len(pairs), "note": "135M model: plumbing checks, not findings"}
        if pairs:
            conds, plan = ix.knockout_conditions(eng, cfg.knockout)
            kt = ix.run_knockout_pairs(eng, ix.knockout_contexts(items, pairs, P), conds, progress)
            run.write_table("knockout", kt)
            ks = {**plan, "n_pairs": len(pairs), "model": cfg.model.profile,
                  **ix.summarize_knockout(kt, n_boot=a.n_boot, seed=cfg.seed, ci=a.ci)}
            ip.knockout_curves(ks, run.plot_path("knockout_curves"))
            summary["knockout"] = {k: v for k, v in ks.items() if k != "curves"}
            summary["knockout"]["curves"] = ks["curves"]

            cps = ix.cue_pairs(items, pairs, P, cfg.patch.contrast)[:cfg.patch.max_pairs]
            pt_table, pinfo = ix.run_patch_pairs(eng, cps, cfg.patch.layers, progress)
            run.write_table("patch", pt_table)
            ps = {**pinfo, "model": cfg.model.profile, **ix.summarize_patch(pt_table, n_boot=a.n_boot, seed=cfg.seed, ci=a.ci)}
            if ps.get("curve"):
                ip.patch_curve(ps, run.plot_path("patch_curve"))
            summary["patch"] = ps

            meta, convs, labels = ix.probe_contexts(items, pairs, P, cfg.probe.concept)
            upd = progress
            if upd:
                upd(2, 0)
            acts = ix.probe_activations(run, eng, convs, list(cfg.probe.layers))
            if upd:
                upd(2, 1)
            groups = [m["family"] for m in meta]
            pr = probe_layers(acts, labels, layers=list(cfg.probe.layers), groups=groups, n_perm=cfg.probe.n_perm,
                              n_splits=cfg.probe.n_splits, seed=cfg.seed, C=cfg.probe.C)
            pr["concept"] = cfg.probe.concept
            run.write_table("probe", pr)
            ip.probe_curve(pr, run.plot_path("probe_auroc"), concept=cfg.probe.concept)
            if upd:
                upd(2, 1)
            summary["probe"] = {"concept": cfg.probe.concept, "n_contexts": len(convs),
                                "layers": pr.to_dict(orient="records"),
                                "n_layers_above_null_p90": int(pr["above_null_p90"].sum())}
        run.write_summary(summary)
        run.finish()
        return json.loads((run.path / "summary.json").read_text())
    finally:
        eng.close()
