"""Policy shift (BDA paper §8 / App. F): between two fits the persistent coalition changes its error
policy. Every method is fitted on a calibration window under the old policy and scored on the same
deployment tasks twice: under the old policy (no shift) and under the new one (shift). Pure trace
arithmetic, no model calls.

A **policy** says which wrong answer the coalition's seats back and on which questions:

* ``order``: ``forward`` backs the candidate after gold in the shared candidate list (the ``fixed``
  target of ``synthetic_councils.py`` / ``corrupt.py``), ``reverse`` the candidate before it. At K >= 3 the two
  differ for every gold answer (a permutation of which wrong answer is backed, each seat's accuracy
  unchanged); at K = 2 they coincide.
* ``lies_on``: the gold classes (positions in the candidate list) whose questions the coalition
  corrupts: ``all``, ``even`` (0, 2, ..), ``odd`` (1, 3, ..) or ``none`` (it plays its genuine self).

The shifts (``SHIFTS``: old policy -> new policy):

* ``permute`` (K >= 3): forward/all -> reverse/all. The one-coin's r_i is unchanged in expectation,
  every off-diagonal cell the confusion learned moves.
* ``classes``: forward/even -> forward/odd. The coalition moves which questions it lies on; at
  K = 2 (where ``permute`` does not exist) this is the accuracy-preserving shift: with balanced
  classes each seat's r_i is unchanged in expectation while its rows swap. At odd K the two class
  sets differ in size, so r_i moves too.
* ``honest``: forward/all -> none: the coalition stops (a seat learned as inverted turns genuine).
* ``sleeper``: none -> forward/all: the pure sleeper of App. F.8 (clean calibration, hostile after).

Traces under a policy are the clean traces corrupted by ``corrupt.corrupt_traces`` with a persistent,
``target="fixed"`` adversary: ``reverse`` corrupts each trace with its candidate list reversed (and
restores the list after), so the flips, repairs and per-task random streams are ``corrupt.py``'s own;
a task outside ``lies_on`` keeps its clean trace. Synthetic councils are generated clean by
``synthetic_councils.generate_council`` and go through the same path. The source traces count as the clean
council, must share one candidate list (a policy is about label identity) and carry gold.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import pandas as pd

from chorus.aggregate.corrupt import council_seats, corrupt_traces, split_by_question
from chorus.aggregate.counts import Pool
from chorus.aggregate.metrics import summarize
from chorus.aggregate.selection import fit_predict_split
from chorus.aggregate.synthetic_councils import Adversary
from chorus.aggregate.trace import Trace
from chorus.core.plots import save, subplots
from chorus.core.config import InputError

ORDERS = ("forward", "reverse")
LIES_ON = ("all", "even", "odd", "none")
PARTS = ("no_shift", "shift")
SHIFTED_SUFFIX = "@shifted"  # deployment tasks under the new policy get this task-id suffix (one pool)


@dataclass(frozen=True)
class Policy:
    order: str = "forward"
    lies_on: str = "all"

    def __post_init__(self):
        if self.order not in ORDERS:
            raise InputError(f"policy order must be one of {ORDERS}, got {self.order!r}")
        if self.lies_on not in LIES_ON:
            raise InputError(f"policy lies_on must be one of {LIES_ON}, got {self.lies_on!r}")

    def lies(self, g: int) -> bool:
        return {"all": True, "none": False, "even": g % 2 == 0, "odd": g % 2 == 1}[self.lies_on]


SHIFTS: dict[str, tuple[Policy, Policy]] = {
    "permute": (Policy("forward", "all"), Policy("reverse", "all")),
    "classes": (Policy("forward", "even"), Policy("forward", "odd")),
    "honest": (Policy("forward", "all"), Policy("forward", "none")),
    "sleeper": (Policy("forward", "none"), Policy("forward", "all")),
}


def shift_kinds(K: int) -> list[str]:
    """The shifts that exist at K (``permute`` needs a second wrong answer)."""
    return [k for k in SHIFTS if k != "permute" or K >= 3]


def check_kind(kind: str, K: int) -> str:
    if kind not in SHIFTS:
        raise InputError(f"shift kind {kind!r} is unknown (known: {', '.join(SHIFTS)})")
    if kind not in shift_kinds(K):
        raise InputError(f"shift kind {kind!r} needs K >= 3 (a second wrong answer to back); these traces have K={K}")
    return kind


def _shared(traces: Sequence[Trace]) -> tuple[str, ...]:
    if not traces:
        raise InputError("traces: none given")
    cands = traces[0].candidates
    for tr in traces:
        if tr.candidates != cands:
            raise InputError(f"traces: a policy shift needs one shared candidate list; task {tr.task_id!r} has "
                             f"{list(tr.candidates)!r}, task {traces[0].task_id!r} {list(cands)!r}")
        if tr.gold is None:
            raise InputError(f"traces: task {tr.task_id!r} has no gold answer (a policy is defined by gold)")
    return cands


def coalition(traces: Sequence[Trace], k: int = 2, p_wrong: float = 1.0, seats: Sequence[str] | None = None) -> Adversary:
    """The persistent coalition, its seats pinned on the whole source (default: the last k seats), so a
    split or a stream prefix is corrupted exactly as the whole file."""
    names = tuple(seats) if seats is not None else council_seats(traces)[-k:] if k > 0 else ()
    return Adversary(kind="persistent", k=k, p_wrong=p_wrong, seats=names, target="fixed")


def apply_policy(traces: Sequence[Trace], policy: Policy, adversary: Adversary, *, seed: int = 0,
                 protocol: str = "strict") -> list[Trace]:
    """The clean ``traces`` as the coalition plays ``policy`` (see the module docstring)."""
    traces = list(traces)
    cands = _shared(traces)
    if adversary.kind != "persistent":
        raise InputError(f"adversary kind must be 'persistent' for a policy shift (a policy belongs to seats), "
                         f"got {adversary.kind!r}")
    adv = replace(adversary, target="fixed")
    lie = [policy.lies(cands.index(tr.gold)) for tr in traces]
    if not any(lie):
        return traces
    src = traces if policy.order == "forward" else [replace(tr, candidates=cands[::-1]) for tr in traces]
    bad = corrupt_traces([s for s, l in zip(src, lie) if l], adv, seed=seed, protocol=protocol)
    it = iter(replace(b, candidates=cands) for b in bad)
    return [next(it) if l else tr for tr, l in zip(traces, lie)]


def shifted_stream(traces: Sequence[Trace], kind: str, shift_at: int, adversary: Adversary, *, seed: int = 0,
                   protocol: str = "strict") -> list[Trace]:
    """``traces`` in order, the first ``shift_at`` under the shift's old policy and the rest under its new one."""
    traces = list(traces)
    check_kind(kind, len(_shared(traces)))
    if not 0 < shift_at < len(traces):
        raise InputError(f"shift_at={shift_at} must lie between 1 and the {len(traces)} traces - 1")
    old, new = SHIFTS[kind]
    return (apply_policy(traces[:shift_at], old, adversary, seed=seed, protocol=protocol)
            + apply_policy(traces[shift_at:], new, adversary, seed=seed, protocol=protocol))


def shift_table(traces: Sequence[Trace], methods: Sequence[str], *, kinds: Sequence[str] | None = None,
                adversary: Adversary | None = None, n_calibration: int = 200, seed: int = 0,
                protocol: str = "strict", inner_folds: int = 5, grids: dict | None = None) -> pd.DataFrame:
    """One row per (kind, part, method): metrics on the deployment tasks under the old policy (``no_shift``)
    and the new one (``shift``), every method fitted once per kind on the calibration window (old policy;
    a seeded question split of the clean traces, ``corrupt.split_by_question``)."""
    from chorus.aggregate.methods import make_method  # lazy: pulls in scipy

    traces = list(traces)
    K = len(_shared(traces))
    kinds = shift_kinds(K) if kinds is None else [check_kind(k, K) for k in kinds]
    adv = adversary if adversary is not None else coalition(traces)
    cal_clean, dep_clean = split_by_question(traces, n_calibration, seed=seed)
    rows = []
    for kind in kinds:
        old, new = SHIFTS[kind]
        cal = apply_policy(cal_clean, old, adv, seed=seed, protocol=protocol)
        pre = apply_policy(dep_clean, old, adv, seed=seed, protocol=protocol)
        post = [replace(t, task_id=t.task_id + SHIFTED_SUFFIX)
                for t in apply_policy(dep_clean, new, adv, seed=seed, protocol=protocol)]
        pool = Pool.from_traces(cal + pre + post, protocol=protocol)
        ms = {m: make_method(m, grids, protocol=protocol) for m in methods}
        nc, nd = len(cal), len(pre)
        cv = fit_predict_split(pool, ms, np.arange(nc), np.arange(nc, pool.T), inner_folds=inner_folds, seed=seed)
        for part, idx in zip(PARTS, (np.arange(nc, nc + nd), np.arange(nc + nd, pool.T))):
            for m in methods:
                v = summarize(cv.answer[m][idx], cv.proba[m][idx], pool.gold[idx])
                rows.append({"kind": kind, "part": part, "method": m, "n_calibration": nc, **v})
    return pd.DataFrame(rows)


def before_after(table: pd.DataFrame, reference: str = "bda_per_agent") -> pd.DataFrame:
    """Per (kind, method): accuracy and Brier without and with the shift, the change, and each part's
    accuracy edge over ``reference`` (the one-coin; NaN where it was not run)."""
    w = table.pivot_table(index=["kind", "method"], columns="part", values=["accuracy", "brier"], sort=False)
    out = pd.DataFrame({"acc_no_shift": w[("accuracy", "no_shift")], "acc_shift": w[("accuracy", "shift")],
                        "brier_no_shift": w[("brier", "no_shift")], "brier_shift": w[("brier", "shift")]})
    out["delta_acc"] = out["acc_shift"] - out["acc_no_shift"]
    for part in PARTS:
        ref = table[(table.method == reference) & (table.part == part)].set_index("kind")["accuracy"]
        acc = out[f"acc_{part}"]
        out[f"edge_{part}"] = acc.to_numpy() - ref.reindex(acc.index.get_level_values("kind")).to_numpy()
    return out.reset_index()


def plot(table: pd.DataFrame, path) -> None:
    """Accuracy without and with the shift, per kind and method (grouped bars)."""
    kinds = list(dict.fromkeys(table["kind"]))
    methods = list(dict.fromkeys(table["method"]))
    fig, axes = subplots(1, len(kinds), figsize=(3.2 * len(kinds) + 0.6, 3.6), squeeze=False)
    x = np.arange(len(methods))
    for ax, kind in zip(axes[0], kinds):
        for j, part in enumerate(PARTS):
            t = table[(table.kind == kind) & (table.part == part)].set_index("method").reindex(methods)
            ax.bar(x + (j - 0.5) * 0.38, t["accuracy"], width=0.38, label=part.replace("_", " "))
        ax.set_xticks(x)
        ax.set_xticklabels(methods, rotation=40, ha="right", fontsize=7)
        ax.set_ylim(0, 1)
        ax.set_title(kind, fontsize=9)
    axes[0][0].set_ylabel("deployment accuracy")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    save(fig, path)
