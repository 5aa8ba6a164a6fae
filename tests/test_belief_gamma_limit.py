"""Issue 19 item 7: at gamma = 1 the FJ system is singular; the FJ R^2 is reported against the
limit of the fixed point as gamma -> 1 (hand-computed), and the summary names the reference."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from chorus.simulate.belief import bayes
from chorus.simulate.belief.analysis import fixed_points, fj_limit_gamma_to_1, r2_no_intercept


def test_limit_hand_computed_and_is_the_limit_of_the_fixed_point():
    kappa, b0 = np.array([1.0, 2.0, 3.0]), np.array([0.2, 0.5, 0.8])
    # (1*0.2 + 2*0.5 + 3*0.8) / (1 + 2 + 3) = 3.6 / 6 = 0.6 for everyone
    np.testing.assert_allclose(fj_limit_gamma_to_1(kappa, b0), [0.6, 0.6, 0.6], atol=1e-15)
    with pytest.raises(ValueError, match="singular"):
        bayes.fj_fixed_point(kappa, b0, 1.0, 1.0)
    for w in (0.5, 2.0):
        near = bayes.fj_fixed_point(kappa, b0, 1 - 1e-7, w)
        np.testing.assert_allclose(near, 0.6, atol=1e-5)
    # a path 0-1-2: degrees 1, 2, 1 weigh in: (1*1*0.2 + 2*2*0.5 + 1*3*0.8) / (1 + 4 + 3) = 4.6 / 8
    A = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]], float)
    np.testing.assert_allclose(fj_limit_gamma_to_1(kappa, b0, A), 4.6 / 8, atol=1e-15)
    np.testing.assert_allclose(bayes.fj_fixed_point(kappa, b0, 1 - 1e-7, 1.0, adjacency=A), 4.6 / 8, atol=1e-5)


def test_fixed_points_table_names_the_reference_and_r2_is_defined():
    tables = {
        "runs": pd.DataFrame({"run": [0, 1], "gamma": [1.0, 0.7], "w": [1.0, 1.0],
                              "topology": ["complete", "complete"]}),
        "agents": pd.DataFrame({"run": [0, 0, 0, 1, 1, 1], "agent": [0, 1, 2] * 2,
                                "kappa": [1.0, 2.0, 3.0] * 2, "b0": [0.2, 0.5, 0.8] * 2}),
        "edges": pd.DataFrame({"run": [], "u": [], "v": []}),
    }
    fp = fixed_points(tables)
    r0, r1 = fp[fp.run == 0], fp[fp.run == 1]
    assert set(r0.reference) == {"fj_limit_gamma_to_1"} and set(r1.reference) == {"fj_fixed_point"}
    np.testing.assert_allclose(r0.b_star, 0.6)
    np.testing.assert_allclose(r1.b_star, bayes.fj_fixed_point([1.0, 2.0, 3.0], [0.2, 0.5, 0.8], 0.7, 1.0))
    # terminal beliefs 0.55, 0.6, 0.65 against the consensus 0.6: 1 - 0.005 / 0.005 = 0
    assert r2_no_intercept([0.55, 0.6, 0.65], r0.b_star.to_numpy()) == pytest.approx(0.0, abs=1e-12)


def test_gamma_ablation_oracle_reports_fj_against_the_limit(tmp_path):
    """The shipped gamma ablation (oracle, small): at gamma = 1 the FJ row has an R^2, its reference
    named, and its terminal beliefs sit near the limit consensus."""
    from pathlib import Path

    from chorus.core.config import load_named
    from chorus.simulate.belief.config import BeliefConfig
    from chorus.simulate.belief.experiment import run_experiment

    cfg = load_named("gamma_ablation", BeliefConfig, Path("simulate/belief/configs"),
                     {"mode": "oracle", "seeds": 2, "n_agents": 8, "rounds": 30})
    _, summary = run_experiment(cfg, tmp_path / "g", sweep=True, make_plots=False)
    fj1 = [c for c in summary["conditions"] if c["gamma"] == 1.0 and c["population"] == "fj"][0]
    assert fj1["fj_reference"] == "fj_limit_gamma_to_1" and fj1["fj_r2"] is not None
    # the landing is far closer to the limit consensus than the initial spread (it converges like 1/t at gamma = 1)
    assert fj1["fj_rmse"] < 0.5 * fj1["initial_variance"] ** 0.5, (fj1["fj_rmse"], fj1["initial_variance"])
    fj07 = [c for c in summary["conditions"] if c["gamma"] == 0.7 and c["population"] == "fj"][0]
    assert fj07["fj_reference"] == "fj_fixed_point" and fj07["fj_r2"] > 0.9
