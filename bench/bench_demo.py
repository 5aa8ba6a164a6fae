"""The README's main job, timed: one cold ``chorus demo`` (empty run directory, models prepared)
with its wall time by stage and in total, the peak memory of the demo process, and the report size;
``--warm`` adds a second invocation on the same directory (every call read back).

    .venv/bin/python bench/bench_demo.py --size full --out bench/results/demo-full.json
    .venv/bin/python bench/bench_demo.py --size tiny --warm

Targets for ``--size full`` on the 2-core CPU machine: under 15 minutes, under 8 GB peak memory.
The memory is the demo process's peak resident set (``getrusage`` of the child; vLLM runs its engine
in that process) and, sampled every 2 s, the resident set of the demo and all its descendants.
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _recorder import machine, write_result  # noqa: E402  (bench/ is the script directory)

ROOT = Path(__file__).resolve().parent.parent
TARGET_S, TARGET_GB = 15 * 60, 8.0


def _tree_rss_kb(pid: int) -> int:
    """Resident set of ``pid`` and its descendants (Linux /proc), in kB."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            for t in Path(f"/proc/{p}/task").iterdir():
                kids = (t / "children").read_text().split()
                todo += [int(k) for k in kids]
        except (OSError, ValueError):
            continue
    return total


def _run(out: Path, size: str, backend: str) -> dict:
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "chorus.cli", "demo", "--size", size, "--out", str(out), "-b", backend],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = {"kb": 0}

    def sample() -> None:
        while p.poll() is None:
            peak["kb"] = max(peak["kb"], _tree_rss_kb(p.pid))
            time.sleep(2)
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    log, _ = p.communicate()
    wall = time.perf_counter() - t0
    th.join(timeout=5)
    if p.returncode not in (0, 1):
        raise SystemExit(f"demo failed ({p.returncode}):\n{log[-3000:]}")
    timing = json.loads((out / "timing.json").read_text())
    summ = json.loads((out / "summary.json").read_text())
    return {"wall_s": round(wall, 1), "exit_code": p.returncode,
            "stages_wall_s": {k: v["wall_s"] for k, v in timing["stages"].items()},
            "stages_sum_s": round(sum(v["wall_s"] for v in timing["stages"].values()), 1),
            "status": {k: v["status"] for k, v in summ["stages"].items()},
            "peak_rss_tree_gb": round(peak["kb"] / 2**20, 2),
            "report_bytes": (out / "report.html").stat().st_size}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="full", choices=["tiny", "full"])
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--dir", type=Path, default=None, help="run directory (default: a temporary one)")
    ap.add_argument("--warm", action="store_true", help="also time a second invocation (calls read back)")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON result here")
    a = ap.parse_args()
    d = a.dir or Path(tempfile.mkdtemp(prefix="chorus-demo-bench-")) / "run"
    if d.exists():
        shutil.rmtree(d)
    res = {"machine": machine(), "command": " ".join(sys.argv), "size": a.size, "backend": a.backend,
           "cold": _run(d, a.size, a.backend)}
    # the largest child's peak resident set: the demo process (vLLM runs its engine in-process)
    res["cold"]["peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20, 2)
    if a.size == "full":
        res["targets"] = {"wall_s": TARGET_S, "peak_rss_gb": TARGET_GB,
                          "wall_ok": res["cold"]["wall_s"] < TARGET_S,
                          "memory_ok": max(res["cold"]["peak_rss_gb"], res["cold"]["peak_rss_tree_gb"]) < TARGET_GB}
    if a.warm:
        res["warm"] = _run(d, a.size, a.backend)
    print(json.dumps(res, indent=2))
    if a.out:
        write_result(a.out, res)


if __name__ == "__main__":
    main()
