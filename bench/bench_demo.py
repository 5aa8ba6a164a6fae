"""Wall time of ``chorus demo`` by stage, cold (empty run directory) and warm (stores populated),
and the size of the report (issue 9).

    .venv/bin/python bench/bench_demo.py --size full --out bench/results/demo-full.json
    .venv/bin/python bench/bench_demo.py --size tiny

Cold: a fresh run directory, so every model call is computed (the model load and the prepared
weights are warm: "from a warm install"). Warm: the same command again on the same directory, so
every call is read back from the stages' stores; the difference is the model work.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _recorder import machine  # noqa: E402  (bench/ is the script directory)

ROOT = Path(__file__).resolve().parent.parent


def _run(out: Path, size: str, backend: str) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "chorus.cli", "demo", "--size", size, "--out", str(out), "-b", backend],
                       cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 1):
        raise SystemExit(f"demo failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    timing = json.loads((out / "timing.json").read_text())
    summ = json.loads((out / "summary.json").read_text())
    return {"wall_s": round(wall, 1), "stages_wall_s": {k: v["wall_s"] for k, v in timing["stages"].items()},
            "status": {k: v["status"] for k, v in summ["stages"].items()},
            "report_bytes": (out / "report.html").stat().st_size}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="full", choices=["tiny", "full"])
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--dir", type=Path, default=None, help="run directory (default: a temporary one)")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON result here")
    a = ap.parse_args()
    d = a.dir or Path(tempfile.mkdtemp(prefix="chorus-demo-bench-")) / "run"
    if d.exists():
        shutil.rmtree(d)
    res = {"machine": machine(), "command": " ".join(sys.argv),
           "size": a.size, "backend": a.backend, "cold": _run(d, a.size, a.backend), "warm": _run(d, a.size, a.backend)}
    txt = json.dumps(res, indent=2)
    print(txt)
    if a.out:
        a.out.write_text(txt)


if __name__ == "__main__":
    main()
