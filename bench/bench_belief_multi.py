"""Benchmark of the belief engine (oracle mode) on Beta groups and on multi-concept groups.

    .venv/bin/python bench/bench_belief_multi.py                       # N = 20, 20 rounds, 50 runs
    .venv/bin/python bench/bench_belief_multi.py --runs 50 --repeats 5 --out bench/results/belief_multi.json

Same N, rounds and runs (one lockstep group, uniform kappa = 4, complete graph) three ways, all
through the one engine (``lockstep.run_group``): (1) a Beta group (a ``BeliefConfig``: scalar roles,
the Beta view of the result); (2) a multi-concept group on a topic with one K = 2 concept (the same
dynamics, bit for bit); (3) a multi-concept group on the shipped ``aldenvale_council`` topic (three
concepts, K = 3, 2, 4). Times the updates alone (min and median
of ``--repeats``) and, once per engine, the event table built and written to parquet. Reports
listener events per second (one listener hearing one utterance; the rate the engines share) and,
for a multi-concept group, concept updates per second (listener events x concepts).
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
import yaml  # noqa: E402

from _recorder import machine, write_result  # noqa: E402  (bench/ is the script directory)

BINARY_TOPIC = {
    "id": "bench_binary", "title": "one binary concept", "setting": "Aldenvale",
    "concepts": [{"id": "transit", "title": "transit", "question": "Rail or roads?",
                  "stances": [{"id": "rail", "assertion": "expand rail", "phrase": "expanding rail"},
                              {"id": "roads", "assertion": "keep roads", "phrase": "keeping roads"}]}],
    "levels": ["torn between {top} and {second}", "slightly for {top}", "clearly for {top}",
               "strongly for {top}", "committed to {top}"],
    "prompts": {"generator": {"system": "{setting}", "user": "{issues} {views}"},
                "appraiser": {"system": "{setting}", "user": "{issues} {statement} {format}"}}}


def _time(fn, repeats: int) -> tuple[list[float], object]:
    walls, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - t0)
    return walls, out


def single(n: int, rounds: int, runs: int, repeats: int, tmp: Path) -> dict:
    from chorus.simulate.belief.config import BeliefConfig
    from chorus.simulate.belief.lockstep import prepare, run_group
    from chorus.simulate.belief.experiment import plan
    from chorus.simulate.belief.tables import events_table
    cfg = BeliefConfig(mode="oracle", n_agents=n, rounds=rounds, seeds=runs, population={"kind": "uniform", "kappa": 4})
    grp = prepare(plan(cfg, sweep=False)[1], cfg.seed)[0]
    walls, res = _time(lambda: run_group(grp), repeats)
    t0 = time.perf_counter()
    ev = events_table(res)
    ev.to_parquet(tmp / "single.parquet", index=False)
    return _row("Beta group (BeliefConfig)", walls, int(res.listen.sum()), 1, len(ev), time.perf_counter() - t0)


def multi(topic: str, label: str, n: int, rounds: int, runs: int, repeats: int, tmp: Path) -> dict:
    from chorus.simulate.belief.config import MultiBeliefConfig
    from chorus.simulate.belief.lockstep import plan, prepare, run_group
    from chorus.simulate.belief.tables import concept_events_table
    cfg = MultiBeliefConfig(mode="oracle", topic=topic, n_agents=n, rounds=rounds, seeds=runs,
                            population={"kind": "uniform", "kappa": 4})
    grp = prepare(plan(cfg), cfg.seed)[0]
    walls, res = _time(lambda: run_group(grp), repeats)
    t0 = time.perf_counter()
    ev = concept_events_table(res)
    ev.to_parquet(tmp / f"{label}.parquet", index=False)
    return _row(label, walls, int(res.listen.any(-1).sum()), grp.C, len(ev), time.perf_counter() - t0,
                Ks=[int(k) for k in grp.Ks])


def _row(label, walls, listener_events, concepts, rows, table_s, **extra) -> dict:
    best, med = min(walls), float(np.median(walls))
    return {"engine": label, "concepts": concepts, **extra, "listener_events": listener_events,
            "concept_updates": listener_events * concepts, "event_table_rows": rows,
            "updates_s_min": best, "updates_s_median": med, "updates_s_all": walls,
            "listener_events_per_s": listener_events / best, "concept_updates_per_s": listener_events * concepts / best,
            "event_table_parquet_s": table_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None, help="write the result JSON here (e.g. bench/results/belief_multi.json)")
    a = ap.parse_args()
    res = {"machine": machine(), "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
           "agents": a.agents, "rounds": a.rounds, "runs": a.runs, "repeats": a.repeats, "engines": []}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "bench_binary.yaml").write_text(yaml.safe_dump(BINARY_TOPIC))
        res["engines"].append(single(a.agents, a.rounds, a.runs, a.repeats, tmp))
        res["engines"].append(multi(str(tmp / "bench_binary.yaml"), "multi-concept group, 1 concept (K=2)",
                                    a.agents, a.rounds, a.runs, a.repeats, tmp))
        res["engines"].append(multi("aldenvale_council", "multi-concept group, 3 concepts (K=3,2,4)",
                                    a.agents, a.rounds, a.runs, a.repeats, tmp))
    base = res["engines"][0]["listener_events_per_s"]
    for e in res["engines"]:
        e["listener_events_per_s_vs_single"] = e["listener_events_per_s"] / base
    print(f"oracle mode, N={a.agents}, {a.rounds} rounds, {a.runs} runs in lockstep (min of {a.repeats}; "
          f"load average at start {res['machine'].get('loadavg_at_start')})")
    for e in res["engines"]:
        print(f"  {e['engine']:45s} {e['updates_s_min']:.3f} s  {e['listener_events_per_s']:>12,.0f} listener events/s "
              f"({e['listener_events_per_s_vs_single']:.2f}x single)  {e['concept_updates_per_s']:>12,.0f} concept "
              f"updates/s; event table + parquet {e['event_table_parquet_s']:.2f} s ({e['event_table_rows']:,} rows)")
    if a.out:
        write_result(a.out, res)


if __name__ == "__main__":
    main()
