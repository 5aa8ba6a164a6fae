"""Benchmarks of aggregate/ (issue 3). Run: ``.venv/bin/python bench/bench_aggregate.py``.

On 4,500 synthetic binary traces (3 seats, 3 rounds):
  * full nested CV of per-agent BDA over the whole grid (80 configurations x 25 inner fits)
    -- target < 1 s on the 2-core machine;
  * the confusion model's nested CV (30 configurations x 25 inner fits) -- target < 5 s;
  * posterior evaluation throughput -- target >= 1,000,000 tasks/s;
  * crowd-kit's one-coin Dawid-Skene EM on the round-0 votes of the same pool, for comparison.
Prints a table of medians over repeats plus the machine. No assertion: it reports.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable before `pip install -e .`

from _recorder import machine  # noqa: E402  (bench/ is the script directory)


def timeit(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=4500)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    import numpy as np

    from chorus.aggregate import (ConfusionBDA, CouncilSpec, DawidSkeneEM, OneCoinBDA, Pool, generate_council, nested_cv,
                           one_coin_posterior)
    from chorus.aggregate.posterior import one_coin_proba
    from chorus.aggregate.trace import Trace

    warnings.simplefilter("ignore")
    R = args.repeats
    rows = []

    t = time.perf_counter()
    traces = generate_council(CouncilSpec(n_tasks=args.tasks, K=2, rounds=3), seed=0)
    t_gen = time.perf_counter() - t
    dicts = [tr.to_dict() for tr in traces]
    parse = timeit(lambda: [Trace.from_dict(d) for d in dicts], R)
    rows.append(("parse + validate traces (Trace.from_dict)", parse, None, f"{args.tasks / statistics.median(parse):,.0f} traces/s"))
    build = timeit(lambda: Pool.from_traces(traces), R)
    rows.append(("automaton + counts (Pool.from_traces)", build, None, f"{args.tasks / statistics.median(build):,.0f} traces/s"))
    pool = Pool.from_traces(traces)
    _ = pool.c, pool.pair_keys, pool.kterm  # cached views, built once per pool

    nested_cv(pool, {"w": OneCoinBDA()}, seed=0)  # warm-up (imports scikit-learn)
    bda = timeit(lambda: nested_cv(pool, {"bda_per_agent": OneCoinBDA()}, seed=0), R)
    rows.append(("nested CV, per-agent BDA (80 configs x 25 fits)", bda, 1.0, ""))
    conf = timeit(lambda: nested_cv(pool, {"bda_confusion": ConfusionBDA()}, seed=0), R)
    rows.append(("nested CV, confusion model (30 configs x 25 fits)", conf, 5.0, ""))

    est = OneCoinBDA(random_state=0).fit(traces)
    idx = np.arange(pool.T)
    reps = 50
    post = timeit(lambda: [one_coin_proba(pool, idx, est._alpha, est._beta) for _ in range(reps)], R)
    per_call = [p / reps for p in post]
    rate = pool.T / statistics.median(per_call)
    rows.append((f"posterior evaluation ({pool.T} tasks per call)", per_call, None,
                 f"{rate:,.0f} tasks/s (target >= 1,000,000)"))
    one = timeit(lambda: [one_coin_posterior(traces[j], est.priors_) for j in range(200)], R)
    rows.append(("one_coin_posterior(trace, priors), single trace", [x / 200 for x in one], None,
                 f"{200 / statistics.median(one):,.0f} traces/s (scalar API)"))

    ds = DawidSkeneEM()
    ck = timeit(lambda: ds._proba(pool, idx), R)
    rows.append(("crowd-kit OneCoinDawidSkene EM, round-0 votes", ck, None, "for comparison"))

    m = machine()
    print(f"machine: {m.get('cpu_model', m['cpu'])}; {m['cores']} logical CPUs; Python {m['python']}; "
          f"numpy {m.get('numpy')}; {m['os']}; load {m.get('loadavg_at_start')}")
    print(f"pool: {args.tasks} synthetic binary traces, 3 seats, 3 rounds "
          f"(generated in {t_gen:.2f} s); medians of {R} repeats; wall-clock")
    print()
    w = max(len(r[0]) for r in rows)
    print(f"{'benchmark'.ljust(w)}  {'median':>10}  {'min':>10}  {'target':>8}  note")
    print("-" * (w + 50))
    for name, ts, target, note in rows:
        med, lo = statistics.median(ts), min(ts)
        tgt = "" if target is None else f"< {target:g} s"
        ok = "" if target is None else ("  OK" if med < target else "  SLOW")
        print(f"{name.ljust(w)}  {fmt(med):>10}  {fmt(lo):>10}  {tgt:>8}  {note}{ok}")


def fmt(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.1f} us"


if __name__ == "__main__":
    main()
