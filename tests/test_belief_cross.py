"""Cross-appraisal: the additive decomposition (closed forms), recovery of known rendering and
reading biases from the synthetic channel, the self pair against a plain channel audit, the call
store (rerun free, killed run resumes), the command, and one plumbing run through two embedded
models."""
import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from chorus.core.config import ConfigError, validate
from chorus.simulate.belief import analysis
from chorus.simulate.belief import cross as X
from chorus.simulate.belief.config import BeliefConfig
from chorus.simulate.belief.experiment import run_experiment


# -- the math ---------------------------------------------------------------------------------
def test_additive_fit_is_row_and_column_means_and_anchor_moves_the_shared_part():
    mu, r, q = 0.02, np.array([0.05, -0.01, -0.04]), np.array([-0.03, 0.01, 0.02])
    inter = np.array([[0.004, -0.002, -0.002], [-0.002, 0.001, 0.001], [-0.002, 0.001, 0.001]])
    B = mu + r[:, None] + q[None, :] + inter  # the interaction sums to zero by row and column
    f = X.additive_fit(B)
    assert f["mu"] == pytest.approx(B.mean())
    assert np.allclose(f["r"], B.mean(1) - B.mean()) and np.allclose(f["r"], r)
    assert np.allclose(f["q"], B.mean(0) - B.mean()) and np.allclose(f["q"], q)
    assert np.allclose(f["resid"], inter)
    a = X.additive_fit(B, anchor=1)  # model 1 assumed to read faithfully: q_1 = 0, mu = 0
    assert a["mu"] == 0 and a["q"][1] == 0
    assert np.allclose(a["r"], mu + r + q[1]) and np.allclose(a["q"], q - q[1])
    assert np.allclose(a["fitted"], f["fitted"])  # the same fit, another split
    # replicates: leading dimensions; a replicate missing an observed pair is NaN
    R = np.stack([B, B + 0.01, np.where(np.eye(3, dtype=bool), np.nan, B)])
    fr = X.additive_fit(R)
    assert np.allclose(fr["mu"][:2], [B.mean(), B.mean() + 0.01]) and np.isnan(fr["mu"][2])


def test_additive_fit_with_a_missing_pair_and_an_unidentified_panel():
    r, q = np.array([0.03, -0.03]), np.array([0.01, -0.01])
    B = 0.1 + r[:, None] + q[None, :]
    B[1, 0] = np.nan  # three pairs still identify mu, r, q (no interaction left to see)
    f = X.additive_fit(B)
    assert f["mu"] == pytest.approx(0.1) and np.allclose(f["r"], r) and np.allclose(f["q"], q)
    with pytest.raises(ValueError, match="do not identify"):
        X.additive_fit(np.where(np.eye(2, dtype=bool), B, np.nan))  # self pairs only
    C = 0.1 + r[:, None] + q[None, :]
    C[:, 1] = np.nan  # appraiser 1 never gave a valid reading: its part is not estimated
    f = X.additive_fit(C)
    assert np.allclose(f["r"], r) and f["q"][0] == 0 and np.isnan(f["q"][1])
    # through decompose: an unidentified panel is reported as such, never a crash or a number
    app = pd.DataFrame({"generator": ["A", "A", "B", "B"] * 3, "appraiser": ["A", "B", "A", "B"] * 3,
                        "uid": np.repeat([0, 1, 2], 4), "s": np.repeat([0.2, 0.5, 0.8], 4),
                        "e": np.tile([0.3, np.nan, np.nan, 0.4], 3)})
    app["failed"] = app.e.isna()
    d = X.decompose(app, ["A", "B"], n_boot=10)
    assert not d["fit"]["bias"]["identified"] and "do not identify" in d["fit"]["bias"]["why_not"]
    assert d["parts"].estimate.isna().all()
    assert d["pairs"].set_index(["generator", "appraiser"]).bias.loc[("A", "A")] == pytest.approx(0.3 - 0.5)


def test_pair_stats_by_hand():
    s = np.array([0.2, 0.4, 0.6])
    E = np.array([[0.3, 0.1], [np.nan, 0.3], [0.8, 0.5]])
    bias, slope = X.pair_stats(s, E)
    assert bias[0] == pytest.approx((0.1 + 0.2) / 2) and slope[0] == pytest.approx(0.5 / 0.4)
    assert bias[1] == pytest.approx(-0.1) and slope[1] == pytest.approx(1.0)
    b2, _ = X.pair_stats(s, np.full((3, 1), np.nan))
    assert np.isnan(b2[0])


# -- the synthetic channel --------------------------------------------------------------------
R_TRUE = {"A": 0.05, "B": -0.03}
Q_TRUE = {"A": -0.04, "B": 0.0}  # B reads faithfully


def _syn(tmp_path, name="syn", **kw):
    cfg = X.CrossConfig(name=name, mode="synthetic", models=["A", "B"],
                        synthetic={"render_bias": R_TRUE, "read_bias": Q_TRUE, "n": 80, "noise": 0.02,
                                   "fail_rate": kw.pop("fail_rate", 0.0)},
                        analysis={"n_boot": 200, **kw.pop("analysis", {})}, **kw)
    return X.run_cross(cfg, tmp_path / name, make_plots=False)


def test_decomposition_recovers_known_rendering_and_reading_biases(tmp_path):
    run, s = _syn(tmp_path, fail_rate=0.15, appraiser={"max_retries": 0})
    parts = pd.DataFrame(s["parts"])
    bias = parts[parts.quantity == "bias"].set_index(["model", "part"])
    r, q = np.array(list(R_TRUE.values())), np.array(list(Q_TRUE.values()))
    # sum-to-zero: the parts are the known biases centred over the panel, mu their shared sum
    assert bias.loc[("*", "shared")].estimate == pytest.approx(r.mean() + q.mean(), abs=0.005)
    for i, m in enumerate(["A", "B"]):
        for part, truth in (("render", r[i] - r.mean()), ("read", q[i] - q.mean())):
            row = bias.loc[(m, part)]
            assert row.estimate == pytest.approx(truth, abs=0.006), (m, part)
            assert row.lo <= truth + 0.002 and truth - 0.002 <= row.hi, (m, part)  # interval covers
    # rendering adds a constant: the slope parts are nil
    slope = parts[parts.quantity == "slope"].set_index(["model", "part"])
    assert slope.loc[("*", "shared")].estimate == pytest.approx(1.0, abs=0.03)
    # failures are counted, never defaulted; cost = utterances x appraisers (no retries here)
    app = run.read_table("appraisals")
    assert 0.05 < app.failed.mean() < 0.3 and app[app.failed].e.isna().all()
    assert app[app.failed].error.notna().all() and (app.attempts == 1).all()
    assert s["cost"]["appraiser_calls_total"] == s["cost"]["first_pass_calls"] == 2 * 80 * 2
    assert len(pd.DataFrame(s["pairs"])) == 4


def test_anchor_on_a_faithful_reader_gives_absolute_rendering_bias(tmp_path):
    _, s = _syn(tmp_path, name="anch", analysis={"anchor": "B", "n_boot": 0})
    bias = pd.DataFrame(s["parts"]).query("quantity == 'bias'").set_index(["model", "part"])
    assert bias.loc[("*", "shared")].estimate == 0
    for m in ("A", "B"):
        assert bias.loc[(m, "render")].estimate == pytest.approx(R_TRUE[m], abs=0.005)
        assert bias.loc[(m, "read")].estimate == pytest.approx(Q_TRUE[m], abs=0.005)
    assert pd.isna(bias.loc[("A", "render")].lo)  # n_boot = 0: no interval, never a made-up one


def test_self_pair_equals_the_plain_channel_audit_of_the_run(tmp_path):
    """A belief run in LLM mode through synthetic model A, then cross-appraised: the self pair
    re-reads the run's utterances with the run's request seeds and reproduces its audit."""
    syn = X.SyntheticCfg(render_bias=R_TRUE, read_bias=Q_TRUE, noise=0.02, fail_rate=0.1)
    bcfg = BeliefConfig(name="a", mode="llm", n_agents=4, rounds=3, seeds=2, llm={
        "model": "A", "appraiser": {"tau": 1.0}, "probe": {"enabled": False}})
    brun, bsum = run_experiment(bcfg, tmp_path / "run_a", engine=X.synthetic_engine("A", syn), make_plots=False)
    cfg = X.CrossConfig(mode="synthetic", models=["A", "B"], runs=[str(brun.path)], max_utterances=None,
                        synthetic=syn.model_dump(), analysis={"n_boot": 0})
    run, s = X.run_cross(cfg, tmp_path / "cross", make_plots=False)
    ut_run = brun.read_table("utterances")
    ut = run.read_table("utterances")
    assert (ut[ut.generator == "A"].source.str.startswith("run:")).all()
    app = run.read_table("appraisals")
    self_a = app[(app.generator == "A") & (app.appraiser == "A")].sort_values("uid")
    assert len(self_a) == len(ut_run) == 2 * 3 * 4
    np.testing.assert_array_equal(self_a.s.to_numpy(), ut_run.s.to_numpy())
    np.testing.assert_array_equal(self_a.e.to_numpy(), ut_run.e.to_numpy())  # NaN where the run failed too
    assert s["self_vs_run"]["A"] == {"utterances": 24, "failed_mismatch": 0, "max_abs_diff_e": 0.0}
    pair = pd.DataFrame(s["pairs"]).set_index(["generator", "appraiser"]).loc[("A", "A")]
    assert pair.pearson == pytest.approx(bsum["headline"]["channel_pearson"], abs=1e-12)
    tc = run.read_table("transfer").query("generator == 'A' and appraiser == 'A'").reset_index(drop=True)
    ref = analysis.transfer_curve(ut_run, 10)
    pd.testing.assert_frame_equal(tc[["bin", "s_mean", "e_mean", "e_std", "n"]], ref[["bin", "s_mean", "e_mean",
                                                                                         "e_std", "n"]],
                                  check_dtype=False)


def test_rerun_reads_the_store_and_a_killed_run_resumes(tmp_path):
    cfg = X.CrossConfig(mode="synthetic", models=["A", "B"], analysis={"n_boot": 0},
                        synthetic={"render_bias": R_TRUE, "read_bias": Q_TRUE, "n": 30, "fail_rate": 0.2})

    def dies_on_b(m):
        if m == "B":
            raise RuntimeError("killed")
        return X.synthetic_engine(m, cfg.synthetic, tmp_path / "c" / "calls.sqlite")
    with pytest.raises(RuntimeError, match="killed"):
        X.run_cross(cfg, tmp_path / "c", load=dies_on_b, make_plots=False)
    run, s = X.run_cross(cfg, tmp_path / "c", make_plots=False)  # resumes: A's appraisals are stored
    st = run.provenance()["stats"]
    assert st["computed"]["A"] == 0 and st["computed"]["B"] == st["appraiser_calls"]["B"] > 60  # retries
    assert s["cost"]["retries"] > 0 and s["cost"]["appraiser_calls_total"] == 120 + s["cost"]["retries"]
    first = run.read_table("appraisals")
    run2, s2 = X.run_cross(cfg, tmp_path / "c", make_plots=False)
    assert s2["cost"]["computed_total"] == 0  # every call read back from the store
    assert s2["cost"]["appraiser_calls_total"] == s["cost"]["appraiser_calls_total"]
    pd.testing.assert_frame_equal(run2.read_table("appraisals"), first)
    assert s2["parts"] == s["parts"]


def test_bad_input_is_named(tmp_path):
    with pytest.raises(ConfigError, match="at least two models"):
        validate(X.CrossConfig, {"models": ["A"]})
    with pytest.raises(ConfigError, match="anchor"):
        validate(X.CrossConfig, {"models": ["A", "B"], "analysis": {"anchor": "C"}})
    with pytest.raises(ConfigError, match="render_bias has no entry"):
        validate(X.CrossConfig, {"mode": "synthetic", "models": ["A", "Z"]})
    orc, _ = run_experiment(BeliefConfig(mode="oracle", n_agents=3, rounds=1, seeds=1), tmp_path / "o",
                            make_plots=False)
    with pytest.raises(ConfigError, match="oracle"):
        X.run_cross(X.CrossConfig(models=["A", "B"], runs=[str(orc.path)]), tmp_path / "x")


def test_command_and_report_dispatch(tmp_path):
    from chorus.simulate.belief.cli import app
    runner = CliRunner()
    out = tmp_path / "cli"
    r = runner.invoke(app, ["cross", "--synthetic", "--model", "synth-a", "--model", "synth-b", "--out", str(out),
                            "--set", "synthetic.n=30", "--set", "analysis.n_boot=50", "--no-plots"])
    assert r.exit_code == 0, r.output
    assert "rendering part" in r.output and "120 appraiser calls" in r.output
    before = json.loads((out / "summary.json").read_text())
    (out / "summary.json").unlink()
    r = runner.invoke(app, ["recompute", str(out)])
    assert r.exit_code == 0, r.output
    after = json.loads((out / "summary.json").read_text())
    assert after["parts"] == before["parts"] and after["cost"] == before["cost"]
    for p in ("cross_transfer_grid", "cross_parts", "cross_pair_bias"):
        assert (out / "plots" / f"{p}.png").is_file()
    # issue 51 item 5: the plots' intervals say what they rest on (each generator's 30 utterances resampled)
    svg = lambda p: " ".join((out / "plots" / f"{p}.svg").read_text().split())
    assert "95%, 60 utterances resampled" in svg("cross_parts")
    assert "95%, normal theory (mean +- 1.96 SE), " in svg("cross_transfer_grid")
    assert after["parts"][0]["resampled"] == "utterance" and after["parts"][0]["n_units"] == 60
    r = runner.invoke(app, ["cross", "--model", "synth-a"])
    assert r.exit_code == 2 and "at least two models" in r.output


# -- one plumbing run through the embedded models --------------------------------------------
def _ready(*profiles) -> bool:
    try:
        from chorus.serving.profiles import ModelError, get_profile
    except ImportError:
        return False
    try:
        return all(get_profile(p).status()[0] for p in profiles)
    except ModelError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not _ready("smollm2-135m-instruct", "gemma3-270m"), reason="embedded models not available")
def test_two_embedded_models_plumbing(tmp_path, hf_engine):
    """SmolLM2-135M (the session's engine, on this run's store) and gemma-3-270m (base model, plain
    template; loaded here) each generate one utterance and read both (hf, CPU): six model calls.
    Plumbing only: neither model can judge stance, no number here is a finding."""
    from chorus.serving import load_engine
    cfg = X.CrossConfig(models=["smollm2-135m-instruct", "gemma3-270m"], backend="hf", dtype="float32",
                        generate={"n": 1, "generator": {"max_tokens": 8}},
                        appraiser={"tau": 1.0, "max_retries": 0, "max_tokens": 12}, analysis={"n_boot": 20})
    store = tmp_path / "real" / "calls.sqlite"
    loaded = []

    def load(m):  # the shared SmolLM2 backend must outlive this test: nothing is closed by run_cross
        eng = hf_engine.with_store(store) if m == cfg.panel()[0] else load_engine(m, "hf", store=store,
                                                                                   dtype="float32")
        loaded.append(eng)
        return eng
    try:
        run, s = X.run_cross(cfg, tmp_path / "real", load=load, close_engines=False, make_plots=False)
    finally:
        for eng in loaded:
            if eng.profile.name != cfg.panel()[0]:
                eng.close()
    st = run.provenance()["stats"]
    n_text = int(run.read_table("utterances").text.notna().sum())  # an empty generation is not read
    assert st["generator_calls"] == 2 and n_text + st["generation_failures"] == 2
    assert s["cost"]["appraiser_calls_total"] == 2 * n_text  # no retries (max_retries = 0)
    assert st["loads"] == 3  # two generators, then two appraisers: the last generator's engine is kept
    assert [e.profile.name for e in loaded] == [cfg.panel()[0], cfg.panel()[1], cfg.panel()[0]]
    app = run.read_table("appraisals")
    assert len(app) == 2 * n_text and set(app.appraiser) == set(cfg.panel())
    ok = app[~app.failed]
    assert ok.p_raw.between(0, 1).all() and app[app.failed].error.notna().all()
    assert set(run.provenance()["engines"]) == set(cfg.panel())
    # one speaker belief per generator: no slope to fit, and the summary says so
    assert s["fit"]["slope"]["identified"] is False and s["fit"]["slope"]["why_not"]
