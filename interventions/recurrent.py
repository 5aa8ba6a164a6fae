"""Recurrent-state knockout: in chosen Gated DeltaNet (linear-attention) layers of a hybrid model,
the tokens of a blocked message write nothing into what the blocked queries read.

A Gated DeltaNet layer mixes tokens two ways, and both are cut:

* the short causal convolution over the projected q/k/v channels: the message's entries in the
  window are removed (its projected inputs are zero for the cut computation);
* the recurrent state ``S_t = exp(g_t) S_{t-1} + k_t beta_t (v_t - S_{t-1}^T k_t)^T``: each message
  token becomes an identity step, no decay and no write (``beta_t = 0``, ``g_t = 0``). Its decay is
  a write too: a token that shrinks the state changes what later positions read.

The message's own outputs, and those of every position that is not a blocked query, are the
layer's usual outputs. The layer is run twice (``severed``): once as usual, once with the three
edits above made on its own input projections (``in_proj_qkv``, ``in_proj_a``, ``in_proj_b``, by
forward hooks), and the blocked query positions take the second run's output. The edits go
through the model's own kernels (the PyTorch reference ones, or flash-linear-attention's where
installed), so the cut computation is the layer's own computation with the message taken out.
``recompute_layer`` is the independent check: the layer written out token by token in float64
from its weights, with the message's contributions removed by construction (tests, bench).

The blocked (query, key) edges are the attention knockout's own (``knockout._blocked_edges``):
the keys of a row are its message tokens, the queries those after it ("after") or the readout
("decision"). Readouts only: no KV cache (the cut run would update the cache a second time).
Hooks, not nnsight, because the cut run calls the layer a second time inside its own forward,
which an nnsight trace does not express; the hooks act inside either knockout route's forward.
"""
from __future__ import annotations

from typing import Any
from chorus.interventions.families import KNOWN_FAMILIES
from chorus.core.config import InputError

# model_type -> the Gated DeltaNet input projections the edits act on (conv input, decay, write gate)
RECURRENT_FAMILIES: dict[str, tuple[str, str, str]] = {
    "qwen3_5": ("in_proj_qkv", "in_proj_a", "in_proj_b"),
    "qwen3_5_text": ("in_proj_qkv", "in_proj_a", "in_proj_b"),
    "qwen3_5_moe": ("in_proj_qkv", "in_proj_a", "in_proj_b"),
    "qwen3_5_moe_text": ("in_proj_qkv", "in_proj_a", "in_proj_b"),
}
MIXERS = ("attention", "recurrent", "both")

__all__ = ["RecurrentError", "RECURRENT_FAMILIES", "MIXERS", "supported", "modules", "severed", "recompute_layer"]


class RecurrentError(InputError):
    """A recurrent knockout that cannot be done as asked (no recurrent layers, a family whose
    recurrent mixer chorus cannot cut, a KV cache)."""


def supported(lm: Any) -> None:
    """Raise one line unless ``lm`` (a ``families.LayerMap``) has recurrent layers chorus can cut."""
    if not lm.unmaskable:
        raise RecurrentError(f"recurrent knockout asked of {lm.model_type}, which has no recurrent layers "
                             f"(all {lm.n_layers} attend): use mixer 'attention'")
    if lm.model_type not in RECURRENT_FAMILIES:
        raise RecurrentError(f"{lm.model_type}: recurrent knockout supports the Gated DeltaNet layers of "
                             f"{', '.join(sorted(RECURRENT_FAMILIES))}; its recurrent layers {lm.unmaskable} stay uncut")


def modules(lm: Any) -> dict[int, Any]:
    """Decoder layer index -> its Gated DeltaNet module (the layers ``lm.unmaskable`` names)."""
    supported(lm)
    names = KNOWN_FAMILIES[lm.model_type][1]
    out = {}
    for i in lm.unmaskable:
        mod = next((getattr(lm.layers[i], n) for n in names if getattr(lm.layers[i], n, None) is not None), None)
        proj = RECURRENT_FAMILIES[lm.model_type]
        if mod is None or any(getattr(mod, p, None) is None for p in proj):
            raise RecurrentError(f"{lm.model_type}: layer {i}'s recurrent mixer has no {', '.join(proj)} "
                                 f"(transformers changed the module?)")
        out[i] = mod
    return out


class severed:
    """Context: in each layer of ``sel`` (layer -> (B,) bool rows), the rows' blocked queries of
    ``blocked`` ((B, T, T) bool, padded coordinates) read the layer's recurrent state and
    convolution window without their blocked keys' tokens. Empty ``sel``: no effect."""

    def __init__(self, lm: Any, blocked: Any, sel: dict[int, Any]):
        self.lm, self.blocked, self.sel = lm, blocked, sel
        self.handles: list[Any] = []
        self.hits: set[int] = set()

    def __enter__(self):
        if not self.sel:
            return self
        mods = modules(self.lm)
        for layer, rows in sorted(self.sel.items()):
            if layer not in mods:
                raise RecurrentError(f"layer {layer} is not a recurrent layer of this {self.lm.model_type} model "
                                     f"(recurrent: {self.lm.unmaskable})")
            self.handles.append(mods[layer].register_forward_pre_hook(_no_cache, with_kwargs=True))
            self.handles.append(mods[layer].register_forward_hook(self._hook(layer, rows), with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles.clear()
        if exc[0] is None and self.sel and len(self.hits) != len(self.sel):
            missed = sorted(set(self.sel) - self.hits)
            raise RecurrentError(f"recurrent layer(s) {missed} did not run during the forward pass")

    def _hook(self, layer: int, rows: Any):
        qkv_name, a_name, b_name = RECURRENT_FAMILIES[self.lm.model_type]

        def hook(module, args, kwargs, output):
            import torch

            self.hits.add(layer)
            blk = self.blocked.to(output.device) & rows.to(output.device)[:, None, None]
            if blk.shape[1] != output.shape[1] or blk.shape[2] != output.shape[1]:
                raise RecurrentError(f"recurrent knockout: blocked edges are {tuple(blk.shape[1:])} but the layer "
                                     f"sees {output.shape[1]} positions")
            keys = blk.any(dim=1)      # (B, T) the message tokens, per row
            queries = blk.any(dim=2)   # (B, T) the positions that read without them
            if not bool(queries.any()):
                return output

            def zero(_m, _i, out):
                return out.masked_fill(keys[..., None], 0.0)

            def floor(_m, _i, out):  # sigmoid -> 0 (no write), softplus -> 0 (no decay)
                return out.masked_fill(keys[..., None], torch.finfo(out.dtype).min)

            hs = [getattr(module, qkv_name).register_forward_hook(zero),
                  getattr(module, a_name).register_forward_hook(floor),
                  getattr(module, b_name).register_forward_hook(floor)]
            try:
                cut = module.forward(*args, **kwargs)
            finally:
                for h in hs:
                    h.remove()
            return torch.where(queries[..., None], cut, output)
        return hook


def _no_cache(_module, args, kwargs):
    """Before the layer runs: the cut run would write the cache a second time."""
    if kwargs.get("cache_params") is not None:
        raise RecurrentError("recurrent knockout runs without a KV cache (readouts); this forward has one")


def recompute_layer(module: Any, hidden: Any, keys: Any = None, queries: Any = None) -> Any:
    """The Gated DeltaNet layer ``module`` on ``hidden`` (B, T, D), written out token by token in
    float64 from its weights; where ``keys`` / ``queries`` ((B, T) bool) are given, the ``queries``
    positions read a state and convolution window to which the ``keys`` tokens contributed nothing
    (zero conv entries, identity recurrence steps), every other position the usual ones. No padding,
    no cache. Independent of the layer's kernels: the reference the cut layer is checked against."""
    import torch

    with torch.no_grad():
        return _recompute(module, hidden, keys, queries)


def _recompute(module: Any, hidden: Any, keys: Any, queries: Any) -> Any:
    import torch
    import torch.nn.functional as F

    d = torch.float64
    h = hidden.to(d)
    dev = h.device
    B, T, _ = h.shape
    W = lambda lin: lin.weight.to(dev, d)
    qkv = h @ W(module.in_proj_qkv).T                       # (B, T, C)
    z = h @ W(module.in_proj_z).T
    b = h @ W(module.in_proj_b).T
    a = h @ W(module.in_proj_a).T
    conv_w = module.conv1d.weight.to(dev, d)[:, 0, :]            # (C, K): the last tap is the current token
    K = conv_w.shape[1]
    kd, vd, nk, nv = module.head_k_dim, module.head_v_dim, module.num_k_heads, module.num_v_heads
    A = -module.A_log.to(dev, d).exp()
    dt = module.dt_bias.to(dev, d)

    def run(cut: bool) -> Any:
        x = qkv.clone()
        beta, g = torch.sigmoid(b), A * F.softplus(a + dt)
        if cut:
            x[keys] = 0.0
            beta, g = beta.masked_fill(keys[..., None], 0.0), g.masked_fill(keys[..., None], 0.0)
        conv = torch.zeros_like(x)
        for t in range(T):
            for j in range(K):
                if t - j >= 0:
                    conv[:, t] += conv_w[:, K - 1 - j] * x[:, t - j]
        conv = F.silu(conv)
        q, k, v = torch.split(conv, [kd * nk, kd * nk, vd * nv], dim=-1)
        q, k, v = q.reshape(B, T, nk, kd), k.reshape(B, T, nk, kd), v.reshape(B, T, nv, vd)
        if nv // nk > 1:
            q, k = q.repeat_interleave(nv // nk, dim=2), k.repeat_interleave(nv // nk, dim=2)
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) / kd ** 0.5
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        S = torch.zeros(B, nv, kd, vd, dtype=d, device=dev)
        o = torch.zeros(B, T, nv, vd, dtype=d, device=dev)
        for t in range(T):
            S = S * g[:, t].exp()[..., None, None]
            mem = (S * k[:, t, :, :, None]).sum(-2)
            delta = (v[:, t] - mem) * beta[:, t][..., None]
            S = S + k[:, t, :, :, None] * delta[:, :, None, :]
            o[:, t] = (S * q[:, t, :, :, None]).sum(-2)
        # gated RMSNorm per head, then the output projection
        zz = z.reshape(B, T, nv, vd)
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + module.norm.variance_epsilon)
        o = module.norm.weight.to(dev, d) * o * F.silu(zz)
        return o.reshape(B, T, nv * vd) @ W(module.out_proj).T

    plain = run(False)
    if keys is None or queries is None or not bool(queries.any()):
        return plain
    return torch.where(queries[..., None], run(True), plain)
