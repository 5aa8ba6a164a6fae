"""Benchmark of the debate protocol (issue 5).

    .venv/bin/python bench/bench_debate.py                                  # 100 q x 3 agents x 3 rounds, hf
    .venv/bin/python bench/bench_debate.py --questions 10 --rounds 1 --max-tokens 32 --one-by-one 3
    .venv/bin/python bench/bench_debate.py --backend vllm --dtype bfloat16 --compiled --raw-batches 2 \
        --out bench/results/debate-vllm-cpu.json                            # the CPU result in the notes
    .venv/bin/python bench/bench_debate.py --backend vllm --profile llama-3.1-8b-instruct --questions 600
    .venv/bin/python bench/bench_debate.py --long --long-questions 2 --max-tokens 32 \
        --out bench/results/debate-long-cpu.json                           # the 12-round `long` config (bench_long)

Three ways, with no call store so every request is computed:
(1) lockstep: debate + reflection through ``run_protocol`` (one engine batch per round across
    all questions and both conditions);
(2) raw engine: exactly the batches (1) sent, replayed with ``engine.chat`` and nothing around it
    (``--raw-batches K``: the first K, compared with the same batches' share of (1));
(3) one question at a time (on the first ``--one-by-one`` questions, extrapolated per question).
Reports generated tokens/s of (1) and (2) (target (1) >= 0.8 x (2)), the speedup of (1) over
(3), and the collective metrics of (1). SmolLM2-135M numbers are plumbing, not findings.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from _recorder import Recorder, machine  # noqa: E402  (bench/ is the script directory)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--agents", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--profile", default="smollm2-135m-instruct")
    ap.add_argument("--backend", default="hf")
    ap.add_argument("--dtype", default=None, help="float32 (the profile default on CPU) or bfloat16")
    ap.add_argument("--compiled", action="store_true", help="vLLM: compile graphs (slower start, faster steps)")
    ap.add_argument("--one-by-one", type=int, default=3, help="questions timed one at a time (0 = skip)")
    ap.add_argument("--skip-raw", action="store_true")
    ap.add_argument("--raw-batches", type=int, default=None,
                    help="replay only the first K recorded batches to the raw engine (default: all)")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON result here")
    ap.add_argument("--long", action="store_true",
                    help="the shipped `long` config (12 rounds) through run_debate + report instead (see bench_long)")
    ap.add_argument("--long-questions", type=int, default=8, help="--long: questions (bench.limit)")
    ap.add_argument("--vote", action="store_true",
                    help="the compute-matched vote arm after debate (+ reflection) through run_debate (see bench_vote)")
    a = ap.parse_args()
    if a.long:
        return bench_long(a)
    if a.vote:
        return bench_vote(a)

    from chorus.serving import load_engine
    from chorus.simulate.debate.metrics import collective_summary
    from chorus.simulate.debate.prompts import load_prompts
    from chorus.simulate.debate.protocol import run_protocol
    from chorus.simulate.debate.questions import build_bench

    items, _ = build_bench(seed=0)
    items = items[:a.questions]
    P = load_prompts()
    kw = dict(agents=a.agents, rounds=a.rounds, temperature=0.7, max_tokens=a.max_tokens, seed=0, prompts=P)
    t0 = time.perf_counter()
    opts = {"enforce_eager": not a.compiled} if a.backend == "vllm" else {}
    eng = load_engine(a.profile, backend=a.backend, store=None, dtype=a.dtype, **opts)
    load_s = time.perf_counter() - t0
    rec = Recorder(eng)
    t0 = time.perf_counter()
    turns, info = run_protocol(rec, items, **kw)
    lock_s = time.perf_counter() - t0
    res = {"machine": machine(), "profile": a.profile, "backend": a.backend, "dtype": eng.dtype,
           "compiled": a.compiled, "questions": len(items),
           "agents": a.agents, "rounds": a.rounds, "max_tokens": a.max_tokens, "load_s": load_s,
           "lockstep": {"wall_s": lock_s, "new_tokens": info["new_tokens"], "tokens_per_s": info["new_tokens"] / lock_s,
                        "batches": [b["batch_size"] for b in info["batches"]],
                        "excluded": len(info["excluded"])}}
    engine_s = sum(rec.walls)
    res["lockstep"]["engine_s"] = engine_s
    res["lockstep"]["outside_engine_share"] = 1 - engine_s / lock_s  # prompt building, parsing, bookkeeping
    if not a.skip_raw:
        k_raw = len(rec.calls) if a.raw_batches is None else min(a.raw_batches, len(rec.calls))
        t0 = time.perf_counter()
        ntok = 0
        for convs, k in rec.calls[:k_raw]:
            ntok += sum(o.completion_tokens for o in eng.chat(convs, **k))
        raw_s = time.perf_counter() - t0
        # the same batches inside the protocol, charged their share of the protocol's outside-engine time
        lock_same = sum(rec.walls[:k_raw]) * lock_s / engine_s
        res["raw_engine"] = {"batches": k_raw, "of_batches": len(rec.calls), "wall_s": raw_s, "new_tokens": ntok,
                             "tokens_per_s": ntok / raw_s, "lockstep_wall_s_same_batches": lock_same}
        res["lockstep_over_raw"] = raw_s / lock_same
    if a.one_by_one:
        t0 = time.perf_counter()
        for it in items[:a.one_by_one]:
            run_protocol(eng, [it], **kw)
        per_q = (time.perf_counter() - t0) / a.one_by_one
        res["one_by_one"] = {"questions": a.one_by_one, "s_per_question": per_q,
                             "extrapolated_wall_s": per_q * len(items), "speedup_lockstep": per_q * len(items) / lock_s}
    s, _ = collective_summary(turns, n_boot=500, n_perm=500)
    res["collective"] = s
    txt = json.dumps(res, indent=2, default=float)
    print(txt)
    if a.out:
        a.out.write_text(txt)


def bench_long(a) -> None:
    """``--long``: the shipped ``long`` config (I = 3, 12 rounds, debate + reflection) on
    ``--long-questions`` questions with ``--max-tokens``, through ``run_debate`` (no call store:
    every request is computed; a temporary run directory) and ``report``: wall time, time per question, the report's own
    time and the §C.2 block of the summary. SmolLM2-135M numbers are plumbing, not findings.

        .venv/bin/python bench/bench_debate.py --long --long-questions 8 --max-tokens 64 \
            --out bench/results/debate-long-cpu.json
    """
    import tempfile

    from chorus.serving import load_engine
    from chorus.simulate.debate.config import DebateConfig, load
    from chorus.simulate.debate.experiment import report, run_debate

    cfg = load("long", DebateConfig, {"bench.limit": a.long_questions, "generation.max_tokens": a.max_tokens,
                                      "model.profile": a.profile, "model.backend": a.backend})
    mach = machine()  # the load average before the run, not after it
    t0 = time.perf_counter()
    eng = load_engine(a.profile, backend=a.backend, store=None, dtype=a.dtype)
    load_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run, summary = run_debate(cfg, Path(tmp) / "run", engine=eng)
        wall = time.perf_counter() - t0
        proto = json.loads((run.path / "protocol.json").read_text())
        t0 = time.perf_counter()
        report(run.path)  # the report alone (bootstrap + plots), from the run's files
        report_s = time.perf_counter() - t0
    n_q = summary["n_questions"]
    res = {"machine": mach, "mode": "long", "config": "long", "profile": a.profile, "backend": a.backend,
           "dtype": eng.dtype, "questions": n_q, "agents": cfg.agents, "rounds": cfg.rounds,
           "max_tokens": cfg.generation.max_tokens, "n_boot": cfg.analysis.n_boot, "load_s": load_s,
           "run_wall_s": wall, "s_per_question": wall / n_q, "protocol_wall_s": proto.get("wall_s"),
           "new_tokens": proto.get("new_tokens"), "tokens_per_s": proto["new_tokens"] / proto["wall_s"],
           "n_generated": summary["n_generated"], "parse_rate": summary["parse_rate"],
           "n_truncated": summary["n_truncated"], "report_s": report_s, "c2": summary["c2"],
           "note": "SmolLM2-135M on CPU: timings are real, the collective numbers are plumbing, not findings"}
    txt = json.dumps(res, indent=2, default=float)
    print(txt)
    if a.out:
        a.out.write_text(txt)


def bench_vote(a) -> None:
    """``--vote``: debate + reflection, then the compute-matched vote arm (``voting.py``), on
    ``--questions`` built questions with ``--agents``, ``--rounds``, ``--max-tokens``, through
    ``run_debate`` (no call store: every request is computed). Time and generated tokens per
    question for the protocol and for the vote arm, the arm's waves and overdraw, and the token
    matching. SmolLM2-135M numbers are plumbing, not findings.

        .venv/bin/python bench/bench_debate.py --vote --questions 6 --rounds 1 --max-tokens 32 \
            --out bench/results/debate-vote-cpu.json
    """
    import tempfile

    from chorus.serving import load_engine
    from chorus.simulate.debate.config import DebateConfig

    t0 = time.perf_counter()
    eng = load_engine(a.profile, backend=a.backend, store=None, dtype=a.dtype)
    load_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        from chorus.simulate.debate.experiment import run_debate
        cfg = DebateConfig(name="bench-vote", agents=a.agents, rounds=a.rounds, bench={"limit": a.questions},
                           model={"profile": a.profile, "backend": a.backend},
                           generation={"max_tokens": a.max_tokens}, analysis={"n_boot": 200, "n_perm": 200},
                           voting={"enabled": True})
        t0 = time.perf_counter()
        run, summary = run_debate(cfg, Path(tmp) / "run", engine=eng, make_plots=False)
        wall = time.perf_counter() - t0
        proto = json.loads((run.path / "protocol.json").read_text())
        vinfo = json.loads((run.path / "voting.json").read_text())
        vq = run.read_table("vote_questions")
    v = summary["vote"]
    n_q = v["n_questions"]
    res = {"machine": machine(), "mode": "vote", "profile": a.profile, "backend": a.backend, "dtype": eng.dtype,
           "questions": n_q, "agents": a.agents, "rounds": a.rounds, "max_tokens": a.max_tokens, "load_s": load_s,
           "run_wall_s": wall,
           "protocol": {"wall_s": proto["wall_s"], "s_per_question": proto["wall_s"] / n_q,
                        "new_tokens": proto["new_tokens"], "batches": [b["batch_size"] for b in proto["batches"]]},
           "vote": {"wall_s": vinfo["wall_s"], "s_per_question": vinfo["wall_s"] / n_q,
                    "new_tokens": vinfo["new_tokens"],
                    "tokens_per_s": vinfo["new_tokens"] / max(vinfo["model_s"], 1e-9),
                    "waves": [w["batch_size"] for w in vinfo["waves"]], "n_overdrawn": vinfo["n_overdrawn"],
                    "samples_per_question": v["samples_per_question"], "tokens_per_question": v["tokens_per_question"],
                    "n_matched": v["n_matched"], "n_cap_hits": v["n_cap_hits"], "parse_rate": v["parse_rate"],
                    "max_gap_share_of_last_sample":
                        float((vq["token_gap"] / vq["last_sample_tokens"].clip(lower=1)).max())},
           "arms": v.get("arms"), "n_paired": v.get("n_paired"),
           "note": "SmolLM2-135M: timings are real, the accuracy numbers are plumbing, not findings"}
    txt = json.dumps(res, indent=2, default=float)
    print(txt)
    if a.out:
        a.out.write_text(txt)


if __name__ == "__main__":
    main()
