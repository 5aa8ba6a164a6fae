"""Benchmarks of the belief layer.

    .venv/bin/python bench/bench_belief.py                 # oracle engine (seconds)
    .venv/bin/python bench/bench_belief.py --llm           # + LLM-mode lockstep vs raw engine vs one-by-one
    .venv/bin/python bench/bench_belief.py --llm --runs 8 --agents 4 --rounds 1 --backend hf

Oracle: the seed's kappa-sweep size, 7 kappa x 5 seeds = 35 runs x N = 20 x 20 rounds =
266,000 listener events; times the vectorised updates alone, and with the full event table
built and written to parquet (targets 0.05 s and 0.5 s).

LLM (needs serving and the embedded model): the same R runs (a small kappa sweep) three ways,
with no call store so every request is computed: (1) lockstep through the engine, one batch
per turn across runs; (2) the raw engine replaying exactly the batches (1) sent, with no
simulation around it; (3) the runs one after another. Reports generated tokens per second of
(1) and (2) (target: (1) >= 0.8 x (2)) and the speedup of (1) over (3).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402


def oracle(repeats: int) -> dict:
    from chorus.simulate.belief.config import BeliefConfig
    from chorus.simulate.belief.lockstep import prepare, run_group
    from chorus.simulate.belief.experiment import plan
    from chorus.simulate.belief.channel import OracleProbe
    from chorus.simulate.belief.tables import events_table

    cfg = BeliefConfig(mode="oracle", population={"kind": "uniform"},
                       sweep={"population.kappa": [0.5, 1, 2, 4, 8, 16, 32]})
    conds, specs = plan(cfg, sweep=True)
    t = time.perf_counter()
    groups = prepare(specs, cfg.seed)
    t_prep = time.perf_counter() - t
    upd, full, n_ev = [], [], 0
    with tempfile.TemporaryDirectory() as d:
        for _ in range(repeats):
            t0 = time.perf_counter()
            res = run_group(groups[0], probe=OracleProbe())
            t1 = time.perf_counter()
            ev = events_table(res)
            ev.to_parquet(Path(d) / "events.parquet", index=False)
            t2 = time.perf_counter()
            upd.append(t1 - t0)
            full.append(t2 - t0)
            n_ev = len(ev)
    return {"runs": len(specs), "listener_events": n_ev, "prepare_s": t_prep,
            "updates_s_min": min(upd), "updates_s_median": float(np.median(upd)),
            "with_event_table_s_min": min(full), "with_event_table_s_median": float(np.median(full))}


from _recorder import Recorder  # noqa: E402  (bench/ is the script directory)


def llm(runs: int, agents: int, rounds: int, backend: str, max_tokens: int) -> dict:
    from chorus.serving import load_engine
    from chorus.simulate.belief.config import BeliefConfig
    from chorus.simulate.belief.lockstep import prepare, run_group
    from chorus.simulate.belief.experiment import plan
    from chorus.simulate.belief.channel import LLMAppraiser, LLMGenerator

    kappas = [0.5, 1, 2, 4, 8, 16, 32][:max(1, min(7, runs))]
    n_seeds = int(np.ceil(runs / len(kappas)))
    cfg = BeliefConfig(mode="llm", n_agents=agents, rounds=rounds, seeds=n_seeds,
                       population={"kind": "uniform"}, sweep={"population.kappa": kappas},
                       llm={"backend": backend, "appraiser": {"tau": 1.0},
                            "generator": {"max_tokens": max_tokens}})
    conds, specs = plan(cfg, sweep=True)
    specs = specs[:runs]
    t = time.perf_counter()
    eng = load_engine(cfg.llm.model.profile, backend=backend)  # no store: everything is computed
    t_load = time.perf_counter() - t
    rec = Recorder(eng)

    def roles(e):
        return dict(generator=LLMGenerator(e, max_tokens=max_tokens), appraiser=LLMAppraiser(e), probe=None)

    # warm-up (first-call costs out of the way)
    eng.chat([[{"role": "user", "content": "Hello"}]], temperature=0.0, max_tokens=4)

    t = time.perf_counter()
    res = run_group(prepare(specs, cfg.seed)[0], **roles(rec))
    t_lock = time.perf_counter() - t
    tokens = int(res.gen_tokens.sum())

    t = time.perf_counter()
    raw_tokens = 0
    for convs, kw in rec.calls:
        outs = eng.chat(convs, **kw)
        if kw.get("json_schema") is None:
            raw_tokens += sum(o.completion_tokens for o in outs)
    t_raw = time.perf_counter() - t

    t = time.perf_counter()
    for sp in specs:
        run_group(prepare([sp], cfg.seed)[0], **roles(eng))
    t_seq = time.perf_counter() - t
    return {"backend": backend, "engine": eng.identity, "load_s": t_load, "runs": len(specs),
            "agents": agents, "rounds": rounds, "batch_size": len(specs),
            "batches": len(rec.calls), "generated_tokens": tokens,
            "lockstep_s": t_lock, "raw_engine_s": t_raw, "one_by_one_s": t_seq,
            "lockstep_tok_s": tokens / t_lock, "raw_tok_s": raw_tokens / t_raw,
            "lockstep_vs_raw": t_raw / t_lock, "speedup_vs_one_by_one": t_seq / t_lock}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--llm", action="store_true", help="also benchmark LLM mode (needs the model)")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--agents", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--backend", default="auto")
    a = ap.parse_args()
    o = oracle(a.repeats)
    print(f"oracle: {o['runs']} runs, {o['listener_events']:,} listener events")
    print(f"  updates:               {o['updates_s_min']:.4f} s (min of {a.repeats}), median {o['updates_s_median']:.4f} s  [target < 0.05 s]")
    print(f"  + event table parquet: {o['with_event_table_s_min']:.4f} s (min), median {o['with_event_table_s_median']:.4f} s  [target < 0.5 s]")
    print(f"  (population/graph set-up, once: {o['prepare_s']:.4f} s)")
    if a.llm:
        r = llm(a.runs, a.agents, a.rounds, a.backend, a.max_tokens)
        print(f"llm ({r['backend']}, {r['engine'].get('profile')}, {r['engine'].get('dtype')}): "
              f"{r['runs']} runs x N={r['agents']} x {r['rounds']} round(s), batch {r['batch_size']}, "
              f"{r['batches']} batches, {r['generated_tokens']} generated tokens")
        print(f"  lockstep:     {r['lockstep_s']:.1f} s, {r['lockstep_tok_s']:.2f} gen tok/s")
        print(f"  raw engine:   {r['raw_engine_s']:.1f} s, {r['raw_tok_s']:.2f} gen tok/s  -> lockstep/raw = {r['lockstep_vs_raw']:.2f}  [target >= 0.8]")
        print(f"  one by one:   {r['one_by_one_s']:.1f} s  -> lockstep speedup {r['speedup_vs_one_by_one']:.2f}x")


if __name__ == "__main__":
    main()
