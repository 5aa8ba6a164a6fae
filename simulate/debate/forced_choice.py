"""Forced-choice readings of the option labels (peer-influence paper §3.3): a conversation ending in
the fixed "answer now" prefill (``prompts.readout_prefill``), scored by the next-token log-probabilities
of the labels in one ``engine.option_logprobs`` batch per label set. The interventions' readouts and
the belief reading of a debate (``stubbornness.py``) both read agents this way."""
from __future__ import annotations

from typing import Any, Sequence


def option_strings(labels: Sequence[str]) -> list[str]:
    """The labels as the model writes them after the cue ("Answer:" -> " A")."""
    return [" " + lab for lab in labels]


def forced_choice(engine: Any, conversations: Sequence[list[dict]], labels: Sequence[Sequence[str]],
                  progress: Any = None, chunk: int = 64) -> list[dict[str, float]]:
    """Option-label log-probs after each conversation's prefill, batched per label set (in chunks,
    so that ``progress(total, k)`` advances)."""
    out: list[dict[str, float] | None] = [None] * len(conversations)
    groups: dict[tuple, list[int]] = {}
    for i, labs in enumerate(labels):
        groups.setdefault(tuple(labs), []).append(i)
    if progress:
        progress(len(conversations), 0)
    for labs, idx_all in groups.items():
        for c0 in range(0, len(idx_all), chunk):
            idx = idx_all[c0:c0 + chunk]
            lps = engine.option_logprobs([conversations[i] for i in idx], option_strings(labs))
            for i, d in zip(idx, lps):
                out[i] = {lab: float(d[" " + lab]) for lab in labs}
            if progress:
                progress(len(conversations), len(idx))
    return out  # type: ignore[return-value]
