"""Council throughput on this machine (no call store: everything is computed).

* lockstep: N councils (3 seats, R rounds) deliberated in lockstep: council tasks per minute;
* raw: every batch the lockstep runner sent, replayed straight to ``Engine.chat`` (same
  conversations, seeds and schema, so the same tokens): the runner's throughput as a fraction of
  the raw engine's at the same batch size (round by round and overall);
* task by task: the first M councils run one at a time: the lockstep speedup per task;
* baselines: token cost per task of MoA-Lite, MoA, Self-MoA and ArgLLMs on the lockstep councils.

Seats default to the council configs' heterogeneous trio (SmolLM2 analyst, gemma-3-270m analyst,
SmolLM2 skeptic: two engines, one batch per engine per round); ``--profile P`` makes all three seats P.

    python bench/bench_council.py --backend vllm --dtype bfloat16 --compiled --n 60 --sequential 3 \
        --interleave --out bench/results/council-vllm-cpu.json

On a 2-core machine shared with other jobs the absolute numbers move with the load
(``loadavg`` is recorded); the ratios are the point.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def reset_prefix_cache(eng) -> bool:
    """Empty vLLM's prefix cache (outside the timed region): a replay of the same prompts right
    after the runner's call would otherwise skip their prefill and look faster than it is."""
    llm = getattr(getattr(eng, "backend", None), "llm", None)
    return bool(llm is not None and hasattr(llm, "reset_prefix_cache") and llm.reset_prefix_cache())


class ReplayRecorder:
    """Wraps an engine; keeps every chat call (conversations and sampling) for the raw replay.
    With ``replay``, each batch is replayed straight to the engine right after it ran, so the
    runner and the raw engine are timed under the same machine load (interleaved). Both calls
    start from an empty prefix cache."""

    def __init__(self, eng, replay: bool = False):
        self.eng = eng
        self.calls = []
        self.replay = replay

    def chat(self, convs, **kw):
        reset_prefix_cache(self.eng)
        t0 = time.perf_counter()
        outs = self.eng.chat(convs, **kw)
        rec = {"convs": convs, "kw": kw, "wall_s": time.perf_counter() - t0,
               "tokens": sum(o.completion_tokens for o in outs)}
        if self.replay:
            reset_prefix_cache(self.eng)
            t0 = time.perf_counter()
            raw = self.eng.chat(convs, **kw)
            rec.update(raw_wall_s=time.perf_counter() - t0, raw_tokens=sum(o.completion_tokens for o in raw))
        self.calls.append(rec)
        return outs

    def __getattr__(self, k):
        return getattr(self.eng, k)


DEFAULT_SEATS = "smollm2-135m-instruct:analyst,gemma3-270m:analyst,smollm2-135m-instruct:skeptic"


def parse_seats(spec: str, profile: str | None):
    from chorus.simulate.council.runner import Seat
    if profile:
        return [Seat("A1", profile, "analyst"), Seat("A2", profile, "generalist"), Seat("A3", profile, "skeptic")]
    seats = []
    for i, part in enumerate(x for x in spec.split(",") if x.strip()):
        prof, _, persona = part.strip().partition(":")
        seats.append(Seat(f"A{i + 1}", prof, persona or "analyst"))
    if len(seats) < 2:
        raise SystemExit(f"--seats {spec!r}: a council needs at least 2 seats (PROFILE:PERSONA,...)")
    return seats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=8, help="tasks (councils) in the lockstep run")
    ap.add_argument("--sequential", type=int, default=3, help="councils to run one at a time")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dataset", default="truthfulqa_claims")
    ap.add_argument("--seats", default=DEFAULT_SEATS, help="PROFILE:PERSONA per seat, comma-separated")
    ap.add_argument("--profile", default=None, help="all three seats this profile (analyst, generalist, skeptic)")
    ap.add_argument("--backend", default="hf")
    ap.add_argument("--dtype", default=None, help="float32 (the profile default on CPU) or bfloat16")
    ap.add_argument("--compiled", action="store_true", help="vLLM: compile graphs (slower start, faster steps)")
    ap.add_argument("--max-tokens", type=int, default=80)
    ap.add_argument("--max-chars", type=int, default=100)
    ap.add_argument("--no-baselines", action="store_true")
    ap.add_argument("--interleave", action="store_true",
                    help="replay each batch right after it ran (same load for runner and raw engine)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    os.environ.setdefault("CHORUS_TORCH_THREADS", "1")

    from _recorder import machine, write_result

    from chorus.serving import load_engine
    from chorus.simulate.council.data import load_tasks
    from chorus.simulate.council.llm_baselines import run_baselines
    from chorus.simulate.council.prompts import load_prompts
    from chorus.simulate.council.runner import make_councils, run_councils

    P = load_prompts()
    tasks, _ = load_tasks(a.dataset, a.n, balanced=False)
    seats = parse_seats(a.seats, a.profile)
    opts = {"enforce_eager": not a.compiled} if a.backend == "vllm" else {}
    t0 = time.perf_counter()
    engines = {p: load_engine(p, backend=a.backend, store=None, dtype=a.dtype, **opts)
               for p in dict.fromkeys(s.profile for s in seats)}
    load_s = time.perf_counter() - t0
    gen = dict(rounds=a.rounds, P=P, max_tokens=a.max_tokens, max_chars=a.max_chars, max_retries=2)
    res: dict = {"machine": machine(), "command": "bench/bench_council.py",
                 "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
                 "seats": [f"{s.agent}={s.profile}/{s.persona}" for s in seats],
                 "engines": {p: {"backend": a.backend, "dtype": getattr(e, "dtype", None)} for p, e in engines.items()},
                 "engine_load_s": load_s}

    # lockstep
    recs = {p: ReplayRecorder(e, replay=a.interleave) for p, e in engines.items()}
    councils = make_councils(tasks, [("clean", ())], [0])
    t0 = time.perf_counter()
    stats = run_councils(councils, seats, recs, **gen)
    wall = time.perf_counter() - t0 - sum(c.get("raw_wall_s", 0.0) for r in recs.values() for c in r.calls)
    tok = sum(b["new_tokens"] for b in stats.batches)
    res["lockstep"] = {"councils": len(councils), "wall_s": wall, "tasks_per_min": len(councils) / wall * 60,
                       "new_tokens": tok, "tok_s": tok / wall,
                       "engine_s": sum(c["wall_s"] for r in recs.values() for c in r.calls),
                       "batches": [{k: b[k] for k in ("round", "attempt", "profile", "n", "wall_s", "new_tokens")}
                                   for b in stats.batches],
                       "abstentions": stats.to_dict()["n_abstentions"], "illegal": dict(stats.illegal)}
    res["lockstep"]["outside_engine_share"] = 1.0 - res["lockstep"]["engine_s"] / wall
    res["machine"]["loadavg_after_lockstep"] = os.getloadavg()

    # raw replay of the same batches (each engine's calls in the order the runner sent them)
    rows, order = [], {p: iter(r.calls) for p, r in recs.items()}
    for b in stats.batches:
        call = next(order[b["profile"]])
        if a.interleave:
            rw, rt = call["raw_wall_s"], call["raw_tokens"]
        else:
            reset_prefix_cache(engines[b["profile"]])
            t0 = time.perf_counter()
            outs = engines[b["profile"]].chat(call["convs"], **call["kw"])
            rw = time.perf_counter() - t0
            rt = sum(o.completion_tokens for o in outs)
        cw = b["wall_s"] - (call.get("raw_wall_s", 0.0) if a.interleave else 0.0)  # the runner's own call
        rows.append({"round": b["round"], "attempt": b["attempt"], "profile": b["profile"], "n": b["n"],
                     "council_tok_s": b["new_tokens"] / cw, "raw_tok_s": rt / rw, "raw_wall_s": rw,
                     "same_tokens": rt == b["new_tokens"], "ratio": (b["new_tokens"] / cw) / (rt / rw) if rt else None})
    raw_wall = sum(r["raw_wall_s"] for r in rows)
    # the rounds' whole wall (prompt building, automaton checks included) against raw engine time
    res["raw"] = {"batches": rows, "council_tok_s_incl_overhead": tok / wall,
                  "raw_tok_s": sum(b["new_tokens"] for b in stats.batches) / raw_wall if raw_wall else None,
                  "ratio_overall": raw_wall / wall if raw_wall else None,
                  "all_same_tokens": all(r["same_tokens"] for r in rows)}

    # task by task (the first m tasks)
    m = min(a.sequential, len(tasks))
    t0 = time.perf_counter()
    for t in tasks[:m]:
        run_councils(make_councils([t], [("clean", ())], [0]), seats, engines, **gen)
    seq = time.perf_counter() - t0
    res["machine"]["loadavg_after_task_by_task"] = os.getloadavg()
    res["task_by_task"] = {"councils": m, "wall_s": seq, "s_per_task": seq / m,
                           "tasks_per_min": m / seq * 60, "speedup_lockstep": (seq / m) / (wall / len(councils))}

    if not a.no_baselines:
        from chorus.simulate.council.config import Generation
        g = Generation(max_tokens=a.max_tokens, max_chars=a.max_chars)
        first = seats[0].profile
        t0 = time.perf_counter()
        rows = run_baselines(councils, seats, engines, stats.turns, P,
                             methods=["moa_lite", "moa", "self_moa", "argllms"], synthesizer=first,
                             self_moa_profile=first, argllms_generator=first, samples=6, claim_base=0.5,
                             fair_attack=True, root=0, gen=g)
        import pandas as pd
        df = pd.DataFrame(rows)
        council_tok = pd.DataFrame(stats.turns).eval("t = prompt_tokens + completion_tokens").groupby("trace_id")["t"].sum()
        res["baselines"] = {"wall_s": time.perf_counter() - t0,
                            "tokens_per_task": {k: float(v) for k, v in df.groupby("method")["tokens"].mean().items()},
                            "calls_per_task": {k: float(v) for k, v in df.groupby("method")["n_calls"].mean().items()},
                            "parse_rate": {k: float(v) for k, v in df.groupby("method")["parsed"].mean().items()},
                            "council_tokens_per_task": float(council_tok.mean())}
    res["machine"]["loadavg_at_end"] = os.getloadavg()
    print(json.dumps({k: v for k, v in res.items() if k not in ("lockstep", "raw")}, indent=1))
    print(json.dumps({"tasks_per_min": res["lockstep"]["tasks_per_min"], "ratio_overall": res["raw"]["ratio_overall"],
                      "speedup_lockstep": res["task_by_task"]["speedup_lockstep"]}))
    if a.out:
        write_result(a.out, res)


if __name__ == "__main__":
    main()
