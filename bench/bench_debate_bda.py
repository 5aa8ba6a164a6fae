"""Benchmark of BDA over a debate (``chorus debate bda``) and of the decision-flip diagnostic, on a
synthetic debate whose agents answer with planted reliabilities (no model calls: pure math).

    .venv/bin/python bench/bench_debate_bda.py                                  # 2000 q x 5 agents x 3 rounds
    .venv/bin/python bench/bench_debate_bda.py --questions 4500 --out bench/results/debate-bda-cpu.json

Reports the seconds to convert turns into traces, to run every method's nested CV, and the flip
diagnostic; the planted vs fitted reliabilities (max abs error) and every method's accuracy / ECE.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _recorder import machine, write_result  # noqa: E402  (bench/ is the script directory)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2, help="debate rounds after round 0")
    ap.add_argument("--reliabilities", default="0.85,0.65,0.6,0.55,0.55")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()

    import numpy as np

    from chorus.aggregate.flips import decision_flips, flip_summary
    from chorus.simulate.debate.bda import debate_traces, read_run, run_bda, synthetic_debate
    rel = [float(x) for x in a.reliabilities.split(",")]
    res: dict = {"machine": machine(), "questions": a.questions, "agents": len(rel), "rounds": a.rounds,
                 "reliabilities": rel}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        src = synthetic_debate(Path(tmp) / "debate", rel, n=a.questions, rounds=a.rounds, seed=a.seed)
        res["make_synthetic_s"] = time.perf_counter() - t0
        turns, items, votes = read_run(src)
        t0 = time.perf_counter()
        traces, info = debate_traces(turns, items, votes=votes)
        res["convert_s"] = time.perf_counter() - t0
        res["moves"] = info["moves"]
        t0 = time.perf_counter()
        out, s = run_bda(src, make_plots=False)
        res["bda_s"] = time.perf_counter() - t0
        g = s["groups"]["no-yes"]
        res["metrics"] = {m: {k: v[k] for k in ("accuracy", "ece_ew", "brier")} for m, v in g["metrics"].items()}
        cell = json.loads((out / "no-yes" / "results.json").read_text())["cells"][0]
        folds = [f for f in cell["folds"] if f["method"] == "bda_per_agent"]
        fitted = np.mean([[f[f"r[A{i + 1}]"] for i in range(len(rel))] for f in folds], axis=0)
        res["fitted_reliabilities"] = fitted.tolist()
        res["max_abs_reliability_error"] = float(np.abs(fitted - rel).max())
        t0 = time.perf_counter()
        flips = flip_summary(decision_flips(traces))
        res["flips_s"] = time.perf_counter() - t0
        res["flips"] = flips.to_dict("records")
    print(json.dumps({k: v for k, v in res.items() if k != "machine"}, indent=2))
    if a.out:
        write_result(a.out, res)


if __name__ == "__main__":
    main()
