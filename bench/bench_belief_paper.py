"""The belief-layer paper report (``chorus paper belief``) over the oracle sweeps that fill its
mechanism sections (regimes, kappa recovery, the forgetting ablation, the gamma sweep): oracle evidence,
no model, every number exact; the model sections (Table 2 per model, App. B calibration) name the LLM
runs they need. Times each sweep and the report; keeps paper.md, numbers.json and figures/.

    .venv/bin/python bench/bench_belief_paper.py --out bench/results/belief-paper-oracle.json
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

SWEEPS = ("regimes", "committed", "kappa_recovery", "gamma_ablation", "gamma_sweep_oracle")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "belief-paper-oracle.json")
    a = ap.parse_args()
    chorus = str(Path(sys.executable).with_name("chorus"))
    info: dict = {"machine": machine(), "sweeps_s": {}}
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for name in SWEEPS:
            t = time.perf_counter()
            run = Path(tmp) / name
            subprocess.run([chorus, "belief", "sweep", name, "--set", "mode=oracle", "--out", str(run)], check=True,
                           stdout=subprocess.DEVNULL)
            info["sweeps_s"][name] = round(time.perf_counter() - t, 2)
            runs.append(run)
        keep = a.out.with_suffix("")
        shutil.rmtree(keep, ignore_errors=True)
        t = time.perf_counter()
        from chorus.papers.belief import build_paper
        md = build_paper(runs, keep)
        info["paper_s"] = round(time.perf_counter() - t, 2)
        for p in (md, keep / "numbers.json"):   # no temporary path in the kept report
            p.write_text(p.read_text().replace(tmp, "RUNS"))
        n = json.loads((keep / "numbers.json").read_text())
        info["sections"] = {k: ("missing: " + v["missing"]) if "missing" in v else "present"
                            for k, v in n["sections"].items()}
        info["report"] = str(keep.relative_to(ROOT))
    write_result(a.out, info)
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
