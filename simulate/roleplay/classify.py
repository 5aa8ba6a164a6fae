"""Stance (text -> 1-6) and on-topic classifiers through the serving layer with structured output.
Greedy calls go through the run's call store (cached, resumable). An output that does not conform
is counted and left missing (NaN / None), never replaced by a default; parse rates are reported."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from chorus.simulate.roleplay.prompts import classifier_messages
from chorus.core.config import InputError

# Guided choice (the engine's structured output): one short constrained answer per text, which
# costs a prompt pass and a token or two, so every post and opinion of a run can be labelled.
STANCE_CHOICES = ["1", "2", "3", "4", "5", "6"]
ON_TOPIC_CHOICES = ["yes", "no"]


def _parse_stance(c) -> float:
    if not c.conformed or c.parsed not in STANCE_CHOICES:
        return float("nan")
    return float(c.parsed)


def _parse_on_topic(c) -> bool | None:
    if not c.conformed or c.parsed not in ON_TOPIC_CHOICES:
        return None
    return c.parsed == "yes"


def expected_stance(logprobs: dict[str, float]) -> float:
    """sum_k k * p(k) with p renormalised over the six labels: a scalar on the 1-6 scale."""
    lp = np.array([logprobs[c] for c in STANCE_CHOICES], dtype=float)
    p = np.exp(lp - lp.max())
    p /= p.sum()
    return float(np.dot(p, np.arange(1, 7)))


def classify_texts(engine: Any, pairs: list[tuple[str, str]], P: dict, *, max_tokens: int = 4,
                   readout: str = "choice", progress=None) -> pd.DataFrame:
    """One row per unique (topic, text): raw stance (agreement with the statement, 1-6, not yet
    reverse coded), on_topic, and whether each output conformed. Batched greedy calls.

    readout "choice": the stance is the guided-choice label; "expected": the expectation of the
    label under the model's renormalised next-token distribution over "1".."6" (a continuous
    scalar; the guided choice is still made, so its parse rate is still reported)."""
    if readout not in ("choice", "expected"):
        raise InputError(f"stance readout must be choice or expected, got {readout!r}")
    uniq = list(dict.fromkeys((t, x) for t, x in pairs if isinstance(x, str) and x.strip()))
    cols = ["topic", "text", "stance_raw", "stance_ok", "on_topic", "on_topic_ok", "stance_choice", "stance_output",
            "on_topic_output"]
    if not uniq:
        return pd.DataFrame(columns=cols)
    st = engine.chat([classifier_messages("stance", t, x, P) for t, x in uniq], temperature=0.0,
                     max_tokens=max_tokens, choices=STANCE_CHOICES, progress=progress)
    ot = engine.chat([classifier_messages("on_topic", t, x, P) for t, x in uniq], temperature=0.0,
                     max_tokens=max_tokens, choices=ON_TOPIC_CHOICES)
    ev = None
    if readout == "expected":
        ev = [expected_stance(d) for d in engine.option_logprobs(
            [classifier_messages("stance", t, x, P) for t, x in uniq], STANCE_CHOICES)]
    rows = []
    for i, ((t, x), a, b) in enumerate(zip(uniq, st, ot)):
        s, o = _parse_stance(a), _parse_on_topic(b)
        rows.append({"topic": t, "text": x, "stance_raw": s if ev is None else ev[i], "stance_ok": s == s,
                     "on_topic": o, "on_topic_ok": o is not None, "stance_choice": s, "stance_output": a.text,
                     "on_topic_output": b.text})
    return pd.DataFrame(rows, columns=cols)


def parse_rates(labels: pd.DataFrame) -> dict[str, Any]:
    n = int(len(labels))
    return {"n_texts": n,
            "stance_parse_rate": float(labels["stance_ok"].mean()) if n else float("nan"),
            "on_topic_parse_rate": float(labels["on_topic_ok"].mean()) if n else float("nan"),
            "n_stance_unparsed": int((~labels["stance_ok"].astype(bool)).sum()) if n else 0,
            "n_on_topic_unparsed": int((~labels["on_topic_ok"].astype(bool)).sum()) if n else 0}


def attach(messages: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """messages + stance (reverse coded for truth-framed topics) + on_topic, joined on (topic, text)."""
    m = messages.merge(labels[["topic", "text", "stance_raw", "on_topic"]], on=["topic", "text"], how="left")
    m["stance"] = np.where(m["truth_framed"].astype(bool), 7.0 - m["stance_raw"], m["stance_raw"])
    return m
