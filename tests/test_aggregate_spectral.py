"""Spectral initialisation of one-coin Dawid-Skene and the K = 2 label-switching demonstration (BDA paper
App. F.10): the rank-one algebra exactly, recovery from votes, the mirror symmetry of the likelihood, the
spectral-started EM at the majority-started fixed point on a good council, and councils read upside down."""
from __future__ import annotations

import json

import numpy as np
import pytest

from chorus.aggregate.baselines import DawidSkeneEM
from chorus.aggregate.counts import Pool
from chorus.aggregate.label_switching import demonstrate, table
from chorus.aggregate.spectral import (agreement, mirrored, one_coin_loglik, skills_from_agreement, spectral_skills)
from chorus.aggregate.synthetic_councils import CouncilSpec, generate_council


def _population_agreement(p: np.ndarray, K: int) -> np.ndarray:
    A = np.outer(p, p) + np.outer(1 - p, 1 - p) / (K - 1)
    np.fill_diagonal(A, np.nan)
    return A


def _votes(p, K, T, seed):
    g = np.random.default_rng(seed)
    truth = g.integers(0, K, T)
    right = g.random((T, len(p))) < np.asarray(p)
    other = (truth[:, None] + g.integers(1, K, (T, len(p)))) % K
    return np.where(right, truth[:, None], other), truth


@pytest.mark.parametrize("K", [2, 3, 4])
def test_rank_one_algebra_is_exact(K):
    p = np.array([0.9, 0.75, 0.6, 0.55, 0.8])
    assert np.allclose(skills_from_agreement(_population_agreement(p, K), K), p, rtol=0, atol=1e-10)
    A = _population_agreement(p, K)
    A[0, 1] = A[1, 0] = np.nan  # a pair that never met is filled in from the others
    assert np.allclose(skills_from_agreement(A, K), p, atol=1e-10)
    # the sign: most seats better than chance; a council mostly worse than chance comes out mirrored
    bad = np.array([0.2, 0.2, 0.2, 0.7, 0.7])
    assert np.allclose(skills_from_agreement(_population_agreement(bad, 2), 2), 1 - bad, atol=1e-10)


def test_agreement_counts_by_hand_and_recovery_from_votes():
    V = np.array([[0, 0, 1], [1, 1, 1], [0, -1, 0], [-1, 1, 0]])
    A, n = agreement(V)
    assert n[0, 1] == 2 and A[0, 1] == 1.0 and n[0, 2] == 3 and A[0, 2] == pytest.approx(2 / 3)
    assert n[1, 2] == 3 and A[1, 2] == pytest.approx(1 / 3)  # rows 0, 1, 3: only row 1 agrees
    p = np.array([0.85, 0.7, 0.65, 0.6, 0.55])
    for K in (2, 4):
        V, _ = _votes(p, K, 40_000, seed=K)
        assert np.abs(spectral_skills(V, K) - p).max() < 0.02


def test_mirror_image_has_the_same_likelihood_at_k2():
    V, _ = _votes([0.8, 0.3, 0.65], 2, 500, seed=1)
    V[::7, 1] = -1  # missing votes
    skill, prior = np.array([0.8, 0.3, 0.65]), np.array([0.4, 0.6])
    ms, mp = mirrored(skill, prior)
    assert list(mp) == [0.6, 0.4] and np.allclose(ms, [0.2, 0.7, 0.35])
    assert one_coin_loglik(V, skill, prior) == pytest.approx(one_coin_loglik(V, ms, mp), rel=1e-12)
    with pytest.raises(ValueError, match="K = 2 only"):
        mirrored(skill, np.array([0.2, 0.3, 0.5]))


def _council(rel, n=1500, seed=0):
    return generate_council(CouncilSpec(n_tasks=n, K=2, rounds=2, reliabilities=tuple(rel)), seed=seed)


def test_spectral_start_reaches_the_majority_fixed_point_on_a_good_council():
    trs = _council([0.85, 0.7, 0.65, 0.6, 0.55])
    a, b = DawidSkeneEM(), DawidSkeneEM(init="spectral")
    pa = a.fit(trs).predict_proba(trs)
    pb = b.fit(trs).predict_proba(trs)
    assert np.abs(pa["probability"].to_numpy() - pb["probability"].to_numpy()).max() < 1e-8
    assert b.em_converged_ and np.abs(b.init_skills_.to_numpy() - [0.85, 0.7, 0.65, 0.6, 0.55]).max() < 0.05
    with pytest.raises(ValueError, match="init must be 'majority' or 'spectral'"):
        DawidSkeneEM(init="tensor")


def test_councils_read_upside_down_and_the_labels_that_orient_them():
    # three seats worse than chance: majority-started EM lands on the mirror; the spectral start's
    # sign (most seats better than chance: 2 x 0.7 outweighs 3 x 0.3 in q) still orients it
    r = demonstrate(_council([0.3, 0.3, 0.3, 0.85, 0.85]))
    u = r["unsupervised"]
    assert not u["ds_em"]["oriented"] and u["ds_em_spectral"]["oriented"]
    assert u["ds_em"]["loglik"] == pytest.approx(u["ds_em_spectral"]["loglik"], rel=1e-9)  # the same fit, mirrored
    # mostly worse than chance in q too: every unsupervised reading is upside down, the supervised prior is not
    r = demonstrate(_council([0.2, 0.2, 0.2, 0.7, 0.7]))
    for m in ("ds_em", "ds_em_spectral"):
        x = r["unsupervised"][m]
        assert x["accuracy"] < 0.2 and not x["oriented"] and x["loglik"] == pytest.approx(x["mirror_loglik"], rel=1e-12)
    assert r["cross_validated"]["bda_per_agent"]["accuracy"] > 0.9 and r["cross_validated"]["bda_per_agent"]["supervised"]
    t = table(r)
    assert list(t.method) == ["ds_em", "ds_em_spectral", "bda_per_agent", "plurality"]


def test_cli_writes_the_demonstration_and_refuses_other_k(tmp_path):
    from typer.testing import CliRunner

    from chorus.aggregate.trace import dump_traces
    from chorus.cli import app
    f = tmp_path / "sw.jsonl"
    dump_traces(_council([0.2, 0.2, 0.2, 0.7, 0.7], n=400), f)
    res = CliRunner().invoke(app, ["aggregate", "switch", str(f), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    j = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert j["n_tasks"] == 400 and (tmp_path / "o" / "plots" / "label_switching.png").is_file()
    g = tmp_path / "k3.jsonl"
    dump_traces(generate_council(CouncilSpec(n_tasks=100, K=3, rounds=2, reliabilities=(0.7, 0.6, 0.6))), g)
    res = CliRunner().invoke(app, ["aggregate", "switch", str(g)])
    assert res.exit_code == 2 and "needs labelled K = 2 traces: 0 of 100 are" in res.output, res.output


def test_every_fit_runs_its_starts_and_reports_the_fixed_points():
    # the mirror-image council: majority and spectral starts end at exact mirror images (equal likelihood:
    # unlabelled votes cannot tell them apart), both found by every fit, the tie kept at the init start
    pool = Pool.from_traces(_council([0.3, 0.3, 0.3, 0.85, 0.85]))
    fits = {}
    for init in ("majority", "spectral"):
        ds = DawidSkeneEM(init=init)
        P = ds._proba(pool, np.arange(pool.T))
        fits[init] = ds
        assert [r["start"] for r in ds.starts_][:2] == [init, {"majority": "spectral", "spectral": "majority"}[init]]
        assert len(ds.starts_) == 5 and ds.n_fixed_points_ == 2 and ds.start_kept_ == init
        other = ds.starts_[1]
        assert other["fixed_point"] != ds.starts_[0]["fixed_point"] and other["mirror_of_kept"] is True
        assert other["loglik"] == pytest.approx(ds.starts_[0]["loglik"], rel=1e-9)
        s = ds.fitted_summary()
        assert s["ds_fixed_points"] == 2 and s["ds_start_kept"] == init
        assert "reached 2 different fixed points" in s["ds_starts_warning"] and "mirror image" in s["ds_starts_warning"]
        assert ((P.argmax(1) == pool.gold).mean() > 0.9) == (init == "spectral")
    # a council whose starts end at different, not mirrored, points: the highest likelihood is kept
    trs = generate_council(CouncilSpec(n_tasks=60, K=3, rounds=1, reliabilities=(0.3, 0.3, 0.3, 0.5, 0.5)), seed=1)
    pool = Pool.from_traces(trs)
    ds = DawidSkeneEM()
    ds._proba(pool, np.arange(pool.T))
    ll = {r["start"]: r["loglik"] for r in ds.starts_}
    assert ds.start_kept_ == "spectral" and ll["spectral"] == max(ll.values()) > ll["majority"] + 1
    assert ds.n_fixed_points_ >= 2 and ds.fitted_summary()["ds_loglik[majority]"] == ll["majority"]
    single = DawidSkeneEM(multi_start=False)
    single._proba(pool, np.arange(pool.T))
    assert [r["start"] for r in single.starts_] == ["majority"] and single.starts_warning() is None
    with pytest.raises(ValueError, match="n_random_starts"):
        DawidSkeneEM(n_random_starts=-1)
