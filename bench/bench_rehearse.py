"""The paper architectures at their real widths, rehearsed on this machine (issue 17).

    .venv/bin/python bench/bench_rehearse.py                                  # all three, hf + vLLM
    .venv/bin/python bench/bench_rehearse.py --arch gemma-4-e4b-it --backend hf
    .venv/bin/python bench/bench_rehearse.py --layers full --backend hf       # full depth where memory allows

Each architecture is built once with dummy weights (``serving.dummy``; kept in CACHE/dummy/) at the
fewest layers that keep its layer pattern (Llama 2, Qwen3.5 4, Gemma-4 6) unless ``--layers``
says otherwise, then ``chorus.rehearse`` takes it through every path. Writes
bench/results/rehearse-<host>.json: per architecture, per path: status, seconds, peak memory.
Random weights: numbers are cost and plumbing, never quality.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _recorder import machine  # noqa: E402  (bench/ is the script directory)

MIN_LAYERS = {"llama-3.1-8b-instruct": 2, "qwen3.5-9b": 4, "gemma-4-e4b-it": 6}


def main() -> None:
    from chorus.rehearse import rehearse
    from serving.dummy import architectures, build_dummy
    from serving.profiles import cache_dir

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", action="append", choices=architectures(), help="default: all three")
    ap.add_argument("--backend", action="append", choices=["hf", "vllm", "openai"], help="default: hf and vllm")
    ap.add_argument("--path", action="append", help="only these paths (e.g. chat, hf.knockout)")
    ap.add_argument("--layers", default=None, help="decoder layers, or 'full' (default: one pattern period)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    out = a.out or ROOT / "bench" / "results" / f"rehearse-{platform.node()}.json"
    res = {"machine": machine(), "command": " ".join(sys.argv), "archs": {}}
    if out.exists():  # one architecture at a time adds to the file
        res["archs"] = json.loads(out.read_text()).get("archs", {})
    for arch in a.arch or sorted(MIN_LAYERS):
        layers = None if a.layers == "full" else int(a.layers or MIN_LAYERS[arch])
        t0 = time.perf_counter()
        folder = build_dummy(arch, cache_dir() / "dummy" / f"{arch}-L{layers or 'all'}", layers=layers)
        built = time.perf_counter() - t0
        r = rehearse(str(folder), backends=a.backend or ["hf", "vllm"], paths=a.path,
                     out=out.parent / f"rehearse-{arch}")
        r["build_or_reuse_s"] = round(built, 1)
        res["archs"][arch] = r
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=2, default=str))
        print(f"{arch}: {r['counts']} in {r['seconds']:.0f} s", flush=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
