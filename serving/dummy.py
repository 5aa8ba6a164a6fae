"""Dummy-weight model folders of the paper architectures, for rehearsing a user's machine.

The published ``config.json`` of each paper model ships in ``serving/architectures/`` (sources and
digests in its SOURCES.md). ``build_dummy`` writes a folder that loads like the real checkpoint:
the published config (optionally with fewer layers that keep the real widths and the layer
pattern), random weights in safetensors, the family's published chat template, and a stand-in
tokenizer whose ids fit the vocabulary (the embedded SmolLM2 BPE, padded with filler tokens to the
model's vocabulary size, with the family's special tokens added). Generations are noise: a dummy
folder tests plumbing, memory and speed, never results.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from chorus.serving.profiles import DEFAULT_PROFILE, ModelError, get_profile

ARCH_DIR = Path(__file__).parent / "architectures"

# The special tokens each family's chat template writes, and which end a turn. Strings only: their
# ids in the stand-in tokenizer are assigned here (SmolLM2's ids where it has the token, else the
# top of the vocabulary), and the config's bos/eos/pad ids are rewritten to match.
SPECIALS: dict[str, dict[str, Any]] = {
    "llama-3.1-8b-instruct": {
        "bos": "<|begin_of_text|>", "eos": ["<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"],
        "pad": "<|finetune_right_pad_id|>",
        "other": ["<|start_header_id|>", "<|end_header_id|>", "<|python_tag|>"]},
    "qwen3.5-9b": {
        "bos": None, "eos": ["<|im_end|>", "<|endoftext|>"], "pad": "<|endoftext|>",
        "other": ["<|im_start|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
                  "</tool_response>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]},
    "gemma-4-e4b-it": {
        "bos": "<bos>", "eos": ["<turn|>", "<eos>"], "pad": "<pad>",
        "other": ["<|turn>", "<|channel>", "<channel|>", "<|think|>", "<|image|>", "<|audio|>", "<|video|>",
                  "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>"]},
}

# layers per period of each family's pattern: the fewest layers that keep it (3 Gated-DeltaNet + 1
# full attention for Qwen3.5; 5 sliding + 1 global for Gemma-4)
PATTERN_PERIOD = {"llama-3.1-8b-instruct": 1, "qwen3.5-9b": 4, "gemma-4-e4b-it": 6}


def architectures() -> list[str]:
    return sorted(p.stem for p in ARCH_DIR.glob("*.json"))


def published_config(arch: str) -> dict[str, Any]:
    f = ARCH_DIR / f"{arch}.json"
    if not f.is_file():
        raise ModelError(f"unknown paper architecture {arch!r}; shipped: {', '.join(architectures())}")
    return json.loads(f.read_text())


def _text(cfg: dict[str, Any]) -> dict[str, Any]:
    return cfg.get("text_config", cfg)


def reduce_layers(cfg: dict[str, Any], arch: str, layers: int | None) -> dict[str, Any]:
    """The published config with ``layers`` decoder layers: widths untouched, per-layer lists cut
    to length. Gemma-4's KV-shared tail shrinks in proportion, kept only when the unshared layers
    still hold every attention type the shared ones borrow from."""
    cfg = json.loads(json.dumps(cfg))
    t = _text(cfg)
    full = int(t["num_hidden_layers"])
    if layers is None or layers == full:
        return cfg
    if layers < 1 or layers > full:
        raise ModelError(f"--layers must be between 1 and {full} for {arch}, got {layers}")
    t["num_hidden_layers"] = layers
    if isinstance(t.get("layer_types"), list):
        t["layer_types"] = t["layer_types"][:layers]
    shared = int(t.get("num_kv_shared_layers") or 0)
    if shared:
        k = layers * shared // full
        kinds = t.get("layer_types") or []
        if k and not set(kinds[layers - k:]) <= set(kinds[:layers - k]):
            k = 0
        t["num_kv_shared_layers"] = k
    return cfg


def narrow(cfg: dict[str, Any], factor: int = 16) -> dict[str, Any]:
    """A narrow copy for fast plumbing tests: widths divided by ``factor``, head counts by
    ``factor // 2`` (head dims, rope and the vocabulary stay the published ones), vision and audio
    towers one layer deep. Not the real widths: the rehearsal benchmark uses those."""
    cfg = json.loads(json.dumps(cfg))
    t = _text(cfg)
    h = max(1, factor // 2)
    for k in ("hidden_size", "intermediate_size", "hidden_size_per_layer_input"):
        if isinstance(t.get(k), int):
            t[k] = max(8, t[k] // factor)
    kv = max(1, int(t.get("num_key_value_heads") or 1) // h)
    t["num_attention_heads"] = max(kv, int(t["num_attention_heads"]) // h)
    t["num_key_value_heads"] = kv
    for k in ("linear_num_key_heads", "linear_num_value_heads"):
        if isinstance(t.get(k), int):
            t[k] = max(1, t[k] // h)
    for tower in ("vision_config", "audio_config"):
        v = cfg.get(tower)
        if not isinstance(v, dict):
            continue
        for k in ("depth", "num_hidden_layers"):
            if k in v:
                v[k] = 1
        for k in ("hidden_size", "intermediate_size", "output_proj_dims"):
            if isinstance(v.get(k), int):
                v[k] = max(8, v[k] // factor)
        if "num_heads" in v:
            v["num_heads"] = max(1, v["num_heads"] // h)
        if "num_attention_heads" in v:
            v["num_attention_heads"] = v["num_key_value_heads"] = 1
        if "out_hidden_size" in v:
            v["out_hidden_size"] = t["hidden_size"]
    return cfg


def _standin_tokenizer(arch: str, vocab_size: int, out: Path) -> dict[str, int | list[int] | None]:
    """SmolLM2's byte-level BPE padded to ``vocab_size`` with filler tokens (decodable, never
    produced by encoding), plus the family's specials. Returns the special ids for the config."""
    src = get_profile(DEFAULT_PROFILE)
    if not src.status()[0]:
        raise ModelError(f"the stand-in tokenizer comes from the embedded default: {src.status()[1]}")
    tj = json.loads((src.path / "tokenizer.json").read_text())
    vocab: dict[str, int] = tj["model"]["vocab"]
    if len(vocab) > vocab_size:
        raise ModelError(f"stand-in tokenizer has {len(vocab)} ids, more than the model's vocabulary {vocab_size}")
    sp = SPECIALS[arch]
    wanted = [s for s in [sp["bos"], *sp["eos"], sp["pad"], *sp["other"]] if s]
    wanted = list(dict.fromkeys(wanted))
    top = vocab_size - 1
    added = {a["content"]: a for a in tj.get("added_tokens", [])}
    for s in wanted:
        if s not in vocab:
            vocab[s] = top
            top -= 1
        added[s] = {"id": vocab[s], "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                    "normalized": False, "special": True}
    used = set(vocab.values())
    for i in range(vocab_size):
        if i not in used:
            vocab[f"<|x{i}|>"] = i
    tj["model"]["vocab"] = dict(sorted(vocab.items(), key=lambda kv: kv[1]))
    tj["added_tokens"] = sorted(added.values(), key=lambda a: a["id"])
    (out / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))
    tc = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": sp["bos"], "eos_token": sp["eos"][0],
          "pad_token": sp["pad"], "add_bos_token": False, "clean_up_tokenization_spaces": False,
          "model_max_length": 1 << 20}
    (out / "tokenizer_config.json").write_text(json.dumps(tc, indent=2))
    shutil.copy(ARCH_DIR / f"{arch}.chat_template.jinja", out / "chat_template.jinja")
    return {"bos_token_id": vocab[sp["bos"]] if sp["bos"] else None,
            "eos_token_id": [vocab[e] for e in sp["eos"]], "pad_token_id": vocab[sp["pad"]]}


def _set_ids(cfg: dict[str, Any], ids: dict[str, Any]) -> None:
    """The config's special ids point at the stand-in tokenizer's (top level and text config)."""
    for d in {id(cfg): cfg, id(_text(cfg)): _text(cfg)}.values():
        for k, v in ids.items():
            if k in d or d is _text(cfg):
                d[k] = v


def write_config_and_tokenizer(arch: str, out: str | Path, *, layers: int | None = None,
                               narrow_by: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """A folder with the (reduced) published config, the stand-in tokenizer and the chat template,
    and no weights: enough for vLLM's ``load_format="dummy"``. Returns (config, special ids)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = reduce_layers(published_config(arch), arch, layers)
    if narrow_by:
        cfg = narrow(cfg, narrow_by)
    ids = _standin_tokenizer(arch, int(_text(cfg)["vocab_size"]), out)
    _set_ids(cfg, ids)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return cfg, ids


def build_dummy(arch: str, out: str | Path, *, layers: int | None = None, dtype: str = "bfloat16",
                seed: int = 0, force: bool = False, narrow_by: int | None = None, device: str = "cpu") -> Path:
    """Write a dummy-weight folder of ``arch`` (a name in ``architectures()``) to ``out``;
    ``narrow_by`` makes it narrow (``narrow``) for tests, never for the rehearsal. ``device="cuda"``
    draws the random weights on a GPU (an 8B model in seconds rather than minutes)."""
    import torch
    import transformers
    from safetensors.torch import save_file  # noqa: F401  (save_pretrained needs it)

    out = Path(out)
    if (out / "chorus_dummy.json").is_file() and not force:
        return out
    t0 = time.perf_counter()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    cfg, ids = write_config_and_tokenizer(arch, tmp, layers=layers, narrow_by=narrow_by)
    hf_cfg = transformers.AutoConfig.from_pretrained(tmp)
    cls_name = (cfg.get("architectures") or [None])[0]
    cls = getattr(transformers, cls_name, None) if cls_name else None
    if cls is None:
        raise ModelError(f"{arch}: transformers {transformers.__version__} has no class {cls_name!r} "
                         f"(model_type {cfg.get('model_type')!r}); upgrade transformers")
    torch.manual_seed(seed)
    try:
        with torch.device(device):
            model = cls._from_config(hf_cfg, dtype=getattr(torch, dtype))
    except Exception as err:
        raise ModelError(f"{arch}: transformers {transformers.__version__} cannot build {cls_name}: "
                         f"{type(err).__name__}: {err}") from None
    n_params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(tmp, safe_serialization=True)
    del model
    meta = {"architecture": arch, "published_config": f"serving/architectures/{arch}.json",
            "layers": _text(cfg)["num_hidden_layers"], "full_layers": _text(published_config(arch))["num_hidden_layers"],
            "layer_types": _text(cfg).get("layer_types"), "num_kv_shared_layers": _text(cfg).get("num_kv_shared_layers"),
            "dtype": dtype, "seed": seed, "narrowed_by": narrow_by, "parameters": n_params, "special_ids": ids,
            "tokenizer": f"stand-in: {DEFAULT_PROFILE} BPE padded to {_text(cfg)['vocab_size']} ids",
            "transformers": transformers.__version__, "build_s": round(time.perf_counter() - t0, 1),
            "note": "random weights: for plumbing, memory and speed only"}
    (tmp / "chorus_dummy.json").write_text(json.dumps(meta, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out
