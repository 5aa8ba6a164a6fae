"""Row-drift detector on many synthetic streams (BDA paper §8 / App. F: "twice the noise floor at a fifth
of a window"). Run: ``.venv/bin/python bench/bench_drift.py`` (writes bench/results/drift-synthetic.json).

Per K in {2, 3}: one clean synthetic council of ``--pool`` tasks (3 seats, 3 rounds), rewritten under every
policy the shifts use (``chorus.aggregate.policy_shift``) for two coalitions: k = 2 at p_wrong = 1 and k = 1 at
p_wrong = 0.5. A stream is 5W tasks drawn without replacement from that pool (seeded), so streams share
tasks but never repeat one: the reference window [0, W), a stationary stretch, the shift at s = 3W, and 2W
tasks after it. The detector (``chorus.aggregate.drift.RowDriftDetector``, defaults: lam 1, factor 2, 200
bootstrap pairs) is fitted on each stream's own reference window, as it would be in deployment.

Reported per (K, coalition, shift, W): the alarm delay (shifted share of the window at the first alarm at or
after the shift: median, mean, quartiles; a stream that alarmed earlier is also counted in
``alarm_before_shift``), streams that never alarmed, streams refused (a class under the floor's minimum in
the reference window, possible at W = 50, K = 3), and the median ratio
drift / noise floor at each shifted fraction (where it crosses 2 is the paper's statement). Per (K,
coalition, old policy, W) on stationary streams of the same length (old policy throughout): the
false-alarm rate (share of streams with any alarm over their 3W + 1 monitored windows) and the per-window
rate. Plus the policy-shift table (``shift_table``) on a 1,500-task council per K.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable before `pip install -e .`

from _recorder import machine, write_result  # noqa: E402  (bench/ is the script directory)

KEY_BENCH_STREAMS = 43
FRACTIONS = [round(0.05 * i, 2) for i in range(21)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=int, default=20000, help="Synthetic tasks per K.")
    ap.add_argument("--streams", type=int, default=200, help="Streams per cell (shifted and stationary each).")
    ap.add_argument("--windows", default="50,100,200", help="Window sizes W, comma-separated.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "drift-synthetic.json"))
    args = ap.parse_args()

    import numpy as np

    from chorus.aggregate.counts import Pool
    from chorus.aggregate.drift import RowDriftDetector, StreamCounts, alarm_delay, first_alarm
    from chorus.aggregate.policy_shift import SHIFTS, apply_policy, before_after, coalition, shift_kinds, shift_table
    from chorus.aggregate.synthetic_councils import CouncilSpec, generate_council
    from chorus.core.seeding import rng as make_rng

    t0 = time.perf_counter()
    Ws = [int(x) for x in args.windows.split(",")]
    coalitions = [(2, 1.0), (1, 0.5)]
    shifted, stationary, shift_tables = [], [], []
    for K in (2, 3):
        clean = generate_council(CouncilSpec(n_tasks=args.pool, K=K), seed=args.seed, prefix=f"k{K}")
        kinds = shift_kinds(K)
        for k, pw in coalitions:
            adv = coalition(clean, k=k, p_wrong=pw)
            policies = {p for kind in kinds for p in SHIFTS[kind]}
            sc = {p: StreamCounts.from_pool(Pool.from_traces(apply_policy(clean, p, adv, seed=args.seed)))
                  for p in policies}
            for W in Ws:
                T, s = 5 * W, 3 * W
                draw = make_rng(args.seed, KEY_BENCH_STREAMS, K, k, W)
                for kind in kinds:
                    old, new = SHIFTS[kind]
                    delays, ratios, nfloor = [], [], []
                    before = never = refused = 0
                    for _ in range(args.streams):
                        idx = draw.choice(args.pool, size=T, replace=False)
                        a, b = sc[old].take(idx[:s]), sc[new].take(idx[s:])
                        st = StreamCounts(*(np.concatenate([getattr(a, f), getattr(b, f)])
                                            for f in ("n", "gold", "cons", "moves")), labels=a.labels)
                        try:
                            det = RowDriftDetector(W).fit(st)
                        except ValueError:  # a class below the noise floor's minimum in the reference window
                            refused += 1
                            continue
                        d = det.drift(st)
                        nfloor.append(det.noise_floor_)
                        ratios.append([d[s - 1 + int(round(f * W))] / det.noise_floor_ for f in FRACTIONS])
                        # a pre-shift alarm is a false alarm; the delay is taken from the first alarm after s
                        if first_alarm(d[:s], det.threshold_) is not None:
                            before += 1
                        post = first_alarm(np.where(np.arange(T) >= s, d, np.nan), det.threshold_)
                        if post is None:
                            never += 1
                        else:
                            delays.append(alarm_delay(post, s, W))
                    dl = np.asarray(delays)
                    r = np.asarray(ratios)
                    med = np.median(r, axis=0)
                    cross = next((f for f, v in zip(FRACTIONS, med) if v > 2.0), None)
                    shifted.append({"K": K, "k": k, "p_wrong": pw, "shift": kind, "window": W, "streams": args.streams,
                                    "delay_median": float(np.median(dl)) if len(dl) else None,
                                    "delay_mean": float(dl.mean()) if len(dl) else None,
                                    "delay_q25": float(np.quantile(dl, 0.25)) if len(dl) else None,
                                    "delay_q75": float(np.quantile(dl, 0.75)) if len(dl) else None,
                                    "delay_max": float(dl.max()) if len(dl) else None,
                                    "refused": refused, "alarm_before_shift": before / (args.streams - refused),
                                    "never_alarmed": never / (args.streams - refused),
                                    "noise_floor_mean": float(np.mean(nfloor)),
                                    "median_ratio_by_fraction": dict(zip(map(str, FRACTIONS), map(float, med))),
                                    "fraction_where_median_ratio_exceeds_2": cross})
                for old in dict.fromkeys(SHIFTS[kind][0] for kind in kinds):
                    any_alarm, refused, per_window, nfloor, peak, mean_ratio, null_cv = 0, 0, [], [], [], [], []
                    for _ in range(args.streams):
                        st = sc[old].take(draw.choice(args.pool, size=T, replace=False))
                        try:
                            det = RowDriftDetector(W).fit(st)
                        except ValueError:
                            refused += 1
                            continue
                        d = det.drift(st)
                        m = d[np.isfinite(d)]
                        any_alarm += bool((m > det.threshold_).any())
                        per_window.append(float((m > det.threshold_).mean()))
                        nfloor.append(det.noise_floor_)
                        peak.append(float(m.max() / det.noise_floor_))
                        mean_ratio.append(float(m.mean() / det.noise_floor_))
                        null_cv.append(float(det.null_drifts_.std(ddof=1) / det.noise_floor_))
                    stationary.append({"K": K, "k": k, "p_wrong": pw, "policy": f"{old.order}/{old.lies_on}",
                                       "window": W, "streams": args.streams, "monitored_windows": 3 * W + 1,
                                       "refused": refused, "false_alarm_rate": any_alarm / (args.streams - refused),
                                       "per_window_rate": float(np.mean(per_window)),
                                       "noise_floor_mean": float(np.mean(nfloor)),
                                       "peak_ratio_median": float(np.median(peak)),
                                       # ~1: the bootstrap floor is the stationary drift's mean; the null's spread
                                       # (its coefficient of variation) is what sets the false-alarm rate at 2x
                                       "mean_drift_over_floor": float(np.mean(mean_ratio)),
                                       "null_cv_mean": float(np.mean(null_cv))})
                print(f"K={K} k={k} p_wrong={pw} W={W}: done at {time.perf_counter() - t0:.0f} s", flush=True)
        tab = shift_table(clean[:1500], ["plurality", "bda_per_agent", "bda_confusion", "stacker"], n_calibration=300,
                          seed=args.seed)
        shift_tables.append({"K": K, "n_tasks": 1500, "n_calibration": int(tab.n_calibration.iloc[0]),
                             "coalition": {"k": 2, "p_wrong": 1.0}, "before_after": before_after(tab).to_dict("records")})
    res = {"bench": "drift-synthetic", "command": "python bench/bench_drift.py " + " ".join(sys.argv[1:]),
           "machine": machine(), "seconds": round(time.perf_counter() - t0, 1),
           "settings": {"pool": args.pool, "streams": args.streams, "windows": Ws, "seed": args.seed,
                        "stream": "5W tasks: reference [0, W), shift at 3W", "detector": "RowDriftDetector defaults "
                        "(lam 1, factor 2, n_boot 200, min 10 per class)", "coalitions": coalitions},
           "shifted": shifted, "stationary": stationary, "shift_tables": shift_tables}
    write_result(args.out, res)
    print(f"wrote {args.out} in {res['seconds']} s")


if __name__ == "__main__":
    main()
