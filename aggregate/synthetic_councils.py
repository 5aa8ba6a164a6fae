"""Synthetic councils at the count level, adversaries, and the controls of BDA paper §F.

The generator emits protocol-legal traces (``STRICT``): round 0, every seat proposes; rounds
1..R-1, every seat makes one move. Each move first draws the seat's *belief*: in round 0, and
in later rounds with probability 1 - ``p_stay`` (otherwise the seat keeps its belief, so a
seat's moves are correlated as in real councils), the gold answer with probability theta_i,
else a uniformly random wrong answer. The move then endorses that
belief: with probability ``p_concede`` it concedes to an earlier-round move of another seat
that endorses the belief, with probability ``p_challenge`` it challenges an earlier-round move
of another seat that endorses a different answer, otherwise it (re-)proposes the belief.

Adversaries (BDA paper §F.1/F.3): a corrupted seat's informative move is redirected, with
probability ``p_wrong``, to a wrong answer (uniformly random, or a fixed function of the gold
answer with ``target="fixed"``, the systematic coalition whose label identity the
permutation control destroys); a redirected challenge always targets a move that endorses
the gold answer. ``persistent`` adversaries sit on the same seats in every task (calibration
included), ``rotating`` ones on fresh random seats per task.

Randomness: each task draws from its own streams ``rng(seed, 11, t)`` (genuine behaviour) and
``rng(seed, 12, t)`` (adversary), so a clean and an attacked version of the same task share
gold and genuine draws (common random numbers across a sweep; the sleeper's paired traces).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from chorus.aggregate.trace import Move, Trace
from chorus.core.seeding import rng as make_rng
from chorus.core.config import InputError

DEFAULT_CANDIDATES = {2: ("true", "false"), 3: ("yes", "no", "maybe"), 4: ("A", "B", "C", "D")}


@dataclass(frozen=True)
class Adversary:
    kind: Literal["persistent", "rotating"] = "persistent"
    k: int = 1
    p_wrong: float = 1.0
    seats: tuple[str, ...] | None = None  # persistent seats (default: the last k)
    target: Literal["random", "fixed"] = "random"

    def __post_init__(self):
        if self.kind not in ("persistent", "rotating"):
            raise InputError(f"adversary kind must be 'persistent' or 'rotating', got {self.kind!r}")
        if not 0.0 <= self.p_wrong <= 1.0:
            raise InputError(f"p_wrong must lie in [0, 1], got {self.p_wrong!r}")
        if self.k < 0:
            raise InputError(f"k must be >= 0, got {self.k!r}")
        if self.target not in ("random", "fixed"):
            raise InputError(f"adversary target must be 'random' or 'fixed', got {self.target!r}")


@dataclass(frozen=True)
class CouncilSpec:
    n_tasks: int = 1500
    K: int = 2
    reliabilities: tuple[float, ...] = (0.74, 0.68, 0.68)
    rounds: int = 3
    p_concede: float = 0.3
    p_challenge: float = 0.15
    candidates: tuple[str, ...] | None = None
    p_stay: float = 0.5  # a seat keeps its previous (genuine) belief in a later round
    repeats: int = 1  # traces per question (generation seeds); >1 makes tasks repeat
    overconfidence: float = 0.1  # stated confidence ~ theta + overconfidence (+ noise)

    def __post_init__(self):
        if self.K < 2:
            raise InputError(f"K must be >= 2, got {self.K}")
        if self.rounds < 1:
            raise InputError(f"rounds must be >= 1, got {self.rounds}")
        if any(not 0.0 <= r <= 1.0 for r in self.reliabilities) or len(self.reliabilities) < 1:
            raise InputError(f"reliabilities must lie in [0, 1], got {list(self.reliabilities)!r}")
        if self.candidates is not None and len(self.candidates) != self.K:
            raise InputError(f"{len(self.candidates)} candidates given for K={self.K}")
        if not 0.0 <= self.p_stay <= 1.0:
            raise InputError(f"p_stay must lie in [0, 1], got {self.p_stay!r}")
        if not (0 <= self.p_concede <= 1 and 0 <= self.p_challenge <= 1
                and self.p_concede + self.p_challenge <= 1):
            raise InputError("p_concede and p_challenge must be probabilities summing to <= 1")

    @property
    def labels(self) -> tuple[str, ...]:
        if self.candidates is not None:
            return tuple(self.candidates)
        return DEFAULT_CANDIDATES.get(self.K, tuple(f"c{k}" for k in range(self.K)))

    @property
    def agents(self) -> tuple[str, ...]:
        return tuple(f"A{i + 1}" for i in range(len(self.reliabilities)))


def _wrong(gold: int, K: int, r: np.random.Generator) -> int:
    w = int(r.integers(K - 1))
    return w + (w >= gold)


def generate_council(spec: CouncilSpec, *, adversary: Adversary | None = None, seed: int = 0,
                     prefix: str = "syn", start: int = 0) -> list[Trace]:
    """``spec.n_tasks`` traces (``repeats`` per question)."""
    labels = spec.labels
    agents = spec.agents
    I, K = len(agents), spec.K
    theta = np.asarray(spec.reliabilities, float)
    adv = adversary if adversary is not None and adversary.k > 0 and adversary.p_wrong > 0 else None
    if adv is not None and adv.k > I:
        raise InputError(f"adversary k={adv.k} exceeds the {I} seats")
    fixed_seats: set[int] = set()
    if adv is not None and adv.kind == "persistent":
        names = adv.seats if adv.seats is not None else agents[I - adv.k:]
        unknown = [s for s in names if s not in agents]
        if unknown or len(names) != adv.k:
            raise InputError(f"adversary seats {list(names)!r} must be {adv.k} of {list(agents)!r}")
        fixed_seats = {agents.index(s) for s in names}
    out: list[Trace] = []
    for t in range(start, start + spec.n_tasks):
        q = t // spec.repeats
        rq = make_rng(seed, 10, q)  # the question: its gold answer
        gold = int(rq.integers(K))
        r = make_rng(seed, 11, t)
        ra = make_rng(seed, 12, t)
        if adv is None:
            bad: set[int] = set()
        elif adv.kind == "persistent":
            bad = fixed_seats
        else:
            bad = set(int(x) for x in ra.choice(I, size=adv.k, replace=False))
        moves: list[Move] = []
        endorsed: list[int | None] = []  # candidate each move endorses positively
        held = [0] * I  # each seat's genuine belief
        for rnd in range(spec.rounds):
            prev = len(moves)  # moves of earlier rounds are visible
            for i in range(I):
                fresh = gold if r.random() < theta[i] else _wrong(gold, K, r)
                stay = r.random() < spec.p_stay
                belief = held[i] = held[i] if (rnd > 0 and stay) else fresh
                u = r.random()
                corrupt = i in bad and ra.random() < adv.p_wrong  # type: ignore[union-attr]
                if corrupt:
                    belief = (gold + 1) % K if adv.target == "fixed" else _wrong(gold, K, ra)  # type: ignore[union-attr]
                if rnd == 0:
                    conf = float(np.clip(theta[i] + spec.overconfidence + 0.08 * r.standard_normal()
                                         + (0.05 if belief == gold else -0.05), 1.0 / K, 1.0))
                    moves.append(Move(agents[i], 0, "propose", labels[belief], confidence=round(conf, 3)))
                    endorsed.append(belief)
                    continue
                others = [j for j in range(prev) if moves[j].agent != agents[i] and endorsed[j] is not None]
                agree = [j for j in others if endorsed[j] == belief]
                if corrupt:
                    disagree = [j for j in others if endorsed[j] == gold]
                else:
                    disagree = [j for j in others if endorsed[j] != belief]
                if u < spec.p_concede and agree:
                    j = agree[int(r.integers(len(agree)))]
                    moves.append(Move(agents[i], rnd, "concede", target=j))
                    endorsed.append(belief)
                elif u < spec.p_concede + spec.p_challenge and disagree:
                    j = disagree[int(r.integers(len(disagree)))]
                    moves.append(Move(agents[i], rnd, "challenge", target=j))
                    endorsed.append(None)
                else:
                    moves.append(Move(agents[i], rnd, "propose", labels[belief]))
                    endorsed.append(belief)
        qid = f"{prefix}-q{q:05d}" if spec.repeats > 1 else None
        out.append(Trace(task_id=f"{prefix}-{t:05d}", candidates=labels, moves=tuple(moves),
                         gold=labels[gold], question_id=qid))
    return out


# -- controls ---------------------------------------------------------------------------------
def permute_labels(traces: Sequence[Trace], seed: int = 0) -> list[Trace]:
    """The label-permutation control: each task gets its own random relabelling of its
    candidates (answers and gold mapped through it, the candidate list unchanged), which keeps
    every within-task structure and destroys cross-task label identity."""
    out = []
    for t, tr in enumerate(traces):
        perm = make_rng(seed, 13, t).permutation(tr.K)
        m = {c: tr.candidates[p] for c, p in zip(tr.candidates, perm)}
        moves = tuple(Move(mv.agent, mv.round, mv.force, None if mv.answer is None else m[mv.answer],
                           mv.target, mv.confidence, mv.text, mv.extra) for mv in tr.moves)
        extra = dict(tr.extra)
        if isinstance(extra.get("vote_arm"), dict):  # an external vote arm's tallies follow the relabelling
            extra["vote_arm"] = {m.get(c, c): n for c, n in extra["vote_arm"].items()}
        out.append(Trace(tr.task_id, tr.candidates, moves, None if tr.gold is None else m[tr.gold],
                         tr.question_id, extra))
    return out


def truncate_traces(traces: Sequence[Trace], max_round: int = 0) -> list[Trace]:
    """Round truncation: keep rounds <= ``max_round`` of every trace (refit on the result)."""
    return [tr.truncate(max_round) for tr in traces]


def sleeper_traces(spec: CouncilSpec, *, n_calibration: int, n_deploy: int, f: float,
                   adversary: Adversary, seed: int = 0) -> tuple[list[Trace], list[Trace]]:
    """The sleeper design (BDA paper §F.8): a calibration window in which each task carries the
    adversarial trace with probability ``f`` (else the clean trace of the same task), and a
    disjoint, fully adversarial deployment set."""
    if not 0.0 <= f <= 1.0:
        raise InputError(f"f must lie in [0, 1], got {f!r}")
    cal_spec = _with_n(spec, n_calibration)
    clean = generate_council(cal_spec, adversary=None, seed=seed, prefix="cal")
    attacked = generate_council(cal_spec, adversary=adversary, seed=seed, prefix="cal")
    pick = make_rng(seed, 14).random(n_calibration) < f
    cal = [a if p else c for c, a, p in zip(clean, attacked, pick)]
    dep = generate_council(_with_n(spec, n_deploy), adversary=adversary, seed=seed, prefix="dep",
                           start=n_calibration)
    return cal, dep


def _with_n(spec: CouncilSpec, n: int) -> CouncilSpec:
    from dataclasses import replace

    return replace(spec, n_tasks=n)
