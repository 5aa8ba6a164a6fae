"""Shared by the benchmarks: an engine wrapper that records every chat batch, so the same
batches can be replayed straight to the raw engine (the ">= 0.8x raw engine" checks), and the
machine description every result file carries."""
from __future__ import annotations

import os
import platform
import time


def machine() -> dict:
    """CPU model, cores, torch threads, GPU if any, and the load average when the benchmark started
    (a loaded machine explains slow numbers). Torch is optional (bench_aggregate runs without it)."""
    info = {"host": platform.node(), "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "python": platform.python_version(), "os": f"{platform.system()} {platform.release()}"}
    try:
        info["cpu_model"] = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        import numpy
        info["numpy"] = numpy.__version__
    except ImportError:
        pass
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    try:
        info["loadavg_at_start"] = os.getloadavg()
    except OSError:
        pass
    return info


class Recorder:
    """Wraps an engine; records every chat batch (conversations + sampling kwargs, progress dropped)."""

    def __init__(self, eng):
        self.eng, self.calls = eng, []
        self.walls: list[float] = []  # seconds inside the engine, per recorded batch

    def __getattr__(self, k):
        return getattr(self.eng, k)

    def chat(self, convs, **kw):
        self.calls.append((list(convs), {k: v for k, v in kw.items() if k != "progress"}))
        t0 = time.perf_counter()
        out = self.eng.chat(convs, **kw)
        self.walls.append(time.perf_counter() - t0)
        return out


def write_result(path, res: dict) -> None:
    """The result JSON every benchmark writes with ``--out`` (numpy scalars as floats)."""
    import json
    from pathlib import Path
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=2, default=float))
    print(f"-> {path}")


def interleaved_medians(fns: dict, repeats: int = 3, *, warmup: bool = True) -> tuple[dict, dict]:
    """Time each callable of ``fns`` ``repeats`` times, interleaved (a slow spell of the machine hits every
    one alike), each pass ended by a device synchronisation where a GPU is used (kernels run
    asynchronously); ``warmup`` runs each once first. Returns (median seconds, every time) by name."""
    import statistics
    try:
        import torch
        sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    except ImportError:
        sync = lambda: None  # noqa: E731
    if warmup:
        for f in fns.values():
            f()
    times: dict = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            sync()
            t0 = time.perf_counter()
            f()
            sync()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}, times
