"""Issue 19 item 7: Dawid-Skene run to its EM fixed point; equal-mass ECE independent of row order."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from chorus.aggregate.baselines import DawidSkeneEM, one_coin_em_step
from chorus.core.stats import bins, ece


def _votes(seed: int = 8) -> pd.DataFrame:
    """15 tasks, K = 4, three workers of accuracy ~U(0.3, 0.9): a case where crowd-kit's rule stops early."""
    r = np.random.default_rng(seed)
    K, T = int(r.integers(3, 5)), int(r.integers(8, 30))
    gold, th = r.integers(K, size=T), r.uniform(0.3, 0.9, 3)
    rows = [(t, f"w{w}", int(gold[t]) if r.random() < th[w] else int(r.integers(K)))
            for t in range(T) for w in range(3)]
    return pd.DataFrame(rows, columns=["task", "worker", "label"])


def _crowdkit(data, **kw):
    from crowdkit.aggregation import OneCoinDawidSkene

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return OneCoinDawidSkene(**kw).fit(data)


def test_dawid_skene_runs_to_its_fixed_point():
    from crowdkit.aggregation import MajorityVote

    data = _votes()
    assert data.label.nunique() == 4 and data.task.nunique() == 15
    ds = DawidSkeneEM()
    # our step is crowd-kit's step: one EM step from its majority-vote start equals its n_iter=1 fit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mv = MajorityVote().fit_predict_proba(data)
    one = _crowdkit(data, n_iter=1, tol=-np.inf)
    ds.max_em_steps, ds.posterior_tol = 1, 0.0
    P1, _, _ = ds.converge(data, mv)
    np.testing.assert_allclose(P1.reindex(index=one.probas_.index, columns=one.probas_.columns).to_numpy(),
                               one.probas_.to_numpy(), atol=1e-12)
    # before the fix: crowd-kit's default stops after 3 steps, its bound having gone down, far from the fixed point
    ck = _crowdkit(data)
    assert len(ck.loss_history_) == 3 and ck.loss_history_[2] < ck.loss_history_[1]
    ds = DawidSkeneEM()
    P, steps, ok = ds.converge(data, ck.probas_)
    assert ok and steps > 50
    gap = float(np.abs(P.to_numpy() - ck.probas_.to_numpy()).max())
    assert gap > 0.5  # 0.62 on this case
    # after: at the fixed point, one more EM step moves no posterior by 1e-8
    labels = list(P.columns)
    V = np.full((15, 3), -1)
    V[pd.Index(P.index).get_indexer(data.task), pd.Index(["w0", "w1", "w2"]).get_indexer(data.worker)] = \
        pd.Index(labels).get_indexer(data.label)
    assert np.abs(one_coin_em_step(V, P.to_numpy()) - P.to_numpy()).max() < 1e-8


def test_dawid_skene_through_a_pool_reports_convergence():
    from chorus.aggregate.counts import Pool
    from chorus.aggregate.trace import Trace

    data = _votes()
    cands = ["A", "B", "C", "D"]
    traces = [Trace.from_dict({"task_id": f"t{t}", "candidates": cands, "gold": "A", "moves": [
        {"agent": w, "round": 0, "force": "propose", "answer": cands[int(lab)]}
        for w, lab in zip(g.worker, g.label)]}) for t, g in data.groupby("task")]
    pool = Pool.from_traces(traces)
    ds = DawidSkeneEM()
    P = ds._proba(pool, np.arange(pool.T))
    assert P.shape == (15, 4) and np.allclose(P.sum(1), 1)
    s = ds.fitted_summary()
    assert s["em_converged"] == 1 and s["em_extra_steps"] > 50 and set(s) >= {"skill[w0]", "skill[w2]"}
    ref, _, _ = DawidSkeneEM().converge(data, _crowdkit(data).probas_)
    np.testing.assert_allclose(P, ref.reindex(columns=range(4), fill_value=0.0).to_numpy(), atol=1e-12)


def _old_mass_bins(conf, n_bins):
    """The binning before the fix: split of a stable argsort, which cuts runs of ties by row order."""
    b = np.empty(len(conf), dtype=int)
    for k, part in enumerate(np.array_split(np.argsort(conf, kind="mergesort"), n_bins)):
        b[part] = k
    return b


def test_equal_mass_ece_is_independent_of_row_order():
    r = np.random.default_rng(0)
    conf = r.choice([1 / 3, 0.5, 2 / 3, 1.0], size=300, p=[0.1, 0.2, 0.3, 0.4])  # plurality-like ties
    correct = (r.random(300) < conf).astype(float)
    vals, old = [], []
    for k in range(200):
        p = np.random.default_rng(k).permutation(300)
        vals.append(ece(conf[p], correct[p], 15, "mass"))
        ob = _old_mass_bins(conf[p], 15)
        old.append(np.abs(np.bincount(ob, correct[p], 15) - np.bincount(ob, conf[p], 15)).sum() / 300)
    assert np.ptp(vals) < 1e-12
    assert np.ptp(old) > 0.01  # the bug: the same forecasts, many values
    # a tie group never spans two bins
    b = bins(conf, 15, "mass")
    assert all(len(set(b[conf == v])) == 1 for v in np.unique(conf))


def test_equal_mass_ece_with_ties_hand_computed():
    conf = np.array([0.7, 0.9, 0.6, 0.7, 0.9, 0.7])
    correct = np.array([1, 1, 0, 0, 1, 1])
    # 2 bins of 3: sorted 0.6 0.7 0.7 | 0.7 0.9 0.9; the edge is s_3 = 0.7, so every 0.7 goes up:
    # bin 0 = {0.6}: |0 - 0.6|; bin 1 = three 0.7 and two 0.9: |4 - 3.9|  -> 0.7 / 6
    assert bins(conf, 2, "mass").tolist() == [1, 1, 0, 1, 1, 1]
    assert ece(conf, correct, 2, "mass") == pytest.approx(0.7 / 6, abs=1e-12)
    # fewer tasks than bins: one per bin, the rest empty
    assert bins(np.array([0.3, 0.1]), 5, "mass").tolist() == [1, 0]
