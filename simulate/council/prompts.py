"""Prompt templates are data (prompts/council_v2.yaml); this module renders them and builds the
structured-output schemas. Pure: no model code. Honest prompts are rendered from
``Task.public()`` only; ``adversary_preamble`` is the one place the correct answer enters.

Layout: what the seats of a council share (task, candidates, transcript, instructions) comes
first and the seat's own text (persona, name, a retry reason) last, so an engine's prefix cache
computes the shared part once per council and round."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from chorus.core.config import load_prompt_file
from chorus.simulate.council.data import Task

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
DEFAULT_PROMPTS = "council_v2"
#: rubric levels of the round-0 confidence, weakest first
RUBRIC = ("guess", "lean", "likely", "confident", "certain")
FORCES = ("propose", "concede", "challenge")


def load_prompts(name: str = DEFAULT_PROMPTS) -> dict[str, Any]:
    """Council prompts by name or path; a user's file must hold every template of the shipped ones (its
    personas are its own)."""
    return load_prompt_file(name, PROMPTS_DIR, DEFAULT_PROMPTS, ("personas",))


def rubric_probability(level: str, K: int) -> float:
    """Rubric anchor -> probability: 'guess' is chance (1/K), 'certain' is 1, evenly between."""
    i = RUBRIC.index(level)
    return 1.0 / K + (1.0 - 1.0 / K) * i / (len(RUBRIC) - 1)


def _clip(text: str, n: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def task_text(pub: dict[str, Any], P: dict) -> str:
    """A council task as the seats read it: its data set's template (multiple choice, PubMedQA,
    a TruthfulQA claim, yes/no, binary). The debate's ``question_block`` renders its own items."""
    if pub["options"] is not None:
        opts = "\n".join(P["option"].format(label=c, text=t) for c, t in zip(pub["candidates"], pub["options"]))
        return P["question"]["mc"].format(question=pub["question"], options=opts)
    if pub["dataset"] == "pubmedqa":
        return P["question"]["pubmedqa"].format(question=pub["question"])
    if pub["dataset"] == "truthfulqa_claims":  # a question with one proposed answer to judge
        return P["question"]["qa_claim"].format(question=pub["question"])
    if list(pub["candidates"]) == ["yes", "no"]:
        return P["question"]["yesno"].format(question=pub["question"])
    return P["question"]["binary"].format(question=pub["question"])


def candidates_text(pub: dict[str, Any]) -> str:
    return ", ".join(pub["candidates"])


def adversary_preamble(task: Task, P: dict) -> str:
    """The stealth role (BDA paper §F.2); it names the correct answer, so it is only ever an
    adversarial seat's own system message (or a baseline's under the fair attack)."""
    return P["adversary"].format(correct=task.candidate_text(task.gold))


@dataclass(frozen=True)
class SeatText:
    """What a seat is told about itself. ``persona`` ends its user turn (seats differ there, so it
    follows everything they share); ``role``, the stealth role or None, is its system message,
    prepended to the standard council prompt as in BDA §F.2."""

    persona: str
    role: str | None = None


def seat_text(persona: str, P: dict, adversary: str | None = None) -> SeatText:
    if persona not in P["personas"]:
        raise KeyError(f"unknown persona {persona!r} (prompts define {', '.join(P['personas'])})")
    return SeatText(P["personas"][persona], adversary)


def _seat_messages(seat: SeatText, user: str) -> list[dict[str, str]]:
    return ([{"role": "system", "content": seat.role}] if seat.role else []) + [{"role": "user", "content": user}]


def round0_messages(pub: dict[str, Any], seat: SeatText, P: dict) -> list[dict[str, str]]:
    user = P["round0"].format(question_block=task_text(pub, P), candidates=candidates_text(pub),
                              rubric=P["rubric"], persona=seat.persona)
    return _seat_messages(seat, user)


def transcript_text(entries: Sequence[dict[str, Any]], P: dict) -> str:
    """``entries``: dicts with round, agent, force, answer, target, target_answer, text
    (accepted moves and abstentions of earlier rounds, in order)."""
    T = P["transcript"]
    lines, cur = [], None
    for e in entries:
        if e["round"] != cur:
            cur = e["round"]
            lines.append(T["round"].format(round=cur))
        lines.append(T[e["force"]].format(agent=e["agent"], answer=e.get("answer"), target=e.get("target"),
                                          target_answer=e.get("target_answer"), text=_clip(e.get("text") or "")))
    return "\n".join(lines)


def move_messages(pub: dict[str, Any], seat: SeatText, me: str, entries: Sequence[dict[str, Any]],
                  positions: dict[str, str | None], P: dict, retry_reason: str | None = None) -> list[dict[str, str]]:
    pos = ", ".join(f"{a}: {p if p is not None else 'none'}" for a, p in positions.items())
    user = P["move"].format(question_block=task_text(pub, P), candidates=candidates_text(pub),
                            transcript=transcript_text(entries, P), positions=pos, persona=seat.persona, me=me)
    if retry_reason:
        user += "\n" + P["retry"].format(reason=retry_reason)
    return _seat_messages(seat, user)


def envelope_schema(candidates: Sequence[str], max_chars: int = 200, with_evidence: bool = True) -> dict[str, Any]:
    props: dict[str, Any] = {"answer": {"enum": list(candidates)},
                             "reasoning": {"type": "string", "maxLength": max_chars}}
    if with_evidence:
        props["evidence"] = {"type": "string", "maxLength": max_chars // 2}
    props["confidence"] = {"enum": list(RUBRIC)}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def move_schema(candidates: Sequence[str], agents: Sequence[str], max_chars: int = 160) -> dict[str, Any]:
    """One schema for every seat of a round (so a round stays one batch per profile); naming
    oneself or 'none' where a target is needed is left to the protocol automaton to reject."""
    props = {"move": {"enum": list(FORCES)}, "target": {"enum": ["none", *agents]},
             "answer": {"enum": list(candidates)}, "reason": {"type": "string", "maxLength": max_chars}}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


# -- baselines -------------------------------------------------------------------------------------
def responses_text(responses: Sequence[tuple[str, str]], P: dict) -> str:
    return "\n".join(P["moa_response"].format(k=k + 1, answer=a, text=_clip(t))
                     for k, (a, t) in enumerate(responses))


def moa_layer_messages(pub, seat: SeatText, responses, P: dict) -> list[dict[str, str]]:
    user = P["moa_layer"].format(question_block=task_text(pub, P), candidates=candidates_text(pub),
                                 responses=responses_text(responses, P), rubric=P["rubric"], persona=seat.persona)
    return _seat_messages(seat, user)


def moa_synth_messages(pub, responses, P: dict) -> list[dict[str, str]]:
    user = P["moa_synth"].format(question_block=task_text(pub, P), candidates=candidates_text(pub),
                                 responses=responses_text(responses, P), rubric=P["rubric"])
    return [{"role": "user", "content": user}]


def arg_statement(pub, candidate: str, P: dict) -> str:
    if pub["options"] is None and list(pub["candidates"]) == ["true", "false"]:
        return P["arg_statement"]["binary"].format(candidate=candidate)
    if pub["options"] is not None:
        candidate = f"{candidate} ({pub['options'][pub['candidates'].index(candidate)]})"
    return P["arg_statement"]["other"].format(candidate=candidate)


def arg_generate_messages(pub, statement: str, side: str, P: dict, strength: str | None = None) -> list[dict[str, str]]:
    """``strength``: None (the clean generator) or 'strong' / 'weak' (the fair attack's generator)."""
    side_text = P["arg_side"][side]
    user = P["arg_generate"].format(question_block=task_text(pub, P), statement=statement, side=side_text)
    if strength is not None:
        last = P["arg_fair_attack"][strength].format(side=side_text)
        user = user.rsplit("\n", 1)[0] + "\n" + last
    return [{"role": "user", "content": user}]


def arg_evaluate_messages(pub, statement: str, side: str, argument: str, P: dict) -> list[dict[str, str]]:
    user = P["arg_evaluate"].format(question_block=task_text(pub, P), statement=statement,
                                    side=P["arg_side"][side], argument=_clip(argument, 400))
    return [{"role": "user", "content": user}]
