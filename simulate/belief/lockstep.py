"""The lockstep population engine, for any number of concepts and stances.

N agents on a networkx graph take sequential round-robin turns: in each round every agent
speaks once, one utterance at a time; each utterance is appraised once and the same evidence is
consumed by every neighbour of the speaker (committed agents never move; a failed appraisal
moves nobody, per concept). Many independent runs (seeds x conditions) advance in lockstep, so
each role call is one batch across runs; the belief updates are one vectorised Dirichlet step
per turn (``dirichlet.step``) on state of shape (R runs, N agents, C concepts, K_max stances):
padded stances hold zero counts and zero evidence, so updates and credences are exact.

A two-stance topic (the Beta layer, one topic per run) is the case C = 1, K = 2: its groups keep
Beta-shaped arrays ((R, N) kappa and b0), its roles see scalar credences and evidence, and its
result is a Beta view (``GroupResult``: alpha, beta) of the same state, bit for bit what a
separate Beta engine computed. A multi-concept topic gives one group of its concepts with optional couplings (``dirichlet.mix_evidence``).

Every random choice of a run (initial beliefs, graph, turn order) comes from generators
spawned by (root seed, run seed, stream[, concept]), and every model request's seed from
(root seed, run seed, round, turn or agent, role, attempt): a run's results are identical
alone or batched.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
import networkx as nx
import numpy as np

from . import bayes, dirichlet
from .config import BeliefConfig, check_against_topic
from .population import build_graph, concept_stream, initial_credences, turn_order
from .population import population as build_concept_population
from .channel import (Appraiser, Generator, OracleAppraiser, OracleGenerator, OracleProbe, Probe, ProbeRound, RunKey,
                      Turn)
from .topics import MultiTopic, load_multi_topic, load_topic

__all__ = ["RunSpec", "Group", "GroupResult", "Result", "plan", "prepare", "run_group", "simulate"]


@dataclass
class RunSpec:
    """One run: a config and a replicate seed; ``run`` is its id in the tables, ``condition`` the
    index of its condition in a sweep."""
    run: int
    seed: int
    config: BeliefConfig
    condition: int = 0


def plan(cfg: BeliefConfig) -> list[RunSpec]:
    """One run per replicate seed of a multi-concept config, checked against its topic (a Beta
    config's conditions and runs come from ``experiment.plan``)."""
    check_against_topic(cfg, load_multi_topic(cfg.topic))
    return [RunSpec(run=i, seed=s, config=cfg) for i, s in enumerate(cfg.seed_list)]


# -- one lockstep group ----------------------------------------------------------------------
@dataclass
class Coupled:
    """An active coupling, in concept indices."""
    src: int
    dst: int
    M: np.ndarray
    weight: float


@dataclass
class Group:
    """Runs advancing in lockstep. Beta layer (``topic`` None): kappa / b0 / committed / groups
    (R, N), gamma / w (R, 1), one topic per run in ``keys``. Concepts: kappa / committed / groups
    (R, N, C), b0 (R, N, C, K_max) zero-padded, gamma / w (C,), the topic in ``topic``."""
    specs: list[RunSpec]
    root_seed: int
    kappa: np.ndarray
    b0: np.ndarray
    committed: np.ndarray
    groups: np.ndarray
    adj: np.ndarray          # (R, N, N) bool
    gamma: np.ndarray
    w: np.ndarray
    order: np.ndarray        # (R, rounds, N) speaker of each turn
    keys: list[RunKey]
    topic: MultiTopic | None = None
    couplings: list[Coupled] = field(default_factory=list)
    graphs: list[nx.Graph] = field(repr=False, default_factory=list)

    @property
    def beta(self) -> bool:
        return self.topic is None

    @property
    def R(self) -> int:
        return len(self.specs)

    @property
    def N(self) -> int:
        return self.kappa.shape[1]

    @property
    def C(self) -> int:
        return 1 if self.beta else self.kappa.shape[2]

    @property
    def Ks(self) -> np.ndarray:
        return np.array([2] if self.beta else self.topic.Ks)

    @property
    def rounds(self) -> int:
        return self.order.shape[1]

    def lifted(self):
        """(kappa (R,N,C), b0 (R,N,C,K), committed (R,N,C), gamma, w broadcasting over (R,N,C,K))."""
        if self.beta:
            return (self.kappa[..., None], dirichlet.binary(self.b0)[:, :, None, :], self.committed[..., None],
                    self.gamma[:, :, None, None], self.w[:, :, None, None])
        return self.kappa, self.b0, self.committed, self.gamma[:, None], self.w[:, None]


def _concepts(cfg: BeliefConfig, topic: MultiTopic | None):
    """[(K, gamma, w, population)] per concept: the Beta layer is one K = 2 concept."""
    if topic is None:
        return [(2, cfg.gamma, cfg.w, cfg.population)]
    return [(c.K, *cfg.concept(c.id)) for c in topic.concepts]


def _stack(specs: Sequence[RunSpec], root_seed: int, topic: MultiTopic | None, taus: dict[str, float]) -> Group:
    cfg0 = specs[0].config
    n = cfg0.n_agents
    concepts = _concepts(cfg0, topic)
    C, Kmax = len(concepts), max(c[0] for c in concepts)
    R = len(specs)
    kappa, groups = np.empty((R, n, C)), np.empty((R, n, C), dtype=object)
    b0 = np.zeros((R, n, C, Kmax))
    A, graphs, orders, keys, gam, ww = [], [], [], [], [], []
    for i, sp in enumerate(specs):
        cfg = sp.config
        cs = _concepts(cfg, topic)
        bayes.check_gamma(np.array([c[1] for c in cs]))
        for ci, (K, _, _, p) in enumerate(cs):
            b = initial_credences(p, K, n, lambda ci=ci, s=sp.seed: concept_stream(root_seed, s, ci))
            kappa[i, :, ci], groups[i, :, ci], b0[i, :, ci, :K] = build_concept_population(p, b)
        gam.append([c[1] for c in cs]), ww.append([c[2] for c in cs])
        g = build_graph(cfg, root_seed, sp.seed)
        graphs.append(g)
        A.append(nx.to_numpy_array(g, nodelist=range(n), dtype=float) > 0)
        orders.append(turn_order(cfg, root_seed, sp.seed))
        t = topic if topic is not None else load_topic(cfg.topic)
        keys.append(RunKey(seed=sp.seed, topic=t, tau=taus.get(t.id, 1.0),
                           correction=getattr(cfg, "channel_correction", "none")))
    if topic is None:  # the Beta layer's shapes
        return Group(specs=list(specs), root_seed=root_seed, kappa=kappa[..., 0], b0=b0[..., 0, 0],
                     committed=np.isinf(kappa[..., 0]), groups=groups[..., 0], adj=np.array(A),
                     gamma=np.array(gam, dtype=float), w=np.array(ww, dtype=float), order=np.array(orders),
                     keys=keys, graphs=graphs)
    cps = [Coupled(topic.index(cp.from_), topic.index(cp.to), topic.coupling_matrix(cp), cp.weight)
           for cp in topic.couplings] if cfg0.couplings else []
    return Group(specs=list(specs), root_seed=root_seed, kappa=kappa, b0=b0, committed=np.isinf(kappa),
                 groups=groups, adj=np.array(A), gamma=np.array(gam[0], dtype=float),
                 w=np.array(ww[0], dtype=float), order=np.array(orders), keys=keys, topic=topic,
                 couplings=cps, graphs=graphs)


def prepare(specs: Sequence[RunSpec], root_seed: int, taus: dict[str, float] | None = None) -> list[Group]:
    """Build every population and graph (all validation happens here, before any model call)
    and stack runs into lockstep groups: Beta runs by (n_agents, rounds), multi-concept runs by
    config (one topic and one set of per-concept parameters per group). ``taus``: the appraiser
    temperature per topic id (default 1)."""
    by_key: dict[tuple, list[RunSpec]] = {}
    for sp in specs:
        cfg = sp.config
        key = ("concepts", id(cfg)) if cfg.multi else (cfg.n_agents, cfg.rounds)
        by_key.setdefault(key, []).append(sp)
    out = []
    for key, ss in by_key.items():
        topic = None
        if key[0] == "concepts":
            topic = load_multi_topic(ss[0].config.topic)
            check_against_topic(ss[0].config, topic)
        out.append(_stack(ss, root_seed, topic, taus or {}))
    return out


# -- the run -----------------------------------------------------------------------------------
@dataclass
class Result:
    """Every turn of a group, in the engine's shapes."""
    group: Group
    alpha: np.ndarray        # (T+1, R, N, C, K_max) state before each turn, and the final state
    speaker: np.ndarray      # (T, R)
    s: np.ndarray            # (T, R, C, K_max) speaker credences
    p_raw: np.ndarray        # (T, R, C, K_max) the appraiser's reading
    e_appraised: np.ndarray  # (T, R, C, K_max), NaN rows = failed appraisal on that concept
    e: np.ndarray            # (T, R, C, K_max) consumed (after couplings)
    attempts: np.ndarray     # (T, R)
    listen: np.ndarray       # (T, R, N, C) who updated on which concept
    probe: np.ndarray | None = None      # (rounds, R, N) self-reports after each round (NaN: none)
    probe_failures: int = 0
    e_raw: np.ndarray | None = None      # (T, R, C, K_max) evidence before a channel correction
    texts: list | None = None            # T lists of R texts (LLM mode)
    errors: list | None = None           # T lists of R appraisal errors (per concept: lists of C)
    gen_tokens: np.ndarray | None = None  # (T, R) completion tokens of the generator

    @property
    def b(self) -> np.ndarray:
        return dirichlet.credence(self.alpha)


@dataclass
class GroupResult:
    """The Beta view of a Beta group's result (C = 1, K = 2): alpha / beta are the two stances."""
    group: Group
    alpha: np.ndarray        # (T+1, R, N)
    beta: np.ndarray
    speaker: np.ndarray      # (T, R)
    s: np.ndarray            # (T, R)
    p_raw: np.ndarray        # (T, R)
    e: np.ndarray            # (T, R), NaN = failed appraisal
    attempts: np.ndarray     # (T, R)
    listen: np.ndarray       # (T, R, N)
    probe: np.ndarray        # (rounds, R, N)
    probe_failures: int = 0
    e_raw: np.ndarray | None = None
    texts: list | None = None
    errors: list | None = None
    gen_tokens: np.ndarray | None = None

    @property
    def b(self) -> np.ndarray:
        return self.alpha / (self.alpha + self.beta)


def beta_view(res: Result) -> GroupResult:
    first = (..., 0, 0)
    return GroupResult(group=res.group, alpha=res.alpha[first], beta=res.alpha[..., 0, 1], speaker=res.speaker,
                       s=res.s[first], p_raw=res.p_raw[first], e=res.e[first], attempts=res.attempts,
                       listen=res.listen[..., 0], probe=res.probe, probe_failures=res.probe_failures,
                       e_raw=None if res.e_raw is None else res.e_raw[first], texts=res.texts,
                       errors=res.errors, gen_tokens=res.gen_tokens)


def apply_couplings(e: np.ndarray, couplings: Sequence[Coupled], Ks) -> np.ndarray:
    """Consumed evidence (R, C, Kmax) from the appraised evidence: each coupled concept gets
    the convex mixture of ``dirichlet.mix_evidence`` (targets from appraised evidence only)."""
    if not couplings:
        return e
    out = e.copy()
    for dst in sorted({cp.dst for cp in couplings}):
        kd = Ks[dst]
        inc = [cp for cp in couplings if cp.dst == dst]
        targets = [dirichlet.coupling_target(e[:, cp.src, : Ks[cp.src]], cp.M, cp.weight) for cp in inc]
        out[:, dst, :kd] = dirichlet.mix_evidence(e[:, dst, :kd], targets, [cp.weight for cp in inc])
    return out


def run_group(grp: Group, generator: Generator | None = None, appraiser: Appraiser | None = None,
              probe: Probe | None = None, on_turn: Callable[[int], None] | None = None) -> GroupResult | Result:
    """Advance every run of ``grp`` in lockstep (oracle roles by default): a ``GroupResult`` for
    a Beta group, a ``Result`` for a multi-concept one."""
    generator = generator or OracleGenerator()
    appraiser = appraiser or OracleAppraiser()
    R, N, C, rounds = grp.R, grp.N, grp.C, grp.rounds
    Ks = grp.Ks
    Kmax = int(Ks.max())
    T = rounds * N
    kappa, b0, committed, gamma, w = grp.lifted()
    kfin = np.where(committed, 1.0, kappa)  # placeholder counts for committed agents
    alpha0 = dirichlet.prior_counts(kfin, b0)
    alpha = alpha0.copy()
    A = np.empty((T + 1, R, N, C, Kmax))
    SPK = np.empty((T, R), dtype=np.int32)
    S, P, EA, E = (np.empty((T, R, C, Kmax)) for _ in range(4))
    ATT = np.zeros((T, R), dtype=np.int32)
    L = np.zeros((T, R, N, C), dtype=bool)
    PR = np.full((rounds, R, N), np.nan) if grp.beta else None
    ER, has_raw = np.full((T, R, C, Kmax), np.nan), False
    llm = not isinstance(generator, OracleGenerator)
    texts: list | None = [] if llm else None
    errors: list | None = [] if llm else None
    gtok = np.zeros((T, R), dtype=np.int32) if llm else None
    probe_fail = 0
    ar = np.arange(R)
    movable = ~committed
    # the Beta layer's roles see scalars (the first stance) and answer scalars: lift them to (x, 1 - x),
    # the values of dirichlet.binary, written into a fresh (R, 1, 2) array (cheaper than stacking)
    def lift(x):
        if not grp.beta:
            return x
        out = np.empty((R, 1, 2))
        out[:, 0, 0] = x
        out[:, 0, 1] = 1.0 - np.asarray(x, dtype=float)
        return out
    for t in range(T):
        r, j = divmod(t, N)
        A[t] = alpha
        spk = grp.order[:, r, j]
        sa = alpha[ar, spk]                                   # (R, C, Kmax)
        s = sa / sa.sum(-1, keepdims=True)
        turn = Turn(grp.root_seed, r, j, grp.keys, spk, s[:, 0, 0] if grp.beta else s)
        utt = generator.generate(turn)
        app = appraiser.appraise(turn, utt)
        ea = lift(app.e)
        e = apply_couplings(ea, grp.couplings, Ks)
        ok = np.isfinite(e).all(-1)                           # (R, C)
        lis = grp.adj[ar, spk][:, :, None] & movable & ok[:, None, :]
        new = dirichlet.step(alpha, alpha0, e[:, None], gamma, w)
        alpha = np.where(lis[..., None], new, alpha)
        SPK[t], S[t], P[t], EA[t], E[t], ATT[t], L[t] = spk, s, lift(app.p_raw), ea, e, app.attempts, lis
        if app.e_raw is not None:
            ER[t], has_raw = lift(app.e_raw), True
        if llm:
            texts.append(utt.texts)
            errors.append(app.errors)
            if utt.completion_tokens is not None:
                gtok[t] = utt.completion_tokens
        if probe is not None and j == N - 1:
            pr, nf = probe.probe(ProbeRound(grp.root_seed, r, grp.keys, dirichlet.credence(alpha)[..., 0, 0]))
            PR[r], probe_fail = pr, probe_fail + nf
        if on_turn is not None:
            on_turn(1)
    A[T] = alpha
    res = Result(group=grp, alpha=A, speaker=SPK, s=S, p_raw=P, e_appraised=EA, e=E, attempts=ATT, listen=L,
                 probe=PR, probe_failures=probe_fail, e_raw=ER if has_raw else None, texts=texts, errors=errors,
                 gen_tokens=gtok)
    return beta_view(res) if grp.beta else res


def simulate(specs: Sequence[RunSpec], root_seed: int, generator=None, appraiser=None,
             probe=None, taus: dict[str, float] | None = None, on_turn=None) -> list[GroupResult | Result]:
    """Prepare and run every group (oracle roles by default; probe = b for Beta groups in oracle mode)."""
    if probe is None and generator is None:
        probe = OracleProbe()
    return [run_group(g, generator, appraiser, probe if g.beta else None, on_turn)
            for g in prepare(specs, root_seed, taus)]
