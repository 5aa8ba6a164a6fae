"""The paper architectures at their real widths, rehearsed on this machine (issue 17).

    .venv/bin/python bench/bench_rehearse.py                                  # all three, hf + vLLM
    .venv/bin/python bench/bench_rehearse.py --arch gemma-4-e4b-it --backend hf
    .venv/bin/python bench/bench_rehearse.py --layers full --backend hf       # full depth where memory allows
    .venv/bin/python bench/bench_rehearse.py --table                          # the arch x path x backend table

Each architecture is built once with dummy weights (``chorus.serving.dummy``; kept in CACHE/dummy/) at the
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


def _cell(r: dict) -> str:
    if r["status"] == "pass":
        mem = r.get("peak_anon_gib")
        load = r.get("load_avg_1m")
        return (f"pass {r['seconds']:.0f} s, {r['peak_rss_gib']:.1f} GiB" + (f" ({mem:.1f} anon)" if mem else "")
                + (f", load {load:.1f}" if load is not None else ""))
    err = r.get("error") or ""
    # a server's log tail ends with chorus serve's own one-line reason: show that one
    why = (err[err.index("chorus serve: "):] if "chorus serve: " in err else err).splitlines()[0]
    why = why.split(": ModelError")[0][:50] if r["status"] == "skipped" else why[:160]
    return f"{r['status']}: {why}"


def table(res: dict) -> str:
    """Markdown: one row per path, one column per architecture; every cell from the JSON."""
    archs = sorted(res["archs"])
    from chorus.rehearse import PATHS
    seen = {r["path"] for a in archs for r in res["archs"][a]["results"]}
    paths = [p for p in PATHS if p in seen] + sorted(seen - set(PATHS))  # the rehearsal's own order
    m = res["archs"][archs[0]].get("machine", {}) if archs else {}
    cmds = "; ".join(f"`{c}`" for c in res.get("commands", [res.get("command")]) if c)
    lines = [f"Machine: {m.get('cpu')} ({m.get('cores')} cores, {m.get('ram_gib')} GiB), {m.get('kind')}. "
             f"Commands: {cmds}. Cells: status, seconds, peak RSS of the process and its "
             "children (anonymous memory in brackets: without mapped checkpoint pages and shared libraries), "
             "and the 1-minute load average at the path's end where recorded (above the core count, "
             "other jobs shared the CPU and the seconds are inflated).",
             ""]
    head = ["path"]
    for a in archs:
        c = res["archs"][a]["config"]
        head.append(f"{a} ({c['layers']} of {c['dummy']['full_layers']} layers, "
                    f"{c['dummy']['parameters'] / 1e9:.2f} B params)")
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in paths:
        row = [p]
        for a in archs:
            r = next((x for x in res["archs"][a]["results"] if x["path"] == p), None)
            row.append(_cell(r) if r else "not run")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    from chorus.rehearse import rehearse
    from chorus.serving.dummy import architectures, build_dummy
    from chorus.serving.profiles import cache_dir

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", action="append", choices=architectures(), help="default: all three")
    ap.add_argument("--backend", action="append", choices=["hf", "vllm", "openai"], help="default: hf and vllm")
    ap.add_argument("--path", action="append", help="only these paths (e.g. chat, hf.knockout)")
    ap.add_argument("--layers", default=None, help="decoder layers, or 'full' (default: one pattern period)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--table", action="store_true",
                    help="print the architecture x path x backend table of --out (markdown) and write it beside")
    a = ap.parse_args()
    out = a.out or ROOT / "bench" / "results" / f"rehearse-{platform.node()}.json"
    if a.table:
        md = table(json.loads(out.read_text()))
        out.with_suffix(".md").write_text(md)
        print(md)
        return
    res = {"machine": machine(), "command": " ".join(sys.argv), "archs": {}}
    if out.exists():  # one architecture at a time adds to the file
        prev = json.loads(out.read_text())
        res["archs"] = prev.get("archs", {})
        res["commands"] = [*prev.get("commands", [prev.get("command")]), res["command"]]
    for arch in a.arch or sorted(MIN_LAYERS):
        layers = None if a.layers == "full" else int(a.layers or MIN_LAYERS[arch])
        t0 = time.perf_counter()
        folder = build_dummy(arch, cache_dir() / "dummy" / f"{arch}-L{layers or 'all'}", layers=layers)
        built = time.perf_counter() - t0
        r = rehearse(str(folder), backends=a.backend or ["hf", "vllm"], paths=a.path,
                     out=out.parent / f"rehearse-{arch}")
        r["build_or_reuse_s"] = round(built, 1)
        old = res["archs"].get(arch)
        if a.path and old and old["config"] == r["config"]:  # a rerun of some paths updates those rows
            redone = {x["path"] for x in r["results"]}
            r["results"] = [x for x in old["results"] if x["path"] not in redone] + r["results"]
            r["counts"] = {k: sum(x["status"] == k for x in r["results"]) for k in ("pass", "fail", "skipped")}
            r["reruns"] = [*old.get("reruns", []), " ".join(sys.argv)]
        res["archs"][arch] = r
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=2, default=str))
        print(f"{arch}: {r['counts']} in {r['seconds']:.0f} s", flush=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
