"""LLM roles of the multi-concept engine, over a ``serving`` engine's ``chat``.

- generator: renders the speaker's credences on every concept as stance phrases (no numbers)
  and writes one comment;
- appraiser: ONE structured call per utterance (JSON schema: an integer rating 0..100 per stance
  of every concept) returning evidence for every concept: the ratings normalised to the simplex,
  then temperature-scaled (``dirichlet.temperature_scale``).

A concept missing from the answer, or an invalid distribution on it (a stance missing or
unknown, a rating that is not a number in 0..100, all ratings zero), is a failed appraisal for
that concept only: after the retries (fresh seed, ``retry_temperature``; a retry fills only the
concepts still failed) its evidence is NaN, it moves nobody on that concept, and it is counted.
An answer that does not conform to the schema is still read concept by concept when it parses
as JSON. Never a default value. Request seeds are ``call_seed(root, run seed, round, turn, role,
attempt)``, as in the single-concept roles: a run's results do not depend on its batch.
"""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from . import dirichlet
from .multi import MultiAppraisals
from .multi_topics import WEIGHT_MAX, MultiTopic
from .roles import APPRAISE, Turn, Utterances


def parse_ratings(out: Any, topic: MultiTopic) -> tuple[np.ndarray, list[str | None]]:
    """(C, Kmax) normalised ratings (NaN rows for failed concepts) and the per-concept errors."""
    C, Kmax = topic.C, max(topic.Ks)
    p = np.full((C, Kmax), np.nan)
    parsed = getattr(out, "parsed", None)
    if parsed is None:
        try:  # a non-conforming answer may still carry some concepts
            parsed = json.loads(out.text)
        except (json.JSONDecodeError, TypeError):
            why = "non-conforming output" if getattr(out, "conformed", None) is False else "not valid JSON"
            return p, [why] * C
    if not isinstance(parsed, dict):
        return p, ["answer is not a JSON object"] * C
    errors: list[str | None] = []
    for ci, c in enumerate(topic.concepts):
        obj = parsed.get(c.id)
        why = None
        if obj is None:
            why = f"no {c.id!r} in the answer"
        elif not isinstance(obj, dict):
            why = f"{c.id} is not an object"
        elif set(obj) != set(c.stance_ids):
            miss, extra = sorted(set(c.stance_ids) - set(obj)), sorted(set(obj) - set(c.stance_ids))
            why = f"{c.id}: " + "; ".join(([f"missing {miss}"] if miss else []) + ([f"unknown {extra}"] if extra else []))
        else:
            vals = [obj[s] for s in c.stance_ids]
            if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in vals):
                why = f"{c.id}: a rating is not a number"
            elif any(not (0 <= v <= WEIGHT_MAX) for v in vals):
                why = f"{c.id}: a rating is outside 0..{WEIGHT_MAX}"
            elif sum(vals) <= 0:
                why = f"{c.id}: every rating is zero (no distribution)"
            else:
                v = np.asarray(vals, dtype=float)
                p[ci, : c.K] = v / v.sum()
                p[ci, c.K:] = 0.0
        errors.append(why)
    return p, errors


class MultiLLMAppraiser:
    """One JSON-schema-constrained call per utterance for every concept; per-concept failures."""

    def __init__(self, engine: Any, temperature: float = 0.0, max_tokens: int = 200,
                 max_retries: int = 2, retry_temperature: float = 0.7):
        self.engine = engine
        self.temperature, self.max_tokens = temperature, max_tokens
        self.max_retries, self.retry_temperature = max_retries, retry_temperature
        self.requests = 0

    def appraise(self, turn: Turn, utterances: Utterances) -> MultiAppraisals:
        R = len(turn.runs)
        topic: MultiTopic = turn.runs[0].topic
        if any(rk.topic.id != topic.id for rk in turn.runs):
            raise ValueError("every run of a multi-concept group must share its topic")
        C, Kmax = topic.C, max(topic.Ks)
        texts = utterances.texts or [None] * R
        p = np.full((R, C, Kmax), np.nan)
        attempts = np.zeros(R, dtype=np.int32)
        errors: list[list[str | None]] = [["no utterance"] * C if t is None else [None] * C for t in texts]
        todo = [i for i, t in enumerate(texts) if t is not None]
        schema = topic.appraiser_schema()
        for attempt in range(1 + self.max_retries):
            if not todo:
                break
            temp = self.temperature if attempt == 0 else self.retry_temperature
            self.requests += len(todo)
            outs = self.engine.chat([topic.appraiser_messages(texts[i]) for i in todo], json_schema=schema,
                                    temperature=temp, max_tokens=self.max_tokens,
                                    seed=[turn.seed(i, APPRAISE, attempt) for i in todo])
            again = []
            for i, o in zip(todo, outs):
                attempts[i] += 1
                pi, why = parse_ratings(o, topic)
                for ci in range(C):
                    if np.isnan(p[i, ci, 0]):  # only concepts still failed take this answer
                        if why[ci] is None:
                            p[i, ci], errors[i][ci] = pi[ci], None
                        else:
                            errors[i][ci] = why[ci]
                if any(e is not None for e in errors[i]):
                    again.append(i)
            todo = again
        tau = np.array([rk.tau for rk in turn.runs], dtype=float)
        e = np.full_like(p, np.nan)
        for ci, K in enumerate(topic.Ks):
            ok = np.isfinite(p[:, ci, 0])
            if ok.any():
                e[ok, ci, :K] = dirichlet.temperature_scale(p[ok, ci, :K], tau[ok])
                e[ok, ci, K:] = 0.0
        return MultiAppraisals(p_raw=p, e=e, attempts=attempts, errors=errors)
