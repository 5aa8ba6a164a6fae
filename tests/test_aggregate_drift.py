"""Row drift (aggregate/drift.py) and the policy shift (aggregate/policy_shift.py): the distance and the
window rows by hand, the rows equal to the confusion model's, the policies' rewrites, the detector firing
on a planted shift and quiet on stationary streams, and both CLI verbs end to end with a bad input."""
from __future__ import annotations

import json

import numpy as np
import pytest

from chorus.aggregate.confusion import confusion_counts, confusion_log_rows
from chorus.aggregate.counts import Pool
from chorus.aggregate.drift import (RowDriftDetector, StreamCounts, alarm_delay, first_alarm, row_drift, rows,
                             shifted_fraction, window_sums)
from chorus.aggregate.policy_shift import SHIFTS, Policy, apply_policy, coalition, shifted_stream
from chorus.aggregate.posterior import MU_CLIP, reliabilities
from chorus.aggregate.synthetic_councils import CouncilSpec, generate_council
from chorus.core.seeding import rng as make_rng


def test_drift_by_hand():
    P = np.array([[[1.0, 0.0], [0.0, 1.0]], [[0.7, 0.3], [0.2, 0.8]]])  # (I=2, K=2, K=2)
    Q = P.copy()
    Q[0, 0] = [0.5, 0.5]  # seat 0, row 0: TV 0.5; row 1 unchanged -> mean 0.25
    Q[1, 1] = [0.4, 0.6]  # seat 1, row 1: TV 0.2 -> mean 0.1
    assert row_drift(P, Q) == pytest.approx(0.25)
    assert row_drift(P, P) == 0.0
    # rows: M = [[3, 1], [0, 2]], r = 5/6, lam = 2: row 0 = ([3, 1] + 2 [5/6, 1/6]) / 6, row 1 = ([0, 2] + 2 [1/6, 5/6]) / 4
    R = rows(np.array([[[3.0, 1.0], [0.0, 2.0]]]), np.array([5.0]), np.array([6.0]), lam=2.0)
    assert np.allclose(R[0], [[7 / 9, 2 / 9], [1 / 12, 11 / 12]])
    assert np.allclose(window_sums(np.arange(5.0), 3), [3.0, 6.0, 9.0])
    assert alarm_delay(59, 50, 40) == pytest.approx(0.25) and alarm_delay(None, 50, 40) is None
    assert np.allclose(shifted_fraction(np.array([48, 49, 50, 69, 200]), 50, 20), [0, 0, 0.05, 1.0, 1.0])
    assert first_alarm(np.array([np.nan, 0.1, 0.3, 0.5]), 0.2) == 2 and first_alarm(np.array([np.nan, 0.1]), 0.2) is None


def test_window_rows_are_the_confusion_models_rows():
    trs = generate_council(CouncilSpec(n_tasks=300, K=3), seed=3)
    pool = Pool.from_traces(apply_policy(trs, Policy("forward", "all"), coalition(trs, k=1, p_wrong=0.7)))
    s = StreamCounts.from_pool(pool)
    det = RowDriftDetector(100, lam=4.0)
    idx = np.arange(120, 220)
    want = np.exp(confusion_log_rows(confusion_counts(pool, idx), reliabilities(pool, idx), np.array([4.0]), MU_CLIP)[0])
    assert np.allclose(det.window_rows(s)[120], want, atol=1e-12)


def test_policies_rewrite_the_coalition_only():
    trs = generate_council(CouncilSpec(n_tasks=60, K=3, rounds=1), seed=1)
    adv = coalition(trs, k=1)
    assert adv.seats == ("A3",)
    c = trs[0].candidates
    fwd = apply_policy(trs, Policy("forward", "all"), adv)
    rev = apply_policy(trs, Policy("reverse", "all"), adv)
    odd = apply_policy(trs, Policy("forward", "odd"), adv)
    for t, f, r, o in zip(trs, fwd, rev, odd):
        g = c.index(t.gold)
        a3 = lambda tr: next(m.answer for m in tr.moves if m.agent == "A3")  # noqa: E731
        assert a3(f) == c[(g + 1) % 3] and a3(r) == c[(g - 1) % 3]  # after gold / before gold
        assert [m for m in f.moves if m.agent != "A3"] == [m for m in t.moves if m.agent != "A3"]
        assert (o == t) == (g % 2 == 0) and f.candidates == c == r.candidates
    assert apply_policy(trs, Policy("forward", "none"), adv) == trs
    with pytest.raises(ValueError, match="K >= 3"):
        shifted_stream(generate_council(CouncilSpec(n_tasks=20, K=2), seed=0), "permute", 10, adv)


@pytest.fixture(scope="module")
def k3_counts():
    """One K = 3 council under the permute shift's old and new policies (2 of 3 seats, p_wrong = 1)."""
    trs = generate_council(CouncilSpec(n_tasks=3000, K=3), seed=7)
    adv = coalition(trs, k=2, p_wrong=1.0)
    return {p: StreamCounts.from_pool(Pool.from_traces(apply_policy(trs, p, adv))) for p in SHIFTS["permute"]}


def test_detector_fires_on_a_planted_shift_and_stays_quiet_on_stationary_streams(k3_counts):
    old, new = SHIFTS["permute"]
    W, n_streams = 80, 30
    T, s = 5 * W, 3 * W
    draw = make_rng(0, 99)
    false_alarms, delays = 0, []
    for _ in range(n_streams):
        st = k3_counts[old].take(draw.choice(3000, size=T, replace=False))
        det = RowDriftDetector(W).fit(st)
        assert det.threshold_ == pytest.approx(2 * det.noise_floor_) and len(det.null_drifts_) == 200
        false_alarms += first_alarm(det.drift(st), det.threshold_) is not None
        idx = draw.choice(3000, size=T, replace=False)
        a, b = k3_counts[old].take(idx[:s]), k3_counts[new].take(idx[s:])
        sh = StreamCounts(*(np.concatenate([getattr(a, f), getattr(b, f)]) for f in ("n", "gold", "cons", "moves")),
                          labels=a.labels)
        det = RowDriftDetector(W).fit(sh)
        delays.append(alarm_delay(first_alarm(det.drift(sh)[s:], det.threshold_) + s, s, W))
    # bench/results/drift-synthetic.json: this cell's stationary false-alarm rate over 3W + 1 windows is low
    assert false_alarms / n_streams <= 0.2
    assert all(0 < d <= 0.5 for d in delays) and np.median(delays) < 0.35


def test_too_short_a_window_names_the_field():
    s = StreamCounts.from_pool(Pool.from_traces(generate_council(CouncilSpec(n_tasks=200, K=2), seed=0)))
    with pytest.raises(ValueError, match=r"window=12 is too short for the noise floor: .* needs >= 10"):
        RowDriftDetector(12).fit(s)
    with pytest.raises(ValueError, match=r"window=150 needs a stream of at least 2 x window = 300"):
        RowDriftDetector(150).fit(s)


def test_cli_drift_and_shift_end_to_end(tmp_path):
    from typer.testing import CliRunner

    from chorus.aggregate.trace import dump_traces
    from chorus.cli import app
    f = tmp_path / "k3.jsonl"
    dump_traces(generate_council(CouncilSpec(n_tasks=500, K=3), seed=0), f)
    run = CliRunner().invoke
    res = run(app, ["aggregate", "drift", str(f), "--window", "60", "--shift", "permute", "--shift-at", "300",
                    "--out", str(tmp_path / "d")])
    assert res.exit_code == 0, res.output
    j = json.loads((tmp_path / "d" / "summary.json").read_text())
    assert j["shift_at"] == 300 and 0 < j["alarm_delay"] <= 1 and j["threshold"] == pytest.approx(2 * j["noise_floor"])
    assert (tmp_path / "d" / "plots" / "drift.png").stat().st_size > 0 and (tmp_path / "d" / "tables" / "drift.parquet").exists()
    res = run(app, ["aggregate", "drift", str(f), "--window", "8"])
    assert res.exit_code == 2 and "window=8 is too short" in res.output
    res = run(app, ["aggregate", "shift", str(f), "--kinds", "permute", "--n-calibration", "150",
                    "--methods", "bda_per_agent,bda_confusion", "--out", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    ba = {r["method"]: r for r in json.loads((tmp_path / "s" / "summary.json").read_text())["before_after"]}
    # the confusion learned the coalition's wrong-answer map and follows it into the wrong answer; the
    # one-coin never learned which wrong answer, only how often a seat is wrong
    assert ba["bda_confusion"]["delta_acc"] < -0.3 and abs(ba["bda_per_agent"]["delta_acc"]) < 0.1
    res = run(app, ["aggregate", "shift", str(f), "--kinds", "nosuch"])
    assert res.exit_code == 2 and "shift kind 'nosuch' is unknown" in res.output
