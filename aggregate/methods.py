"""Method names used by configs and the results file, and their factories.

``<name>+iso`` wraps any arm in leak-free isotonic recalibration.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from chorus.aggregate.base import Aggregator
from chorus.aggregate.baselines import (BestMember, DawidSkeneEM, FinalPlurality, GatedVote, IsotonicRecalibrated,
                                 LogisticStacker, Plurality, VerbalizedVote, VoteArm)
from chorus.aggregate.estimators import B_GRID, KAPPA_GRID, LAMBDA_GRID, S_GRID, TAU_GRID, ConfusionBDA, OneCoinBDA
from chorus.core.config import InputError

#: name -> (description, factory(grids, common kwargs))
_REGISTRY: dict[str, tuple[str, Callable[[Mapping[str, Any], dict], Aggregator]]] = {
    "plurality": ("plurality of round-0 proposals", lambda g, kw: Plurality(**kw)),
    "final_plurality": ("plurality of the last round's endorsements (a debate's final majority)",
                        lambda g, kw: FinalPlurality(**kw)),
    "vote_arm": ("plurality of the trace's independent vote arm (vote_arm tallies)", lambda g, kw: VoteArm(**kw)),
    "verbalized": ("verbalized-confidence vote", lambda g, kw: VerbalizedVote(**kw)),
    "best_member": ("best member (round-0 accuracy on the training part)", lambda g, kw: BestMember(**kw)),
    "stacker": ("logistic stacker on [c_i(g), d_i(g)]",
                lambda g, kw: LogisticStacker(C_grid=g.get("C", (0.01, 0.1, 1.0, 10.0, 100.0)), **kw)),
    "gated": ("gated vote (seats above 1/K)", lambda g, kw: GatedVote(**kw)),
    "ds_em": ("one-coin Dawid-Skene EM on round-0 votes (crowd-kit, unsupervised)",
              lambda g, kw: DawidSkeneEM(**kw)),
    "ds_em_spectral": ("one-coin Dawid-Skene EM on round-0 votes from a spectral start (unsupervised, App. F.10)",
                       lambda g, kw: DawidSkeneEM(init="spectral", **kw)),
    "bda_shared": ("BDA one-coin, shared prior",
                   lambda g, kw: OneCoinBDA("shared", b_grid=g.get("b", B_GRID), s_grid=g.get("s", S_GRID), **kw)),
    "bda_per_agent": ("BDA one-coin, per-agent prior",
                      lambda g, kw: OneCoinBDA("per_agent", b_grid=g.get("b", B_GRID),
                                               kappa_grid=g.get("kappa", KAPPA_GRID),
                                               s_grid=g.get("s", S_GRID), **kw)),
    "bda_rel_proposals": ("BDA one-coin, per-agent prior, r_i from proposals only (Table 7 ablation)",
                          lambda g, kw: OneCoinBDA("per_agent", b_grid=g.get("b", B_GRID),
                                                   kappa_grid=g.get("kappa", KAPPA_GRID), s_grid=g.get("s", S_GRID),
                                                   reliability="proposals", **kw)),
    "bda_rel_round0": ("BDA one-coin, per-agent prior, r_i from round-0 proposals only (Table 7 ablation)",
                       lambda g, kw: OneCoinBDA("per_agent", b_grid=g.get("b", B_GRID),
                                                kappa_grid=g.get("kappa", KAPPA_GRID), s_grid=g.get("s", S_GRID),
                                                reliability="round0", **kw)),
    **{f"bda_key_{k}": (f"BDA one-coin, per-agent prior over the '{k}' reliability key (Table 7 granularity; "
                        f"chorus.aggregate.keys)",
                        lambda g, kw, k=k: OneCoinBDA("per_agent", b_grid=g.get("b", B_GRID),
                                                      kappa_grid=g.get("kappa", KAPPA_GRID), s_grid=g.get("s", S_GRID),
                                                      key=k, **kw))
       for k in ("shared", "agent_round", "agent_force")},
    "bda_tempered": ("BDA one-coin, per-agent prior, CV temperature (BDA paper §E.5 control)",
                     lambda g, kw: OneCoinBDA("per_agent", b_grid=g.get("b", B_GRID),
                                              kappa_grid=g.get("kappa", KAPPA_GRID),
                                              s_grid=g.get("s", S_GRID),
                                              tau_grid=g.get("tau", TAU_GRID), **kw)),
    "bda_confusion": ("BDA tempered confusion model",
                      lambda g, kw: ConfusionBDA(lambda_grid=g.get("lambda", LAMBDA_GRID),
                                                 tau_grid=g.get("tau", TAU_GRID), **kw)),
}

ISO_SUFFIX = "+iso"


def method_names() -> list[str]:
    return list(_REGISTRY)


def describe(name: str) -> str:
    if name.endswith(ISO_SUFFIX):
        return describe(name[: -len(ISO_SUFFIX)]) + " + isotonic recalibration"
    return _REGISTRY[name][0]


def check_method(name: str) -> str:
    base = name[: -len(ISO_SUFFIX)] if name.endswith(ISO_SUFFIX) else name
    if base not in _REGISTRY:
        raise InputError(f"unknown method {name!r} (known: {', '.join(_REGISTRY)}; append "
                         f"'{ISO_SUFFIX}' for isotonic recalibration)")
    return name


def make_method(name: str, grids: Mapping[str, Any] | None = None, *, protocol: str = "strict",
                on_violation: str = "error") -> Aggregator:
    check_method(name)
    kw = {"protocol": protocol, "on_violation": on_violation}
    grids = {k: tuple(v) for k, v in (grids or {}).items() if v is not None}
    if name.endswith(ISO_SUFFIX):
        return IsotonicRecalibrated(make_method(name[: -len(ISO_SUFFIX)], grids, **kw), **kw)
    return _REGISTRY[name][1](grids, kw)
