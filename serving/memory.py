"""Model sizes for device planning: parameters read from safetensors headers (nothing is loaded),
GiB per dtype, and the CUDA device's size. The one sizing rule that uses them is
``chorus.serving.plan.plan_devices`` (every experiment and ``chorus.serving.engine.engine_pool``).
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

from chorus.core.config import bad_input

GIB = 1024 ** 3
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_ST_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
             "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


@bad_input
class MemoryPlanError(RuntimeError):
    """A model cannot be sized, or the device lacks the memory a plan counted on (waking vLLM)."""


def parameter_count(folder: str | Path) -> int:
    """Parameters in a folder's safetensors files, read from their headers (no tensor is loaded)."""
    n = 0
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise MemoryPlanError(f"no *.safetensors in {folder}: cannot size the model")
    for f in files:
        with open(f, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(size))
        for k, v in header.items():
            if k == "__metadata__":
                continue
            c = 1
            for d in v["shape"]:
                c *= d
            n += c
    return n


def weights_gib(folder: str | Path, dtype: str) -> float:
    if dtype not in BYTES:
        raise MemoryPlanError(f"dtype must be one of {sorted(BYTES)}, got {dtype!r}")
    return parameter_count(folder) * BYTES[dtype] / GIB


def device_gib() -> float | None:
    """Total memory of CUDA device 0, or None without CUDA."""
    try:
        import torch
        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(0).total_memory / GIB
    except ImportError:  # pragma: no cover
        pass
    return None
