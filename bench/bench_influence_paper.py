"""The peer-influence paper report (``chorus paper influence``) as a user builds it, on the embedded
model through the CLI: one smoke debate, then every influence verb reading its turns
(``--set source.run=``), then the report over all of them. Times each command; keeps paper.md,
numbers.json and figures/. SmolLM2-135M numbers are plumbing, not findings (the report says so per
run through its model column); the long-debate section names the run it needs.

    .venv/bin/python bench/bench_influence_paper.py --out bench/results/influence-paper-smoke.json
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

BEHAVIOUR = {"readout": ["--set", "readout.fractions=[0.0, 0.5, 1.0]", "--set", "readout.controls=[unrelated, filler]"],
             "ablate": [], "cues": ["--set", "cues.sets=[original, matched]"]}
INTERNALS = ("knockout", "patch", "probe", "concepts", "transfer")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=8, help="questions of the smoke debate (bench.limit)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "influence-paper-smoke.json")
    a = ap.parse_args()
    chorus = str(Path(sys.executable).with_name("chorus"))
    info: dict = {"machine": machine(), "questions": a.questions, "commands_s": {}}

    def run(name: str, *args: str) -> None:
        t = time.perf_counter()
        subprocess.run([chorus, *args], check=True, stdout=subprocess.DEVNULL)
        info["commands_s"][name] = round(time.perf_counter() - t, 2)

    with tempfile.TemporaryDirectory() as tmp:
        debate = Path(tmp) / "debate"
        run("debate run smoke", "debate", "run", "smoke", "--set", f"bench.limit={a.questions}",
            "--set", "generation.max_tokens=48", "--out", str(debate))
        runs = [debate]
        for verb, extra in BEHAVIOUR.items():
            out = Path(tmp) / verb
            run(f"influence {verb}", "influence", verb, "influence_smoke", "--set", f"source.run={debate}", *extra,
                "--out", str(out))
            runs.append(out)
        for verb in INTERNALS:
            out = Path(tmp) / verb
            run(f"influence {verb}", "influence", verb, "internals_smoke", "--set", f"source.run={debate}",
                "--out", str(out))
            runs.append(out)
        keep = a.out.with_suffix("")
        shutil.rmtree(keep, ignore_errors=True)
        run("paper influence", "paper", "influence", *map(str, runs), "--out", str(keep))
        for p in (keep / "paper.md", keep / "numbers.json"):   # no temporary path in the kept report
            p.write_text(p.read_text().replace(tmp, "RUNS"))
        n = json.loads((keep / "numbers.json").read_text())
        info["sections"] = {k: ("missing: " + v["missing"]) if "missing" in v else f"{len(v['rows'])} rows"
                            for k, v in n["sections"].items()}
        info["report"] = str(keep.relative_to(ROOT))
    write_result(a.out, info)
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
