"""Residual-stream interchange through nnsight: run the context with source cue X, keep the
residual stream (decoder-layer outputs) at the cue positions, and write it into the run with
cue Y at one layer at a time; read how the adoption margin moves with depth.

The two contexts must tokenise to the same length and differ only inside the cue span (the
experiment builds cue pairs that way and skips, counting, any pair that does not), so a
position in X is the same position in Y. One batched trace patches every layer at once: row
``i`` of the batch is Y patched at layer ``layers[i]``, plus one unpatched row.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from interventions.knockout import hf_backend, _nnsight_model, envoy_layers, layer_map


class PatchError(ValueError):
    """The two runs cannot be aligned position by position, or the request is out of range."""


def _check(engine: Any, x_ids: Sequence[int], y_ids: Sequence[int], positions: Sequence[int], layers: Sequence[int]):
    lm = layer_map(engine)
    if len(x_ids) != len(y_ids):
        raise PatchError(f"source and target runs differ in length ({len(x_ids)} vs {len(y_ids)} tokens): "
                         "positions cannot be aligned; use cues of equal token length")
    bad = [p for p in positions if not 0 <= p < len(y_ids)]
    if bad:
        raise PatchError(f"positions {bad} are outside the context ({len(y_ids)} tokens)")
    badl = [x for x in layers if not 0 <= x < lm.n_layers]
    if badl:
        raise PatchError(f"layer(s) {badl} out of range: the model has {lm.n_layers} decoder layers "
                         f"(valid 0..{lm.n_layers - 1})")
    return lm


def interchange(engine: Any, x_ids: Sequence[int], y_ids: Sequence[int], positions: Sequence[int],
                layers: Sequence[int] | str = "all") -> dict[str, Any]:
    """Log-softmax next-token distributions at the last position of: X, Y, and Y with the
    residual stream at ``positions`` replaced by X's after decoder layer L, for each L in
    ``layers``. Returns ``{"x": (V,), "y": (V,), "patched": (len(layers), V), "layers": [...]}``."""
    import nnsight
    import torch

    be = hf_backend(engine)
    lm = layer_map(engine)
    layers = list(range(lm.n_layers)) if layers == "all" else [int(x) for x in layers]
    _check(engine, x_ids, y_ids, positions, layers)
    nm = _nnsight_model(be.model, engine.tokenizer)
    dev = next(be.model.parameters()).device
    pos = torch.tensor(sorted(set(int(p) for p in positions)), dtype=torch.long, device=dev)
    T = len(y_ids)
    env = envoy_layers(nm, lm)
    with torch.inference_mode():
        xi = torch.tensor([list(x_ids)], device=dev)
        with nm.trace(input_ids=xi, attention_mask=torch.ones_like(xi), position_ids=torch.arange(T, device=dev)[None],
                      use_cache=False):
            saved = nnsight.save({})  # nnsight: only saved objects leave the trace body
            for l in sorted(set(layers)):
                saved[l] = env[l].output[0, pos, :].clone()
            x_logits = nm.output.logits[0, -1].save()
        n = len(layers)
        rows_at: dict[int, list[int]] = {}
        for i, l in enumerate(layers):
            rows_at.setdefault(l, []).append(i)
        yi = torch.tensor([list(y_ids)] * (n + 1), device=dev)
        with nm.trace(input_ids=yi, attention_mask=torch.ones_like(yi),
                      position_ids=torch.arange(T, device=dev)[None].expand(n + 1, -1), use_cache=False):
            for l in sorted(rows_at):  # forward order (nnsight requires it)
                out = env[l].output
                for i in rows_at[l]:
                    out[i, pos, :] = saved[l]
            y_logits = nm.output.logits[:, -1].save()
    lp = lambda t: torch.log_softmax(t.float(), dim=-1).cpu().numpy()
    yl = lp(y_logits)
    return {"x": lp(x_logits), "y": yl[n], "patched": yl[:n], "layers": layers}


def option_ids(engine: Any, prompt: Any, options: Sequence[str]) -> list[int]:
    """Single-token ids of the options after ``prompt`` (patching reads one next-token
    distribution; a multi-token option is an error naming it)."""
    out = []
    for o in options:
        ids = engine.option_token_ids(prompt, o)
        if len(ids) != 1:
            raise PatchError(f"option {o!r} is {len(ids)} tokens; patching and probes read single-token options")
        out.append(ids[0])
    return out


def restored_share(m_patched: np.ndarray, m_x: float, m_y: float) -> np.ndarray:
    """(m_patched - m_Y) / (m_X - m_Y): 0 = no X information carried, 1 = X's margin."""
    d = m_x - m_y
    return (np.asarray(m_patched, float) - m_y) / d if d != 0 else np.full(np.shape(m_patched), np.nan)
