"""The multi-concept lockstep engine: every agent holds a Dirichlet belief per concept.

N agents on a graph take sequential round-robin turns (the single-concept engine's graph, turn
order and seeding conventions: ``engine.build_graph``, streams ``STREAM_INIT / GRAPH / ORDER``,
per-request seeds). A speaker renders its credences on every concept in one utterance; the
utterance is appraised once (one appraiser call returns evidence for every concept) and each
concept's belief of each listener takes its own Dirichlet update with that concept's kappa,
gamma and w. A failed appraisal on a concept (NaN) moves nobody on that concept only. Optional
couplings mix evidence between concepts before the update (``dirichlet.mix_evidence``).

State arrays are padded to the largest K, shape (R runs, N agents, C concepts, K_max): padded
stances hold zero counts and zero evidence, so the update and credences are exact on every
concept. Concept 0's initial credences use the single-concept stream, so a topic with one K = 2
concept reproduces ``engine.run_group`` bit for bit (tested); concept ci > 0 uses the stream
``(STREAM_INIT, ci)``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np
import pandas as pd

from core.config import ConfigError
from core.seeding import rng

from . import core, dirichlet
from .engine import STREAM_INIT, STREAM_ORDER, build_graph
from .multi_config import ConceptPopulation, MultiBeliefConfig, check_against_topic
from .multi_topics import MultiTopic, load_multi_topic
from .roles import RunKey, Turn, Utterances


@dataclass
class MultiRunSpec:
    run: int
    seed: int
    config: MultiBeliefConfig


# -- populations ------------------------------------------------------------------------------
def concept_stream(root_seed: int, seed: int, ci: int) -> np.random.Generator:
    """Concept 0 shares the single-concept initial-belief stream (bit-for-bit K = 2 reproduction)."""
    return rng(root_seed, seed, STREAM_INIT) if ci == 0 else rng(root_seed, seed, STREAM_INIT, ci)


def initial_credences(p: ConceptPopulation, K: int, n: int, gen: Callable[[], np.random.Generator]) -> np.ndarray:
    """(n, K) initial credences. spread / uniform / scalar values: the single-concept draws of
    ``engine.initial_beliefs`` on the first stance (K = 2); dirichlet: symmetric Dirichlet."""
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


def concept_population(p: ConceptPopulation, b0: np.ndarray):
    """(kappa (n,), group (n,)) for one concept; kappa = inf marks a committed agent."""
    n, K = b0.shape
    kappa = np.full(n, float(p.kappa))
    group = np.full(n, "all", dtype=object)
    if p.kind == "fj":
        n_st = round(p.stubborn_fraction * n)
        stubborn = np.zeros(n, dtype=bool)
        if K == 2:  # the single-concept rule: half the camp at each end of b on the first stance
            order = np.argsort(b0[:, 0], kind="stable")
            stubborn[order[: n_st // 2]] = True
            stubborn[order[n - (n_st - n_st // 2):]] = True
        else:  # one camp per stance: the not-yet-chosen agents with the highest credence on it
            sizes = [n_st // K + (k < n_st % K) for k in range(K)]
            for k in range(K):
                cand = [a for a in np.argsort(-b0[:, k], kind="stable") if not stubborn[a]]
                stubborn[cand[: sizes[k]]] = True
        kappa = np.where(stubborn, p.stubborn_kappa, p.pliable_kappa)
        group = np.where(stubborn, "stubborn", "pliable").astype(object)
    elif p.kind == "custom":
        kappa = np.asarray(p.kappas, dtype=float)
        group = np.where(np.isinf(kappa), "committed", "free").astype(object)
    return kappa, group


# -- one lockstep group -------------------------------------------------------------------------
@dataclass
class Coupled:
    """An active coupling, in concept indices."""
    src: int
    dst: int
    M: np.ndarray
    weight: float


@dataclass
class MultiGroup:
    specs: list[MultiRunSpec]
    root_seed: int
    topic: MultiTopic
    kappa: np.ndarray        # (R, N, C), inf = committed
    b0: np.ndarray           # (R, N, C, Kmax), zero-padded
    committed: np.ndarray    # (R, N, C)
    groups: np.ndarray       # (R, N, C) labels
    adj: np.ndarray          # (R, N, N) bool
    gamma: np.ndarray        # (C,)
    w: np.ndarray            # (C,)
    order: np.ndarray        # (R, rounds, N)
    keys: list[RunKey]
    couplings: list[Coupled] = field(default_factory=list)
    graphs: list[nx.Graph] = field(repr=False, default_factory=list)

    @property
    def R(self) -> int:
        return len(self.specs)

    @property
    def N(self) -> int:
        return self.kappa.shape[1]

    @property
    def C(self) -> int:
        return self.kappa.shape[2]

    @property
    def Ks(self) -> np.ndarray:
        return np.array(self.topic.Ks)

    @property
    def rounds(self) -> int:
        return self.order.shape[1]


def plan(cfg: MultiBeliefConfig) -> list[MultiRunSpec]:
    """One run per replicate seed, validated against the topic before anything runs."""
    check_against_topic(cfg, load_multi_topic(cfg.topic))
    return [MultiRunSpec(run=i, seed=s, config=cfg) for i, s in enumerate(cfg.seed_list)]


def prepare(specs: Sequence[MultiRunSpec], root_seed: int, tau: float = 1.0) -> MultiGroup:
    """Populations, graphs and turn orders of every run, stacked for lockstep (one config)."""
    cfg = specs[0].config
    if any(sp.config is not cfg and sp.config != cfg for sp in specs):
        raise ConfigError("the runs of one multi-concept group must share a config")
    topic = load_multi_topic(cfg.topic)
    check_against_topic(cfg, topic)
    n, rounds, C, Kmax = cfg.n_agents, cfg.rounds, topic.C, max(topic.Ks)
    gam, ww = zip(*[cfg.concept(c.id)[:2] for c in topic.concepts])
    core.check_gamma(np.array(gam))
    R = len(specs)
    kappa = np.empty((R, n, C))
    b0 = np.zeros((R, n, C, Kmax))
    groups = np.empty((R, n, C), dtype=object)
    A, graphs, orders, keys = [], [], [], []
    for i, sp in enumerate(specs):
        for ci, c in enumerate(topic.concepts):
            p = cfg.concept(c.id)[2]
            b = initial_credences(p, c.K, n, lambda ci=ci, s=sp.seed: concept_stream(root_seed, s, ci))
            b0[i, :, ci, : c.K] = b
            kappa[i, :, ci], groups[i, :, ci] = concept_population(p, b)
        g = build_graph(cfg, root_seed, sp.seed)
        graphs.append(g)
        A.append(nx.to_numpy_array(g, nodelist=range(n), dtype=float) > 0)
        if cfg.turn_order == "fixed":
            orders.append(np.tile(np.arange(n), (rounds, 1)))
        else:
            gen = rng(root_seed, sp.seed, STREAM_ORDER)
            orders.append(np.stack([gen.permutation(n) for _ in range(rounds)]))
        keys.append(RunKey(seed=sp.seed, topic=topic, tau=tau))
    cps = [Coupled(topic.index(cp.from_), topic.index(cp.to), topic.coupling_matrix(cp), cp.weight)
           for cp in topic.couplings] if cfg.couplings else []
    return MultiGroup(specs=list(specs), root_seed=root_seed, topic=topic, kappa=kappa, b0=b0,
                      committed=np.isinf(kappa), groups=groups, adj=np.array(A),
                      gamma=np.array(gam, dtype=float), w=np.array(ww, dtype=float),
                      order=np.array(orders), keys=keys, couplings=cps, graphs=graphs)


# -- roles (oracle) ------------------------------------------------------------------------------
@dataclass
class MultiAppraisals:
    p_raw: np.ndarray      # (R, C, Kmax) the appraiser's normalised ratings (NaN: failed concept)
    e: np.ndarray          # (R, C, Kmax) evidence on each concept's simplex (NaN: failed concept)
    attempts: np.ndarray   # (R,) model calls spent on the utterance
    errors: list[list[str | None]] = field(default_factory=list)  # R lists of C (None = ok)


class MultiOracleGenerator:
    def generate(self, turn: Turn) -> Utterances:
        return Utterances(texts=None)


class MultiOracleAppraiser:
    """e = the speaker's credence vector per concept (last stance closed as 1 - the rest, so
    K = 2 gives the Beta layer's (s, 1 - s))."""

    def __init__(self):
        self._last: dict[str, np.ndarray] = {}  # per topic: (C, Kmax) mask of each concept's last stance

    def appraise(self, turn: Turn, utterances: Utterances) -> MultiAppraisals:
        topic: MultiTopic = turn.runs[0].topic
        last = self._last.get(topic.id)
        if last is None:
            last = self._last[topic.id] = np.arange(turn.s.shape[-1]) == (np.array(topic.Ks) - 1)[:, None]
        e = dirichlet.close_simplex(turn.s, last)
        return MultiAppraisals(p_raw=turn.s, e=e, attempts=np.zeros(len(turn.s), dtype=np.int32))


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


# -- the run --------------------------------------------------------------------------------------
@dataclass
class MultiResult:
    group: MultiGroup
    alpha: np.ndarray        # (T+1, R, N, C, Kmax) state before each turn, and the final state
    speaker: np.ndarray      # (T, R)
    s: np.ndarray            # (T, R, C, Kmax) speaker credences
    p_raw: np.ndarray        # (T, R, C, Kmax)
    e_appraised: np.ndarray  # (T, R, C, Kmax), NaN rows = failed appraisal on that concept
    e: np.ndarray            # (T, R, C, Kmax) consumed (after couplings)
    attempts: np.ndarray     # (T, R)
    listen: np.ndarray       # (T, R, N, C) who updated on which concept
    texts: list | None = None
    errors: list | None = None            # T lists of R lists of C
    gen_tokens: np.ndarray | None = None  # (T, R)

    @property
    def b(self) -> np.ndarray:
        return dirichlet.credence(self.alpha)


def run_multi(grp: MultiGroup, generator: Any = None, appraiser: Any = None,
              on_turn: Callable[[int], None] | None = None) -> MultiResult:
    """Advance every run of ``grp`` in lockstep; oracle roles by default."""
    generator = generator or MultiOracleGenerator()
    appraiser = appraiser or MultiOracleAppraiser()
    R, N, C, rounds = grp.R, grp.N, grp.C, grp.rounds
    Kmax, Ks = grp.b0.shape[-1], grp.Ks
    T = rounds * N
    kfin = np.where(grp.committed, 1.0, grp.kappa)  # placeholder counts for committed agents
    alpha0 = dirichlet.prior_counts(kfin, grp.b0)
    alpha = alpha0.copy()
    gamma, w = grp.gamma[:, None], grp.w[:, None]   # (C, 1): broadcast over (R, N, C, Kmax)
    A = np.empty((T + 1, R, N, C, Kmax))
    SPK = np.empty((T, R), dtype=np.int32)
    S, P, EA, E = (np.empty((T, R, C, Kmax)) for _ in range(4))
    ATT = np.zeros((T, R), dtype=np.int32)
    L = np.zeros((T, R, N, C), dtype=bool)
    llm = not isinstance(generator, MultiOracleGenerator)
    texts: list | None = [] if llm else None
    errors: list | None = [] if llm else None
    gtok = np.zeros((T, R), dtype=np.int32) if llm else None
    ar = np.arange(R)
    movable = ~grp.committed
    for t in range(T):
        r, j = divmod(t, N)
        A[t] = alpha
        spk = grp.order[:, r, j]
        sa = alpha[ar, spk]                                   # (R, C, Kmax)
        s = sa / sa.sum(-1, keepdims=True)
        turn = Turn(grp.root_seed, r, j, grp.keys, spk, s)
        utt = generator.generate(turn)
        app = appraiser.appraise(turn, utt)
        e = apply_couplings(app.e, grp.couplings, Ks)
        ok = np.isfinite(e).all(-1)                           # (R, C)
        lis = grp.adj[ar, spk][:, :, None] & movable & ok[:, None, :]
        new = dirichlet.step(alpha, alpha0, e[:, None], gamma, w)
        alpha = np.where(lis[..., None], new, alpha)
        SPK[t], S[t], P[t], EA[t], E[t], ATT[t], L[t] = spk, s, app.p_raw, app.e, e, app.attempts, lis
        if llm:
            texts.append(utt.texts)
            errors.append(app.errors)
            if utt.completion_tokens is not None:
                gtok[t] = utt.completion_tokens
        if on_turn is not None:
            on_turn(1)
    A[T] = alpha
    return MultiResult(group=grp, alpha=A, speaker=SPK, s=S, p_raw=P, e_appraised=EA, e=E,
                       attempts=ATT, listen=L, texts=texts, errors=errors, gen_tokens=gtok)


def simulate(specs: Sequence[MultiRunSpec], root_seed: int, generator=None, appraiser=None,
             tau: float = 1.0, on_turn=None) -> MultiResult:
    return run_multi(prepare(specs, root_seed, tau), generator, appraiser, on_turn)


# -- tables ----------------------------------------------------------------------------------------
def _ids(res: MultiResult):
    g = res.group
    return (np.array([sp.run for sp in g.specs], dtype=np.int32),
            np.array([sp.seed for sp in g.specs], dtype=np.int32))


def _cat(values: Sequence[str], codes: np.ndarray) -> pd.Categorical:
    return pd.Categorical.from_codes(codes, categories=list(values))


def _stance_rows(Ks: np.ndarray, concept: np.ndarray):
    """For items with concept indices ``concept``: (item index, stance index) of one row per stance."""
    per = Ks[concept]
    item = np.repeat(np.arange(len(concept)), per)
    starts = np.repeat(np.cumsum(per) - per, per)
    return item, (np.arange(per.sum()) - starts).astype(np.int64)


def _stance_cat(topic: MultiTopic, c: np.ndarray, k: np.ndarray) -> pd.Categorical:
    names = sorted({s.id for cc in topic.concepts for s in cc.stances})
    lut = np.array([[names.index(s.id) for s in cc.stances] + [0] * (max(topic.Ks) - cc.K)
                    for cc in topic.concepts])
    return _cat(names, lut[c, k])


def events_table(res: MultiResult) -> pd.DataFrame:
    """One row per listener update, concept and stance: run, seed, round, turn, speaker,
    listener, concept, stance (and its index k), speaker credence s, consumed evidence e (and
    the appraised e before couplings), listener b before/after, kappa, b0, discounted count m
    and update count c (on that concept) before the update."""
    g = res.group
    run, seed = _ids(res)
    t, r, l, c = np.nonzero(res.listen)
    a = res.alpha
    # per event first (n, kappa, count), then one row per stance
    n_before, n_after = a[t, r, l, c].sum(-1), a[t + 1, r, l, c].sum(-1)
    kappa = g.kappa[r, l, c]
    count = np.cumsum(res.listen, axis=0, dtype=np.int32)[t, r, l, c]
    i, k = _stance_rows(g.Ks, c)
    t, r, l, c = t[i], r[i], l[i], c[i]
    n_before, n_after, kappa, count = n_before[i], n_after[i], kappa[i], count[i]
    return pd.DataFrame({
        "run": run[r], "seed": seed[r], "round": (t // g.N).astype(np.int32), "turn": (t % g.N).astype(np.int32),
        "speaker": res.speaker[t, r], "listener": l.astype(np.int32),
        "concept": _cat(g.topic.concept_ids, c), "stance": _stance_cat(g.topic, c, k), "k": k.astype(np.int8),
        "s": res.s[t, r, c, k], "e": res.e[t, r, c, k], "e_appraised": res.e_appraised[t, r, c, k],
        "b_before": a[t, r, l, c, k] / n_before, "b_after": a[t + 1, r, l, c, k] / n_after,
        "kappa": kappa, "b0": g.b0[r, l, c, k], "m": n_before - kappa, "c": count - 1,
    })


def appraisals_table(res: MultiResult) -> pd.DataFrame:
    """One row per utterance, concept and stance: speaker credence s, normalised rating p_raw,
    appraised and consumed evidence, whether the concept's appraisal failed (and why), and how
    many listeners updated on it."""
    g = res.group
    run, seed = _ids(res)
    T, R = res.speaker.shape
    tt, rr, cc = (x.ravel() for x in np.meshgrid(np.arange(T), np.arange(R), np.arange(g.C), indexing="ij"))
    i, k = _stance_rows(g.Ks, cc)
    t, r, c = tt[i], rr[i], cc[i]
    err = None
    if res.errors is not None:
        flat = [res.errors[a][b][d] for a, b, d in zip(tt, rr, cc)]
        err = pd.Series([flat[x] for x in i], dtype="string")
    failed = ~np.isfinite(res.e_appraised[t, r, c]).all(-1)
    df = pd.DataFrame({
        "run": run[r], "seed": seed[r], "round": (t // g.N).astype(np.int32), "turn": (t % g.N).astype(np.int32),
        "speaker": res.speaker[t, r], "concept": _cat(g.topic.concept_ids, c),
        "stance": _stance_cat(g.topic, c, k), "k": k.astype(np.int8),
        "s": res.s[t, r, c, k], "p_raw": res.p_raw[t, r, c, k], "e_appraised": res.e_appraised[t, r, c, k],
        "e": res.e[t, r, c, k], "failed": failed,
        "listeners": res.listen[t, r, :, c].sum(-1).astype(np.int32),
    })
    if err is not None:
        df["error"] = err
    return df


def utterances_table(res: MultiResult) -> pd.DataFrame:
    g = res.group
    run, seed = _ids(res)
    T, R = res.speaker.shape
    tt = np.repeat(np.arange(T), R)
    rr = np.tile(np.arange(R), T)
    failed = ~np.isfinite(res.e_appraised).all(-1)             # (T, R, C)
    df = pd.DataFrame({
        "run": run[rr], "seed": seed[rr], "round": (tt // g.N).astype(np.int32),
        "turn": (tt % g.N).astype(np.int32), "speaker": res.speaker.ravel(),
        "attempts": res.attempts.ravel(), "failed_concepts": failed.sum(-1).ravel().astype(np.int32)})
    if res.texts is not None:
        df["text"] = pd.Series([x for row in res.texts for x in (row or [None] * R)], dtype="string")
        df["completion_tokens"] = res.gen_tokens.ravel()
    return df


def beliefs_table(res: MultiResult) -> pd.DataFrame:
    """Credence per agent, concept and stance at the start (round 0) and after each round."""
    g = res.group
    run, seed = _ids(res)
    R, N, C, rounds = g.R, g.N, g.C, g.rounds
    bb = res.b[::N]                                             # (rounds+1, R, N, C, Kmax)
    rd, rr, ag, cc = (x.ravel() for x in np.meshgrid(np.arange(rounds + 1), np.arange(R), np.arange(N),
                                                     np.arange(C), indexing="ij"))
    i, k = _stance_rows(g.Ks, cc)
    rd, rr, ag, cc = rd[i], rr[i], ag[i], cc[i]
    return pd.DataFrame({
        "run": run[rr], "seed": seed[rr], "round": rd.astype(np.int32), "agent": ag.astype(np.int32),
        "concept": _cat(g.topic.concept_ids, cc), "stance": _stance_cat(g.topic, cc, k), "k": k.astype(np.int8),
        "b": bb[rd, rr, ag, cc, k], "committed": g.committed[rr, ag, cc]})


def agents_table(res: MultiResult) -> pd.DataFrame:
    """Per run, agent, concept and stance: b0, and the agent's kappa / group / degree on it."""
    g = res.group
    run, _ = _ids(res)
    rr, ag, cc = (x.ravel() for x in np.meshgrid(np.arange(g.R), np.arange(g.N), np.arange(g.C), indexing="ij"))
    i, k = _stance_rows(g.Ks, cc)
    rr, ag, cc = rr[i], ag[i], cc[i]
    return pd.DataFrame({
        "run": run[rr], "agent": ag.astype(np.int32), "concept": _cat(g.topic.concept_ids, cc),
        "stance": _stance_cat(g.topic, cc, k), "k": k.astype(np.int8), "b0": g.b0[rr, ag, cc, k],
        "kappa": g.kappa[rr, ag, cc], "committed": g.committed[rr, ag, cc],
        "group": g.groups[rr, ag, cc].astype(str), "degree": g.adj.sum(-1)[rr, ag].astype(np.int32)})


def edges_table(res: MultiResult) -> pd.DataFrame:
    frames = []
    for sp, gr in zip(res.group.specs, res.group.graphs):
        e = np.array(list(gr.edges()), dtype=np.int32).reshape(-1, 2)
        frames.append(pd.DataFrame({"run": sp.run, "u": e[:, 0], "v": e[:, 1]}))
    return pd.concat(frames, ignore_index=True)


def runs_table(res: MultiResult) -> pd.DataFrame:
    return pd.DataFrame([{"run": sp.run, "seed": sp.seed, "n_agents": sp.config.n_agents,
                          "rounds": sp.config.rounds, "topology": sp.config.topology.kind,
                          "topic": sp.config.topic, "mode": sp.config.mode} for sp in res.group.specs])


def concepts_table(res: MultiResult) -> pd.DataFrame:
    import json
    g = res.group
    cfg = g.specs[0].config
    rows = []
    for ci, c in enumerate(g.topic.concepts):
        gamma, w, p = cfg.concept(c.id)
        inc = [cp for cp in g.couplings if cp.dst == ci]
        rows.append({"concept": c.id, "index": ci, "K": c.K, "title": c.title,
                     "stances": json.dumps(c.stance_ids), "gamma": gamma, "w": w, "population": p.kind,
                     "kappa": float(p.kappa), "coupled_in": bool(inc),
                     "couplings_in": json.dumps([{"from": g.topic.concept_ids[cp.src], "weight": cp.weight}
                                                 for cp in inc])})
    return pd.DataFrame(rows)


def all_tables(res: MultiResult) -> dict[str, pd.DataFrame]:
    return {"events": events_table(res), "appraisals": appraisals_table(res),
            "utterances": utterances_table(res), "beliefs": beliefs_table(res),
            "agents": agents_table(res), "edges": edges_table(res), "runs": runs_table(res),
            "concepts": concepts_table(res)}
