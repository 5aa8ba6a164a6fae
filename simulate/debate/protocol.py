"""Debate and the matched reflection control, run in lockstep.

Round 0: I agents answer each question independently; it is shared by both conditions (the
same seeds and prompts), so debate and reflection branch from identical initial answers and
the comparison is paired. Round r >= 1: in debate each agent sees the question, its own
round r-1 response (as its own turn) and the other agents' round r-1 responses; in
reflection it sees the same turns without the peers. Updates are simultaneous.

Every agent-turn of a round, across all questions and both conditions, goes to the engine as
one batch. Every request seed derives from (config seed, question, agent, round, condition),
so results do not depend on batching, and the call store makes reruns free.

Exclusions are counted, never silent: numeric items (no option set) unless ``numeric=True``, and
a question whose prompt for any agent would not fit the context window (from that round on, per
condition). With ``numeric=True`` (``chorus debate run``) numeric items ride in the same batches
and their turns come back apart, as ``info["numeric_turns"]`` (``numeric.py``'s columns: the read
number in ``value``), so the label-scored turns table and every reader of it stay as they were.
Generations cut at the token limit are kept, flagged ``truncated`` and counted.

A run can also continue a stored debate from a later round (``start``: the round and every agent's
responses before it), with some replies fixed in advance (``given``): a counterfactual replay
(``interventions/counterfactual.py``) swaps one agent's reply at one round and lets the rest unfold
under the same seeds.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import pandas as pd

from chorus.core.config import InputError
from chorus.core.seeding import call_seed, stable_int
from chorus.simulate.debate.numeric import NUMERIC_TURN_COLUMNS, is_correct
from chorus.simulate.debate.parse import parse_answer, parse_numeric, read_number
from chorus.simulate.debate.prompts import turn_messages
from chorus.simulate.debate.questions import Item

CONDITION_KEY = {"shared": 0, "debate": 1, "reflection": 2, "vote": 3}  # vote: simulate/debate/voting.py

TURN_COLUMNS = ["qid", "family", "domain", "subdomain", "agent", "round", "condition", "shared", "response",
                "answer", "parsed", "truncated", "reference", "correct", "prompt_tokens", "completion_tokens",
                "cached", "seed"]


def qkey(qid: str) -> int:
    """A stable 31-bit integer key of a question id (for seed derivation)."""
    return stable_int(qid, bits=31)


def turn_seed(seed: int, qid: str, agent: int, rnd: int, condition: str) -> int:
    return call_seed(seed, qkey(qid), agent, rnd, CONDITION_KEY["shared" if rnd == 0 else condition])


def _fits(engine: Any, messages: list[dict], max_tokens: int) -> bool:
    return len(engine.render(messages).ids) + max_tokens <= engine.max_model_len


class NothingAsked(InputError):
    """Every question of a run was excluded before its first turn (each exclusion's reason counted)."""


def nothing_asked(n_items: int, excluded: list[dict[str, Any]]) -> NothingAsked:
    by: dict[str, int] = {}
    for e in excluded:
        by[e["reason"]] = by.get(e["reason"], 0) + 1
    reasons = "; ".join(f"{n} x {why}" for why, n in sorted(by.items(), key=lambda kv: -kv[1])) or "none given"
    return NothingAsked(f"all {n_items} questions were excluded before the first turn, so nothing was asked "
                        f"({reasons}); no result is written: shorten the prompts or lower generation.max_tokens")


def run_protocol(engine: Any, items: Sequence[Item], *, agents: int = 3, rounds: int = 3,
                 conditions: Sequence[str] = ("debate", "reflection"), temperature: float = 0.7,
                 top_p: float = 1.0, max_tokens: int = 2048, seed: int = 0, prompts: dict,
                 progress: Callable[[int, int], None] | None = None,
                 start: tuple[int, dict[str, list[str]]] | None = None,
                 given: Callable[[str, Item, int, int, list[dict], int], Any] | None = None,
                 numeric: bool = False) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Run debate and/or reflection on ``items``. Returns (turns table, info) where info has
    exclusions, batch sizes, token counts and wall time. ``progress(total, k)``: called once
    with k = 0 to announce the total, then with the number of turns just finished.

    ``start = (r0, prev)``: begin at round r0 >= 1 of every condition, from ``prev`` (question id ->
    every agent's response at round r0 - 1; questions missing there are not played); the table then
    holds rounds r0.. only. ``given(condition, item, agent, round, messages, seed)``: a reply fixed in
    advance (anything with a ``Completion``'s fields), or None to generate it."""
    P = prompts
    excluded: list[dict[str, Any]] = []
    scorable = []
    for it in items:
        if it.numeric and not numeric:
            excluded.append({"qid": it.id, "condition": "all", "round": 0, "reason": "numeric item (no option set)"})
        else:
            scorable.append(it)
    conds = list(conditions)
    r0 = 0
    active = {c: [it for it in scorable] for c in conds}
    prev: dict[str, dict[str, list[str]]] = {c: {} for c in conds}
    if start is not None:
        r0, before = start
        if r0 < 1:
            raise ValueError(f"start round must be >= 1 (round 0 is shared), got {r0}")
        active = {c: [it for it in scorable if it.id in before] for c in conds}
        prev = {c: {q: list(v) for q, v in before.items()} for c in conds}
    rows: list[dict[str, Any]] = []
    nrows: list[dict[str, Any]] = []  # numeric items' turns (kept out of the label-scored table)
    total = len(active[conds[0]]) * agents * ((1 if r0 == 0 else 0) + (rounds - max(r0, 1) + 1) * len(conds))
    if progress:
        progress(total, 0)
    batches = []
    t_start = time.perf_counter()
    gen_tokens = 0
    model_s = 0.0
    for r in range(r0, rounds + 1):
        jobs: list[tuple[str, Item, int, list[dict]]] = []  # (condition, item, agent, messages)
        groups = [("shared", active[conds[0]])] if r == 0 else [(c, active[c]) for c in conds]
        for cond, its in groups:
            keep = []
            for it in its:
                msgs = [turn_messages(it, a, r, cond, prev[cond].get(it.id, []) if cond != "shared" else [], P)
                        for a in range(agents)]
                if not all(_fits(engine, m, max_tokens) for m in msgs):
                    excluded.append({"qid": it.id, "condition": "all" if cond == "shared" else cond, "round": r,
                                     "reason": f"prompt + {max_tokens} new tokens exceeds the {engine.max_model_len}-token window"})
                    continue
                keep.append(it)
                jobs.extend((cond, it, a, m) for a, m in enumerate(msgs))
            if cond == "shared":
                for c in conds:
                    active[c] = list(keep)
            else:
                active[cond] = keep
        if not jobs:
            if r == r0:   # nothing was asked at all: a run of no question is a failure, not a result
                raise nothing_asked(len(items), excluded)
            break
        seeds = [turn_seed(seed, it.id, a, r, cond) for cond, it, a, _ in jobs]

        def _prog(_n: int, k: int) -> None:  # the engine's advances move this run's one bar
            if progress and k:
                progress(total, k)

        t0 = time.perf_counter()
        fixed = [given(cond, it, a, r, m, s) if given else None for (cond, it, a, m), s in zip(jobs, seeds)]
        todo = [k for k, f in enumerate(fixed) if f is None]
        outs = list(fixed)
        if todo:
            for k, o in zip(todo, engine.chat([jobs[k][3] for k in todo], temperature=temperature, top_p=top_p,
                                              max_tokens=max_tokens, seed=[seeds[k] for k in todo], progress=_prog)):
                outs[k] = o
        if progress and len(todo) < len(jobs):
            progress(total, len(jobs) - len(todo))
        dt = time.perf_counter() - t0
        model_s += dt
        new_tok = sum(o.completion_tokens for o in outs if not o.cached)
        gen_tokens += new_tok
        batches.append({"round": r, "batch_size": len(jobs), "wall_s": dt, "new_tokens": new_tok,
                        "cached": sum(o.cached for o in outs)})
        nxt: dict[str, dict[str, list[str]]] = {c: {} for c in conds}
        for (cond, it, a, _), out, s in zip(jobs, outs, seeds):
            if it.numeric:
                val = parse_numeric(out.text)
                ref = read_number(it.reference) if it.reference is not None else None
                for c in (conds if cond == "shared" else [cond]):
                    nxt[c].setdefault(it.id, [""] * agents)[a] = out.text
                    nrows.append({"qid": it.id, "family": it.family, "domain": it.domain, "subdomain": it.subdomain,
                                  "agent": a, "round": r, "condition": c, "shared": cond == "shared",
                                  "response": out.text, "value": val, "parsed": val is not None,
                                  "truncated": out.finish_reason == "length", "reference": ref,
                                  "tolerance": it.tolerance,
                                  "correct": (None if ref is None or val is None else is_correct(val, ref, it.tolerance)),
                                  "prompt_tokens": out.prompt_tokens, "completion_tokens": out.completion_tokens,
                                  "cached": bool(out.cached), "seed": s})
                continue
            ans = parse_answer(out.text, it.labels)
            for c in (conds if cond == "shared" else [cond]):
                nxt[c].setdefault(it.id, [""] * agents)[a] = out.text
                rows.append({"qid": it.id, "family": it.family, "domain": it.domain, "subdomain": it.subdomain,
                             "agent": a, "round": r, "condition": c, "shared": cond == "shared",
                             "response": out.text, "answer": ans, "parsed": ans is not None,
                             "truncated": out.finish_reason == "length", "reference": it.reference,
                             "correct": (None if it.reference is None or ans is None else ans == it.reference),
                             "prompt_tokens": out.prompt_tokens, "completion_tokens": out.completion_tokens,
                             "cached": bool(out.cached), "seed": s})
        prev = nxt
    turns = pd.DataFrame(rows, columns=TURN_COLUMNS)
    info = {"n_items": len(items), "n_scorable": len(scorable), "excluded": excluded,
            "numeric_turns": pd.DataFrame(nrows, columns=NUMERIC_TURN_COLUMNS),
            "batches": batches, "wall_s": time.perf_counter() - t_start, "model_s": model_s,
            "new_tokens": gen_tokens}
    return turns, info


def turns_by_question(turns: pd.DataFrame, condition: str) -> dict[str, dict[int, list[str]]]:
    """qid -> round -> list of every agent's response (rebuilds contexts for readouts)."""
    out: dict[str, dict[int, list[str]]] = {}
    sub = turns[turns["condition"] == condition].sort_values(["qid", "round", "agent"])
    for (qid, r), g in sub.groupby(["qid", "round"], sort=False):
        out.setdefault(qid, {})[int(r)] = list(g["response"])
    return out
