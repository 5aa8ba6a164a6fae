"""One GPU check, ready for the first machine with an NVIDIA GPU (no internet needed).

    .venv/bin/python bench/gpu_check.py                  # on a GPU: full size, about an hour (budgets below)
    .venv/bin/python bench/gpu_check.py --tiny           # anywhere (CI, CPU): the same steps, tiny sizes

It prints torch, its CUDA build, the driver (nvidia-smi) and the GPU first. Steps, in priority
order; each runs as its own process (a crash or out-of-memory in one does not stop the others)
under its own time budget (seconds, full size; ``--budget-s`` caps the total, default the sum of
the chosen steps', 4260 s for all), and a step that cannot start in time is recorded as skipped:
  rehearse-llama  840  the Llama-3.1-8B-Instruct dummy folder, drawn on the GPU in bf16 (16 GB on disk),
                       and its rehearsal (chorus.rehearse), hf and vLLM paths
                       (``build-llama``, 240: the folder alone, when later steps need it without this one)
  serving         480  chorus's engine against raw ``vllm.LLM.generate``: same prompts, batch sizes
                       1 .. 256, up to 256 new tokens, the same stopping rule on both sides (equal work)
  knockout        300  knockout cost against a plain forward pass on the 8B architecture, bf16
  debate-600      600  one 600-question debate round at 8B through the lockstep driver
  rehearse-qwen   720, rehearse-gemma 720   the other two paper architectures (folder built, rehearsed, deleted)
A step passes when its process exits 0 and the JSON it wrote records no failure (a rehearsal
path that failed, unequal work in the race, a knockout whose two routes disagree in float32).
A dummy folder is deleted as soon as no later step needs it, so the run fits a 64 GiB disk.
Writes one JSON (default bench/results/gpu-check-<host>.json) with the device, every step's
status, wall time, result and the tail of its log. With --tiny: narrow dummy folders (widths / 16,
real vocabularies and layer patterns), the embedded model, and small counts, so CI proves it runs.
A bare GPU machine (no vLLM, no registry) runs bench/gpu_check_bare.py instead.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _recorder import machine  # noqa: E402  (bench/ is the script directory)
from gpu_check_bare import device_info, header_line  # noqa: E402

ARCHS = {"rehearse-llama": "llama-3.1-8b-instruct", "rehearse-qwen": "qwen3.5-9b", "rehearse-gemma": "gemma-4-e4b-it"}
PY = sys.executable
TINY_PATHS = ["load", "chat", "option_logprobs", "knockout"]  # --tiny: the rehearsal's core paths only (CI time)
# seconds per step at full size on one H100 (estimates with room: loads, vLLM's graph capture, writes)
BUDGET_S = {"build-llama": 240, "rehearse-llama": 840, "serving": 480, "knockout": 300, "debate-600": 600,
            "rehearse-qwen": 720, "rehearse-gemma": 720}
TINY_BUDGET_S = 300
# the minimum CUDA driver per torch CUDA build (NVIDIA's compatibility table), for the one-line hint
DRIVER_FOR_CUDA = {"13.0": 580, "12.9": 575, "12.8": 570, "12.6": 560, "12.4": 550, "12.1": 530, "11.8": 520}


def _build_kw(arch: str, tiny: bool) -> str:
    if tiny:
        from chorus.serving.dummy import PATTERN_PERIOD
        return f"layers={PATTERN_PERIOD[arch]}, narrow_by=16"
    return "layers=None, device='cuda'"  # full size, random weights drawn on the GPU


def build_step(arch: str, tiny: bool, work: Path, out: Path) -> list[str]:
    code = f"""
import json, time
from pathlib import Path
from chorus.serving.dummy import build_dummy
t0 = time.perf_counter()
folder = build_dummy({arch!r}, Path({str(work)!r}) / {arch!r}, {_build_kw(arch, tiny)})
size = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
Path({str(out)!r}).mkdir(parents=True, exist_ok=True)
(Path({str(out)!r}) / "step.json").write_text(json.dumps({{"folder": str(folder), "build_s": round(time.perf_counter() - t0, 1),
    "weights_on_disk_gib": round(size / 2**30, 3)}}))
"""
    return [PY, "-c", code]


def rehearse_step(arch: str, tiny: bool, work: Path, out: Path, keep: bool) -> list[str]:
    """A python -c command: build the dummy folder (unless built), rehearse it, delete it unless
    ``keep`` (disk: 15-18 GB per full-size folder)."""
    code = f"""
import json, shutil, time
from pathlib import Path
from chorus.serving.dummy import build_dummy
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


def steps(tiny: bool, work: Path) -> list[tuple[str, list[str], Path, set[str]]]:
    """(name, command, result folder, dummy folders it needs) in priority order. The Llama folder
    serves the rehearsal, knockout and debate steps (a path works wherever a profile does)."""
    res = work / "results"
    llama = str(work / ARCHS["rehearse-llama"])
    L = {"llama"}
    s = [("build-llama", build_step(ARCHS["rehearse-llama"], tiny, work, res / "build-llama"), res / "build-llama", L),
         ("rehearse-llama", rehearse_step(ARCHS["rehearse-llama"], tiny, work, res / "rehearse-llama", keep=True),
          res / "rehearse-llama", L)]
    if tiny:
        s += [("serving", [PY, "bench/bench_serving.py", "--only", "hf", "--sizes", "1,4", "--repeats", "1",
                           "--new-tokens", "8", "--out", str(res / "serving" / "step.json")], res / "serving", set()),
              ("knockout", [PY, "bench/bench_knockout.py", "--profile", llama, "--contexts", "2", "--batch", "2",
                            "--repeats", "1", "--skip-sweep", "--out", str(res / "knockout" / "step.json")],
               res / "knockout", L),
              ("debate-600", [PY, "bench/bench_debate.py", "--profile", llama, "--questions", "4", "--rounds", "1",
                              "--max-tokens", "8", "--one-by-one", "0", "--skip-raw",
                              "--out", str(res / "debate-600" / "step.json")], res / "debate-600", L)]
    else:
        s += [("serving", [PY, "bench/bench_serving.py", "--gpu-llama8b", "--out", str(res / "serving" / "step.json")],
               res / "serving", set()),
              ("knockout", [PY, "bench/bench_knockout.py", "--profile", llama, "--dtype", "bfloat16", "--contexts", "16",
                            "--skip-sweep", "--out", str(res / "knockout" / "step.json")], res / "knockout", L),
              ("debate-600", [PY, "bench/bench_debate.py", "--backend", "vllm", "--profile", llama, "--questions", "600",
                              "--rounds", "1", "--one-by-one", "0", "--skip-raw", "--dtype", "bfloat16", "--compiled",
                              "--out", str(res / "debate-600" / "step.json")], res / "debate-600", L)]
    for name in ("rehearse-qwen", "rehearse-gemma"):
        s.append((name, rehearse_step(ARCHS[name], tiny, work, res / name, keep=False), res / name, set()))
    return s


def judge(name: str, result: dict | None) -> list[str]:
    """What the step's own JSON says went wrong (an exit code 0 is not enough)."""
    if result is None:
        return ["the step wrote no result JSON"]
    bad: list[str] = []
    if name.startswith("rehearse-"):
        failed = [f"{r['path']}: {r.get('error', '')[:160]}" for r in result.get("results", []) if r["status"] == "fail"]
        bad += [f"rehearsal path failed: {f}" for f in failed]
        if not result.get("results"):
            bad.append("the rehearsal ran no path")
    elif name == "serving":
        rows = [r for k in ("gpu_llama8b", "hf", "vllm") for r in result.get(k) or []]
        if not rows:
            bad.append("the race recorded no row")
        for r in rows:
            if r.get("new_tokens_chorus") != r.get("new_tokens_raw"):
                bad.append(f"unequal work at {r['requests']} requests ({r['backend']}): chorus generated "
                           f"{r.get('new_tokens_chorus')} tokens, raw {r.get('new_tokens_raw')}")
            if not (isinstance(r.get("ratio"), (int, float)) and math.isfinite(r["ratio"])):
                bad.append(f"no finite throughput ratio at {r.get('requests')} requests")
    elif name == "knockout":
        for k in ("ratio_interface_vs_plain", "ratio_nnsight_vs_plain", "nnsight_vs_interface"):
            if not (isinstance(result.get(k), (int, float)) and math.isfinite(result[k])):
                bad.append(f"{k} missing or not finite")
        if result.get("dtype") == "float32" and result.get("routes_bitwise_equal") is False:
            bad.append("the AttentionInterface and nnsight knockout routes disagree in float32")
    elif name == "debate-600":
        lock = result.get("lockstep") or {}
        if not lock.get("new_tokens"):
            bad.append("the debate generated no token")
        if lock.get("excluded", 0) >= result.get("questions", 1):
            bad.append(f"every question was excluded ({lock.get('excluded')})")
    return bad


def no_cuda_line(info: dict) -> str:
    """Why torch sees no device, as far as the numbers tell (an old driver looked like no GPU)."""
    base = f"gpu_check: torch {info.get('torch')} sees no CUDA device"
    if info.get("cuda_build") is None:
        return f"{base}: it is a CPU build (reinstall with scripts/setup.sh on this GPU machine), or run with --tiny"
    drv, need = info.get("driver"), DRIVER_FOR_CUDA.get(".".join(str(info["cuda_build"]).split(".")[:2]))
    if drv:
        try:
            old = need is not None and int(drv.split(".")[0]) < need
        except ValueError:
            old = False
        if old:
            return (f"{base}: NVIDIA driver {drv} is older than {need}, which its CUDA {info['cuda_build']} build needs; "
                    f"update the driver or install a torch built for an older CUDA")
        return f"{base} although nvidia-smi shows {info.get('smi_gpu')} (driver {drv}); check CUDA_VISIBLE_DEVICES"
    return f"{base} and nvidia-smi found none ({info.get('nvidia_smi')}); run with --tiny on a CPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (CPU, CI)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help=f"wall-clock cap for all steps (default: the sum of the step budgets, {sum(BUDGET_S.values())} s)")
    ap.add_argument("--only", action="append", choices=list(BUDGET_S), help="run only these steps")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    info = device_info()
    print(header_line(info), flush=True)  # first: what every number below was measured on
    if not a.tiny and not info.get("cuda_available"):
        sys.exit(no_cuda_line(info))
    budgets = {k: (TINY_BUDGET_S if a.tiny else v) for k, v in BUDGET_S.items()}
    t_all = time.perf_counter()
    out = a.out or ROOT / "bench" / "results" / f"gpu-check-{platform.node()}.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    if a.tiny:
        env.setdefault("CHORUS_VLLM_EAGER", "1")
    with tempfile.TemporaryDirectory(prefix="chorus-gpu-check-") as d:
        work = Path(d)
        plan = steps(a.tiny, work)
        names = set(a.only or [p[0] for p in plan if p[0] != "build-llama"])
        if names & {"knockout", "debate-600"} and not names & {"build-llama", "rehearse-llama"}:
            names.add("build-llama")  # the steps on the 8B folder need it built (rehearse-llama builds it too)
        chosen = [p for p in plan if p[0] in names]
        total = a.budget_s if a.budget_s is not None else float(sum(budgets[p[0]] for p in chosen))
        report = {"machine": machine(), "device": info, "command": " ".join(sys.argv), "tiny": a.tiny,
                  "budget_s": total, "step_budgets_s": {p[0]: budgets[p[0]] for p in chosen}, "steps": {}}
        folders = {"llama": work / ARCHS["rehearse-llama"]}
        for i, (name, cmd, res, needs) in enumerate(chosen):
            left = total - (time.perf_counter() - t_all)
            limit = min(budgets[name], left)
            rec: dict = {"budget_s": budgets[name]}
            builds = name in ("build-llama", "rehearse-llama")
            missing = [f for f in needs if not builds and not folders[f].is_dir()]
            if missing:
                rec.update(status="skipped", reason=f"no {', '.join(missing)} folder (its build did not pass)")
            elif limit < 20:
                rec.update(status="skipped", reason=f"budget: {left:.0f} s of the total left")
            else:
                res.mkdir(parents=True, exist_ok=True)
                t0 = time.perf_counter()
                try:
                    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit)
                    rc, log = p.returncode, p.stdout + p.stderr
                except subprocess.TimeoutExpired as e:
                    rc, log = "timeout", ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes)
                                          else (e.stdout or "")) + f"\n[killed after {limit:.0f} s: its budget]"
                f = res / "step.json"
                result = json.loads(f.read_text()) if f.is_file() else None
                problems = [f"exit {rc}"] if rc != 0 else judge(name, result)
                rec.update(status="fail" if problems else "pass", rc=rc, wall_s=round(time.perf_counter() - t0, 1),
                           log_tail=log[-2000:])
                if problems:
                    rec["problems"] = problems[:20]
                if result is not None:
                    rec["result"] = result
            later = set().union(*(p[3] for p in chosen[i + 1:])) if i + 1 < len(chosen) else set()
            for key, path in folders.items():
                if key not in later and path.exists():
                    shutil.rmtree(path, ignore_errors=True)  # 16 GB: the next architecture needs the disk
                    rec.setdefault("deleted", []).append(path.name)
            report["steps"][name] = rec
            print(f"{name}: {rec['status']} {rec.get('wall_s', '')} {'; '.join(rec.get('problems', []))[:300]}",
                  flush=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(report, indent=2, default=str))  # after every step: a kill keeps the rest
    report["total_wall_s"] = round(time.perf_counter() - t_all, 1)
    out.write_text(json.dumps(report, indent=2, default=str))
    print(f"wrote {out}")
    if any(r["status"] == "fail" for r in report["steps"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
