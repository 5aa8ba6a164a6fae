"""Benchmark of the belief layer over a debate (``chorus debate belief``) on a synthetic debate whose agents
are belief-layer agents with planted kappa and gamma (reading=planted, appraiser=oracle: no model calls).

    .venv/bin/python bench/bench_debate_belief.py                            # 800 q x 3 agents x 3 rounds
    .venv/bin/python bench/bench_debate_belief.py --out bench/results/debate-belief-synthetic.json

Reports the seconds to build the run and to read it (observations, closed-form inversion, joint fits and
their family bootstrap), and the recovery: the largest relative error of any well-conditioned reading's
kappa, and of each agent's fitted kappa and gamma.
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
    ap.add_argument("--questions", type=int, default=800)
    ap.add_argument("--rounds", type=int, default=3, help="debate rounds after round 0")
    ap.add_argument("--kappas", default="0.5,2,8")
    ap.add_argument("--gamma", type=float, default=0.7)
    ap.add_argument("--n-boot", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()

    import numpy as np
    import pandas as pd

    from chorus.simulate.debate.config import BeliefReadConfig
    from chorus.simulate.debate.stubbornness import run_belief, synthetic_belief_debate
    kap = [float(x) for x in a.kappas.split(",")]
    res: dict = {"machine": machine(), "questions": a.questions, "agents": len(kap), "rounds": a.rounds,
                 "kappas": kap, "gamma": a.gamma, "n_boot": a.n_boot}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        src = synthetic_belief_debate(Path(tmp) / "debate", kap, gamma=a.gamma, n=a.questions, rounds=a.rounds, seed=a.seed)
        res["make_synthetic_s"] = time.perf_counter() - t0
        cfg = BeliefReadConfig(reading="planted", appraiser="oracle", gamma=a.gamma, n_boot=a.n_boot, seed=a.seed)
        t0 = time.perf_counter()
        out, s = run_belief(src, cfg, out=Path(tmp) / "belief", make_plots=False)
        res["read_s"] = time.perf_counter() - t0
        obs = pd.read_parquet(out / "tables" / "observations.parquet")
        deb = obs[(obs["condition"] == "debate") & obs["keep"]]
        planted = np.asarray(kap)[deb["agent"].to_numpy()]
        res["readings"] = int(s["counts"]["observations"])
        res["well_conditioned"] = int(s["counts"]["retained"])
        res["max_rel_error_closed_form"] = float(np.max(np.abs(deb["kappa_hat"] - planted) / planted))
        rows = [r for r in s["agents"] if r["agent"] != "all"]
        res["agents"] = [{k: r[k] for k in ("agent", "kappa", "kappa_lo", "kappa_hi", "kappa_fit", "gamma_fit",
                                            "kappa_fit_lo", "kappa_fit_hi", "drift_debate", "drift_reflection")} for r in rows]
        res["max_rel_error_fit_kappa"] = float(max(abs(r["kappa_fit"] - k) / k for r, k in zip(rows, kap)))
        res["max_rel_error_fit_gamma"] = float(max(abs(r["gamma_fit"] - a.gamma) / a.gamma for r in rows))
    print(json.dumps({k: v for k, v in res.items() if k != "machine"}, indent=2))
    if a.out:
        write_result(a.out, res)


if __name__ == "__main__":
    main()
