"""Directional channel correction: the synthetic biased channel, the monotone maps (closed forms),
the fit and its refusals, the stored JSON, and the seed's measure of success (pliable consensus
back to the initial mean, transfer curve on the diagonal, kappa recovery not worse); one tiny
plumbing run through the embedded model."""
import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from chorus.core.config import ConfigError
from chorus.simulate.belief import calibration as cal
from chorus.simulate.belief import correction as C
from chorus.simulate.belief.config import BeliefConfig, ChannelCfg
from chorus.simulate.belief.lockstep import simulate
from chorus.simulate.belief.experiment import plan, run_experiment
from chorus.simulate.belief.tables import events_table, utterances_table
from chorus.simulate.belief.cli import app

POWER3 = {"channel": {"kind": "power", "exponent": 3}}
FAITHFUL = {"channel": {"kind": "faithful"}}


def _calibration_cfg(oracle, **kw) -> BeliefConfig:
    """A calibration-style run: stubborn speakers spread over the stance range."""
    base = dict(name="cal", mode="oracle", seeds=2, n_agents=20, rounds=5, oracle=oracle,
                population={"kind": "uniform", "kappa": 32,
                            "b0": {"kind": "spread", "low": 0.02, "high": 0.98, "jitter": 0.01}})
    return BeliefConfig(**{**base, **kw})


def _paired_cfg(oracle, path, populations=None) -> BeliefConfig:
    """Uncorrected and corrected arms of the same populations, in one lockstep sweep."""
    pops = populations or [{"kind": "degroot", "kappa": 0.1}]
    return BeliefConfig(name="paired", mode="oracle", seeds=2, n_agents=20, rounds=20, oracle=oracle,
                        sweep={"channel_correction": ["none", str(path)], "population": pops})


@pytest.fixture(scope="module")
def power3(tmp_path_factory):
    """A calibration run through e = s**3, its fitted correction, and the paired evaluation
    (DeGroot and three kappa levels)."""
    d = tmp_path_factory.mktemp("power3")
    run_experiment(_calibration_cfg(POWER3), d / "cal", make_plots=False)
    rec = C.fit_run(d / "cal", store=False, plot=False)
    pops = [{"kind": "degroot", "kappa": 0.1}, {"kind": "uniform", "kappa": 1},
            {"kind": "uniform", "kappa": 4}, {"kind": "uniform", "kappa": 16}]
    run, summary = run_experiment(_paired_cfg(POWER3, d / "cal", pops), d / "paired", sweep=True,
                                  make_plots=False)
    return d, rec, run, summary


# -- the synthetic channel --------------------------------------------------------------------------
def test_channel_curves_closed_forms():
    s = np.array([0.0, 0.2, 0.35, 0.5, 0.8, 1.0])
    assert np.allclose(C.channel_curve(s, ChannelCfg()), s)
    assert np.allclose(C.channel_curve(s, ChannelCfg(kind="power", exponent=3)), s ** 3)
    lg = C.channel_curve(np.array([0.5, 0.8]), ChannelCfg(kind="logit", slope=2, shift=0.5))
    assert np.allclose(lg, 1 / (1 + np.exp(-np.array([0.5, 2 * np.log(4) + 0.5]))))
    # the seed's Claude example: a mild 0.35 arrives as about 0.24, the a+ side stays faithful
    one = C.channel_curve(s, ChannelCfg(kind="one_sided", exponent=2.06))
    assert one[2] == pytest.approx(0.5 * 0.7 ** 2.06) and one[2] == pytest.approx(0.24, abs=0.005)
    assert np.allclose(one[3:], s[3:])
    plus = C.channel_curve(s, ChannelCfg(kind="one_sided", side="plus", exponent=2))
    assert np.allclose(plus[:4], s[:4]) and plus[4] == pytest.approx(1 - 0.5 * 0.4 ** 2)
    assert C.channel_id(BeliefConfig()) == "oracle"
    assert C.channel_id(BeliefConfig(oracle=POWER3)) == "oracle-power-p3"
    assert C.channel_id(BeliefConfig(oracle={"channel": {"kind": "logit", "slope": 2, "noise": 0.1}})) \
        == "oracle-logit-a2-b0-noise0.1"
    assert C.channel_id(BeliefConfig(mode="llm")) == "smollm2-135m-instruct"


def test_noisy_channel_is_seeded_and_batch_invariant():
    cfg = BeliefConfig(mode="oracle", n_agents=4, rounds=3, seeds=[0, 1, 2],
                       oracle={"channel": {"kind": "power", "exponent": 2, "noise": 0.5}})
    _, specs = plan(cfg, sweep=False)
    app_ = C.ChannelAppraiser(cfg.oracle.channel)
    batched = utterances_table(simulate(specs, cfg.seed, appraiser=app_)[0])
    assert not np.allclose(batched.e, batched.s ** 2)  # noise is there
    assert batched.e.between(0, 1).all()
    for sp in specs:
        alone = utterances_table(simulate([sp], cfg.seed, appraiser=app_)[0])
        assert np.array_equal(alone.e.to_numpy(), batched[batched.run == sp.run].e.to_numpy())


def test_synthetic_channel_is_for_oracle_mode_and_not_sweepable():
    with pytest.raises(Exception, match="oracle.channel.kind = 'power'"):
        BeliefConfig(mode="llm", oracle=POWER3)
    cfg = BeliefConfig(mode="oracle", sweep={"oracle.channel.exponent": [2, 3]})
    with pytest.raises(ConfigError, match="sweep.oracle.channel.exponent"):
        plan(cfg, sweep=True)


# -- the maps: closed forms ------------------------------------------------------------------------------
def test_isotonic_inverse_hand_computed():
    m = C.CorrectionMap("isotonic", {"s": [0.0, 0.2, 0.4, 1.0], "e": [0.0, 0.3, 0.3, 1.0]})
    # a flat piece maps to its midpoint; linear in between; clipped outside the knots
    assert m(np.array([0.3, 0.15, 0.65, 0.0, 1.0])) == pytest.approx([0.3, 0.1, 0.7, 0.0, 1.0])
    m2 = C.CorrectionMap("isotonic", {"s": [0.2, 0.8], "e": [0.1, 0.5]})
    assert m2(np.array([0.0, 0.3, 0.9])) == pytest.approx([0.2, 0.5, 0.8])
    assert np.isnan(m2(np.array([np.nan]))[0])


def test_parametric_maps_closed_forms_and_identity():
    s = np.linspace(0.01, 0.99, 99)
    ll = C.CorrectionMap("logit_linear", {"a": 2.0, "b": 0.5})
    e = ll.forward(s)
    assert ll(e) == pytest.approx(s, abs=1e-9)
    assert ll(np.array([0.5]))[0] == pytest.approx(1 / (1 + np.exp(0.25)))  # (logit(.5) - b) / a = -0.25
    beta = C.CorrectionMap("beta", {"a": 1.0, "b": 1.0, "c": 0.0})
    assert beta.forward(s) == pytest.approx(s, abs=1e-9) and beta(s) == pytest.approx(s, abs=1e-4)
    mom = C.CorrectionMap("moment", {"knots": [0.0, 0.5, 1.0], "coef": [0.1, 0.2, 0.6]})
    assert mom(np.array([0.0, 0.25, 0.5, 1.0])) == pytest.approx([0.1, 0.2, 0.3, 0.9])
    grid = np.array([[0.0, 0.25], [0.5, np.nan]])   # any shape, as the other families take; NaN stays NaN
    assert mom(grid)[0] == pytest.approx([0.1, 0.2]) and mom(grid)[1, 0] == pytest.approx(0.3)
    assert np.isnan(mom(grid)[1, 1]) and ll(grid).shape == mom(grid).shape == (2, 2)
    with pytest.raises(ConfigError, match="non-negative"):
        C.CorrectionMap("moment", {"knots": [0.0, 1.0], "coef": [0.1, -0.2]})


def test_fit_recovers_known_curves():
    s = np.linspace(0.02, 0.98, 150)
    fit = C.fit_map(s, s ** 3)
    g = C.CorrectionMap.from_dict(fit["map"])
    assert fit["family"] == "isotonic" and fit["informative"]
    assert g(s ** 3) == pytest.approx(s, abs=1e-3)
    lg = C.fit_map(s, C.channel_curve(s, ChannelCfg(kind="logit", slope=2, shift=0.5)), families=["logit_linear"])
    p = lg["candidates"]["logit_linear"]["map"]["params"]
    assert p["a"] == pytest.approx(2.0, rel=1e-4) and p["b"] == pytest.approx(0.5, abs=1e-4)
    assert lg["candidates"]["logit_linear"]["heldout_diagonal_mse"] < 1e-10
    flat = C.fit_map(s, np.full_like(s, 0.4), families=["isotonic"])
    assert not flat["informative"]


def test_too_few_events_refused_with_the_count():
    s = np.linspace(0.1, 0.9, 30)
    e = np.r_[s[:27] ** 2, [np.nan] * 3]
    with pytest.raises(ConfigError, match=r"27 appraised utterances .*3 failed.*min_events = 50"):
        C.fit_map(s, e)
    assert C.fit_map(s, e, min_events=20)["n_events"] == 27
    with pytest.raises(ConfigError, match="all 30 speaker beliefs"):
        C.fit_map(np.full(30, 0.5), s, min_events=10)


# -- the measure of success -------------------------------------------------------------------------
def test_correction_removes_a_known_one_sided_bias(power3):
    d, rec, run, summary = power3
    block = summary["channel_correction"]
    ok = block["success"]
    # uncorrected, the one-sided channel drags the pliable consensus far below its initial mean
    assert ok["consensus_gap_uncorrected"] > 0.1
    assert ok["consensus_gap_corrected"] < 0.05 and ok["consensus_within_0.05"] is True
    assert ok["raw_on_diagonal_share"] == 0.0 and ok["corrected_on_diagonal_share"] == 1.0
    arms = {a["arm"]: a for a in block["arms"]}
    assert arms["none"]["degroot_landing"] < 0.1
    assert abs(arms[str(d / "cal")]["degroot_landing"] - arms["none"]["degroot_initial_mean"]) < 0.05
    # both evidences are logged: e is what listeners consumed, g(e_raw)
    ut = run.read_table("utterances")
    cond = run.read_table("correction_arms").set_index("condition").arm
    corr = ut[ut.condition.map(cond) != "none"]
    g, _, _ = C.load_correction(str(d / "cal"), "transit_priority", "oracle-power-p3")
    assert np.allclose(corr.e, g(corr.e_raw)) and np.allclose(corr.e_raw, corr.s ** 3)
    unc = ut[ut.condition.map(cond) == "none"]
    assert np.array_equal(unc.e, unc.e_raw)
    assert "e_raw" in run.read_table("events").columns
    prov = run.provenance()
    assert prov["channel"] == "oracle-power-p3"
    applied = next(iter(prov["channel_correction"].values()))
    assert applied["family"] == rec["family"] and applied["n_events"] == 200
    assert summary["headline"]["correction_consensus_gap_corrected"] == ok["consensus_gap_corrected"]


def test_kappa_recovery_not_worse(power3):
    ok = power3[3]["channel_correction"]["success"]
    assert ok["kappa_not_worse"] is True
    assert ok["kappa_median_rel_error_corrected"] < 0.01 < ok["kappa_median_rel_error_uncorrected"]
    assert ok["kappa_spearman_corrected"] == pytest.approx(1.0)


def test_faithful_channel_gives_the_identity_and_leaves_consensus_unchanged(tmp_path):
    run_experiment(_calibration_cfg(FAITHFUL), tmp_path / "cal", make_plots=False)
    rec = C.fit_run(tmp_path / "cal", store=False, plot=False)
    g = C.CorrectionMap.from_dict(rec["map"])
    lo, hi = rec["s_range"]
    grid = np.linspace(lo, hi, 200)
    assert g(grid) == pytest.approx(grid, abs=1e-3)
    run, summary = run_experiment(_paired_cfg(FAITHFUL, tmp_path / "cal"), tmp_path / "paired", sweep=True,
                                  make_plots=False)
    bel = run.read_table("beliefs")
    b0, b1 = (bel[bel.condition == c].b.to_numpy() for c in (0, 1))
    assert np.abs(b0 - b1).max() < 1e-3
    ok = summary["channel_correction"]["success"]
    assert abs(ok["consensus_gap_corrected"] - ok["consensus_gap_uncorrected"]) < 1e-3


def test_plots(power3, tmp_path):
    from chorus.simulate.belief import correction_plots
    d, rec, run, _ = power3
    pairs, _ = C.run_pairs(d / "cal")
    assert correction_plots.fit(pairs, rec, tmp_path / "fit.png").stat().st_size > 10_000
    tabs = {n: run.read_table(n) for n in ("utterances", "beliefs")}
    derived = {n: run.read_table(n) for n in ("condition_metrics", "transfer_correction", "correction_arms")}
    assert correction_plots.correction(tabs, derived, tmp_path / "c.png").stat().st_size > 10_000
    svg = " ".join((tmp_path / "c.svg").read_text().split())   # issue 51 item 5: the bars name their level
    assert "error bars (panel a): 95%, t-interval, " in svg and "utterances" in svg
    assert correction_plots.correction(tabs, {"condition_metrics": None}, tmp_path / "none.png") is None


def test_diagonal_bins_hand_computed():
    s = np.array([0.05, 0.06, 0.07, 0.55, 0.56, 0.57, 0.95])
    d = C.diagonal_bins(s, s + np.array([0, 0, 0, 0.2, 0.2, 0.2, 0]), bins=10, tolerance=0.01)
    assert d.loc[0, "on_diagonal"] and d.loc[0, "half_width"] == 0.0
    assert not d.loc[5, "on_diagonal"] and d.loc[5, "d_mean"] == pytest.approx(0.2)
    assert not d.loc[9, "assessed"]  # one utterance: no interval
    assert C.diagonal_mse(s, s + 0.1, 2) == pytest.approx(0.01)


# -- files and refusals ---------------------------------------------------------------------------------
def test_stored_json_round_trips(power3, tmp_path, monkeypatch):
    d, rec, _, _ = power3
    on_disk = json.loads((d / "cal" / "correction.json").read_text())
    for fam, c in on_disk["candidates"].items():
        a, b = C.CorrectionMap.from_dict(c["map"]), C.CorrectionMap.from_dict(rec["candidates"][fam]["map"])
        grid = np.linspace(0, 1, 101)
        assert np.array_equal(a(grid), b(grid)), fam
    assert on_disk["n_events"] == 200 and on_disk["source_mode"] == "oracle"
    assert on_disk["versions"]["scikit-learn"] and on_disk["criterion"] == "heldout_diagonal_mse"
    monkeypatch.setenv("CHORUS_CACHE", str(tmp_path))
    shipped = sorted(cal.SHIPPED_FITS_DIR.rglob("*"))
    rec2 = C.fit_run(d / "cal", store=True, plot=False)
    stored = tmp_path / "fits" / "transit_priority" / "oracle-power-p3.correction.json"
    assert sorted(cal.SHIPPED_FITS_DIR.rglob("*")) == shipped  # never written into the package
    assert str(stored) in rec2["written"]
    g, r, p = C.load_correction("stored", "transit_priority", "oracle-power-p3")
    assert p == stored and r["map"] == rec["map"]


def test_bad_corrections_are_refused(power3, tmp_path, monkeypatch):
    d = power3[0]
    monkeypatch.setenv("CHORUS_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match="no stored correction for model/channel 'oracle-power-p3'"):
        run_experiment(BeliefConfig(mode="oracle", oracle=POWER3, channel_correction="stored"), tmp_path / "r")
    with pytest.raises(ConfigError, match="no such correction file"):
        run_experiment(BeliefConfig(mode="oracle", channel_correction=str(tmp_path / "nope")), tmp_path / "r")
    with pytest.raises(ConfigError, match="belongs to model/channel 'oracle-power-p3'.*'oracle'"):
        run_experiment(BeliefConfig(mode="oracle", channel_correction=str(d / "cal")), tmp_path / "r")
    assert not (tmp_path / "r").exists()  # refused before a run directory is written
    with pytest.raises(ConfigError, match="not a finished belief run"):
        C.fit_run(tmp_path, store=False)


def test_no_correction_keeps_tables_unchanged():
    cfg = BeliefConfig(mode="oracle", n_agents=4, rounds=2, seeds=1)
    _, specs = plan(cfg, sweep=False)
    res = simulate(specs, cfg.seed)[0]
    assert res.e_raw is None
    assert list(utterances_table(res).columns) == ["run", "condition", "seed", "round", "turn", "speaker", "s",
                                                   "p_raw", "e", "failed", "attempts", "listeners"]
    assert "e_raw" not in events_table(res).columns


def test_cli_fit_then_corrected_sweep(tmp_path):
    runner = CliRunner()
    cal_dir = tmp_path / "cal"
    r = runner.invoke(app, ["run", "channel_calibration", "--set", "seeds=2", "--set", "rounds=3",
                            "--out", str(cal_dir), "--no-plots"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["correct", "fit", str(cal_dir), "--no-store", "--no-plots"])
    assert r.exit_code == 0, r.output
    assert "oracle-power-p3" in r.output and "n = 120" in r.output and "isotonic" in r.output
    assert (cal_dir / "correction.json").is_file()
    r = runner.invoke(app, ["correct", "fit", str(cal_dir), "--no-store", "--min-events", "500"])
    assert r.exit_code == 2 and "120 appraised utterances" in r.output and "500" in r.output
    out = tmp_path / "biased"
    # a pliable population's landing wanders with the turn order: 20 agents, 2 seeds keep it near b0's mean
    r = runner.invoke(app, ["sweep", "channel_biased", "--set", "seeds=2", "--set", "rounds=10",
                            "--set", f"sweep.channel_correction=[none, {cal_dir}]", "--no-plots",
                            "--set", "sweep.population=[{kind: degroot, kappa: 0.1}]", "--out", str(out)])
    assert r.exit_code == 0, r.output
    s = json.loads((out / "summary.json").read_text())
    assert s["channel_correction"]["success"]["consensus_within_0.05"] is True
    r = runner.invoke(app, ["recompute", str(out), "--no-plots"])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "summary.json").read_text())["channel_correction"] == s["channel_correction"]


# -- through the embedded model (plumbing only) ----------------------------------------------------


@pytest.mark.slow
def test_real_model_fit_and_apply(tmp_path, hf_engine):
    """A tiny LLM run's (s, e) pairs (6 utterances) fitted with a low --min-events, applied in a
    second tiny run (3 utterances): 12 batched model calls. SmolLM2-135M cannot judge stance: this
    checks the plumbing, no number here is a finding."""
    llm = {"model": {"backend": "hf"}, "appraiser": {"tau": 1.0, "max_retries": 1}, "generator": {"max_tokens": 12},
           "probe": {"enabled": False}}
    cfg = BeliefConfig(name="real-cal", mode="llm", n_agents=3, rounds=1, seeds=2, llm=llm,
                       population={"kind": "uniform", "kappa": 2})
    run_experiment(cfg, tmp_path / "cal", engine=hf_engine, make_plots=False)
    n_ok = int((~pd.read_parquet(tmp_path / "cal" / "tables" / "utterances.parquet").failed).sum())
    rec = C.fit_run(tmp_path / "cal", min_events=4, store=False, plot=False)
    assert rec["n_events"] == n_ok and rec["model"] == "smollm2-135m-instruct" and rec["appraiser_tau"] == 1.0
    cfg2 = cfg.model_copy(update={"name": "real-corrected", "seeds": 1,
                                  "channel_correction": str(tmp_path / "cal")})
    run, summary = run_experiment(cfg2, tmp_path / "corrected", engine=hf_engine, make_plots=False)
    ut = run.read_table("utterances")
    assert len(ut) == 3 and "e_raw" in ut.columns
    g = C.CorrectionMap.from_dict(rec["map"])
    ok = ut[~ut.failed]
    assert np.allclose(ok.e, g(ok.e_raw))
    assert summary["channel_correction"]["arms"][0]["arm"] == str(tmp_path / "cal")
    assert next(iter(run.provenance()["channel_correction"].values()))["family"] == rec["family"]
