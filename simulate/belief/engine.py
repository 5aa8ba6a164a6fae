"""The lockstep population engine.

N agents on a networkx graph take sequential round-robin turns: in each round every agent
speaks once, one utterance at a time; each utterance is appraised once and the same e is
consumed by every neighbour of the speaker (committed agents never move; a failed appraisal
moves nobody). Many independent runs (seeds x conditions) advance in lockstep, so each role
call is one batch across runs; the belief updates are one vectorised numpy step per turn.

Every random choice of a run (initial beliefs, graph, turn order) comes from generators
spawned by (root seed, run seed, stream), and every model request's seed from
(root seed, run seed, round, turn or agent, role, attempt): a run's results are identical
alone or batched.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import networkx as nx
import numpy as np

from core.config import ConfigError
from core.seeding import rng

from . import core
from .config import BeliefConfig
from .roles import Appraiser, Generator, OracleAppraiser, OracleGenerator, OracleProbe, Probe, ProbeRound, RunKey, Turn
from .topics import Topic, load_topic

STREAM_INIT, STREAM_GRAPH, STREAM_ORDER = 11, 12, 13


@dataclass
class RunSpec:
    """One run: a condition's config and a replicate seed. ``run`` is its id in the tables."""
    run: int
    condition: int
    seed: int
    config: BeliefConfig


# -- populations and graphs ------------------------------------------------------------------
def initial_beliefs(cfg: BeliefConfig, root_seed: int, seed: int) -> np.ndarray:
    ib, n = cfg.population.b0, cfg.n_agents
    if ib.kind == "values":
        return np.asarray(ib.values, dtype=float)
    g = rng(root_seed, seed, STREAM_INIT)
    if ib.kind == "uniform":
        return g.uniform(ib.low, ib.high, n)
    base = np.linspace(ib.low, ib.high, n)
    return np.clip(base + g.uniform(-ib.jitter, ib.jitter, n), 0.0, 1.0)


def build_population(cfg: BeliefConfig, root_seed: int, seed: int):
    """Per-agent (kappa, b0, committed, group) for one run; kappa = inf for committed agents."""
    p, n = cfg.population, cfg.n_agents
    b0 = initial_beliefs(cfg, root_seed, seed)
    kappa = np.full(n, float(p.kappa))
    group = np.full(n, "all", dtype=object)
    if p.kind == "fj":
        n_st = int(round(p.stubborn_fraction * n))
        order = np.argsort(b0, kind="stable")
        stubborn = np.zeros(n, dtype=bool)
        stubborn[order[: n_st // 2]] = True
        stubborn[order[n - (n_st - n_st // 2):]] = True  # order[n:] is empty when none
        kappa = np.where(stubborn, p.stubborn_kappa, p.pliable_kappa)
        group = np.where(stubborn, "stubborn", "pliable").astype(object)
    elif p.kind == "committed":
        n_c = int(round(p.committed_fraction * n))
        b0 = np.full(n, float(p.free_b0))
        b0[:n_c] = p.committed_b
        kappa[:n_c] = np.inf
        group = np.where(np.arange(n) < n_c, "committed", "free").astype(object)
    elif p.kind == "custom":
        kappa = np.asarray(p.kappas, dtype=float)
        group = np.where(np.isinf(kappa), "committed", "free").astype(object)
    committed = np.isinf(kappa)
    return kappa, b0, committed, group


def build_graph(cfg: BeliefConfig, root_seed: int, seed: int) -> nx.Graph:
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


# -- one lockstep group ----------------------------------------------------------------------
@dataclass
class Group:
    """Runs sharing (n_agents, rounds), stacked into (R, N) arrays."""
    specs: list[RunSpec]
    root_seed: int
    kappa: np.ndarray
    b0: np.ndarray
    committed: np.ndarray
    groups: np.ndarray
    adj: np.ndarray          # (R, N, N) bool
    gamma: np.ndarray        # (R, 1)
    w: np.ndarray            # (R, 1)
    order: np.ndarray        # (R, rounds, N) speaker of each turn
    keys: list[RunKey]
    graphs: list[nx.Graph] = field(repr=False, default_factory=list)

    @property
    def R(self) -> int:
        return len(self.specs)

    @property
    def N(self) -> int:
        return self.kappa.shape[1]

    @property
    def rounds(self) -> int:
        return self.order.shape[1]


def prepare(specs: Sequence[RunSpec], root_seed: int, taus: dict[str, float] | None = None) -> list[Group]:
    """Build every population and graph (all validation happens here, before any model call)
    and stack runs into lockstep groups by (n_agents, rounds)."""
    by_shape: dict[tuple[int, int], list[RunSpec]] = {}
    for sp in specs:
        by_shape.setdefault((sp.config.n_agents, sp.config.rounds), []).append(sp)
    groups = []
    for (n, rounds), ss in by_shape.items():
        K, B0, C, G, A, graphs, orders, keys = [], [], [], [], [], [], [], []
        for sp in ss:
            cfg = sp.config
            core.check_gamma(cfg.gamma)
            kappa, b0, committed, grp = build_population(cfg, root_seed, sp.seed)
            g = build_graph(cfg, root_seed, sp.seed)
            K.append(kappa), B0.append(b0), C.append(committed), G.append(grp), graphs.append(g)
            A.append(nx.to_numpy_array(g, nodelist=range(n), dtype=float) > 0)
            if cfg.turn_order == "fixed":
                orders.append(np.tile(np.arange(n), (rounds, 1)))
            else:
                gen = rng(root_seed, sp.seed, STREAM_ORDER)
                orders.append(np.stack([gen.permutation(n) for _ in range(rounds)]))
            topic: Topic = load_topic(cfg.topic)
            keys.append(RunKey(seed=sp.seed, topic=topic,
                               tau=(taus or {}).get(topic.id, 1.0), correction=cfg.channel_correction))
        groups.append(Group(
            specs=list(ss), root_seed=root_seed, kappa=np.array(K), b0=np.array(B0),
            committed=np.array(C), groups=np.array(G), adj=np.array(A),
            gamma=np.array([[sp.config.gamma] for sp in ss]), w=np.array([[sp.config.w] for sp in ss]),
            order=np.array(orders), keys=keys, graphs=graphs))
    return groups


@dataclass
class GroupResult:
    group: Group
    alpha: np.ndarray        # (T+1, R, N) state before each turn, and the final state
    beta: np.ndarray
    speaker: np.ndarray      # (T, R)
    s: np.ndarray            # (T, R)
    p_raw: np.ndarray        # (T, R)
    e: np.ndarray            # (T, R), NaN = failed appraisal
    attempts: np.ndarray     # (T, R)
    listen: np.ndarray       # (T, R, N) who updated on each turn
    probe: np.ndarray        # (rounds, R, N) self-reports on [0, 1] after each round (NaN: none)
    probe_failures: int = 0
    e_raw: np.ndarray | None = None      # (T, R) evidence before a channel correction (None: none applied)
    texts: list | None = None            # T lists of R texts (LLM mode)
    errors: list | None = None           # T lists of R appraisal errors
    gen_tokens: np.ndarray | None = None  # (T, R) completion tokens of the generator

    @property
    def b(self) -> np.ndarray:
        return self.alpha / (self.alpha + self.beta)


def run_group(grp: Group, generator: Generator | None = None, appraiser: Appraiser | None = None,
              probe: Probe | None = None,
              on_turn: Callable[[int], None] | None = None) -> GroupResult:
    """Advance every run of ``grp`` in lockstep. Default roles are the oracle ones."""
    generator = generator or OracleGenerator()
    appraiser = appraiser or OracleAppraiser()
    R, N, rounds = grp.R, grp.N, grp.rounds
    T = rounds * N
    frozen = grp.committed
    kfin = np.where(frozen, 1.0, grp.kappa)  # placeholder counts for committed agents
    alpha0, beta0 = core.prior_counts(kfin, grp.b0)
    alpha, beta = alpha0.copy(), beta0.copy()
    A = np.empty((T + 1, R, N))
    B = np.empty((T + 1, R, N))
    SPK = np.empty((T, R), dtype=np.int32)
    S = np.empty((T, R))
    P = np.empty((T, R))
    E = np.empty((T, R))
    ATT = np.zeros((T, R), dtype=np.int32)
    L = np.zeros((T, R, N), dtype=bool)
    PR = np.full((rounds, R, N), np.nan)
    ER, has_raw = np.full((T, R), np.nan), False
    llm = not isinstance(generator, OracleGenerator)
    texts: list | None = [] if llm else None
    errors: list | None = [] if llm else None
    gtok = np.zeros((T, R), dtype=np.int32) if llm else None
    probe_fail = 0
    ar = np.arange(R)
    movable = ~frozen
    gamma, w = grp.gamma, grp.w
    for t in range(T):
        r, j = divmod(t, N)
        A[t], B[t] = alpha, beta
        spk = grp.order[:, r, j]
        sa, sb = alpha[ar, spk], beta[ar, spk]
        s = sa / (sa + sb)
        turn = Turn(grp.root_seed, r, j, grp.keys, spk, s)
        utt = generator.generate(turn)
        app = appraiser.appraise(turn, utt)
        e = app.e
        lis = grp.adj[ar, spk] & movable
        ok = np.isfinite(e)
        if not ok.all():
            lis &= ok[:, None]
        a_new, b_new = core.step(alpha, beta, alpha0, beta0, e[:, None], gamma, w)
        alpha = np.where(lis, a_new, alpha)
        beta = np.where(lis, b_new, beta)
        SPK[t], S[t], P[t], E[t], ATT[t], L[t] = spk, s, app.p_raw, e, app.attempts, lis
        if app.e_raw is not None:
            ER[t], has_raw = app.e_raw, True
        if llm:
            texts.append(utt.texts)
            errors.append(app.errors)
            if utt.completion_tokens is not None:
                gtok[t] = utt.completion_tokens
        if probe is not None and j == N - 1:
            pr, nf = probe.probe(ProbeRound(grp.root_seed, r, grp.keys, alpha / (alpha + beta)))
            PR[r], probe_fail = pr, probe_fail + nf
        if on_turn is not None:
            on_turn(1)
    A[T], B[T] = alpha, beta
    return GroupResult(group=grp, alpha=A, beta=B, speaker=SPK, s=S, p_raw=P, e=E, attempts=ATT,
                       listen=L, probe=PR, probe_failures=probe_fail, e_raw=ER if has_raw else None,
                       texts=texts, errors=errors,
                       gen_tokens=gtok)


def simulate(specs: Sequence[RunSpec], root_seed: int, generator=None, appraiser=None,
             probe=None, taus: dict[str, float] | None = None, on_turn=None) -> list[GroupResult]:
    """Prepare and run every group (oracle roles by default; probe = b in oracle mode)."""
    if probe is None and generator is None:
        probe = OracleProbe()
    return [run_group(g, generator, appraiser, probe, on_turn) for g in prepare(specs, root_seed, taus)]
