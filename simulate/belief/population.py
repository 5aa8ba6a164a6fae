"""Who holds which belief before anything is said: the population and topology blocks of the
configs, and their builders (initial credences, kappas, groups, graphs, turn orders).

One set of builders for any number of stances K: the Beta layer is K = 2 (the scalar credence
is the first stance's, ``dirichlet.binary``). Every draw comes from ``chorus.core.seeding.rng`` streams
spawned by (root seed, run seed, stream[, concept]); concept 0 uses the plain stream, so a
one-concept K = 2 run reproduces the Beta layer bit for bit.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any, Literal

import networkx as nx
import numpy as np
from pydantic import Field, field_validator, model_validator

from chorus.core.config import ConfigError, InputError, Strict
from chorus.core.seeding import rng

from . import dirichlet

STREAM_INIT, STREAM_GRAPH, STREAM_ORDER = 11, 12, 13


# -- config blocks -------------------------------------------------------------------------------
class Topology(Strict):
    kind: Literal["complete", "ring", "small_world", "scale_free", "edges"] = "complete"
    k: int = Field(4, ge=2, description="ring / small-world: neighbours per agent (even)")
    p: float = Field(0.1, ge=0.0, le=1.0, description="small-world rewiring probability")
    m: int = Field(2, ge=1, description="scale-free: edges per new node")
    edges: list[tuple[int, int]] | None = Field(None, description="kind=edges: explicit edge list")
    require_connected: bool = True

    @model_validator(mode="after")
    def _edges(self) -> "Topology":
        if self.kind == "edges" and not self.edges:
            raise ValueError("topology.kind = 'edges' needs a non-empty topology.edges list")
        return self


class InitialBeliefs(Strict):
    """How the initial credences b0 are drawn (per seed and concept). ``spread``: evenly spaced on
    [low, high] plus uniform jitter, clipped to [0, 1]; ``uniform``: i.i.d. uniform on [low, high]
    (both on the first stance, K = 2 only); ``dirichlet``: a symmetric Dirichlet of
    ``concentration`` (any K); ``values``: given per agent, a credence on the first stance (K = 2) or a
    K-vector on the simplex; ``auto`` (default): ``spread`` for K = 2, ``dirichlet`` for K > 2 (a
    two-stance topic's config records it as ``spread``)."""
    kind: Literal["auto", "spread", "uniform", "values", "dirichlet"] = "auto"
    low: float = Field(0.1, ge=0.0, le=1.0)
    high: float = Field(0.9, ge=0.0, le=1.0)
    jitter: float = Field(0.02, ge=0.0, le=0.5)
    concentration: float = Field(1.0, gt=0.0, description="dirichlet: symmetric concentration")
    values: list[float] | list[list[float]] | None = Field(None, description="values: per agent, a "
                                                            "K-vector on the simplex (or, K = 2, b on the first stance)")

    @field_validator("values")
    @classmethod
    def _unit(cls, v):
        if v is not None and any(not isinstance(x, list) and not (0.0 <= x <= 1.0) for x in v):
            raise ValueError(f"every initial belief must lie in [0, 1], got {v}")
        return v


def _positive_kappa(v: float | None) -> float | None:
    if v is not None and (math.isnan(v) or not v > 0):
        raise ValueError(f"kappa must be > 0, got {v}")
    return v


def _positive_kappas(v: list[float] | None) -> list[float] | None:
    if v is not None and any(math.isnan(x) or x <= 0 for x in v):
        raise ValueError(f"every kappa must be > 0 (.inf = committed), got {v}")
    return v


def check_topology(t: "Topology", n: int) -> None:
    """The topology's fit to the population size, each error naming the field."""
    if t.kind == "edges":
        bad = [e for e in t.edges if not (0 <= e[0] < n and 0 <= e[1] < n) or e[0] == e[1]]
        if bad:
            raise InputError(f"topology.edges has invalid edges for n_agents={n}: {bad[:5]}")
    if t.kind in ("ring", "small_world") and t.k >= n:
        raise InputError(f"topology.k = {t.k} must be < n_agents = {n}")
    if t.kind == "scale_free" and t.m >= n:
        raise InputError(f"topology.m = {t.m} must be < n_agents = {n}")


class Population(Strict):
    """Who is in the population (of every concept, unless ``concepts.<id>.population`` says otherwise).

    - ``degroot``: everyone pliable (``kappa``, default 0.1), b0 from ``b0``.
    - ``uniform``: everyone shares ``kappa`` (default 4; the kappa-recovery sweep), b0 from ``b0``.
    - ``fj``: stubborn camps (``stubborn_kappa``) hold the most extreme b0 (a ``stubborn_fraction``
      of agents: for K = 2 half at each end, for K > 2 one camp per stance made of the agents with
      the highest credence on it); pliable agents (``pliable_kappa``) are between.
    - ``committed`` (K = 2): a ``committed_fraction`` never moves (kappa -> inf) at ``committed_b``;
      the free agents share ``kappa`` and start at ``free_b0``.
    - ``custom``: per-agent ``kappas`` (``.inf`` = committed, never moves) and ``b0.values``.
    """
    kind: Literal["degroot", "uniform", "fj", "committed", "custom"] = "uniform"
    kappa: float | None = None
    b0: InitialBeliefs = InitialBeliefs()
    stubborn_kappa: float = 16.0
    pliable_kappa: float = 1.0
    stubborn_fraction: float = Field(0.5, ge=0.0, le=1.0)
    committed_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    committed_b: float = Field(1.0, ge=0.0, le=1.0)
    free_b0: float = Field(0.05, ge=0.0, le=1.0)
    kappas: list[Annotated[float, Field(allow_inf_nan=True)]] | None = None   # .inf: committed (NaN refused below)

    @field_validator("kappa", "stubborn_kappa", "pliable_kappa")
    @classmethod
    def _k(cls, v):
        return _positive_kappa(v)

    @field_validator("kappas")
    @classmethod
    def _ks(cls, v):
        return _positive_kappas(v)

    @model_validator(mode="after")
    def _defaults(self):
        if self.kappa is None:
            self.kappa = 0.1 if self.kind == "degroot" else 4.0
        if math.isinf(self.kappa) and self.kind != "custom":
            raise ValueError("population.kappa must be finite (use kind 'committed' or 'custom' for committed agents)")
        if self.kind == "custom" and self.kappas is None:
            raise ValueError("population.kind = 'custom' needs population.kappas")
        return self


def check_population(where: str, p: Population, K: int, n: int, concept: str | None = None) -> None:
    """A population's fit to a concept with K stances and n agents, each error naming the field
    (``where``: its dotted path; ``concept``: the concept's id, None for a two-stance topic)."""
    of = f" for concept {concept!r}" if concept else ""
    kind = p.b0.kind
    if kind in ("spread", "uniform") and K != 2:
        raise ConfigError(f"{where}.b0.kind = {kind!r} draws a scalar credence and needs K = 2; concept "
                          f"{concept!r} has K = {K} (use 'dirichlet' or 'values')")
    if p.kind == "committed" and K != 2:
        raise ConfigError(f"{where}.kind = 'committed' holds a two-stance minority; concept {concept!r} has "
                          f"K = {K} (use 'custom' with .inf kappas)")
    if p.kind == "custom":
        if len(p.kappas) != n:
            raise ConfigError(f"{where}.kappas has {len(p.kappas)} entries for n_agents={n}")
        if kind != "values":
            raise ConfigError(f"{where}.kind = 'custom' needs {where}.b0.kind = 'values'")
    if kind == "values":
        v = p.b0.values
        if v is None or len(v) != n:
            raise ConfigError(f"{where}.b0.values must list {n} initial " + (f"credences{of}" if concept else "beliefs"))
        for a, x in enumerate(v):
            vec = [x, 1.0 - x] if isinstance(x, (int, float)) and K == 2 else x
            if not isinstance(vec, list) or len(vec) != K or any(not (0.0 <= y <= 1.0) for y in vec) \
                    or abs(sum(vec) - 1.0) > 1e-9:
                raise ConfigError(f"{where}.b0.values[{a}] = {x!r}: " + (f"concept {concept!r}" if concept else "a two-stance topic")
                                  + f" needs a point of the simplex with K = {K} entries")
    if p.kind == "committed" and round(p.committed_fraction * n) >= n:
        raise ConfigError(f"{where}.committed_fraction = {p.committed_fraction} leaves no free agent at n_agents={n}")


# -- builders ------------------------------------------------------------------------------------
def concept_stream(root_seed: int, seed: int, ci: int) -> np.random.Generator:
    """Concept 0 shares the single-concept initial-belief stream (bit-for-bit K = 2 reproduction)."""
    return rng(root_seed, seed, STREAM_INIT) if ci == 0 else rng(root_seed, seed, STREAM_INIT, ci)


def initial_credences(p: Any, K: int, n: int, gen: Callable[[], np.random.Generator]) -> np.ndarray:
    """(n, K) initial credences of population ``p`` (its ``b0`` block). ``spread``: evenly spaced
    on [low, high] plus uniform jitter, clipped to [0, 1]; ``uniform``: i.i.d. on [low, high]
    (both on the first stance, K = 2); ``values``: per agent a credence (K = 2) or a K-vector;
    ``dirichlet``: symmetric Dirichlet; ``auto``: spread for K = 2, else dirichlet."""
    ib = p.b0
    kind = ("spread" if K == 2 else "dirichlet") if ib.kind == "auto" else ib.kind
    if kind == "values":
        rows = [[x, 1.0 - x] if not isinstance(x, list) else x for x in ib.values]
        return np.asarray(rows, dtype=float)
    g = gen()
    if kind == "dirichlet":
        return g.dirichlet(np.full(K, ib.concentration), n)
    if kind == "uniform":
        b = g.uniform(ib.low, ib.high, n)
    else:
        base = np.linspace(ib.low, ib.high, n)
        b = np.clip(base + g.uniform(-ib.jitter, ib.jitter, n), 0.0, 1.0)
    return dirichlet.binary(b)


def population(p: Any, b0: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kappa (n,), group (n,), b0 (n, K)) of population ``p`` over initial credences ``b0``;
    kappa = inf marks a committed agent (``committed`` also resets b0: ``committed_b`` for the
    committed, ``free_b0`` for the rest)."""
    n, K = b0.shape
    kappa = np.full(n, float(p.kappa))
    group = np.full(n, "all", dtype=object)
    if p.kind == "fj":
        n_st = round(p.stubborn_fraction * n)
        stubborn = np.zeros(n, dtype=bool)
        if K == 2:  # half the camp at each end of b on the first stance
            order = np.argsort(b0[:, 0], kind="stable")
            stubborn[order[: n_st // 2]] = True
            stubborn[order[n - (n_st - n_st // 2):]] = True  # order[n:] is empty when none
        else:  # one camp per stance: the not-yet-chosen agents with the highest credence on it
            sizes = [n_st // K + (k < n_st % K) for k in range(K)]
            for k in range(K):
                cand = [a for a in np.argsort(-b0[:, k], kind="stable") if not stubborn[a]]
                stubborn[cand[: sizes[k]]] = True
        kappa = np.where(stubborn, p.stubborn_kappa, p.pliable_kappa)
        group = np.where(stubborn, "stubborn", "pliable").astype(object)
    elif p.kind == "committed":  # the Beta layer's committed minority (K = 2)
        n_c = int(round(p.committed_fraction * n))
        b = np.full(n, float(p.free_b0))
        b[:n_c] = p.committed_b
        b0 = dirichlet.binary(b)
        kappa[:n_c] = np.inf
        group = np.where(np.arange(n) < n_c, "committed", "free").astype(object)
    elif p.kind == "custom":
        kappa = np.asarray(p.kappas, dtype=float)
        group = np.where(np.isinf(kappa), "committed", "free").astype(object)
    return kappa, group, b0


def build_graph(cfg: Any, root_seed: int, seed: int) -> nx.Graph:
    """The run's interaction graph (``cfg.topology``, ``cfg.n_agents``), seeded per run."""
    t, n = cfg.topology, cfg.n_agents
    gseed = int(rng(root_seed, seed, STREAM_GRAPH).integers(2**31 - 1))
    if t.kind == "complete":
        g = nx.complete_graph(n)
    elif t.kind == "ring":
        g = nx.watts_strogatz_graph(n, t.k, 0.0, seed=gseed)
    elif t.kind == "small_world":
        g = nx.watts_strogatz_graph(n, t.k, t.p, seed=gseed)
    elif t.kind == "scale_free":
        g = nx.barabasi_albert_graph(n, t.m, seed=gseed)
    else:
        g = nx.Graph()
        g.add_nodes_from(range(n))
        g.add_edges_from(t.edges)
    if t.require_connected and not nx.is_connected(g):
        parts = nx.number_connected_components(g)
        raise ConfigError(f"topology.kind = {t.kind!r} gave a disconnected graph ({parts} "
                          f"components, n_agents={n}, seed={seed}); the regimes need a connected "
                          f"population (set topology.require_connected: false to allow it)")
    return g


def turn_order(cfg: Any, root_seed: int, seed: int) -> np.ndarray:
    """(rounds, n) speaker of each turn: fixed round-robin or a fresh permutation per round."""
    n, rounds = cfg.n_agents, cfg.rounds
    if cfg.turn_order == "fixed":
        return np.tile(np.arange(n), (rounds, 1))
    gen = rng(root_seed, seed, STREAM_ORDER)
    return np.stack([gen.permutation(n) for _ in range(rounds)])
