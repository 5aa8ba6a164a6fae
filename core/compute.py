"""What a run cost, measured while it runs and written into its provenance (``compute``), so a
user can plan the next one: wall seconds, the device (kind and name), GPU-hours (wall x GPUs) when
it ran on a GPU, CPU core-seconds (user + system time of this process and its waited-for
children) always, and peak memory where it is cheap to read: PyTorch's
``max_memory_allocated`` per GPU, and the peak resident set size (``getrusage`` maxrss) of the
process. Torch is never imported here: a process that never imported it used no GPU.

What it does not see: memory and CPU time of processes it does not wait for (vLLM's engine-core
subprocess; a server another process runs), and GPU memory outside PyTorch's caching allocator.
A rerun of the same directory (a resumed run) records its own attempt; earlier attempts move to
``compute_earlier``, and ``total_compute`` sums them."""
from __future__ import annotations

import contextlib
import os
import platform
import sys
import time
from typing import Any, Iterator

GIB = 1024 ** 3


def _cpu_seconds() -> float:
    import resource
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def _maxrss_gib() -> float:
    import resource
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # KiB on Linux, bytes on macOS
    return kib / (GIB if sys.platform == "darwin" else 1024 ** 2)


def _cuda():
    """torch.cuda when this process has imported torch and initialised CUDA, else None."""
    torch = sys.modules.get("torch")
    try:
        return torch.cuda if torch is not None and torch.cuda.is_initialized() else None
    except Exception:  # a broken driver: no GPU to report
        return None


def _reset_gpu_peaks() -> None:
    cuda = _cuda()
    if cuda is not None:
        for i in range(cuda.device_count()):
            cuda.reset_peak_memory_stats(i)


def snapshot(wall_s: float, cpu_s: float) -> dict[str, Any]:
    """The record of one attempt that took ``wall_s`` seconds and ``cpu_s`` CPU core-seconds."""
    out: dict[str, Any] = {"wall_s": round(wall_s, 3), "cpu_core_s": round(cpu_s, 3),
                           "peak_rss_gib": round(_maxrss_gib(), 3), "host": platform.node(),
                           "cpu_count": os.cpu_count()}
    cuda = _cuda()
    if cuda is not None and cuda.device_count():
        n = cuda.device_count()
        out.update({"device": "cuda", "device_name": cuda.get_device_name(0), "n_gpus": n,
                    "gpu_hours": round(wall_s * n / 3600, 6),
                    "peak_gpu_memory_gib": [round(cuda.max_memory_allocated(i) / GIB, 3) for i in range(n)]})
    else:
        out.update({"device": "cpu", "device_name": platform.processor() or platform.machine(), "n_gpus": 0,
                    "gpu_hours": None, "peak_gpu_memory_gib": None})
    return out


@contextlib.contextmanager
def measure(run: Any, key: str = "compute") -> Iterator[dict[str, Any]]:
    """Measure the block and write the record to ``run``'s provenance under ``key`` (also when
    the block fails: ``completed`` says which). ``run`` is a ``chorus.core.runs.RunDir``."""
    prov = run.provenance()
    earlier = list(prov.get(f"{key}_earlier") or []) + ([prov[key]] if prov.get(key) else [])
    _reset_gpu_peaks()
    t0, c0 = time.perf_counter(), _cpu_seconds()
    rec: dict[str, Any] = {}
    ok = False
    try:
        yield rec
        ok = True
    finally:
        rec.update(snapshot(time.perf_counter() - t0, _cpu_seconds() - c0), completed=ok)
        fields: dict[str, Any] = {key: rec}
        if earlier:
            fields[f"{key}_earlier"] = earlier
        try:
            run.update_provenance(**fields)
        except OSError:  # the directory is gone: the block's own error (if any) is the one to see
            if ok:
                raise


def total_compute(prov: dict[str, Any], key: str = "compute") -> dict[str, Any] | None:
    """Wall, CPU and GPU-hours of every recorded attempt of one run (None when none was recorded)."""
    recs = [r for r in list(prov.get(f"{key}_earlier") or []) + [prov.get(key)] if r]
    if not recs:
        return None
    return {"attempts": len(recs), "wall_s": sum(r.get("wall_s") or 0.0 for r in recs),
            "cpu_core_s": sum(r.get("cpu_core_s") or 0.0 for r in recs),
            "gpu_hours": sum(r.get("gpu_hours") or 0.0 for r in recs),
            "devices": sorted({f"{r.get('device')}: {r.get('device_name')}" for r in recs})}
