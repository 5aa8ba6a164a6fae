"""Demo hook for ``chorus demo``: a small knockout sweep, a patching curve and a probe on the
embedded model (hf backend, fp32, CPU), in one standard run directory.

    from chorus.interventions.internals.demo import run_demo
    summary = run_demo(Path("runs/demo/knockout"), size="tiny", profile="gemma3-270m")

tiny: up to 4 debate-style contexts (round 0 of 6 questions generated here), knockout in 4
layers (first, about a third and two thirds down, last: 0, 10, 20, 29 of SmolLM2's 30; single and
cumulative) plus all layers for both query variants, 2 cue pairs patched at the same 4 layers, a
'record' probe at those layers with a 20-permutation null. full: 6 contexts, every fourth layer
and the last, 3 cue pairs, 20 permutations (sized for the demo's 15 minutes). The layers come
from the model's own layer count (``num_hidden_layers`` of its config.json). With
``source_run`` (the demo's debate stage: the config's ``source.run``) the contexts come from that run's round 0 instead of a
generation pass here. Every model call goes through the run's store
(resumable). The summary's ``note`` says when an embedded model made the numbers
(``chorus.serving.standing``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from chorus import serving  # chorus.serving.build_engine looked up per call: tests replace it
from chorus.core.runs import RunDir
from chorus.interventions import ablations as ab
from chorus.interventions import knockout_pairs as kp
from chorus.interventions import patching as pt
from chorus.interventions import plots as ip
from chorus.interventions.experiment import source_turns
from chorus.interventions.internals.config import InternalsConfig
from chorus.interventions.probes import probe_activations, probe_contexts, probe_layers
from chorus.serving.profiles import get_profile
from chorus.serving.standing import standing
from chorus.simulate.debate.prompts import load_prompts
from chorus.core.config import InputError

SIZES: dict[str, dict[str, Any]] = {
    # layers: "thirds" = first, ~1/3, ~2/3, last; "every4" = every fourth and the last (demo_layers)
    "tiny": {"questions": 6, "pairs": 4, "cue_pairs": 2, "layers": "thirds", "n_perm": 20,
             "max_tokens": 32},
    "full": {"questions": 12, "pairs": 6, "cue_pairs": 3, "layers": "every4", "n_perm": 20,
             "max_tokens": 48},
}


def demo_layers(n_layers: int, rule: str) -> list[int]:
    """The demo's layer indices for a model of ``n_layers`` layers: "thirds" (SmolLM2's 30 ->
    [0, 10, 20, 29]; gemma-3-270m's 18 -> [0, 6, 12, 17]) or "every4" (30 -> 0, 4, .., 28, 29)."""
    if n_layers < 1:
        raise InputError(f"a model needs at least one layer, got {n_layers}")
    if rule == "thirds":
        picks = [0, round(n_layers / 3), round(2 * n_layers / 3), n_layers - 1]
    elif rule == "every4":
        picks = list(range(0, n_layers, 4)) + [n_layers - 1]
    else:
        raise InputError(f"unknown layer rule {rule!r}: thirds or every4")
    return list(dict.fromkeys(min(p, n_layers - 1) for p in picks))


def model_layers(profile: str) -> int:
    """``num_hidden_layers`` from the profile folder's config.json (the text model's, for a
    multimodal config); raises ``ModelError`` when the profile is not ready."""
    cfg = json.loads((get_profile(profile).require() / "config.json").read_text())
    return int((cfg.get("text_config") or cfg)["num_hidden_layers"])


def run_demo(out: Path, *, profile: str, size: str = "tiny", progress: Callable[[int, int], None] | None = None,
             source_run: Path | None = None) -> dict:
    """``profile``: the model (chorus demo passes its ``-m/--model``). ``source_run``: a debate run
    whose round-0 turns supply the contexts (the demo passes its debate stage: no second generation
    pass on transformers); else round 0 is generated here."""
    if size not in SIZES:
        raise InputError(f"size must be one of {', '.join(SIZES)}, got {size!r}")
    z = SIZES[size]
    layers = demo_layers(model_layers(profile), z["layers"])
    cfg = InternalsConfig.model_validate({
        "name": f"internals_demo_{size}", "seed": 0,
        "source": {"run": str(source_run) if source_run is not None else None, "agents": 3,
                   "generation": {"temperature": 0.7, "max_tokens": z["max_tokens"]},
                   "bench": {"build_seed": 0, "limit": z["questions"]}},
        "model": {"profile": profile, "backend": "hf", "dtype": "float32"},
        "analysis": {"n_boot": 200, "n_perm": 200},
        "interventions": {"max_pairs": z["pairs"]},
        "knockout": {"queries": ["after", "decision"], "sweep_queries": ["after"], "layers": layers},
        "patch": {"contrast": "record", "layers": layers, "max_pairs": z["cue_pairs"]},
        "probe": {"concept": "record", "layers": layers, "n_perm": z["n_perm"], "n_splits": 4}})
    P = load_prompts(cfg.prompts)
    run = RunDir.create(out, part="influence", config=cfg, seeds={"root": cfg.seed}, command=f"demo internals {size}",
                        prompts={"name": P["_name"], "sha256": P["_sha256"]})
    # internals need the weights: transformers, float32 on the demo's CPU path
    eng = serving.build_engine(cfg.model.model_copy(update={"backend": "hf", "dtype": "float32"}), store=run.store_path)
    try:
        run.record_engines("model", eng)
        turns, items = source_turns(cfg, run, eng, 0, progress)
        pairs = ab.select_pairs(items, turns, seed=cfg.seed, max_pairs=cfg.interventions.max_pairs)
        a = cfg.analysis
        summary: dict[str, Any] = {"experiment": cfg.name, "model": cfg.model.profile, "size": size,
                                   "n_pairs": len(pairs), "note": standing([cfg.model.profile]).caveat}
        if pairs:
            conds, plan = kp.knockout_conditions(eng, cfg.knockout)
            kt = kp.run_knockout_pairs(eng, kp.knockout_contexts(items, pairs, P), conds, progress)
            run.write_table("knockout", kt)
            ks = {**plan, "n_pairs": len(pairs), "model": cfg.model.profile,
                  **kp.summarize_knockout(kt, n_boot=a.n_boot, seed=cfg.seed, ci=a.ci)}
            ip.knockout_curves(ks, run.plot_path("knockout_curves"))
            summary["knockout"] = {k: v for k, v in ks.items() if k != "curves"}
            summary["knockout"]["curves"] = ks["curves"]

            cps = pt.cue_pairs(items, pairs, P, cfg.patch.contrast)[:cfg.patch.max_pairs]
            pt_table, pinfo = pt.run_patch_pairs(eng, cps, cfg.patch.layers, progress)
            run.write_table("patch", pt_table)
            ps = {**pinfo, "model": cfg.model.profile, **pt.summarize_patch(pt_table, n_boot=a.n_boot, seed=cfg.seed, ci=a.ci)}
            if ps.get("curve"):
                ip.patch_curve(ps, run.plot_path("patch_curve"))
            summary["patch"] = ps

            meta, convs, labels = probe_contexts(items, pairs, P, cfg.probe.concept)
            groups = [m["family"] for m in meta]
            if len(set(groups)) < 2:  # grouped folds need two questions (a model that rarely disagrees)
                summary["probe"] = {"concept": cfg.probe.concept, "n_contexts": len(convs),
                                    "skipped": f"the probe's question-grouped folds need contexts from at least 2 "
                                               f"questions; the {len(pairs)} pair(s) come from {len(set(groups))}"}
            else:
                upd = progress
                if upd:
                    upd(2, 0)
                acts = probe_activations(run, eng, convs, list(cfg.probe.layers))
                if upd:
                    upd(2, 1)
                pr = probe_layers(acts, labels, layers=list(cfg.probe.layers), groups=groups,
                                  n_perm=cfg.probe.n_perm, n_splits=cfg.probe.n_splits, seed=cfg.seed, C=cfg.probe.C)
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
