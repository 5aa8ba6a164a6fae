"""Metrics and the paired bootstrap, against hand-computed values."""
import numpy as np
import pytest

from chorus.aggregate.metrics import (brier, brier_per_task, brier_sum_logits, ece, paired_bootstrap, reliability_diagram,
                               reliability_table, summarize)


def test_ece_equal_width_hand_computed():
    conf = np.array([0.95, 0.95, 0.65, 0.65, 0.55])
    correct = np.array([1, 0, 1, 1, 0])
    # bin 9: 1 - 1.9 = -0.9; bin 6: 2 - 1.3 = 0.7; bin 5: 0 - 0.55 -> (0.9 + 0.7 + 0.55) / 5
    assert ece(conf, correct, 10, "width") == pytest.approx(0.43, abs=1e-12)
    # confidence 1.0 falls in the last bin, 0.1 exactly in the second
    assert ece(np.array([1.0, 0.1]), np.array([1, 0]), 10, "width") == pytest.approx(0.05)
    tab = reliability_table(conf, correct, 10, "width")
    assert tab["bin"].tolist() == [5, 6, 9] and tab["count"].tolist() == [1, 2, 2]
    assert tab["accuracy"].tolist() == pytest.approx([0.0, 1.0, 0.5])


def test_ece_equal_mass_hand_computed():
    conf = np.array([0.9, 0.6, 0.8, 0.7])
    correct = np.array([1, 0, 1, 1])
    # sorted: (0.6, 0), (0.7, 1) | (0.8, 1), (0.9, 1): |1 - 1.3| + |2 - 1.7| = 0.6 -> 0.15
    assert ece(conf, correct, 2, "mass") == pytest.approx(0.15)
    # 15 equal-mass bins over 30 tasks: 2 per bin
    rng = np.random.default_rng(0)
    c = rng.uniform(0.5, 1, 30)
    y = rng.integers(0, 2, 30)
    order = np.argsort(c, kind="mergesort")
    want = sum(abs(y[order[2 * b:2 * b + 2]].sum() - c[order[2 * b:2 * b + 2]].sum()) for b in range(15)) / 30
    assert ece(c, y, 15, "mass") == pytest.approx(want)
    with pytest.raises(ValueError, match="binning strategy"):
        ece(c, y, 10, "log")


def test_ece_of_constant_half_is_zero_on_balanced_binary():
    # seed D.1: the degenerate constant forecast has ECE 0, which is why selection uses Brier
    conf = np.full(100, 0.5)
    correct = np.r_[np.ones(50), np.zeros(50)]
    assert ece(conf, correct) == 0.0
    assert brier(np.full((100, 2), 0.5), np.r_[np.zeros(50, int), np.ones(50, int)]) == pytest.approx(0.5)


def test_brier_multiclass_hand_computed():
    P = np.array([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3]])
    g = np.array([0, 2])
    # (0.09 + 0.04 + 0.01) and (0.04 + 0.25 + 0.49)
    assert brier_per_task(P, g).tolist() == pytest.approx([0.14, 0.78])
    assert brier(P, g) == pytest.approx(0.46)
    logits = np.log(P)[None]
    assert brier_sum_logits(logits, g)[0] == pytest.approx(0.92)


def test_summarize_uses_the_decided_answer():
    P = np.array([[0.5, 0.5], [0.9, 0.1], [0.3, 0.7]])
    s = summarize(np.array([1, 0, 1]), P, np.array([1, 1, 1]))
    assert s["accuracy"] == pytest.approx(2 / 3)
    assert s["mean_confidence"] == pytest.approx((0.5 + 0.9 + 0.7) / 3)
    assert set(s) == {"n", "accuracy", "ece_ew", "ece_em", "brier", "mean_confidence"}


def _per(correct, conf, bri):
    return {"correct": np.asarray(correct, float), "confidence": np.asarray(conf, float),
            "brier": np.asarray(bri, float)}


def test_paired_bootstrap_deltas_ci_and_p_win():
    rng = np.random.default_rng(1)
    n = 400
    ya = (rng.random(n) < 0.8).astype(float)
    yb = (rng.random(n) < 0.6).astype(float)
    ca, cb = np.full(n, 0.8), np.full(n, 0.9)
    A = _per(ya, ca, (1 - ya) * 2 * (ca ** 2) + ya * 2 * (1 - ca) ** 2)
    B = _per(yb, cb, (1 - yb) * 2 * (cb ** 2) + yb * 2 * (1 - cb) ** 2)
    df = paired_bootstrap({"A": A, "B": B}, [("A", "B")], n_resamples=2000, seed=0)
    acc = df.set_index("metric").loc["accuracy"]
    assert acc["delta"] == pytest.approx(ya.mean() - yb.mean())
    assert acc["ci_low"] < acc["delta"] < acc["ci_high"]
    assert acc["p_win"] == 1.0
    e = df.set_index("metric").loc["ece_ew"]
    assert e["delta"] == pytest.approx(ece(ca, ya) - ece(cb, yb))
    again = paired_bootstrap({"A": A, "B": B}, [("A", "B")], n_resamples=2000, seed=0)
    assert df.equals(again)
    # an arm against itself never wins and always ties
    same = paired_bootstrap({"A": A}, [("A", "A")], n_resamples=500, seed=0)
    assert (same["p_win"] == 0).all() and (same["p_tie"] == 1).all()


def test_clustered_bootstrap_widens_ci_for_repeated_questions():
    rng = np.random.default_rng(2)
    q = 150
    ya = np.repeat((rng.random(q) < 0.75).astype(float), 3)  # 3 repeats per question
    yb = np.repeat((rng.random(q) < 0.70).astype(float), 3)
    A = _per(ya, np.full(3 * q, 0.7), 1 - ya)
    B = _per(yb, np.full(3 * q, 0.7), 1 - yb)
    clusters = np.repeat(np.arange(q), 3)
    plain = paired_bootstrap({"A": A, "B": B}, [("A", "B")], metrics=["accuracy"], n_resamples=3000, seed=0)
    clus = paired_bootstrap({"A": A, "B": B}, [("A", "B")], metrics=["accuracy"], clusters=clusters,
                            n_resamples=3000, seed=0)
    w_plain = float(plain["ci_high"][0] - plain["ci_low"][0])
    w_clus = float(clus["ci_high"][0] - clus["ci_low"][0])
    assert w_clus / w_plain == pytest.approx(np.sqrt(3), rel=0.2)
    assert bool(clus["clustered"][0]) and int(clus["n_clusters"][0]) == q


def test_bootstrap_bad_input():
    A = _per([1, 0], [0.6, 0.6], [0.3, 0.3])
    with pytest.raises(KeyError, match="no per-task results for method 'B'"):
        paired_bootstrap({"A": A}, [("A", "B")], n_resamples=100)
    with pytest.raises(ValueError, match="bootstrap metric"):
        paired_bootstrap({"A": A}, [("A", "A")], metrics=["auc"], n_resamples=100)


def test_reliability_diagram_png(tmp_path):
    rng = np.random.default_rng(0)
    conf = rng.uniform(0.5, 1, 200)
    correct = rng.random(200) < conf
    p = reliability_diagram(conf, correct, tmp_path / "r.png", title="x")
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
