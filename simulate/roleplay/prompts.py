"""Prompt templates are data (prompts/roleplay_v1.yaml); this module renders a memory state into a
conversation. Pure: no model code."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from chorus.core.config import load_prompt_file
from chorus.simulate.roleplay.agent_memory import Memory

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
DEFAULT_PROMPTS = "roleplay_v1"


def load_prompts(name: str = DEFAULT_PROMPTS) -> dict[str, Any]:
    """Role-play prompts by name or path; a user's file must hold every template of the shipped ones."""
    return load_prompt_file(name, PROMPTS_DIR, DEFAULT_PROMPTS)


def _q(text: str | None, P: dict) -> str:
    return text.strip() if text and text.strip() else P["missing"]


def demographics_text(demo: dict) -> str:
    return ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in demo.items()) or "not given"


def render(mem: Memory, P: dict) -> list[dict[str, str]]:
    """System (persona) + one user message whose blocks are the memory components, in order."""
    blocks = [P["task"].format(topic=mem.topic)]
    if mem.initial_text is not None:   # None: ablated, the block is left out (not shown as missing)
        blocks.append(P["initial"].format(text=_q(mem.initial_text, P), stance=_fmt_stance(mem.initial_stance)))
    for rv in mem.rounds:
        lines = [P["round_header"].format(r=rv.round, partner=rv.partner_name)]
        if rv.own_tweet is not None:
            lines.append(P["own_tweet"].format(text=_q(rv.own_tweet, P)))
        if rv.partner_tweet is not None:
            lines.append(P["partner_tweet"].format(partner=rv.partner_name, text=_q(rv.partner_tweet, P)))
        for is_self, text in rv.utterances:
            lines.append(P["utterance_self"].format(text=_q(text, P)) if is_self else
                         P["utterance_partner"].format(partner=rv.partner_name, text=_q(text, P)))
        blocks.append("\n".join(lines))
    if mem.task == "tweet":
        blocks.append(P["ask_tweet"].format(r=mem.round))
    elif mem.task == "chat":
        blocks.append(P["ask_chat"].format(partner=mem.rounds[-1].partner_name))
    else:
        blocks.append(P["ask_final"])
    return [{"role": "system", "content": P["system"].format(demographics=demographics_text(mem.demographics))},
            {"role": "user", "content": "\n\n".join(blocks)}]


def _fmt_stance(s: float) -> str:
    return str(int(s)) if float(s).is_integer() else f"{s:g}"


def classifier_messages(kind: str, topic: str, text: str, P: dict) -> list[dict[str, str]]:
    if kind not in ("stance", "on_topic"):
        raise ValueError(f"classifier kind must be stance or on_topic, got {kind!r}")
    return [{"role": "system", "content": P["classifier_system"]},
            {"role": "user", "content": P[kind].format(topic=topic, text=text.strip())}]
