"""Knockout that lasts through generation: an agent's reply written with attention from chosen query
positions to one message cut in chosen layers, at every decode step.

The queries blocked are those of ``knockout.QUERIES``, carried into the reply: ``"after"`` cuts every
prompt position after the message and every generated position; ``"decision"`` cuts the last prompt
position (where the reply starts) and every generated position. The edit is the readouts' own
(``knockout.edit_mask`` through either route); with the KV cache each decode step's one query row is
cut from the message's keys, so greedy decoding with the cache equals step-by-step recomputation
without it under the same knockout (``use_cache=False``: the reference, tests/test_knockout_generate.py).
That equality is a float32 one: in bf16 on a GPU the cached and recomputed kernels round differently
and the two greedy replies part after some tokens (the bare GPU check's ``knockout.generate`` step,
bench/results/gpu-check-bare-h200.json; in float32 there they were the same tokens).
Sliding-window layers keep only the window's keys in the cache, so those models are recomputed
without a cache (``use_cache="auto"``); ``use_cache=True`` with a knockout on one is refused in one line
(``InputError``) rather than left to fail on a shape deep in transformers. Greedy only: a knockout's effect on a sampled reply would be
mixed with the sampling noise.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from chorus.interventions import knockout as ko
from chorus.interventions.families import LayerError
from chorus.interventions.spans import SpanError, message_token_span
from chorus.core.config import InputError


@dataclass
class Reply:
    """A greedy reply: its new token ids, text, and the log-prob of each chosen token."""
    ids: list[int]
    text: str
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"
    cached: bool = True


def _blocked(torch, q0: int, q1: int, T: int, span, first_query: int):
    """(1, q1 - q0, T) bool: queries q0..q1-1 (absolute) at or after ``first_query`` cut from the span."""
    blk = torch.zeros(1, q1 - q0, T, dtype=torch.bool)
    lo = max(first_query, q0) - q0
    if lo < q1 - q0:
        blk[0, lo:, span.start:span.end] = True
    return blk


def greedy(engine: Any, conversation: list[dict], block_message: Any, *, layers: Any = "all", queries: str = "after",
           max_new_tokens: int = 64, route: str = ko.DEFAULT_ROUTE, use_cache: bool | str = "auto",
           temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None) -> Reply:
    """The reply ``engine`` writes to ``conversation`` with attention from the blocked queries to
    ``block_message`` (a message index or (index, start, end), as ``knockout.option_logprobs``) cut in
    ``layers``; ``block_message=None`` or no layer: the plain reply. Greedy at ``temperature`` 0; above it,
    sampled with the hf backend's own seeded processors (``seed``: the request seed), so the plain reply
    is the engine's ``chat`` reply with that seed."""
    import torch

    if queries not in ko.QUERIES:
        raise InputError(f"queries must be one of {ko.QUERIES}, got {queries!r}")
    if route not in ko.ROUTES:
        raise InputError(f"knockout route must be one of {ko.ROUTES}, got {route!r}")
    be = ko.hf_backend(engine)
    lm = ko.layer_map(engine)
    p = engine.render_many([conversation], offsets=block_message is not None)[0]
    engine._check_len(0, p, max_new_tokens)
    span = None
    masked: list[int] = []
    if block_message is not None:
        span = message_token_span(engine.tokenizer, p.text, p.ids, conversation, block_message, p.offsets)
        if span.empty:
            raise SpanError(f"block target {block_message!r} covers no token of the prompt")
        plan = ko.plan(engine, layers)
        if plan["unmaskable"] and not plan["masked"]:
            raise LayerError(f"none of the requested layers {plan['unmaskable']} can be masked: they are recurrent "
                             f"({plan['model_type']})")
        masked = plan["masked"]
    T0 = len(p.ids)
    first = (span.end if queries == "after" else T0 - 1) if span is not None else T0 + max_new_tokens
    sliding = "sliding_attention" in (getattr(be.model.config, "layer_types", None) or [])
    cache = (not sliding) if use_cache == "auto" else bool(use_cache)
    if cache and sliding and span is not None and masked:
        # the window's cache holds the last W keys while the cut is drawn over every key of the prompt: the
        # two do not line up (transformers raised a bare shape error); recomputation gives the same reply
        window = getattr(be.model.config, "sliding_window", None)
        raise InputError(f"use_cache=True with a knockout on {lm.model_type}: its sliding-window layers cache only "
                         f"the last {window} keys, which a cut over the whole prompt does not fit; use "
                         f"use_cache='auto' (recomputed without a cache)")
    dev = next(be.model.parameters()).device
    sel = {layer: torch.ones(1, dtype=torch.bool, device=dev) for layer in masked}
    ids = list(p.ids)
    out = Reply(ids=[], text="", cached=cache)
    past = None
    procs = []
    if temperature > 0:
        from chorus.serving.backends.hf import sampling_processors
        procs = sampling_processors(temperature, top_p, [seed])
    for step in range(max_new_tokens):
        T = len(ids)
        if cache:
            q0 = 0 if past is None else T - 1
            from transformers import DynamicCache
            past = past if past is not None else DynamicCache(config=be.model.config)
            kw = {"input_ids": torch.tensor([ids[q0:]], device=dev),
                  "attention_mask": torch.ones(1, T, dtype=torch.long, device=dev),
                  "position_ids": torch.arange(q0, T, device=dev)[None], "past_key_values": past,
                  "use_cache": True, "logits_to_keep": 1}
        else:
            q0 = 0
            kw = {"input_ids": torch.tensor([ids], device=dev), "attention_mask": torch.ones(1, T, dtype=torch.long, device=dev),
                  "position_ids": torch.arange(T, device=dev)[None], "use_cache": False, "logits_to_keep": 1}
        blocked = _blocked(torch, q0, T, T, span, first).to(dev) if span is not None and sel else None
        logits = ko.run_forward(be, lm, kw, blocked, sel if blocked is not None and blocked.any() else {}, route)
        with torch.inference_mode():
            scores = logits[:, -1].float()
            lp = torch.log_softmax(scores[0], dim=-1)
            for f in procs:  # the backend's order: temperature, nucleus, the seeded draw
                scores = f(torch.tensor([ids], device=dev), scores)
        nxt = int(torch.argmax(scores[0]))
        if nxt in be.eos_ids:
            break
        out.ids.append(nxt)
        out.logprobs.append(float(lp[nxt]))
        ids.append(nxt)
    else:
        out.finish_reason = "length"
    out.text = engine.tokenizer.decode(out.ids, skip_special_tokens=True)
    return out


def greedy_many(engine: Any, conversations: Sequence[list[dict]], blocks: Sequence[Any], **kw: Any) -> list[Reply]:
    """``greedy`` for each (conversation, block) pair, in order."""
    return [greedy(engine, c, b, **kw) for c, b in zip(conversations, blocks)]
