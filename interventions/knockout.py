"""Attention knockout: cut every attention edge from chosen query positions to the tokens of one
message, in chosen layers, and read the same forced-choice option log-probs as the engine.

Two routes apply the same edit (``edit_mask``: the blocked (query, key) edges removed from the
mask the attention is handed), chosen per call (``route``; per run ``knockout.route``):

* ``nnsight`` (the default): inside one nnsight trace, each chosen layer's attention module gets
  its ``attention_mask`` input edited (``_run_nnsight``);
* ``interface``: a custom attention function registered with transformers' ``AttentionInterface``
  (and the matching ``AttentionMaskInterface`` entry, without which the function receives no
  mask) wraps the model's own sdpa (or eager) attention and edits the mask for the layers and
  batch rows being knocked out.

They are bitwise equal (tests/test_knockout.py, on every family); ``bench/bench_knockout.py``
times both against a plain forward. A run's cross-check recomputes some contexts by the other route.

Readouts mirror the hf backend exactly (same rendering, option tokenisation, left padding,
position ids, micro-batching), so ``block_message=None`` is the engine's own readout.

Hybrid models: layers whose token mixer is recurrent (Gated DeltaNet, Mamba, ...) cannot be
masked; they are reported (``plan``) and left alone, never silently counted as knocked out. Their
recurrent route is cut separately (``mixer="recurrent"`` or ``"both"``; a row's ``recurrent``
layers): ``interventions/recurrent.py`` severs the message's writes to the state the blocked
queries read, under either route.
"""
from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

from chorus.interventions.families import FamilyError, LayerError, LayerMap, discover
from chorus.interventions.recurrent import MIXERS, RecurrentError, severed, supported
from chorus.interventions.spans import Span, SpanError, message_token_span
from chorus.serving.types import RequestError, validate_conversations
from chorus.core.config import InputError, bad_input

KO_SDPA = "chorus_knockout"
KO_EAGER = "chorus_knockout_eager"
QUERIES = ("after", "decision")
ROUTES = ("nnsight", "interface")
DEFAULT_ROUTE = "nnsight"  # the route the users named; bench/bench_knockout.py --routes measures both

__all__ = ["option_logprobs", "plan", "Row", "run_rows", "run_rows_shared_prefix", "prepare_rows", "installed",
           "ROUTES", "DEFAULT_ROUTE", "nnsight_model", "envoy_layers", "layer_map",
           "MIXERS", "FamilyError", "LayerError", "SpanError", "KnockoutError", "RecurrentError"]


@bad_input
class KnockoutError(RuntimeError):
    """Knockout could not be applied as asked (wrong backend, a layer that bypassed the mask)."""


# -- the attention function ----------------------------------------------------------------
class _State:
    """Per forward pass: ``blocked`` (B, T, T) bool edges to cut per row (padded coordinates);
    ``rows[id(attention module)]`` (B,) bool: the rows knocked out in that layer."""

    def __init__(self, blocked, rows: dict[int, Any]):
        self.blocked = blocked
        self.rows = rows
        self.hits: set[int] = set()


_STATE: _State | None = None
_EAGER_FNS: dict[type, Any] = {}


def edit_mask(mask, blocked, q_len: int, kv_len: int, *, additive: bool):
    """``mask`` with the ``blocked`` (B, Q, KV) edges removed. Boolean masks (sdpa: True = attend)
    get False there; additive float masks (eager) get the dtype's minimum. A None mask (sdpa's
    is_causal shortcut) is first made explicit."""
    import torch

    blk = blocked
    if blk.shape[-2:] != (q_len, kv_len):
        raise KnockoutError(f"knockout mask is {tuple(blk.shape[-2:])} but attention is {q_len}x{kv_len} "
                            "(a KV cache is not supported for knockout readouts)")
    if mask is None:
        causal = torch.ones(q_len, kv_len, dtype=torch.bool, device=blk.device).tril(kv_len - q_len)
        if additive:
            m = torch.zeros(q_len, kv_len, device=blk.device).masked_fill(~causal, torch.finfo(torch.float32).min)
            return m[None, None].masked_fill(blk[:, None], torch.finfo(torch.float32).min)
        return causal[None, None] & ~blk[:, None]
    if mask.dtype == torch.bool:
        return mask & ~blk[:, None].to(mask.device)
    return mask.masked_fill(blk[:, None].to(mask.device), torch.finfo(mask.dtype).min)


def _wrapped(additive: bool):
    def attention(module, query, key, value, attention_mask, **kwargs):
        st = _STATE
        if st is not None:
            rows = st.rows.get(id(module))
            if rows is not None:
                st.hits.add(id(module))
                blk = st.blocked & rows[:, None, None]
                attention_mask = edit_mask(attention_mask, blk, query.shape[2], key.shape[2], additive=additive)
        if additive:
            fn = _EAGER_FNS.get(type(module))
            if fn is None:
                fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
                if fn is None:
                    from transformers.modeling_utils import eager_attention_forward as fn  # type: ignore
                _EAGER_FNS[type(module)] = fn
            return fn(module, query, key, value, attention_mask, **kwargs)
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    return attention


_REGISTERED = False


def _register() -> None:
    global _REGISTERED
    if _REGISTERED:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

    AttentionInterface.register(KO_SDPA, _wrapped(additive=False))
    AttentionMaskInterface.register(KO_SDPA, sdpa_mask)  # else the function receives no mask
    AttentionInterface.register(KO_EAGER, _wrapped(additive=True))
    AttentionMaskInterface.register(KO_EAGER, eager_mask)
    _REGISTERED = True


class installed:
    """Context: the model runs through the knockout attention function (identical to its own
    sdpa/eager attention while no knockout state is set); restores the implementation after."""

    def __init__(self, model: Any):
        self.model = model

    def __enter__(self):
        _register()
        cfg = self.model.config
        self.old = cfg._attn_implementation
        cfg._attn_implementation = KO_EAGER if self.old == "eager" else KO_SDPA  # flash etc. -> sdpa
        return self

    def __exit__(self, *exc):
        self.model.config._attn_implementation = self.old


# -- rows ------------------------------------------------------------------------------------
@dataclass
class Row:
    """One readout: prompt token ids, option token ids, the span to block (None: plain), the
    decoder layers whose attention is knocked out, the query positions (after | decision) and the
    recurrent layers whose state the span does not write (hybrid models)."""
    prompt: list[int]
    options: list[list[int]]
    span: Span | None = None
    layers: frozenset = frozenset()
    queries: str = "after"
    recurrent: frozenset = frozenset()

    @property
    def cuts(self) -> bool:
        return self.span is not None and not self.span.empty and bool(self.layers or self.recurrent)


def hf_backend(engine: Any):
    be = getattr(engine, "backend", None)
    if be is None or getattr(be, "name", None) != "hf" or getattr(be, "model", None) is None:
        raise KnockoutError(f"knockout needs the transformers backend (backend='hf'); this engine runs "
                            f"{getattr(be, 'name', type(engine).__name__)!r}")
    return be


def layer_map(engine_or_model: Any) -> LayerMap:
    model = getattr(getattr(engine_or_model, "backend", None), "model", None) or engine_or_model
    lm = getattr(model, "_chorus_layer_map", None)
    if lm is None:
        lm = discover(model)
        model._chorus_layer_map = lm
    return lm


def plan(engine: Any, layers: Any = "all", mixer: str = "attention") -> dict[str, Any]:
    """Which requested layers will be masked and which cannot be (recurrent mixers); with ``mixer``
    ``"recurrent"`` or ``"both"``, the recurrent layers whose state is cut (``recurrent``), and with
    ``"recurrent"`` no attention layer is masked."""
    if mixer not in MIXERS:
        raise InputError(f"mixer must be one of {MIXERS}, got {mixer!r}")
    lm = layer_map(engine)
    masked, unmaskable = lm.resolve(layers)
    rec: list[int] = []
    if mixer != "attention":
        supported(lm)
        rec = unmaskable
        if not rec:
            raise LayerError(f"none of the requested layers {masked} is recurrent ({lm.model_type}: recurrent "
                             f"layers {lm.unmaskable})")
    return {"model_type": lm.model_type, "n_layers": lm.n_layers, "mixer": mixer,
            "masked": masked if mixer != "recurrent" else [], "unmaskable": unmaskable if mixer == "attention" else [],
            "recurrent": rec, "recurrent_layers": list(lm.unmaskable)}


def _check_queries(queries: str) -> None:
    if queries not in QUERIES:
        raise InputError(f"queries must be one of {QUERIES}, got {queries!r}")


def _blocked_edges(torch, rows: Sequence[Row], seqs: Sequence[list[int]], T: int, readout: Sequence[tuple[int, int]],
                   device=None):
    """(B, T, T) bool on ``device``: row r's blocked (query, key) pairs in padded coordinates, built
    there from each row's query and key ranges (a (B, T, T) tensor filled on the CPU and copied
    over cost a transfer per batch; issue 52)."""
    B = len(rows)
    bounds = torch.zeros(B, 4, dtype=torch.long)  # query start, query end, key start, key end
    for r, (row, seq) in enumerate(zip(rows, seqs)):
        if not row.cuts:
            continue
        off = T - len(seq)
        s, e = row.span.start + off, row.span.end + off
        q0, q1 = (e, T) if row.queries == "after" else (off + readout[r][0], off + readout[r][1])
        bounds[r] = torch.tensor([q0, q1, s, e])
    b = bounds.to(device)[:, :, None]
    t = torch.arange(T, device=device)[None]
    q = (t >= b[:, 0]) & (t < b[:, 1])
    k = (t >= b[:, 2]) & (t < b[:, 3])
    return q[:, :, None] & k[:, None, :]


def _check_route(route: str) -> None:
    if route not in ROUTES:
        raise InputError(f"knockout route must be one of {ROUTES}, got {route!r}")


def _layer_rows(torch, lm: LayerMap, rows: Sequence[Row], active: Sequence[int], device,
                field: str = "layers") -> dict[int, Any]:
    """layer -> (B,) bool: the rows knocked out in that layer (``field``: the attention ``layers``
    or the ``recurrent`` ones)."""
    out: dict[int, Any] = {}
    for layer in sorted(set().union(*(getattr(rows[r], field) for r in active))):
        out[layer] = torch.tensor([layer in getattr(row, field) and r in active for r, row in enumerate(rows)],
                                  dtype=torch.bool).to(device)
    return out


def _forward(be, lm: LayerMap, rows: Sequence[Row], seqs: Sequence[list[int]], readout: Sequence[tuple[int, int]],
             keep: int, route: str = "interface"):
    """One padded forward of ``seqs`` with the rows' knockouts; returns log-softmax logits
    of the last ``keep`` positions (B, keep, V; 0: every position), exactly as the hf backend computes them. ``route``:
    the knockout applied by the registered attention function, or by nnsight edits of each
    attention module's mask input (the same edit, bitwise equal results)."""
    torch = be.torch
    ids, mask = be._pad(list(seqs))
    T = ids.shape[1]
    active = [r for r, row in enumerate(rows) if row.cuts]
    blocked = _blocked_edges(torch, rows, seqs, T, readout, ids.device) if active else None
    sel = _layer_rows(torch, lm, rows, active, ids.device) if active else {}
    rec = _layer_rows(torch, lm, rows, active, ids.device, "recurrent") if active else {}
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding must not shift positions
    kw = {"input_ids": ids, "attention_mask": mask, "position_ids": pos, "use_cache": False, "logits_to_keep": keep}
    logits = run_forward(be, lm, kw, blocked, sel, route, rec)[:, -keep:]
    with torch.inference_mode():
        return torch.log_softmax(logits.float(), dim=-1)


def run_forward(be, lm: LayerMap, kw: dict, blocked, sel: dict[int, Any], route: str,
                recurrent: dict[int, Any] | None = None):
    """The model's logits on ``kw`` with ``blocked`` (B, Q, KV) edges cut in the rows ``sel[layer]``
    of each attention layer, by ``route``, and the rows ``recurrent[layer]`` of each recurrent layer
    reading a state the blocked keys did not write (``recurrent.severed``, under either route)."""
    with severed(lm, blocked, recurrent or {}):
        return _run_attention(be, lm, kw, blocked, sel, route)


def _run_attention(be, lm: LayerMap, kw: dict, blocked, sel: dict[int, Any], route: str):
    global _STATE
    torch = be.torch
    if route == "nnsight" and sel:
        return _run_nnsight(be, lm, kw, blocked, sel)
    state = _State(blocked, {id(lm.attention[layer]): rows for layer, rows in sel.items()}) if sel else None
    with torch.inference_mode(), installed(be.model):
        _STATE = state
        try:
            logits = be.model(**kw).logits
        finally:
            _STATE = None
    if state is not None and len(state.hits) != len(state.rows):
        missed = [i for i, m in lm.attention.items() if id(m) in state.rows and id(m) not in state.hits]
        raise KnockoutError(f"attention of layer(s) {missed} did not run through the knockout function "
                            f"({lm.model_type}: does its attention module use transformers' AttentionInterface?)")
    return logits


def _run_nnsight(be, lm: LayerMap, kw: dict, blocked, sel: dict[int, Any]):
    """The nnsight route: inside one trace, each chosen layer's attention module gets its
    ``attention_mask`` input with the blocked edges removed (``edit_mask``, as the attention
    function does), layers in forward order (nnsight requires it)."""
    torch = be.torch
    nm = _nnsight_model(be.model, be.tokenizer)
    env = envoy_layers(nm, lm)
    additive = be.model.config._attn_implementation == "eager"
    q_len = kw["input_ids"].shape[1]
    with torch.inference_mode():
        with nm.trace(**kw):
            for layer in sorted(sel):
                att = getattr(env[layer], lm.attn_name)
                args, akw = att.inputs
                akw = dict(akw)
                m = akw.get("attention_mask")
                kv_len = blocked.shape[-1]
                akw["attention_mask"] = edit_mask(m, blocked & sel[layer][:, None, None], q_len, kv_len, additive=additive)
                att.inputs = (args, akw)
            logits = nm.output.logits.save()
    return logits


def run_rows(engine: Any, rows: Sequence[Row], route: str = DEFAULT_ROUTE) -> list[list[float]]:
    """Option log-probs of every row, with its knockout (by ``route``). Micro-batched like the hf
    backend (longest first, same batch size and token budget), so a plain row equals the engine's value."""
    _check_route(route)
    be = hf_backend(engine)
    lm = layer_map(engine)
    _check_rows(lm, rows)
    torch = be.torch
    out: list[list[float]] = [[0.0] * len(r.options) for r in rows]
    if all(len(o) == 1 for r in rows for o in r.options):
        lengths = [len(r.prompt) for r in rows]
        order = sorted(range(len(rows)), key=lambda i: -lengths[i])
        for batch in be._batches(order, lengths):
            brows = [rows[i] for i in batch]
            lp = _forward(be, lm, brows, [r.prompt for r in brows],
                          [(len(r.prompt) - 1, len(r.prompt)) for r in brows], keep=1, route=route).cpu()
            for k, i in enumerate(batch):
                for j, o in enumerate(rows[i].options):
                    out[i][j] = float(lp[k, -1, o[0]])
        return out
    pairs = [(i, k) for i, r in enumerate(rows) for k in range(len(r.options))]
    seqs = [rows[i].prompt + rows[i].options[k] for i, k in pairs]
    lengths = [len(s) for s in seqs]
    order = sorted(range(len(pairs)), key=lambda j: -lengths[j])
    for batch in be._batches(order, lengths):
        brows = [rows[pairs[j][0]] for j in batch]
        bseqs = [seqs[j] for j in batch]
        readout = [(len(rows[i].prompt) - 1, len(rows[i].prompt) - 1 + len(rows[i].options[k]))
                   for i, k in (pairs[j] for j in batch)]
        keep = max(len(rows[pairs[j][0]].options[pairs[j][1]]) for j in batch) + 1  # the hf backend's
        logp = _forward(be, lm, brows, bseqs, readout, keep=keep, route=route)
        for r, j in enumerate(batch):
            i, k = pairs[j]
            n = len(rows[i].options[k])
            p = torch.arange(keep - n - 1, keep - 1)
            tgt = torch.tensor(rows[i].options[k])
            out[i][k] = float(logp[r, p, tgt].double().sum())
    return out


def _check_rows(lm: LayerMap, rows: Sequence[Row]) -> None:
    """Every row's query variant, attention layers and recurrent layers are ones this model has."""
    for row in rows:
        _check_queries(row.queries)
        bad = [x for x in row.layers if x not in lm.attention]
        if bad:
            raise LayerError(f"layer(s) {sorted(bad)} cannot be masked ({lm.model_type}: recurrent layers "
                             f"{lm.unmaskable})")
        if row.recurrent:
            supported(lm)
            bad = [x for x in row.recurrent if x not in lm.unmaskable]
            if bad:
                raise LayerError(f"layer(s) {sorted(bad)} are not recurrent ({lm.model_type}: recurrent layers "
                                 f"{lm.unmaskable})")


def run_rows_shared_prefix(engine: Any, rows: Sequence[Row], route: str = DEFAULT_ROUTE) -> list[list[float]]:
    """``run_rows`` for sweeps: rows that share a prompt (one context under many knockout
    conditions) reuse one KV cache of the tokens no knockout can change (everything before the
    first blocked query: up to the span's end for "after", up to the readout for "decision")
    and recompute only the rest. Single-token options; all-attention models without sliding
    windows (a recurrent or sliding-window cache does not keep every key): otherwise it falls
    back to ``run_rows``. Agrees with
    ``run_rows`` to float32 rounding (different matmul shapes), not bitwise; the two routes agree
    with each other bitwise here too."""
    import copy

    _check_route(route)
    be = hf_backend(engine)
    lm = layer_map(engine)
    sliding = "sliding_attention" in (getattr(be.model.config, "layer_types", None) or [])
    if lm.unmaskable or sliding or not all(len(o) == 1 for r in rows for o in r.options) or \
            any(r.span is None or r.span.empty for r in rows):
        return run_rows(engine, rows, route)
    _check_rows(lm, rows)
    torch = be.torch
    dev = next(be.model.parameters()).device
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(tuple(r.prompt), []).append(i)
    out: list[list[float]] = [[0.0] * len(r.options) for r in rows]
    for prompt, idx in groups.items():
        T = len(prompt)
        cut = min(rows[i].span.end if rows[i].queries == "after" else T - 1 for i in idx)
        with torch.inference_mode(), installed(be.model):
            pre = be.model(input_ids=torch.tensor([prompt[:cut]], device=dev), use_cache=True).past_key_values
        with torch.inference_mode():
            for a in range(0, len(idx), be.batch_size):
                chunk = idx[a:a + be.batch_size]
                B, Q = len(chunk), T - cut
                cache = copy.deepcopy(pre)
                cache.batch_repeat_interleave(B)
                blocked = torch.zeros(B, Q, T, dtype=torch.bool)
                for r, i in enumerate(chunk):
                    sp = rows[i].span
                    if rows[i].layers:
                        q0 = sp.end - cut if rows[i].queries == "after" else T - 1 - cut
                        blocked[r, q0:, sp.start:sp.end] = True
                sel = {layer: torch.tensor([layer in rows[i].layers for i in chunk]).to(dev)
                       for layer in sorted(set().union(*(rows[i].layers for i in chunk)))}
                ids = torch.tensor([list(prompt[cut:])] * B, device=dev)
                kw = {"input_ids": ids, "attention_mask": torch.ones(B, T, dtype=torch.long, device=dev),
                      "position_ids": torch.arange(cut, T, device=dev)[None].expand(B, -1),
                      "past_key_values": cache, "use_cache": True, "logits_to_keep": 1}
                logits = run_forward(be, lm, kw, blocked.to(dev), sel, route)[:, -1]
                lp = torch.log_softmax(logits.float(), dim=-1).cpu()
                for r, i in enumerate(chunk):
                    for j, o in enumerate(rows[i].options):
                        out[i][j] = float(lp[r, o[0]])
    return out


def prepare_rows(engine: Any, conversations: Sequence[list[dict]], options: Sequence[str],
                 block_message: Any) -> list[Row]:
    """Rendered prompts, option tokens and block spans (no layers yet). ``block_message``: one
    target for every conversation, or a list with one per conversation (None = plain)."""

    convs = validate_conversations(conversations)
    if isinstance(options, str) or not options or any(not isinstance(o, str) or not o for o in options):
        raise RequestError(f"options must be a non-empty list of non-empty strings, got {options!r}")
    per = list(block_message) if isinstance(block_message, list) else [block_message] * len(convs)
    if len(per) != len(convs):
        raise SpanError(f"block_message: {len(per)} targets for {len(convs)} conversations")
    # one tokenizer call for every prompt (with the offsets the spans are mapped through) and every
    # prompt + option text: a call per prompt and per option was 6 encodes a row (issue 52)
    prompts, oids = engine.prepare(convs, options, offsets=any(b is not None for b in per))
    rows = []
    for i, (c, blk, p, oid) in enumerate(zip(convs, per, prompts, oids)):
        engine._check_len(i, p, max(len(x) for x in oid))
        span = None
        if blk is not None:
            try:
                span = message_token_span(engine.tokenizer, p.text, p.ids, c, blk, p.offsets)
            except SpanError as err:
                raise SpanError(f"conversation {i}: {err}") from None
            if span.end > len(p.ids) - 1:
                raise SpanError(f"conversation {i}: block target {blk!r} covers the readout position (token "
                                f"{len(p.ids) - 1}); block an earlier message")
        rows.append(Row(list(p.ids), oid, span))
    return rows


def option_logprobs(engine: Any, conversations: Sequence[list[dict]], options: Sequence[str], block_message: Any,
                    layers: Any = "all", queries: str = "after", route: str = DEFAULT_ROUTE,
                    mixer: str = "attention") -> list[dict[str, float]]:
    """The engine's forced-choice readout with attention from the chosen query positions
    (``"after"``: every position after the blocked span; ``"decision"``: the readout position(s)
    only) to the content tokens of message ``block_message`` blocked in ``layers`` (``"all"``, an
    int or a list of ints). ``block_message`` may also be ``(index, start, end)``: a character
    range of that message's content (one peer's text inside a shared message). ``None`` gives the
    plain readout, the serving layer's own. Requested layers that are recurrent (hybrid models)
    cannot be masked: a warning names them (``plan`` returns them). ``route``: ``"nnsight"`` (edits of
    each attention module's mask input in an nnsight trace) or ``"interface"`` (the registered
    attention function); bitwise equal. ``mixer``: ``"attention"`` (the default), ``"recurrent"``
    (the requested recurrent layers' state and convolution, ``interventions/recurrent.py``) or
    ``"both"``."""
    _check_queries(queries)
    _check_route(route)
    if block_message is None:
        return engine.option_logprobs(conversations, options)
    hf_backend(engine)
    p = plan(engine, layers, mixer)
    if p["unmaskable"]:
        if not p["masked"]:
            raise LayerError(f"none of the requested layers {p['unmaskable']} can be masked: they are recurrent "
                             f"({p['model_type']})")
        warnings.warn(f"{p['model_type']}: layers {p['unmaskable']} are recurrent and cannot be masked; "
                      f"knocked out in {p['masked']} only", stacklevel=2)
    rows = prepare_rows(engine, conversations, options, block_message)
    for r in rows:
        r.layers, r.queries, r.recurrent = frozenset(p["masked"]), queries, frozenset(p["recurrent"])
    lps = run_rows(engine, rows, route)
    return [dict(zip(options, v)) for v in lps]


# -- the nnsight route's model wrapper ---------------------------------------------------------
def _nnsight_model(model: Any, tokenizer: Any):
    nm = getattr(model, "_chorus_nnsight", None)
    if nm is None:
        from nnsight import TransformersModel
        nm = TransformersModel(model, tokenizer=tokenizer)
        object.__setattr__(model, "_chorus_nnsight", nm)
    return nm


def nnsight_model(engine: Any):
    """The nnsight wrapper of an hf engine's model (built once, kept on the model): what a trace of
    your own runs on (``interventions/nnsight_recipe.py``)."""
    be = hf_backend(engine)
    return _nnsight_model(be.model, engine.tokenizer)


def envoy_layers(nm: Any, lm: LayerMap):
    """The decoder layers of an nnsight model, by the layer map's path (index them by layer number)."""
    obj = nm
    for part in lm.layers_path.split("."):
        obj = getattr(obj, part)
    return obj
