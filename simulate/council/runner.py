"""The lockstep council runner.

Every seat-turn of a round, across all councils (tasks x conditions x generation seeds), goes to
the engine as one ``chat`` call per model profile (and candidate set). Round 0 asks each seat for
a JSON envelope (answer, reasoning, evidence, rubric-anchored confidence); rounds 1..R-1 ask for
one typed move (propose / concede / challenge with a target agent) through ``json_schema``.
Every move is checked by ``chorus.aggregate.STRICT``, the protocol automaton the aggregator uses: an
illegal move is re-asked (with the rejection reason and a fresh seed) up to ``max_retries``
times, then recorded as an ``abstain`` move with its reason and counted. Abstentions carry no
endorsement; under ``STRICT`` with ``on_violation: skip`` they are the only rejected moves.

Engines only need ``chat(conversations, temperature=, top_p=, max_tokens=, seed=, json_schema=)``
returning objects with ``text, parsed, conformed, prompt_tokens, completion_tokens, cached,
finish_reason`` (``chorus.serving.Engine``; scripted engines in the tests).
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from chorus.aggregate import STRICT
from chorus.aggregate.errors import TraceError
from chorus.aggregate.trace import Trace
from chorus.core.progress import Progress
from chorus.simulate.council import prompts as pr
from chorus.simulate.council.data import Task
from chorus.core.seeding import stable_int, call_seed


@dataclass(frozen=True)
class Seat:
    agent: str
    profile: str
    persona: str = "analyst"


@dataclass
class Council:
    """One council deliberating one task under one condition and generation seed."""

    task: Task
    condition: str
    adversaries: frozenset[str]
    gen_seed: int
    swaps: Mapping[str, Seat] = field(default_factory=dict)  # agent -> its stand-in in this condition
    moves: list[dict[str, Any]] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)  # transcript shown to seats
    position: dict[str, str | None] = field(default_factory=dict)
    last_endorse: dict[str, int] = field(default_factory=dict)  # agent -> index of its latest +1 move

    @property
    def trace_id(self) -> str:
        return f"{self.task.task_id}-s{self.gen_seed}"

    def seat(self, seat: Seat) -> Seat:
        """Who sits in ``seat`` in this council: its stand-in when the condition swaps it."""
        return self.swaps.get(seat.agent, seat)

    def to_trace(self) -> dict[str, Any]:
        rec = {"task_id": self.trace_id, "question_id": self.task.task_id, "candidates": list(self.task.candidates),
               "gold": self.task.gold, "moves": self.moves, "dataset": self.task.dataset,
               "condition": self.condition, "adversaries": sorted(self.adversaries), "gen_seed": self.gen_seed}
        if self.swaps:  # which model sat where (kept by aggregate's loader); unswapped traces stay as they were
            rec["swapped"] = {a: {"profile": s.profile, "persona": s.persona} for a, s in sorted(self.swaps.items())}
        return rec


def task_key(task_id: str) -> int:
    """A stable integer per task id (seeds must not depend on list position: resumability)."""
    return stable_int(task_id, bits=28)   # = int(sha256 hex[:7], 16): kept, seeds stored calls


def seat_seed(root: int, c: Council, seat_index: int, rnd: int, attempt: int) -> int:
    return call_seed(root, c.gen_seed, task_key(c.task.task_id), seat_index, rnd, attempt)


def make_councils(tasks: Sequence[Task], conditions: Sequence[tuple], gen_seeds: Sequence[int]) -> list[Council]:
    """Councils per condition ``(name, adversaries)`` or ``(name, adversaries, {agent: stand-in Seat})``."""
    out = []
    for name, adv, *rest in conditions:
        swaps = dict(rest[0]) if rest else {}
        out += [Council(task=t, condition=name, adversaries=frozenset(adv), gen_seed=s, swaps=swaps)
                for s in gen_seeds for t in tasks]
    return out


def seat_for(c: Council, seat: Seat, P: dict) -> pr.SeatText:
    adv = pr.adversary_preamble(c.task, P) if seat.agent in c.adversaries else None
    return pr.seat_text(seat.persona, P, adv)


# -- parsing and legality ------------------------------------------------------------------------
def parse_envelope(out: Any, task: Task) -> tuple[dict | None, str | None]:
    """A round-0 envelope -> (fields, None) or (None, reason). Never fills in a default."""
    if not getattr(out, "conformed", False) or not isinstance(out.parsed, dict):
        why = "truncated" if getattr(out, "finish_reason", None) == "length" else "malformed envelope"
        return None, f"{why}: {(out.text or '')[:80]!r}"
    d = out.parsed
    if d.get("answer") not in task.candidates:
        return None, f"answer outside the candidates: {d.get('answer')!r}"
    if d.get("confidence") not in pr.RUBRIC:
        return None, f"confidence not a rubric level: {d.get('confidence')!r}"
    return d, None


def build_move(out: Any, c: Council, agent: str, rnd: int) -> tuple[dict | None, str | None]:
    """A move reply -> (trace move dict, None) or (None, reason); targets name agents and are
    resolved to the index of that agent's latest answer-endorsing move."""
    if not getattr(out, "conformed", False) or not isinstance(out.parsed, dict):
        why = "truncated" if getattr(out, "finish_reason", None) == "length" else "malformed move"
        return None, f"{why}: {(out.text or '')[:80]!r}"
    d = out.parsed
    force, tgt, ans = d.get("move"), d.get("target"), d.get("answer")
    if force not in pr.FORCES:
        return None, f"illegal force: {force!r}"
    if ans not in c.task.candidates:
        return None, f"answer outside the candidates: {ans!r}"
    m: dict[str, Any] = {"agent": agent, "round": rnd, "force": force, "answer": ans,
                         "text": str(d.get("reason") or "")}
    if force in ("concede", "challenge"):
        if tgt in (None, "none"):
            return None, f"missing target: a {force} must name another agent"
        if tgt not in c.last_endorse:
            return None, f"answerless target: agent {tgt!r} holds no answer"
        m["target"] = c.last_endorse[tgt]
        m["target_agent"] = tgt
    return m, None


def check_move(c: Council, move: dict[str, Any]) -> str | None:
    """None when ``STRICT`` accepts ``move`` after the council's moves so far, else the reason."""
    rec = {"task_id": c.trace_id, "candidates": list(c.task.candidates), "moves": [*c.moves, move]}
    try:
        tr = Trace.from_dict(rec)
    except TraceError as err:
        return str(err).split(": ", 1)[-1]
    v = STRICT.check(tr)[-1]
    return None if v.accepted else v.reason


def _apply(c: Council, move: dict[str, Any]) -> None:
    j = len(c.moves)
    c.moves.append(move)
    f = move["force"]
    e = {"round": move["round"], "agent": move["agent"], "force": f, "answer": move.get("answer"),
         "text": move.get("text")}
    if f == "propose":
        c.position[move["agent"]] = move["answer"]
        c.last_endorse[move["agent"]] = j
    elif f == "concede":
        e["target"] = move["target_agent"]
        c.position[move["agent"]] = move["answer"]
        c.last_endorse[move["agent"]] = j
    elif f == "challenge":
        e["target"] = move["target_agent"]
        e["target_answer"] = c.moves[move["target"]].get("answer")
    c.entries.append(e)


# -- the lockstep loop ----------------------------------------------------------------------------
@dataclass
class RunStats:
    turns: list[dict[str, Any]] = field(default_factory=list)
    batches: list[dict[str, Any]] = field(default_factory=list)
    illegal: Counter = field(default_factory=Counter)
    abstentions: Counter = field(default_factory=Counter)

    def to_dict(self) -> dict[str, Any]:
        b = self.batches
        return {"n_turn_requests": len(self.turns), "n_batches": len(b),
                "illegal_by_reason": dict(self.illegal), "abstentions_by_reason": dict(self.abstentions),
                "n_abstentions": int(sum(self.abstentions.values())),
                "model_s": float(sum(x["wall_s"] for x in b)),
                "new_tokens": int(sum(x["new_tokens"] for x in b)),
                "computed_new_tokens": int(sum(x["computed_new_tokens"] for x in b))}


def _reason_key(reason: str) -> str:
    return reason.split(":")[0]


@dataclass(frozen=True)
class _Ask:
    """What every request of a run shares: engines, prompts, seeding and generation settings."""

    engines: Mapping[str, Any]
    agents: list[str]
    P: dict
    root_seed: int
    temperature: float
    top_p: float
    max_tokens: int
    max_chars: int


@dataclass
class _Turn:
    """One seat of one council in the round under way (replaces parallel dicts keyed by both)."""

    council: Council
    seat: Seat
    seat_index: int
    move: dict[str, Any] | None = None  # accepted, or the abstention once out of retries
    last_reason: str | None = None  # shown to the seat when it is asked again


def _open_round(councils: Sequence[Council], seats: Sequence[Seat], rnd: int, stats: RunStats,
                progress: Progress | None) -> list[_Turn]:
    """The turns to ask this round, in council then seat order; seats that cannot move abstain now."""
    turns: list[_Turn] = []
    for c in councils:
        for si, s in enumerate(seats):
            if rnd == 0 or s.agent in c.last_endorse:
                turns.append(_Turn(c, c.seat(s), si))  # a swapped seat: its stand-in's engine and persona
            else:  # no accepted round-0 proposal: STRICT would reject every later move
                _apply(c, {"agent": s.agent, "round": rnd, "force": "abstain",
                           "abstain_reason": "no round-0 proposal"})
                stats.abstentions["no round-0 proposal"] += 1
                if progress:
                    progress(0, 1)
    return turns


def _conversation(t: _Turn, rnd: int, ask: _Ask) -> list[dict[str, str]]:
    c, s = t.council, t.seat
    seat = seat_for(c, s, ask.P)
    pub = c.task.public()
    if rnd == 0:
        return pr.round0_messages(pub, seat, ask.P)
    pos = {a: c.position.get(a) for a in ask.agents}
    return pr.move_messages(pub, seat, s.agent, c.entries, pos, ask.P, retry_reason=t.last_reason)


def _ask_batch(batch: list[_Turn], profile: str, cands: tuple[str, ...], rnd: int, attempt: int, ask: _Ask,
               stats: RunStats) -> list[Any]:
    """One ``chat`` call for the turns sharing a profile and candidate set; records the batch."""
    convs, seeds = [], []
    for t in batch:
        convs.append(_conversation(t, rnd, ask))
        seeds.append(seat_seed(ask.root_seed, t.council, t.seat_index, rnd, attempt))
    schema = (pr.envelope_schema(cands, ask.max_chars) if rnd == 0
              else pr.move_schema(cands, ask.agents, ask.max_chars))
    t0 = time.perf_counter()
    outs = ask.engines[profile].chat(convs, temperature=ask.temperature, top_p=ask.top_p,
                                     max_tokens=ask.max_tokens, seed=seeds, json_schema=schema)
    wall = time.perf_counter() - t0
    stats.batches.append({"round": rnd, "attempt": attempt, "profile": profile, "n": len(convs),
                          "n_cached": int(sum(bool(getattr(o, "cached", False)) for o in outs)),
                          "wall_s": wall, "new_tokens": int(sum(o.completion_tokens or 0 for o in outs)),
                          "computed_new_tokens": int(sum(o.completion_tokens or 0 for o in outs
                                                         if not getattr(o, "cached", False)))})
    return outs


def _judge(out: Any, c: Council, agent: str, rnd: int) -> tuple[dict | None, str | None]:
    """A reply -> (move, None) when parsed and accepted by ``STRICT``, else (move or None, reason)."""
    if rnd == 0:
        env, reason = parse_envelope(out, c.task)
        move = None
        if env is not None:
            move = {"agent": agent, "round": 0, "force": "propose", "answer": env["answer"],
                    "confidence": pr.rubric_probability(env["confidence"], c.task.K),
                    "text": str(env.get("reasoning") or ""), "evidence": str(env.get("evidence") or ""),
                    "rubric": env["confidence"]}
    else:
        move, reason = build_move(out, c, agent, rnd)
    if move is not None:
        reason = check_move(c, move)
    return move, reason


def _turn_record(t: _Turn, rnd: int, attempt: int, out: Any, move: dict | None, reason: str | None
                 ) -> dict[str, Any]:
    c, s = t.council, t.seat
    return {"trace_id": c.trace_id, "task_id": c.task.task_id, "dataset": c.task.dataset,
            "condition": c.condition, "gen_seed": c.gen_seed, "agent": s.agent,
            "profile": s.profile, "persona": s.persona, "swapped": s.agent in c.swaps,
            "adversary": s.agent in c.adversaries, "round": rnd,
            "attempt": attempt, "text": out.text, "conformed": bool(out.conformed),
            "legal": reason is None, "reason": reason,
            "force": None if move is None else move["force"],
            "answer": None if move is None else move.get("answer"),
            "prompt_tokens": int(out.prompt_tokens or 0),
            "completion_tokens": int(out.completion_tokens or 0),
            "cached": bool(getattr(out, "cached", False)),
            "finish_reason": getattr(out, "finish_reason", None)}


def _attempt(pending: list[_Turn], rnd: int, attempt: int, ask: _Ask, stats: RunStats,
             progress: Progress | None) -> list[_Turn]:
    """Ask every pending turn once (batched per profile and candidate set); returns those to retry."""
    groups: dict[tuple[str, tuple[str, ...]], list[_Turn]] = {}
    for t in pending:
        groups.setdefault((t.seat.profile, t.council.task.candidates), []).append(t)
    retry: list[_Turn] = []
    for (profile, cands), batch in groups.items():
        outs = _ask_batch(batch, profile, cands, rnd, attempt, ask, stats)
        for t, out in zip(batch, outs):
            move, reason = _judge(out, t.council, t.seat.agent, rnd)
            stats.turns.append(_turn_record(t, rnd, attempt, out, move, reason))
            if reason is None:
                move["attempts"] = attempt + 1
                t.move = move
                if progress:
                    progress(0, 1)
            else:
                stats.illegal[_reason_key(reason)] += 1
                t.last_reason = reason
                retry.append(t)
    return retry


def _abstain(t: _Turn, rnd: int, max_retries: int, stats: RunStats, progress: Progress | None) -> None:
    """Out of retries: an abstention, with the last reason."""
    t.move = {"agent": t.seat.agent, "round": rnd, "force": "abstain",
              "abstain_reason": t.last_reason, "attempts": max_retries + 1}
    stats.abstentions[_reason_key(t.last_reason)] += 1
    if progress:
        progress(0, 1)


def run_councils(councils: Sequence[Council], seats: Sequence[Seat], engines: Mapping[str, Any], *,
                 rounds: int, P: dict, root_seed: int = 0, temperature: float = 0.7, top_p: float = 1.0,
                 max_tokens: int = 160, max_chars: int = 160, max_retries: int = 2,
                 progress: Progress | None = None) -> RunStats:
    """Deliberate every council for ``rounds`` rounds in lockstep; moves land in ``council.moves``."""
    stats = RunStats()
    ask = _Ask(engines, [s.agent for s in seats], P, root_seed, temperature, top_p, max_tokens, max_chars)
    if progress:
        progress(len(councils) * len(seats) * rounds, 0)
    # engines held one at a time: each profile's turns of a round, retries included, before the
    # next profile loads. A turn's reply depends only on the council state at the round's start,
    # its seed and its own last reason, so this order gives the same moves as attempt by attempt.
    by_engine = bool(getattr(engines, "swapped", False))
    for rnd in range(rounds):
        turns = _open_round(councils, seats, rnd, stats, progress)
        groups = ([[t for t in turns if t.seat.profile == p] for p in dict.fromkeys(t.seat.profile for t in turns)]
                  if by_engine else [turns])
        for pending in groups:
            for attempt in range(max_retries + 1):
                if not pending:
                    break
                pending = _attempt(pending, rnd, attempt, ask, stats, progress)
            for t in pending:
                _abstain(t, rnd, max_retries, stats, progress)
        # simultaneous moves: everyone saw the same earlier rounds; append in seat order
        for t in turns:
            _apply(t.council, t.move)
    return stats
