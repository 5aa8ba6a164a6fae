"""Benchmark of counterfactual debates (``interventions/counterfactual.py``): the cost of a replayed round
against the factual round it replays, on the embedded model (hf).

    .venv/bin/python bench/bench_counterfactual.py --out bench/results/counterfactual-cpu.json
    .venv/bin/python bench/bench_counterfactual.py --questions 12 --rounds 3 --max-tokens 64

A debate of ``--questions`` questions x 3 agents x ``--rounds`` rounds (debate and reflection) is run
on a call store, then replayed from round 1 with agent 0's attention to agent 1 cut in every layer.
Reported: the factual rounds' seconds (one engine batch per round, debate and reflection together,
and per turn), the receiver's replies at the cut round (one knocked-out generation each, cut and
unblocked, sequential with the KV cache), and each continued round of the cut arm (only questions
whose history changed are generated; the rest come from the store). SmolLM2-135M: cost, not findings.
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
    ap.add_argument("--questions", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()

    from chorus.interventions.counterfactual import CounterfactualConfig, run_counterfactual
    from chorus.simulate.debate.config import DebateConfig, load
    from chorus.simulate.debate.experiment import run_debate

    work = Path(tempfile.mkdtemp(prefix="chorus-bench-cf-"))
    cfg = load("smoke", DebateConfig, {"bench.limit": a.questions, "rounds": a.rounds,
                                       "generation.max_tokens": a.max_tokens, "analysis.n_boot": 50,
                                       "analysis.n_perm": 50})
    t0 = time.perf_counter()
    run, _ = run_debate(cfg, work / "debate", make_plots=False)
    debate_s = time.perf_counter() - t0
    batches = json.loads((run.path / "protocol.json").read_text())["batches"]
    t0 = time.perf_counter()
    _, s = run_counterfactual(run.path, CounterfactualConfig(receiver=0, peer=1, round=1, n_boot=50), make_plots=False)
    cf_s = time.perf_counter() - t0
    fact = {int(b["round"]): b for b in batches}
    cut = s["cost"]["cut"]["batches"]
    rep = s["cost"]["receiver_replies"]
    res = {"machine": machine(), "model": cfg.model.profile, "questions": s["n_questions"], "agents": cfg.agents,
           "rounds": a.rounds, "max_tokens": a.max_tokens, "debate_wall_s": debate_s, "counterfactual_wall_s": cf_s,
           "factual_rounds": {r: {"wall_s": b["wall_s"], "turns": b["batch_size"], "s_per_turn": b["wall_s"] / b["batch_size"],
                                  "new_tokens": b["new_tokens"]} for r, b in fact.items()},
           "receiver_replies": {**rep, "s_per_reply": rep["wall_s"] / max(rep["computed"], 1)},
           "cut_rounds": {int(b["round"]): {"wall_s": b["wall_s"], "turns": b["batch_size"], "cached": b["cached"],
                                            "new_tokens": b["new_tokens"]} for b in cut},
           "replay_equals_factual": s["replay_equals_factual"], "changed": s["changed"]}
    r1 = fact[1]
    # the replayed round: the receiver's two knocked-out generations per question (cut and unblocked) and
    # the stored replies of the others, against the factual round's batch (debate and reflection)
    res["cut_round_vs_factual_round"] = rep["wall_s"] / r1["wall_s"]
    res["reply_vs_factual_turn"] = res["receiver_replies"]["s_per_reply"] / (r1["wall_s"] / r1["batch_size"])
    print(json.dumps({k: v for k, v in res.items() if k != "machine"}, indent=2, default=float))
    if a.out:
        write_result(a.out, res)


if __name__ == "__main__":
    main()
