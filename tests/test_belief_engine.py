"""The lockstep engine in oracle mode against the closed forms, the regimes and batching."""
import numpy as np
import pandas as pd
import pytest

from chorus.core.config import ConfigError
from chorus.simulate.belief import bayes
from chorus.simulate.belief.analysis import analyse
from chorus.simulate.belief.config import BeliefConfig, expand
from chorus.simulate.belief.lockstep import prepare, run_group, simulate
from chorus.simulate.belief.experiment import plan
from chorus.simulate.belief.channel import Appraisals, OracleProbe
from chorus.simulate.belief.tables import all_tables, events_table


def _specs(cfg, sweep=True):
    return plan(cfg, sweep=sweep and bool(cfg.sweep))


def _events(cfg, sweep=True):
    conds, specs = _specs(cfg, sweep)
    res = simulate(specs, cfg.seed)
    return conds, res, pd.concat([events_table(r) for r in res], ignore_index=True)


@pytest.mark.parametrize("gamma", [0.6, 0.7, 1.0])
def test_engine_events_match_closed_forms(gamma):
    cfg = BeliefConfig(n_agents=8, rounds=6, seeds=2, gamma=gamma, w=1.5,
                       population={"kind": "fj", "stubborn_kappa": 9, "pliable_kappa": 0.7})
    _, _, ev = _events(cfg)
    assert len(ev) == 2 * 6 * 8 * 7
    # the count is deterministic: m before the c-th update is w(1-gamma^c)/(1-gamma)
    np.testing.assert_allclose(ev.m, bayes.discounted_count(ev.c, gamma, 1.5), rtol=1e-11, atol=1e-12)
    assert (ev.groupby(["run", "listener"]).c.max() == 6 * 7 - 1).all()
    # one step is the FJ identity
    pred = bayes.fj_step(ev.b_before, ev.e, ev.b0, ev.kappa, ev.c, gamma, 1.5)
    np.testing.assert_allclose(ev.b_after, pred, rtol=1e-11, atol=1e-13)
    # the estimator returns the prescribed kappa when given e (oracle: e = s)
    ok = bayes.well_conditioned(ev.e, ev.b_before)
    k = bayes.kappa_hat(ev.b_before, ev.b_after, ev.e, ev.b0, ev.m, gamma, 1.5)
    np.testing.assert_allclose(k[ok], ev.kappa[ok], rtol=1e-7)
    assert (ev.s == ev.e).all()


def test_every_listener_is_a_neighbour_and_speakers_rotate():
    cfg = BeliefConfig(n_agents=10, rounds=3, seeds=1, topology={"kind": "ring", "k": 2})
    conds, res, ev = _events(cfg)
    assert set(map(tuple, np.sort(ev[["speaker", "listener"]].to_numpy(), 1))) <= \
        {(i, (i + 1) % 10) if i < 9 else (0, 9) for i in range(10)}
    spk = res[0].speaker[:, 0].reshape(3, 10)
    assert all(sorted(r) == list(range(10)) for r in spk)  # everyone speaks once per round


def test_committed_agents_never_move_and_failures_update_nobody():
    cfg = BeliefConfig(n_agents=10, rounds=4, seeds=2,
                       population={"kind": "committed", "committed_fraction": 0.3})
    _, specs = _specs(cfg, sweep=False)
    grp = prepare(specs, 0)[0]

    class Flaky:
        def appraise(self, turn, utt):  # every third turn fails for run 0
            e = turn.s.copy()
            if turn.turn % 3 == 0:
                e[0] = np.nan
            return Appraisals(p_raw=e, e=e, attempts=np.ones(len(e), dtype=np.int32))
    res = run_group(grp, appraiser=Flaky(), probe=OracleProbe())
    b = res.b
    assert np.all(b[:, grp.committed] == 1.0)
    failed = ~np.isfinite(res.e)
    assert failed.sum() == 4 * 4 and failed[:, 1].sum() == 0  # turns 0, 3, 6, 9 of 4 rounds
    assert not res.listen[failed].any()
    t = np.nonzero(failed[:, 0])[0]
    np.testing.assert_array_equal(b[t, 0], b[t + 1, 0])  # nobody moved on a failed turn
    ut = all_tables([res], expand(cfg, use_sweep=False))["utterances"]
    assert ut.failed.sum() == 16 and ut[ut.failed].listeners.eq(0).all()


def test_batched_equals_alone():
    cfg = BeliefConfig(n_agents=6, rounds=5, seeds=[3, 7], population={"kind": "uniform"},
                       sweep={"population.kappa": [0.5, 4, 32], "gamma": [0.7, 1.0]})
    conds, specs = _specs(cfg)
    batched = simulate(specs, cfg.seed)
    ev_b = events_table(batched[0])
    for sp in specs[::3]:
        alone = events_table(simulate([sp], cfg.seed)[0])
        mine = ev_b[ev_b.run == sp.run].reset_index(drop=True)
        pd.testing.assert_frame_equal(alone, mine)


def test_fj_oracle_matches_the_mean_field_fixed_point():
    cfg = BeliefConfig(mode="oracle", population={"kind": "fj"})  # N=20, 5 seeds, 20 rounds
    conds, specs = _specs(cfg, sweep=False)
    tabs = all_tables(simulate(specs, cfg.seed), conds)
    summary, _ = analyse(tabs, cfg)
    h = summary["headline"]
    assert h["fj_r2"] >= 0.9 and h["fj_persists"]
    assert h["kappa_exact_max_rel_error"] < 1e-6


def test_degroot_oracle_reaches_consensus_near_the_initial_mean():
    cfg = BeliefConfig(population={"kind": "degroot"})
    conds, specs = _specs(cfg, sweep=False)
    tabs = all_tables(simulate(specs, cfg.seed), conds)
    c = analyse(tabs, cfg)[0]["conditions"][0]
    assert c["final_variance"] < 1e-3 * c["initial_variance"]
    assert abs(c["final_mean"] - c["initial_mean"]) < 0.02


def test_committed_oracle_dose_response_is_monotone_and_smooth():
    cfg = BeliefConfig(population={"kind": "committed", "kappa": 4},
                       sweep={"population.committed_fraction": [.05, .1, .15, .2, .25, .3, .35, .4]})
    conds, specs = _specs(cfg)
    tabs = all_tables(simulate(specs, cfg.seed), conds)
    summary, derived = analyse(tabs, cfg)
    assert summary["headline"]["committed_monotone"] and summary["headline"]["committed_smooth"]
    dr = derived["dose_response"].sort_values("f")
    assert np.all(np.diff(dr.late_mean) > 0)


def test_kappa_sweep_recovers_rank_and_values_in_oracle():
    cfg = BeliefConfig(n_agents=10, rounds=8, seeds=2, population={"kind": "uniform"},
                       sweep={"population.kappa": [0.5, 2, 8, 32]})
    conds, specs = _specs(cfg)
    tabs = all_tables(simulate(specs, cfg.seed), conds)
    summary, derived = analyse(tabs, cfg)
    h = summary["headline"]
    assert h["kappa_spearman"] == pytest.approx(1.0)
    assert h["kappa_median_rel_error"] < 1e-8
    # Table 2's caption: the rank is recovered in every seed alone, and the interval holds the exact value
    by_seed = derived["kappa_recovery_by_seed"]
    assert list(by_seed.seed) == [0, 1] and (by_seed.levels == 4).all()
    assert h["kappa_spearman_seeds"] == 2 and h["kappa_spearman_every_seed_one"] and h["kappa_spearman_by_seed_min"] == 1.0
    kr = derived["kappa_recovery"]
    # two seeds, one run each per condition: two runs is too few to resample; the row says so, not a [k, k] interval
    assert kr.kappa_hat_ci_low.isna().all() and (kr.kappa_hat_ci_resampled == "run").all() and (kr.kappa_hat_ci_units == 2).all()
    assert kr.kappa_hat_ci_refused.str.startswith("only 2 runs to resample").all()


def test_recovery_by_seed_and_the_median_interval_by_hand():
    from chorus.simulate.belief.analysis import median_interval, recovery_by_seed, seed_headline
    # seed 0 recovers the order of three levels, seed 1 reverses two of them; NaN estimates are dropped
    t = recovery_by_seed([0, 0, 0, 1, 1, 1, 1], [1, 2, 4, 1, 2, 4, 4], [1.0, 2.0, 4.0, 3.0, 2.0, 5.0, np.nan])
    assert list(t.seed) == [0, 1] and list(t.levels) == [3, 3]
    assert t.spearman[0] == pytest.approx(1.0) and t.spearman[1] == pytest.approx(0.5)
    assert t.median_rel_error[0] == 0.0 and t.median_rel_error[1] == pytest.approx(0.25)  # |3-1|/1, 0, |5-4|/4
    assert seed_headline(t) == {"kappa_spearman_seeds": 2, "kappa_spearman_by_seed_min": pytest.approx(0.5),
                                "kappa_spearman_every_seed_one": False}
    # one value per cluster, all equal: the interval is that value; no resamples: NaN
    assert median_interval([2.0, 2.0, 2.0], [0, 1, 2], n_boot=200, seed=0, ci=0.9) == (2.0, 2.0)
    lo, hi = median_interval([1.0, 2.0, 3.0, 10.0], [0, 0, 1, 1], n_boot=500, seed=0, ci=0.9)
    assert 1.0 <= lo <= 2.5 <= hi <= 10.0
    assert all(np.isnan(median_interval([1.0], [0], n_boot=0, seed=0, ci=0.9)))


def test_graph_kinds_and_connectivity():
    for topo in ({"kind": "ring", "k": 2}, {"kind": "small_world", "k": 4, "p": 0.3},
                 {"kind": "scale_free", "m": 2}):
        cfg = BeliefConfig(n_agents=12, rounds=2, seeds=2, topology=topo)
        grp = prepare(_specs(cfg, False)[1], 0)[0]
        assert not np.any(grp.adj[:, np.arange(12), np.arange(12)])
        assert (grp.adj == grp.adj.transpose(0, 2, 1)).all()
    bad = BeliefConfig(n_agents=5, seeds=1, topology={"kind": "edges", "edges": [[0, 1], [1, 2], [3, 4]]})
    with pytest.raises(ConfigError, match="disconnected"):
        prepare(_specs(bad, False)[1], 0)


def test_correlations_of_a_constant_are_undefined_not_tiny():
    from chorus.simulate.belief.analysis import pearson, r2_no_intercept, spearman
    x = np.arange(12.0)
    const = np.full(12, 0.1)  # np.std of this is ~1e-17, not 0
    assert np.isnan(pearson(x, const)) and np.isnan(spearman(x, const))
    assert pearson(x, 2 * x + 1) == pytest.approx(1.0)
    assert r2_no_intercept(x, x) == 1.0 and r2_no_intercept(x, x + 1) < 1.0


def test_the_kappa_interval_names_its_level_and_refuses_too_few_runs():
    """Ten runs or more: a run-clustered interval, labelled with the unit and the count; fewer: NaN bounds
    and the reason. The estimate is the median either way."""
    from chorus.core.stats import MIN_UNITS, interval_text
    from chorus.simulate.belief.analysis import kappa_interval
    v = np.arange(40.0)
    iv = kappa_interval(v, np.arange(40) // 4, n_boot=300, seed=0, ci=0.9)
    assert iv[0] == pytest.approx(19.5) and iv[1] < 19.5 < iv[2]
    assert (iv.resampled, iv.n_units, iv.refused) == ("run", 10, None)
    assert iv.text().endswith("(90%, 10 runs resampled)")
    few = kappa_interval(v, np.arange(40) // 8, n_boot=300, seed=0, ci=0.9)
    assert few[0] == pytest.approx(19.5) and np.isnan(few[1]) and few.n_units == 5 < MIN_UNITS
    assert few.text().startswith("no interval (only 5 runs to resample")
    assert interval_text(0.31, 0.52, ci=0.95, n_units=40, resampled="question") == "[0.310, 0.520] (95%, 40 questions resampled)"
