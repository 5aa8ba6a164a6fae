"""One GPU check, ready for the first machine with an NVIDIA GPU (no internet needed).

    .venv/bin/python bench/gpu_check.py                  # on a GPU: full size, within --budget-s (600)
    .venv/bin/python bench/gpu_check.py --tiny           # anywhere (CI, CPU): the same steps, tiny sizes

Steps, in priority order; each runs as its own process (a crash or out-of-memory in one does not
stop the others) under what is left of the budget, and a step that cannot start in time is
recorded as skipped:
  1. rehearse-llama   the rehearsal (chorus.rehearse) of Llama-3.1-8B-Instruct, dummy weights,
                      full size on a GPU (hf and vLLM paths)
  2. serving          chorus's engine against raw ``vllm.LLM.generate``: same prompts, batch sizes
                      1 .. 256, fixed output length (bench_serving.py's race)
  3. knockout         knockout cost against a plain forward pass on the 8B architecture (bench_knockout.py)
  4. debate-600       one 600-question debate round at 8B through the lockstep driver (bench_debate.py)
  5. rehearse-qwen, 6. rehearse-gemma   the other two paper architectures
Writes one JSON (default bench/results/gpu-check-<host>.json) with every step's status, wall time,
result and the tail of its log. With --tiny: narrow dummy folders (widths / 16, real vocabularies
and layer patterns), the embedded model, and small counts, so CI proves the script runs.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _recorder import machine  # noqa: E402  (bench/ is the script directory)

ARCHS = {"rehearse-llama": "llama-3.1-8b-instruct", "rehearse-qwen": "qwen3.5-9b", "rehearse-gemma": "gemma-4-e4b-it"}
PY = sys.executable
TINY_PATHS = ["load", "chat", "option_logprobs", "knockout"]  # --tiny: the rehearsal's core paths only (CI time)


def _gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def _build_kw(arch: str, tiny: bool) -> str:
    if tiny:
        from serving.dummy import PATTERN_PERIOD
        return f"layers={PATTERN_PERIOD[arch]}, narrow_by=16"
    return "layers=None, device='cuda'"  # full size, random weights drawn on the GPU


def rehearse_step(arch: str, tiny: bool, work: Path, out: Path, keep: bool) -> list[str]:
    """A python -c command: build the dummy folder (unless built), rehearse it, delete it unless
    ``keep`` (disk: 16-19 GB per full-size folder)."""
    code = f"""
import json, shutil, time
from pathlib import Path
from serving.dummy import build_dummy
from chorus.rehearse import rehearse
t0 = time.perf_counter()
folder = build_dummy({arch!r}, Path({str(work)!r}) / {arch!r}, {_build_kw(arch, tiny)})
built = time.perf_counter() - t0
try:
    res = rehearse(str(folder), backends=["hf", "vllm"], paths={TINY_PATHS if tiny else None!r}, out=Path({str(out)!r}))
finally:
    if not {keep!r}:
        shutil.rmtree(folder, ignore_errors=True)
res["build_s"] = round(built, 1)
Path({str(out)!r}).mkdir(parents=True, exist_ok=True)
(Path({str(out)!r}) / "step.json").write_text(json.dumps(res, indent=2, default=str))
"""
    return [PY, "-c", code]


def steps(tiny: bool, work: Path) -> list[tuple[str, list[str], Path]]:
    """(name, command, result folder) in priority order. The Llama folder is kept for the
    knockout and debate steps (the 8B architecture; a path works wherever a profile does)."""
    res = work / "results"
    llama = str(work / ARCHS["rehearse-llama"])
    s = [("rehearse-llama", rehearse_step(ARCHS["rehearse-llama"], tiny, work, res / "rehearse-llama", keep=True),
          res / "rehearse-llama")]
    if tiny:
        s += [("serving", [PY, "bench/bench_serving.py", "--only", "hf", "--sizes", "1,4", "--repeats", "1",
                           "--new-tokens", "8", "--out", str(res / "serving" / "step.json")], res / "serving"),
              ("knockout", [PY, "bench/bench_knockout.py", "--profile", llama, "--contexts", "2", "--batch", "2",
                            "--repeats", "1", "--skip-sweep", "--out", str(res / "knockout" / "step.json")],
               res / "knockout"),
              ("debate-600", [PY, "bench/bench_debate.py", "--profile", llama, "--questions", "4", "--rounds", "1",
                              "--max-tokens", "8", "--one-by-one", "0", "--skip-raw",
                              "--out", str(res / "debate-600" / "step.json")], res / "debate-600")]
    else:
        s += [("serving", [PY, "bench/bench_serving.py", "--gpu-llama8b", "--out", str(res / "serving" / "step.json")],
               res / "serving"),
              ("knockout", [PY, "bench/bench_knockout.py", "--profile", llama, "--contexts", "16", "--skip-sweep",
                            "--out", str(res / "knockout" / "step.json")], res / "knockout"),
              ("debate-600", [PY, "bench/bench_debate.py", "--backend", "vllm", "--profile", llama, "--questions", "600",
                              "--rounds", "1", "--one-by-one", "0", "--skip-raw", "--dtype", "bfloat16", "--compiled",
                              "--out", str(res / "debate-600" / "step.json")], res / "debate-600")]
    for name in ("rehearse-qwen", "rehearse-gemma"):
        s.append((name, rehearse_step(ARCHS[name], tiny, work, res / name, keep=False), res / name))
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (CPU, CI)")
    ap.add_argument("--budget-s", type=float, default=600.0, help="wall-clock budget for all steps")
    ap.add_argument("--only", action="append", help="run only these steps")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    if not a.tiny and not _gpu():
        sys.exit("gpu_check: no CUDA device here; run with --tiny on a CPU")
    t_all = time.perf_counter()
    out = a.out or ROOT / "bench" / "results" / f"gpu-check-{platform.node()}.json"
    report = {"machine": machine(), "command": " ".join(sys.argv), "tiny": a.tiny, "budget_s": a.budget_s, "steps": {}}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    if a.tiny:
        env.setdefault("CHORUS_VLLM_EAGER", "1")
    with tempfile.TemporaryDirectory(prefix="chorus-gpu-check-") as d:
        work = Path(d)
        for name, cmd, res in steps(a.tiny, work):
            if a.only and name not in a.only:
                continue
            left = a.budget_s - (time.perf_counter() - t_all)
            rec: dict = {}
            if left < 20:
                rec = {"status": "skipped", "reason": f"budget: {left:.0f} s left"}
            else:
                res.mkdir(parents=True, exist_ok=True)
                t0 = time.perf_counter()
                try:
                    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=left)
                    rc, log = p.returncode, p.stdout + p.stderr
                except subprocess.TimeoutExpired as e:
                    rc, log = "timeout", ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes)
                                          else (e.stdout or "")) + f"\n[killed after {left:.0f} s: budget]"
                rec = {"status": "pass" if rc == 0 else "fail", "rc": rc,
                       "wall_s": round(time.perf_counter() - t0, 1), "log_tail": log[-2000:]}
                f = res / "step.json"
                if f.is_file():
                    rec["result"] = json.loads(f.read_text())
            report["steps"][name] = rec
            print(f"{name}: {rec['status']} {rec.get('wall_s', '')}", flush=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(report, indent=2, default=str))  # after every step: a kill keeps the rest
    report["total_wall_s"] = round(time.perf_counter() - t_all, 1)
    out.write_text(json.dumps(report, indent=2, default=str))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
