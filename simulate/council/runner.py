"""The lockstep council runner.

Every seat-turn of a round, across all councils (tasks x conditions x generation seeds), goes to
the engine as one ``chat`` call per model profile (and candidate set). Round 0 asks each seat for
a JSON envelope (answer, reasoning, evidence, rubric-anchored confidence); rounds 1..R-1 ask for
one typed move (propose / concede / challenge with a target agent) through ``json_schema``.
Every move is checked by ``aggregate.STRICT``, the protocol automaton the aggregator uses: an
illegal move is re-asked (with the rejection reason and a fresh seed) up to ``max_retries``
times, then recorded as an ``abstain`` move with its reason and counted. Abstentions carry no
endorsement; under ``STRICT`` with ``on_violation: skip`` they are the only rejected moves.

Engines only need ``chat(conversations, temperature=, top_p=, max_tokens=, seed=, json_schema=)``
returning objects with ``text, parsed, conformed, prompt_tokens, completion_tokens, cached,
finish_reason`` (``serving.Engine``; scripted engines in the tests).
"""
from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from aggregate import STRICT
from aggregate.errors import TraceError
from aggregate.trace import Trace
from simulate.council import prompts as pr
from simulate.council.data import Task

Progress = Callable[[int, int], None]  # update(total, k): k == 0 sets the total, k > 0 advances


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
    moves: list[dict[str, Any]] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)  # transcript shown to seats
    position: dict[str, str | None] = field(default_factory=dict)
    last_endorse: dict[str, int] = field(default_factory=dict)  # agent -> index of its latest +1 move

    @property
    def trace_id(self) -> str:
        return f"{self.task.task_id}-s{self.gen_seed}"

    def to_trace(self) -> dict[str, Any]:
        return {"task_id": self.trace_id, "question_id": self.task.task_id, "candidates": list(self.task.candidates),
                "gold": self.task.gold, "moves": self.moves, "dataset": self.task.dataset,
                "condition": self.condition, "adversaries": sorted(self.adversaries), "gen_seed": self.gen_seed}


def task_key(task_id: str) -> int:
    """A stable integer per task id (seeds must not depend on list position: resumability)."""
    return int(hashlib.sha256(task_id.encode()).hexdigest()[:7], 16)


def seat_seed(root: int, c: Council, seat_index: int, rnd: int, attempt: int) -> int:
    from chorus.seeding import call_seed
    return call_seed(root, c.gen_seed, task_key(c.task.task_id), seat_index, rnd, attempt)


def make_councils(tasks: Sequence[Task], conditions: Sequence[tuple[str, Sequence[str]]],
                  gen_seeds: Sequence[int]) -> list[Council]:
    return [Council(task=t, condition=name, adversaries=frozenset(adv), gen_seed=s)
            for name, adv in conditions for s in gen_seeds for t in tasks]


def system_for(c: Council, seat: Seat, P: dict) -> str:
    adv = pr.adversary_preamble(c.task, P) if seat.agent in c.adversaries else None
    return pr.system_text(seat.persona, P, adv)


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


def run_councils(councils: Sequence[Council], seats: Sequence[Seat], engines: Mapping[str, Any], *,
                 rounds: int, P: dict, root_seed: int = 0, temperature: float = 0.7, top_p: float = 1.0,
                 max_tokens: int = 160, max_chars: int = 160, max_retries: int = 2,
                 progress: Progress | None = None) -> RunStats:
    """Deliberate every council for ``rounds`` rounds in lockstep; moves land in ``council.moves``."""
    stats = RunStats()
    agents = [s.agent for s in seats]
    if progress:
        progress(len(councils) * len(seats) * rounds, 0)
    for rnd in range(rounds):
        pending: list[tuple[int, int]] = []  # (council index, seat index)
        for ci, c in enumerate(councils):
            for si, s in enumerate(seats):
                if rnd == 0 or s.agent in c.last_endorse:
                    pending.append((ci, si))
                else:  # no accepted round-0 proposal: STRICT would reject every later move
                    _apply(c, {"agent": s.agent, "round": rnd, "force": "abstain",
                               "abstain_reason": "no round-0 proposal"})
                    stats.abstentions["no round-0 proposal"] += 1
                    if progress:
                        progress(0, 1)
        accepted: dict[tuple[int, int], dict] = {}
        last_reason: dict[tuple[int, int], str] = {}
        for attempt in range(max_retries + 1):
            if not pending:
                break
            groups: dict[tuple[str, tuple[str, ...]], list[tuple[int, int]]] = {}
            for ci, si in pending:
                groups.setdefault((seats[si].profile, councils[ci].task.candidates), []).append((ci, si))
            retry: list[tuple[int, int]] = []
            for (profile, cands), reqs in groups.items():
                convs, seeds = [], []
                for ci, si in reqs:
                    c, s = councils[ci], seats[si]
                    system = system_for(c, s, P)
                    pub = c.task.public()
                    if rnd == 0:
                        convs.append(pr.round0_messages(pub, system, P))
                    else:
                        pos = {a: c.position.get(a) for a in agents}
                        convs.append(pr.move_messages(pub, system, s.agent, c.entries, pos, P,
                                                      retry_reason=last_reason.get((ci, si))))
                    seeds.append(seat_seed(root_seed, c, si, rnd, attempt))
                schema = pr.envelope_schema(cands, max_chars) if rnd == 0 else pr.move_schema(cands, agents, max_chars)
                t0 = time.perf_counter()
                outs = engines[profile].chat(convs, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                                             seed=seeds, json_schema=schema)
                wall = time.perf_counter() - t0
                stats.batches.append({"round": rnd, "attempt": attempt, "profile": profile, "n": len(convs),
                                      "n_cached": int(sum(bool(getattr(o, "cached", False)) for o in outs)),
                                      "wall_s": wall, "new_tokens": int(sum(o.completion_tokens or 0 for o in outs)),
                                      "computed_new_tokens": int(sum(o.completion_tokens or 0 for o in outs
                                                                     if not getattr(o, "cached", False)))})
                for (ci, si), out in zip(reqs, outs):
                    c, s = councils[ci], seats[si]
                    if rnd == 0:
                        env, reason = parse_envelope(out, c.task)
                        move = None
                        if env is not None:
                            move = {"agent": s.agent, "round": 0, "force": "propose", "answer": env["answer"],
                                    "confidence": pr.rubric_probability(env["confidence"], c.task.K),
                                    "text": str(env.get("reasoning") or ""), "evidence": str(env.get("evidence") or ""),
                                    "rubric": env["confidence"]}
                    else:
                        move, reason = build_move(out, c, s.agent, rnd)
                    if move is not None:
                        reason = check_move(c, move)
                    stats.turns.append({"trace_id": c.trace_id, "task_id": c.task.task_id, "dataset": c.task.dataset,
                                        "condition": c.condition, "gen_seed": c.gen_seed, "agent": s.agent,
                                        "profile": s.profile, "adversary": s.agent in c.adversaries, "round": rnd,
                                        "attempt": attempt, "text": out.text, "conformed": bool(out.conformed),
                                        "legal": reason is None, "reason": reason,
                                        "force": None if move is None else move["force"],
                                        "answer": None if move is None else move.get("answer"),
                                        "prompt_tokens": int(out.prompt_tokens or 0),
                                        "completion_tokens": int(out.completion_tokens or 0),
                                        "cached": bool(getattr(out, "cached", False)),
                                        "finish_reason": getattr(out, "finish_reason", None)})
                    if reason is None:
                        move["attempts"] = attempt + 1
                        accepted[(ci, si)] = move
                        if progress:
                            progress(0, 1)
                    else:
                        stats.illegal[_reason_key(reason)] += 1
                        last_reason[(ci, si)] = reason
                        retry.append((ci, si))
            pending = retry
        for key in pending:  # out of retries: an abstention, with the last reason
            ci, si = key
            accepted[key] = {"agent": seats[si].agent, "round": rnd, "force": "abstain",
                             "abstain_reason": last_reason[key], "attempts": max_retries + 1}
            stats.abstentions[_reason_key(last_reason[key])] += 1
            if progress:
                progress(0, 1)
        # simultaneous moves: everyone saw the same earlier rounds; append in seat order
        for ci, c in enumerate(councils):
            for si in range(len(seats)):
                if (ci, si) in accepted:
                    _apply(c, accepted[(ci, si)])
    return stats
