"""Where the attention lives in each supported model family.

Knockout edits the attention mask that a decoder layer's attention module receives, so it
needs, per decoder layer, the attention module that calls transformers' attention interface.
Hybrid models (Qwen3.5 / Qwen3-Next Gated DeltaNet, Jamba/Bamba/FalconH1 Mamba, LFM2 convs)
have layers whose token mixer is recurrent: a mask cannot cut them, so they are reported as
unmaskable rather than silently skipped.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chorus.core.config import InputError

# model_type -> (attention attribute of a decoder layer, recurrent-mixer attributes)
KNOWN_FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "llama": ("self_attn", ()),
    "mistral": ("self_attn", ()),
    "smollm3": ("self_attn", ()),
    "qwen2": ("self_attn", ()),
    "qwen3": ("self_attn", ()),
    "qwen3_moe": ("self_attn", ()),
    "qwen3_next": ("self_attn", ("linear_attn",)),
    "qwen3_5": ("self_attn", ("linear_attn",)),
    "qwen3_5_text": ("self_attn", ("linear_attn",)),
    "qwen3_5_moe": ("self_attn", ("linear_attn",)),
    "qwen3_5_moe_text": ("self_attn", ("linear_attn",)),
    "gemma": ("self_attn", ()),
    "gemma2": ("self_attn", ()),
    "gemma3": ("self_attn", ()),
    "gemma3_text": ("self_attn", ()),
    "gemma4": ("self_attn", ()),
    "gemma4_text": ("self_attn", ()),
    "olmo2": ("self_attn", ()),
    "lfm2": ("self_attn", ("conv",)),
}

# where the list of decoder layers sits, tried in order (causal LM, then multimodal wrappers)
_LAYER_PATHS = ("model.layers", "model.language_model.layers", "language_model.model.layers",
                "language_model.layers", "model.model.layers")


class FamilyError(InputError):
    """The model's family or layout is not one knockout knows how to mask."""


class LayerError(InputError):
    """A requested layer index is out of range or cannot be masked."""


@dataclass
class LayerMap:
    model_type: str
    n_layers: int
    layers_path: str
    attn_name: str
    layers: list[Any]
    attention: dict[int, Any]                    # decoder layer index -> attention module (maskable)
    unmaskable: list[int] = field(default_factory=list)  # layers whose mixer is recurrent

    @property
    def maskable(self) -> list[int]:
        return sorted(self.attention)

    def resolve(self, layers: Any) -> tuple[list[int], list[int]]:
        """``"all"``, an int or a list of ints -> (maskable requested layers, unmaskable requested
        layers). Out-of-range indices fail naming the valid range."""
        if isinstance(layers, str):
            if layers != "all":
                raise LayerError(f"layers must be 'all', an int or a list of ints, got {layers!r}")
            req = list(range(self.n_layers))
        elif isinstance(layers, bool):
            raise LayerError(f"layers must be 'all', an int or a list of ints, got {layers!r}")
        elif isinstance(layers, int):
            req = [layers]
        else:
            try:
                req = [int(x) for x in layers]
            except (TypeError, ValueError):
                raise LayerError(f"layers must be 'all', an int or a list of ints, got {layers!r}") from None
            if any(isinstance(x, bool) or int(x) != x for x in layers):
                raise LayerError(f"layers must be integers, got {layers!r}")
        bad = [x for x in req if not 0 <= x < self.n_layers]
        if bad:
            raise LayerError(f"layer(s) {bad} out of range: this {self.model_type} model has {self.n_layers} "
                             f"decoder layers (valid 0..{self.n_layers - 1})")
        req = sorted(set(req))
        return [x for x in req if x in self.attention], [x for x in req if x not in self.attention]


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def model_type(model: Any) -> str:
    cfg = model.config
    t = getattr(cfg, "model_type", None) or "?"
    return t


def discover(model: Any) -> LayerMap:
    """The decoder layers and their attention modules. Unknown families fail with a clear error
    (knockout must know which module receives the mask)."""
    t = model_type(model)
    if t not in KNOWN_FAMILIES:
        raise FamilyError(f"model type {t!r} ({type(model).__name__}) has no known attention module names; "
                          f"knockout supports: {', '.join(sorted(KNOWN_FAMILIES))} (add it to "
                          f"chorus.interventions.families.KNOWN_FAMILIES after checking that its attention module "
                          f"calls transformers' AttentionInterface)")
    attn_name, recurrent = KNOWN_FAMILIES[t]
    layers, path = None, ""
    for p in _LAYER_PATHS:
        cand = _get(model, p)
        if cand is not None and hasattr(cand, "__len__") and len(cand):
            layers, path = list(cand), p
            break
    if layers is None:
        raise FamilyError(f"{type(model).__name__} ({t}): no decoder layer list at any of {', '.join(_LAYER_PATHS)}")
    attention, unmaskable = {}, []
    for i, layer in enumerate(layers):
        a = getattr(layer, attn_name, None)
        if a is not None:
            attention[i] = a
        elif any(getattr(layer, r, None) is not None for r in recurrent):
            unmaskable.append(i)
        else:
            kids = ", ".join(n for n, _ in layer.named_children())
            raise FamilyError(f"{t}: decoder layer {i} ({type(layer).__name__}) has neither {attn_name!r} nor a known "
                              f"recurrent mixer {recurrent} (children: {kids})")
    return LayerMap(model_type=t, n_layers=len(layers), layers_path=path, attn_name=attn_name, layers=layers,
                    attention=attention, unmaskable=unmaskable)


# -- tiny random models and engines around a model object (tests, checks without weights) -------
TINY_FAMILIES = ("llama", "qwen2", "qwen3", "gemma3", "gemma4", "qwen3_5")


def tiny_model(family: str, vocab_size: int, *, n_layers: int = 4, seed: int = 0) -> Any:
    """A randomly initialised causal LM of ``family`` (hidden 64, 4 heads, GQA 2): correctness
    of knockout / patching does not need trained weights. ``qwen3_5`` is the hybrid (Gated
    DeltaNet linear-attention layers + one full-attention layer in 4, as Qwen3.5)."""
    import torch
    from transformers import AutoModelForCausalLM

    common = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=n_layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    if family == "llama":
        from transformers import LlamaConfig as C
        cfg = C(**common)
    elif family == "qwen2":
        from transformers import Qwen2Config as C
        cfg = C(**common)
    elif family == "qwen3":
        from transformers import Qwen3Config as C
        cfg = C(head_dim=16, **common)
    elif family == "gemma3":
        from transformers import Gemma3TextConfig as C
        cfg = C(head_dim=16, sliding_window=16, layer_types=["sliding_attention", "full_attention"] * (n_layers // 2)
                + ["full_attention"] * (n_layers % 2), **common)
    elif family == "gemma4":
        from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig as C
        cfg = C(head_dim=16, global_head_dim=16, sliding_window=16, **common)
    elif family == "qwen3_5":
        from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig as C
        cfg = C(head_dim=16, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
                linear_value_head_dim=16, **common)
    else:
        raise FamilyError(f"no tiny config for family {family!r}; choose one of {', '.join(TINY_FAMILIES)}")
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
