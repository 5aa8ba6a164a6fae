"""``chorus influence knockout|patch|probe|transfer|concepts``: the runner the five internals verbs
share, over a debate run directory or a bench file. Each verb's pipeline sits beside its mechanics,
as its module's ``MECHANIC`` (``chorus.interventions.mechanic.Mechanic``): knockout in
``chorus.interventions.knockout_pairs`` (mechanics: ``chorus.interventions.knockout``), patch in
``chorus.interventions.patching``, probe in ``chorus.interventions.probes``, transfer in
``chorus.interventions.state_transfer``, concepts in ``chorus.interventions.concepts`` (a run of its own).

Contexts come from round 0 of a debate run (``source.run``) or are generated here from the
bench (the debate part's helpers), one (receiver, peer) pair per question whose answers differ
(``chorus.interventions.ablations.select_pairs``), read at f = 0 as adoption margins
``logit(peer answer) - logit(receiver's previous answer)``.

Every model readout goes through the run's call store (knockout and patch results are keyed
like engine calls; probe activations are cached in RUN/activations.npz), so a killed run
recomputes nothing it already stored.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from chorus.core.config import ConfigError, load_config
from chorus.core.progress import Progress
from chorus.core.runs import RunDir, amends_run
from chorus.interventions import ablations as ab
from chorus.interventions import concepts, knockout_pairs, patching, probes, state_transfer
from chorus.interventions.experiment import source_turns, start_run
from chorus.interventions.internals.config import InternalsConfig
from chorus.interventions.mechanic import Mechanic
from chorus.simulate.debate.experiment import plan_engines

VERBS = ("knockout", "patch", "probe", "transfer", "concepts")


# -- runs -----------------------------------------------------------------------------------------
def held_beside(cfg: InternalsConfig, verb: str) -> dict[str, Any]:
    """The engines a verb holds beside the receiver (role "model", transformers), for the device
    plan: a transfer's own sender (``TransferSpec.sender_spec``, as ``chorus.interventions.state_transfer``
    builds it; held with the receiver, so in the same phase); none for the other verbs."""
    sender = cfg.transfer.sender_spec(cfg.model) if verb == "transfer" else None
    return {"sender": sender} if sender is not None else {}


def plan_internals(cfg: InternalsConfig, verb: str):
    """The device plan of an internals verb, before anything loads (``chorus influence VERB --check``):
    the receiver on transformers, a transfer's sender beside it, one phase named after the verb."""
    ecfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"backend": "hf"})})
    return plan_engines(ecfg, verb, held_beside(cfg, verb))


def _setup(cfg: InternalsConfig, verb: str, out: Path | None, engine: Any, progress: Progress | None):
    # internals need the weights: transformers; planned (device_plan in provenance) before it loads
    run, engine, P = start_run(cfg, verb, out, engine, backend="hf", roles=held_beside(cfg, verb))
    MECHANICS[verb].precheck(cfg, engine)  # e.g. a layer set this model cannot cut, before any generation
    turns, items = source_turns(cfg, run, engine, 0, progress)
    pairs = ab.select_pairs(items, turns, seed=cfg.seed, max_pairs=cfg.interventions.max_pairs,
                            require_disagreement=cfg.interventions.require_disagreement)
    return run, engine, items, pairs, P


# -- the five verbs: each module defines its MECHANIC beside its mechanics ----------------------------
MECHANICS: dict[str, Mechanic] = {
    "knockout": knockout_pairs.MECHANIC,
    "patch": patching.MECHANIC,
    "probe": probes.MECHANIC,
    "transfer": state_transfer.MECHANIC,
    "concepts": concepts.MECHANIC,
}
assert tuple(MECHANICS) == VERBS  # one list of the internals verbs


def run_internals(cfg: InternalsConfig, verb: str, out: Path | None = None, *, progress: Progress | None = None,
                  make_plots: bool = True, engine: Any = None) -> tuple[RunDir, dict[str, Any]]:
    """verb: knockout | patch | probe | transfer | concepts (``MECHANICS``)."""
    if verb not in MECHANICS:
        raise ConfigError(f"unknown verb {verb!r}: choose one of {', '.join(VERBS)}")
    m = MECHANICS[verb]
    if m.own_run is not None:
        return m.own_run(cfg, out, progress=progress, make_plots=make_plots, engine=engine, report=report)
    run, eng, items, pairs, P = _setup(cfg, verb, out, engine, progress)
    info: dict[str, Any] = {"n_pairs": len(pairs)}
    m.measure(cfg, run, eng, items, pairs, P, progress, info)
    (run.path / f"{verb}_info.json").write_text(json.dumps(info, indent=2, default=str))
    summary = report(run.path, verb, make_plots=make_plots)
    run.finish()
    return run, summary


@amends_run
def report(run_dir: str | Path, verb: str | None = None, *, make_plots: bool = True) -> dict[str, Any]:
    """summary.json and plots from RUN/config.yaml, RUN/tables/*.parquet and RUN/<verb>_info.json."""
    run = RunDir(run_dir)
    if verb is None:
        verb = next((v for v in VERBS if (run.path / f"{v}_info.json").is_file()), None)
        if verb is None:
            raise FileNotFoundError(f"{run.path}: no knockout/patch/probe results (not an internals run?)")
    cfg = load_config(run.path / "config.yaml", InternalsConfig)
    info = json.loads((run.path / f"{verb}_info.json").read_text())
    summary: dict[str, Any] = {"experiment": cfg.name, "verb": verb, "model": cfg.model.profile, **info}
    tab = run.path / "tables" / f"{verb}.parquet"
    t = pd.read_parquet(tab) if tab.is_file() else pd.DataFrame()
    MECHANICS[verb].summarize(cfg, run, info, t, summary, make_plots)
    run.write_summary(summary)
    return summary
