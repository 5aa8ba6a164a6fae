"""Device memory planning for a process that holds a vLLM engine and a transformers copy of a model.

vLLM reserves ``gpu_memory_utilization`` of the device up front (0.9 by default) for weights and KV
cache. An experiment that generates with vLLM and then intervenes with transformers (the demo's
pool, knockout after a debate) loads the same model a second time on the same device, which does
not fit beside a 0.9 reservation. ``plan_memory`` decides, from the sizes alone:

- ``share``: both fit at once; vLLM's share is set so the transformers copy fits beside it;
- ``sleep``: they do not fit together, but each fits alone: vLLM runs with sleep mode enabled and
  is put to sleep (weights offloaded to host memory, KV cache dropped) before the transformers
  copy loads, and woken after it is released and the device has ``wake_gib`` free again;
- otherwise one ``MemoryPlanError`` naming the sizes.

Sizes are GiB per device; tensor parallelism divides the vLLM weights over ``tp`` devices (the
transformers copy lives on one device).
"""
from __future__ import annotations

import json
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

GIB = 1024 ** 3
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_ST_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
             "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


class MemoryPlanError(RuntimeError):
    """The models of one process cannot fit the device, even one at a time."""


@dataclass(frozen=True)
class MemoryPlan:
    action: str                      # "vllm-only" | "share" | "sleep"
    device_gib: float
    weights_gib: float               # one copy of the model, in the load dtype
    tp: int
    gpu_memory_utilization: float    # what vLLM is started with
    kv_cache_gib: float              # what that leaves vLLM for its KV cache (per device)
    hf_gib: float                    # what the transformers copy needs (0 when none)
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def wake_gib(self) -> float:
        """What waking the slept vLLM engine takes back per device: its weights share and KV cache."""
        return self.weights_gib / self.tp + self.kv_cache_gib


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


def plan_memory(device_gib: float, weights: float, *, hf_copy: bool, tp: int = 1, min_kv_gib: float = 2.0,
                vllm_overhead_gib: float = 1.5, hf_overhead_frac: float = 0.2, hf_overhead_gib: float = 1.0,
                max_utilization: float = 0.9) -> MemoryPlan:
    """Decide how one process's vLLM engine and (``hf_copy``) transformers copy share a device.

    vLLM needs its weights share plus ``vllm_overhead_gib`` (activations, CUDA graphs) plus at
    least ``min_kv_gib`` of KV cache; the transformers copy needs its weights plus activations
    (``hf_overhead_frac`` of the weights plus ``hf_overhead_gib``, for forward passes with hooks)."""
    if device_gib <= 0 or weights <= 0 or tp < 1:
        raise MemoryPlanError(f"need a device size, a model size and tp >= 1 (got {device_gib}, {weights}, {tp})")
    per_dev = weights / tp
    vllm_min = per_dev + vllm_overhead_gib + min_kv_gib
    hf_need = (weights + weights * hf_overhead_frac + hf_overhead_gib) if hf_copy else 0.0
    sizes = (f"device {device_gib:.1f} GiB, model {weights:.1f} GiB ({per_dev:.1f} GiB per device at tp={tp}), "
             f"vLLM needs >= {vllm_min:.1f} GiB (weights + {vllm_overhead_gib} overhead + {min_kv_gib} KV)")
    if vllm_min > device_gib * max_utilization:
        raise MemoryPlanError(f"the model does not fit vLLM on this device: {sizes}; use more tensor-parallel "
                              f"devices (-tp), a smaller dtype, or a smaller model")
    if not hf_copy:
        util = max_utilization
        return MemoryPlan("vllm-only", device_gib, weights, tp, util, device_gib * util - per_dev - vllm_overhead_gib,
                          0.0, f"vLLM alone: {sizes}")
    if vllm_min + hf_need <= device_gib * max_utilization:
        util = round((device_gib * max_utilization - hf_need) / device_gib, 3)
        return MemoryPlan("share", device_gib, weights, tp, util, device_gib * util - per_dev - vllm_overhead_gib,
                          hf_need, f"both fit: vLLM takes {util:.3f} of the device and leaves {hf_need:.1f} GiB "
                          f"for the transformers copy; {sizes}")
    if hf_need > device_gib * max_utilization:
        raise MemoryPlanError(f"the transformers copy needs {hf_need:.1f} GiB (weights {weights:.1f} + activations), "
                              f"more than the device's {device_gib * max_utilization:.1f} usable GiB: {sizes}")
    util = max_utilization
    return MemoryPlan("sleep", device_gib, weights, tp, util, device_gib * util - per_dev - vllm_overhead_gib, hf_need,
                      f"not both at once (vLLM {vllm_min:.1f} + transformers {hf_need:.1f} GiB > "
                      f"{device_gib * max_utilization:.1f} usable): vLLM sleeps while the transformers copy is loaded; {sizes}")


def device_gib() -> float | None:
    """Total memory of CUDA device 0, or None without CUDA."""
    try:
        import torch
        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(0).total_memory / GIB
    except ImportError:  # pragma: no cover
        pass
    return None
