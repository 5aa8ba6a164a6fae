"""Prompt templates are data (prompts/debate_v1.yaml); this module renders them. Pure: no
model code. Every conversation the protocol and the interventions send is built here."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from chorus.core.config import load_prompt_file
from chorus.simulate.debate.questions import Item

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
DEFAULT_PROMPTS = "debate_v1"


def load_prompts(name: str = DEFAULT_PROMPTS, like: str = DEFAULT_PROMPTS) -> dict[str, Any]:
    """Debate prompts by name or path; a user's file must hold every template of the shipped ``like``."""
    return load_prompt_file(name, PROMPTS_DIR, like)


def labels_text(labels: Sequence[str]) -> str:
    labs = list(labels)
    return ", ".join(labs[:-1]) + " or " + labs[-1] if len(labs) > 1 else labs[0]


def instruction(item: Item, P: dict) -> str:
    """The answer-format line: a label for an item with options, a number for a numeric one."""
    if item.numeric:
        return P["instruction_numeric"]
    return P["instruction"].format(labels=labels_text(item.labels))


def question_block(item: Item, P: dict) -> str:
    if item.numeric:
        return P["round0_numeric"].format(question=item.question, instruction=instruction(item, P))
    if item.word_labels and [o.lower() for o in item.options] == [lab.lower() for lab in item.labels]:
        opts = P["options_word"].format(labels=" / ".join(item.labels))
    else:
        opts = "\n".join(P["options_letter"].format(label=lab, text=t) for lab, t in zip(item.labels, item.options))
    instr = P["instruction"].format(labels=labels_text(item.labels))
    return P["round0"].format(question=item.question, options=opts, instruction=instr)


def _base(item: Item, P: dict) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": item.system}] if item.system else []
    return msgs + [{"role": "user", "content": question_block(item, P)}]


def peer_block(name: str, text: str, P: dict) -> str:
    return P["peer"].format(name=name, text=text.strip())


def round0_messages(item: Item, P: dict) -> list[dict[str, str]]:
    return _base(item, P)


def debate_messages(item: Item, own_prev: str, peers: Sequence[tuple[str, str]], P: dict) -> list[dict[str, str]]:
    """Round r >= 1 of debate: the question, the agent's own previous response (as its own
    turn), then the peers' previous responses. ``peers``: (display name, text) pairs."""
    instr = instruction(item, P)
    body = "\n\n".join(peer_block(n, t, P) for n, t in peers)
    return _base(item, P) + [{"role": "assistant", "content": own_prev.strip()},
                             {"role": "user", "content": P["debate"].format(peers=body, instruction=instr)}]


def reflection_messages(item: Item, own_prev: str, P: dict) -> list[dict[str, str]]:
    """Round r >= 1 of the matched control: the same turns, only the agent's own response."""
    instr = instruction(item, P)
    return _base(item, P) + [{"role": "assistant", "content": own_prev.strip()},
                             {"role": "user", "content": P["reflection"].format(instruction=instr)}]


def turn_messages(item: Item, agent: int, rnd: int, condition: str, prev: Sequence[str], P: dict) -> list[dict[str, str]]:
    """The conversation agent ``agent`` answers at round ``rnd``; ``prev``: every agent's
    response at round rnd - 1 (unused at round 0)."""
    if rnd == 0:
        return round0_messages(item, P)
    if condition == "reflection":
        return reflection_messages(item, prev[agent], P)
    if condition == "debate":
        peers = [(P["peer_name"].format(k=j + 1), prev[j]) for j in range(len(prev)) if j != agent]
        return debate_messages(item, prev[agent], peers, P)
    raise ValueError(f"unknown condition {condition!r}")


def readout_prefill(messages: list[dict[str, str]], partial: str, P: dict) -> list[dict[str, str]]:
    """Append the fixed "answer now" cue after ``partial`` (the receiver's rationale so far, ''
    at f = 0) as an assistant prefill whose next token is the option label."""
    sep = P["answer_now_sep"] if partial.strip() else ""
    return list(messages) + [{"role": "assistant", "content": partial.rstrip() + sep + P["answer_now"]}]
