"""The move algebra (five forces) and the protocol automaton.

Signed endorsements (spec table; BDA paper §D.7):

=====================  ===========  =====================================
force                  endorsement  candidate
=====================  ===========  =====================================
propose, vote          +1           its own answer
concede (cross-agent)  +1           the target move's answer
challenge              -1           the target move's answer
retract                -1           the agent's own prior answer
self-concede, abstain  none         --
=====================  ===========  =====================================

A move's *answer* for targeting purposes is the candidate it endorses positively (propose,
vote, cross-agent concede); challenges, retracts, abstentions and self-concedes carry none,
so conceding to or challenging them is rejected.

Two automata are provided: ``STRICT`` is the live-council protocol of BDA paper §D.7 (round 0:
every agent proposes once; later rounds: one move per agent per round from {propose,
concede, challenge}; no targeting one's own move), ``GENERAL`` accepts the whole algebra
(vote, retract, abstain, self-concede) but still enforces round order and well-formed
targets. Every rejection carries a reason; nothing is dropped unless ``on_violation="skip"``
is asked for, and then the skips are counted in a ``ProtocolReport``.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Literal

from chorus.aggregate.errors import ProtocolError
from chorus.aggregate.trace import FORCES, Trace
from chorus.core.config import InputError

OnViolation = Literal["error", "skip"]


@dataclass(frozen=True, slots=True)
class Endorsement:
    move: int
    agent: str
    round: int
    sign: int  # +1 endorses, -1 rejects
    candidate: str


@dataclass(frozen=True, slots=True)
class Verdict:
    move: int
    accepted: bool
    reason: str | None = None  # why it was rejected (None when accepted)


@dataclass
class ProtocolReport:
    """Counts of moves seen / rejected (by reason) over many traces, for skip mode."""

    traces: int = 0
    moves: int = 0
    rejected: int = 0
    by_reason: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    forces: Counter = field(default_factory=Counter)

    def add(self, trace: Trace, verdicts: list[Verdict]) -> None:
        self.traces += 1
        self.moves += len(verdicts)
        for v in verdicts:
            self.forces[trace.moves[v.move].force] += 1
            if not v.accepted:
                self.rejected += 1
                key = v.reason.split(":")[0] if v.reason else "?"
                self.by_reason[key] += 1
                if len(self.examples) < 10:
                    self.examples.append(f"task {trace.task_id!r}, move {v.move}: {v.reason}")

    def to_dict(self) -> dict:
        return {"traces": self.traces, "moves": self.moves, "rejected": self.rejected,
                "by_reason": dict(self.by_reason), "examples": list(self.examples),
                "forces": {f: self.forces.get(f, 0) for f in FORCES}}


@dataclass(frozen=True)
class Protocol:
    """A protocol automaton: which forces are legal and which structural rules apply."""

    name: str
    forces: frozenset[str]
    round0_propose: bool = True  # round 0 holds one propose per agent; later movers must have proposed
    one_move_per_round: bool = True  # the vocal-adversary guard (BDA paper §D.5)
    allow_self_concede: bool = False  # a self-concede is legal but uninformative
    max_rounds: int | None = None  # rounds 0..max_rounds-1 are legal when set

    def run(self, trace: Trace) -> tuple[list[Verdict], list[Endorsement]]:
        """Accept or reject each move in order; return the verdicts and the endorsements
        of the accepted moves."""
        verdicts: list[Verdict] = []
        ends: list[Endorsement] = []
        accepted: list[bool] = []
        move_answer: list[str | None] = []  # candidate a move endorses positively
        position: dict[str, str | None] = {}  # agent -> current answer (for retract)
        moved: set[tuple[str, int]] = set()
        proposed_r0: set[str] = set()
        last_round = 0
        for j, m in enumerate(trace.moves):
            reason = self._reject_reason(trace, j, m, accepted, move_answer, position, moved,
                                         proposed_r0, last_round)
            if reason is not None:
                verdicts.append(Verdict(j, False, reason))
                accepted.append(False)
                move_answer.append(None)
                continue
            verdicts.append(Verdict(j, True))
            accepted.append(True)
            last_round = max(last_round, m.round)
            moved.add((m.agent, m.round))
            ans: str | None = None
            f = m.force
            if f in ("propose", "vote"):
                ans = m.answer
                ends.append(Endorsement(j, m.agent, m.round, +1, ans))
                position[m.agent] = ans
                if m.round == 0:
                    proposed_r0.add(m.agent)
            elif f == "concede":
                tgt = trace.moves[m.target]
                if tgt.agent != m.agent:
                    ans = move_answer[m.target]
                    ends.append(Endorsement(j, m.agent, m.round, +1, ans))
                    position[m.agent] = ans
            elif f == "challenge":
                ends.append(Endorsement(j, m.agent, m.round, -1, move_answer[m.target]))
            elif f == "retract":
                ends.append(Endorsement(j, m.agent, m.round, -1, position[m.agent]))
                position[m.agent] = None
            move_answer.append(ans)
        return verdicts, ends

    def _reject_reason(self, trace, j, m, accepted, move_answer, position, moved, proposed_r0,
                       last_round) -> str | None:
        f = m.force
        if f not in self.forces:
            return f"illegal force: {f!r} is not part of the {self.name} protocol " \
                   f"({', '.join(sorted(self.forces))})"
        if m.round < last_round:
            return f"out of order: round {m.round} after a move of round {last_round}"
        if self.max_rounds is not None and m.round >= self.max_rounds:
            return f"too many rounds: round {m.round} >= {self.max_rounds}"
        if self.round0_propose:
            if m.round == 0 and f != "propose":
                return f"round 0 not a propose: round 0 holds proposals only, got {f}"
            if m.round > 0 and m.agent not in proposed_r0:
                return f"no round-0 proposal: agent {m.agent!r} moves in round {m.round} " \
                       f"without a round-0 proposal"
        if self.one_move_per_round and (m.agent, m.round) in moved:
            return f"second move in a round: agent {m.agent!r} already moved in round {m.round}"
        if m.target is not None:
            t = m.target
            if not accepted[t]:
                return f"rejected target: target move {t} was itself rejected"
            own = trace.moves[t].agent == m.agent
            if f == "challenge" and own:
                return f"own-move challenge: agent {m.agent!r} challenges its own move {t} " \
                       f"(retract is the force for that)"
            if f == "concede" and own:
                if not self.allow_self_concede:
                    return f"self-concede: agent {m.agent!r} concedes to its own move {t}"
            elif f in ("concede", "challenge") and move_answer[t] is None:
                return f"answerless target: target move {t} ({trace.moves[t].force}) endorses no answer"
            if f == "concede" and not own and m.answer is not None and m.answer != move_answer[t]:
                return f"inconsistent concede: states answer {m.answer!r} but its target move {t} " \
                       f"endorses {move_answer[t]!r}"
            if f == "challenge" and m.answer is not None and m.answer == move_answer[t]:
                return f"inconsistent challenge: states answer {m.answer!r}, the answer it rejects"
        if f == "retract":
            cur = position.get(m.agent)
            if cur is None:
                return f"nothing to retract: agent {m.agent!r} holds no answer"
            if m.answer is not None and m.answer != cur:
                return f"inconsistent retract: states answer {m.answer!r} but the agent holds {cur!r}"
        if f == "abstain" and m.answer is not None:
            return f"abstain with an answer: abstain carries no answer, got {m.answer!r}"
        return None

    # -- conveniences --------------------------------------------------------------------
    def check(self, trace: Trace) -> list[Verdict]:
        return self.run(trace)[0]

    def endorsements(self, trace: Trace, on_violation: OnViolation = "error",
                     report: ProtocolReport | None = None) -> list[Endorsement]:
        verdicts, ends = self.run(trace)
        if report is not None:
            report.add(trace, verdicts)
        if on_violation == "error":
            for v in verdicts:
                if not v.accepted:
                    m = trace.moves[v.move]
                    raise ProtocolError(f"task {trace.task_id!r}, move {v.move} ({m.agent}, round "
                                        f"{m.round}, {m.force}): {v.reason}")
        elif on_violation != "skip":
            raise InputError(f"on_violation must be 'error' or 'skip', got {on_violation!r}")
        return ends


STRICT = Protocol(name="strict", forces=frozenset({"propose", "concede", "challenge"}))
GENERAL = Protocol(name="general", forces=frozenset(FORCES), round0_propose=False,
                   one_move_per_round=False, allow_self_concede=True)
PROTOCOLS = {"strict": STRICT, "general": GENERAL}


def get_protocol(p: "str | Protocol") -> Protocol:
    if isinstance(p, Protocol):
        return p
    try:
        return PROTOCOLS[p]
    except KeyError:
        raise InputError(f"unknown protocol {p!r} (expected one of {', '.join(PROTOCOLS)})") from None


def extract_endorsements(trace: Trace, protocol: "str | Protocol" = "general",
                         on_violation: OnViolation = "error",
                         report: ProtocolReport | None = None) -> list[Endorsement]:
    """The signed endorsements of a trace's accepted moves (force, agent, target and answer
    only: never the text, never the confidence)."""
    return get_protocol(protocol).endorsements(trace, on_violation, report)


def check_all(traces: Iterable[Trace], protocol: "str | Protocol" = "strict") -> ProtocolReport:
    rep = ProtocolReport()
    p = get_protocol(protocol)
    for tr in traces:
        rep.add(tr, p.check(tr))
    return rep
