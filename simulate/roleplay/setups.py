"""The two setups, batch-first: one engine call per turn-step across all groups.

- full dynamics: after the (human) initial opinions every post, chat utterance and final opinion
  is written by the agents; each agent's memory holds the simulated history it saw.
- next message: the history is the human one; the agent writes each next message.

A chat keeps the human chat's speaker order and length (optionally only its first
``max_utterances``), so simulated and human groups have the same slots. Each request carries its
own seed (derived from the run seed and the slot), so results go through the call store and a
killed run resumes."""
from __future__ import annotations

import copy
import time
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from chorus.simulate.roleplay.data import Group
from chorus.simulate.roleplay.agent_memory import build_memory
from chorus.simulate.roleplay.prompts import render
from chorus.core.seeding import stable_int
from chorus.core.config import InputError

SETUPS = ("full_dynamics", "next_message")
COLUMNS = ["source", "setup", "group_id", "topic", "truth_framed", "participant", "kind", "round", "k",
           "partner", "text", "prompt_tokens", "completion_tokens", "finish_reason", "cached"]


def slot_seed(root: int, *parts: Any) -> int:
    """A per-request seed from the run seed and the slot's identity (stable across runs)."""
    key = stable_int("|".join(map(str, parts)), bits=32, algo="crc32")
    return int(np.random.SeedSequence([root, key]).generate_state(1, dtype=np.uint64)[0] % (2**63))


def truncate_chats(g: Group, max_utterances: int | None) -> Group:
    if max_utterances is None:
        return g
    g = copy.deepcopy(g)
    for rd in g.rounds:
        for c in rd.chats:
            c.utterances = c.utterances[:max_utterances]
    return g


def steps(groups: list[Group]) -> list[tuple[tuple, list[tuple[int, str, tuple]]]]:
    """Turn-steps in protocol order: (step key, [(group index, participant, slot)]). Round r:
    every post, then chat utterance k = 0, 1, ...; at the end every final opinion."""
    out: dict[tuple, list] = {}
    n_rounds = max(len(g.rounds) for g in groups)
    for r in range(n_rounds):
        for gi, g in enumerate(groups):
            if r < len(g.rounds):
                for pid in g.ids:
                    out.setdefault((r, 0, 0), []).append((gi, pid, ("tweet", r, None)))
                for c in g.rounds[r].chats:
                    for k, u in enumerate(c.utterances):
                        out.setdefault((r, 1, k), []).append((gi, u.speaker, ("chat", r, k)))
    for gi, g in enumerate(groups):
        for pid in g.ids:
            out.setdefault((n_rounds, 2, 0), []).append((gi, pid, ("final", None, None)))
    return sorted(out.items(), key=lambda kv: kv[0])


def _blank(g: Group) -> Group:
    """The simulated copy of a group: human initial opinions kept, everything later emptied."""
    s = copy.deepcopy(g)
    for rd in s.rounds:
        rd.tweets = {pid: None for pid in rd.tweets}
        rd.tweet_on_topic = {}
        for c in rd.chats:
            for u in c.utterances:
                u.text, u.on_topic = "", None
    for p in s.participants:
        p.final = None
    return s


def clean(text: str) -> str:
    """Strip whitespace and one pair of wrapping quotes (the prompt shows messages quoted)."""
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "\"'":
        t = t[1:-1].strip()
    return t


def _row(source, setup, g: Group, pid, slot, text, comp=None) -> dict:
    kind, r, k = slot
    if kind == "tweet":
        partner = g.partner(pid, r)
    elif kind == "chat":
        partner = g.partner(pid, r)
    else:
        partner = None
    return {"source": source, "setup": setup, "group_id": g.group_id, "topic": g.topic,
            "truth_framed": g.truth_framed, "participant": pid, "kind": kind,
            "round": (r + 1) if r is not None else (len(g.rounds) + 1 if kind == "final" else 0),
            "k": -1 if k is None else k, "partner": partner, "text": text,
            "prompt_tokens": comp.prompt_tokens if comp else None,
            "completion_tokens": comp.completion_tokens if comp else None,
            "finish_reason": comp.finish_reason if comp else None, "cached": comp.cached if comp else None}


def initial_rows(source: str, setup: str, groups: list[Group]) -> list[dict]:
    return [_row(source, setup, g, p.id, ("initial", None, None), p.initial.text) for g in groups for p in g.participants]


def human_rows(groups: list[Group], max_utterances: int | None = None) -> pd.DataFrame:
    """The human messages in the same long format (source = setup = "human")."""
    rows = initial_rows("human", "human", groups)
    for g in groups:
        g = truncate_chats(g, max_utterances)
        for _, items in steps([g]):
            for _, pid, slot in items:
                kind, r, k = slot
                if kind == "tweet":
                    text = g.rounds[r].tweets.get(pid)
                elif kind == "chat":
                    text = g.rounds[r].chat_of(pid).utterances[k].text
                else:
                    text = g.participant(pid).final.text
                rows.append(_row("human", "human", g, pid, slot, text))
    return pd.DataFrame(rows, columns=COLUMNS)


def simulate(engine: Any, groups: list[Group], setup: str, P: dict, *, source: str, seed: int,
             temperature: float, top_p: float, max_tokens: int, max_utterances: int | None = None,
             memory_ablate: Iterable[str] = (),
             progress: Callable[[int, int], None] | None = None) -> tuple[pd.DataFrame, dict]:
    """Run one setup on every group; returns (messages, info). ``memory_ablate``: memory components
    every agent's prompt leaves out (``agent_memory.ABLATABLE``; the memory-ablation probe)."""
    if setup not in SETUPS:
        raise InputError(f"setup must be one of {SETUPS}, got {setup!r}")
    human = [truncate_chats(g, max_utterances) for g in groups]
    hist = [_blank(g) for g in human] if setup == "full_dynamics" else human
    plan = steps(human)
    total = sum(len(v) for _, v in plan)
    if progress:
        progress(total, 0)
    rows = initial_rows(source, setup, human)
    info: dict[str, Any] = {"setup": setup, "source": source, "n_groups": len(groups), "n_requests": total,
                            "n_steps": len(plan), "batches": [], "n_empty": 0, "n_truncated": 0}
    t_all = time.perf_counter()
    model_s = new_tokens = 0
    for key, items in plan:
        convs = [render(build_memory(hist[gi], pid, slot, memory_ablate), P) for gi, pid, slot in items]
        seeds = [slot_seed(seed, source, setup, human[gi].group_id, pid, *slot) for gi, pid, slot in items]
        t0 = time.perf_counter()
        outs = engine.chat(convs, temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seeds)
        dt = time.perf_counter() - t0
        computed = sum(o.completion_tokens for o in outs if not o.cached)
        model_s += dt
        new_tokens += computed
        info["batches"].append({"step": list(key), "size": len(items), "seconds": dt, "new_tokens": computed,
                                "from_store": sum(o.cached for o in outs)})
        for (gi, pid, slot), o in zip(items, outs):
            text = clean(o.text)
            info["n_empty"] += not text
            info["n_truncated"] += o.finish_reason == "length"
            if setup == "full_dynamics":  # the agents' own history grows
                kind, r, k = slot
                h = hist[gi]
                if kind == "tweet":
                    h.rounds[r].tweets[pid] = text
                elif kind == "chat":
                    h.rounds[r].chat_of(pid).utterances[k].text = text
            rows.append(_row(source, setup, human[gi], pid, slot, text, o))
        if progress:
            progress(total, len(items))
    info.update(wall_s=time.perf_counter() - t_all, model_s=model_s, new_tokens=new_tokens)
    return pd.DataFrame(rows, columns=COLUMNS), info
