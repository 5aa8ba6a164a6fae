"""The DEBATE (role-play) paper report (``chorus paper roleplay``) as a user builds it, on the
embedded model and the SYNTHETIC fixture through the CLI: the smoke run, its two mechanism-probe
variants (T = 0; the memory ablated), the annotator re-classification with gemma3-270m, the
statistics and probes across runs, then the report over all of them. Times each command; keeps
paper.md, numbers.json and figures/. Plumbing, not findings (SmolLM2-135M on synthetic groups).

    .venv/bin/python bench/bench_roleplay_paper.py --limit 2 --out bench/results/roleplay-paper-smoke.json
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _recorder import machine, write_result  # noqa: E402  (bench/ is the script directory)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=2, help="test groups per run (data.limit)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "roleplay-paper-smoke.json")
    a = ap.parse_args()
    chorus = str(Path(sys.executable).with_name("chorus"))
    info: dict = {"machine": machine(), "limit": a.limit, "commands_s": {}}

    def run(name: str, *args: str) -> None:
        t = time.perf_counter()
        subprocess.run([chorus, *args], check=True, stdout=subprocess.DEVNULL)
        info["commands_s"][name] = round(time.perf_counter() - t, 2)

    with tempfile.TemporaryDirectory() as tmp:
        T = Path(tmp)
        small = ["--set", f"data.limit={a.limit}", "--set", "data.train_limit=1"]
        run("roleplay run smoke", "roleplay", "run", "smoke", *small, "--out", str(T / "base"))
        run("roleplay run smoke T=0", "roleplay", "run", "smoke", *small, "--set", "generation.temperature=0",
            "--out", str(T / "t0"))
        run("roleplay run smoke memory ablated", "roleplay", "run", "smoke", *small,
            "--set", "memory.ablate=[initial_opinion, first_tweet]", "--out", str(T / "ablated"))
        run("roleplay annotators", "roleplay", "annotators", str(T / "base"), "--classifier", "gemma3-270m",
            "--out", str(T / "annotators"))
        run("roleplay stats", "roleplay", "stats", str(T / "base"), "--out", str(T / "stats"))
        run("roleplay probes", "roleplay", "probes", str(T / "base"), str(T / "t0"), str(T / "ablated"),
            "--out", str(T / "probes"))
        keep = a.out.with_suffix("")
        shutil.rmtree(keep, ignore_errors=True)
        run("paper roleplay", "paper", "roleplay", *(str(T / n) for n in ("base", "t0", "ablated", "annotators")),
            "--out", str(keep))
        for p in (keep / "paper.md", keep / "numbers.json"):   # no temporary path in the kept report
            p.write_text(p.read_text().replace(tmp, "RUNS"))
        n = json.loads((keep / "numbers.json").read_text())
        info["sections"] = {k: ("missing: " + str(v["missing"])) if "missing" in v else "present"
                            for k, v in n.get("sections", {}).items()}
        info["report"] = str(keep.relative_to(ROOT))
    write_result(a.out, info)
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
