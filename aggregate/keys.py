"""Reliability keys (the BDA paper's Table 7 granularity ablation): which moves share one reliability.

A key maps every accepted endorsement to a *pseudo-seat*; each pseudo-seat is a one-coin seat of its own
(its own r, mu and, per task, its own Beta-marginalised coin), so Eq. 1-3 run unchanged over the
pseudo-seats' tallies:

* ``shared``      one pseudo-seat for the whole council (every seat's moves evidence one coin);
* ``agent``       one per seat (the paper's estimator, and the tallies ``Pool`` already holds);
* ``agent_round`` one per (seat, round): a seat's round-0 proposals and its later moves get separate r;
* ``agent_force`` one per (seat, move force): propose / concede / challenge ... each its own r.

Finer keys give each r fewer moves (the paper: "finer keys overfit their thinner counts"). ``shared``
differs from the ``shared`` *prior* (``OneCoinBDA(prior="shared")``): that keeps one coin per seat with a
common prior; this key pools the seats' moves into one coin.

The keyed pool is a ``Pool`` whose agent axis is the pseudo-seats (named ``A1@r0``, ``A1:concede``, ``*``),
built from the pool's endorsement table and cached per pool, so every fold and every estimator of a
nested CV shares one re-tally.
"""
from __future__ import annotations

import weakref
from dataclasses import replace

import numpy as np

from chorus.aggregate.counts import Pool, natural_key
from chorus.aggregate.errors import TraceError
from chorus.aggregate.trace import FORCES
from chorus.core.config import InputError

KEYS = ("shared", "agent", "agent_round", "agent_force")
SHARED_SEAT = "*"

_CACHE: "weakref.WeakKeyDictionary[Pool, dict[str, Pool]]" = weakref.WeakKeyDictionary()


def check_key(key: str) -> str:
    if key not in KEYS:
        raise InputError(f"reliability key must be one of {', '.join(KEYS)}, got {key!r}")
    return key


def _labels(pool: Pool, key: str) -> tuple[np.ndarray, list[str]]:
    """(pseudo-seat index of every endorsement, pseudo-seat names in natural order)."""
    E = pool.endorsements
    agents = np.asarray(pool.agents, dtype=object)
    if key == "shared":
        return np.zeros(len(E), dtype=np.intp), [SHARED_SEAT]
    if key == "agent_round":
        names = [f"{a}@r{r}" for a, r in zip(agents[E[:, 1]], E[:, 4])]
    else:
        names = [f"{a}:{FORCES[f]}" for a, f in zip(agents[E[:, 1]], E[:, 5])]
    seats = sorted(set(names), key=natural_key)
    where = {s: j for j, s in enumerate(seats)}
    return np.fromiter((where[n] for n in names), dtype=np.intp, count=len(names)), seats


def keyed_pool(pool: Pool, key: str = "agent") -> Pool:
    """``pool`` re-tallied over the pseudo-seats of ``key`` (``pool`` itself for ``agent``). The keyed
    pool carries e, c, d, N and the proposal tallies; the round-0 vote fields are emptied (they are per
    seat; only the one-coin posterior with ``reliability="all"`` or ``"proposals"`` reads a keyed pool)."""
    check_key(key)
    if key == "agent":
        return pool
    if pool.endorsements is None:
        raise TraceError(f"reliability key {key!r} needs the pool's endorsement table (build it with Pool.from_traces)")
    cached = _CACHE.setdefault(pool, {})
    if key in cached:
        return cached[key]
    E = pool.endorsements
    j, seats = _labels(pool, key)
    T, J, K = pool.T, len(seats), pool.K
    pos = np.zeros((T, J, K), dtype=np.int32)
    neg = np.zeros((T, J, K), dtype=np.int32)
    prop = np.zeros((T, J, K), dtype=np.int32)
    up = E[:, 3] > 0
    np.add.at(pos, (E[up, 0], j[up], E[up, 2]), 1)
    np.add.at(neg, (E[~up, 0], j[~up], E[~up, 2]), 1)
    is_prop = up & np.isin(E[:, 5], [FORCES.index("propose"), FORCES.index("vote")])
    np.add.at(prop, (E[is_prop, 0], j[is_prop], E[is_prop, 2]), 1)
    out = replace(pool, agents=tuple(seats), pos=pos, neg=neg, prop_pos=prop,
                  r0_answer=np.full((T, J), -1, dtype=np.int64), r0_conf=np.full((T, J), np.nan))
    cached[key] = out
    return out
