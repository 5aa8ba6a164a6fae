"""The belief layer over a debate (simulate/debate/stubbornness.py, simulate/belief/trajectory.py): the closed
form against hand-computed updates, exact recovery of planted kappa and gamma from a synthetic debate of
belief-layer agents, and every bad input in one line. The real-model run is in test_debate_e2e.py."""
import json

import numpy as np
import pandas as pd
import pytest

from chorus.simulate.belief import bayes
from chorus.simulate.belief.trajectory import Trajectories, fit, kappa_closed_form
from chorus.simulate.debate.config import BeliefReadConfig
from chorus.simulate.debate.questions import validate_item
from chorus.simulate.debate.stubbornness import (READ, SPOKE, BeliefReadError, observations, run_belief, stance_items,
                                          synthetic_belief_debate)


def test_closed_form_against_a_hand_computed_pair_of_updates():
    # kappa 2, b0 1/2, gamma 1/2: e = 1 gives (2, 1), b = 2/3; e = 0 gives (1.5, 2), b = 3/7
    a0, c0 = bayes.prior_counts(2.0, 0.5)
    a, c = bayes.step(a0, c0, a0, c0, 1.0, 0.5)
    assert bayes.credence(a, c) == pytest.approx(2 / 3)
    a, c = bayes.step(a, c, a0, c0, 0.0, 0.5)
    assert bayes.credence(a, c) == pytest.approx(3 / 7)
    A, M = 0.5 * 1 + 1 * 0, 0.5 + 1  # lags 1 and 0
    assert bayes.credence_after(2.0, 0.5, A, M) == pytest.approx(3 / 7, abs=1e-15)
    assert bayes.kappa_hat_cumulative(3 / 7, 0.5, A, M) == pytest.approx(2.0, abs=1e-13)
    # one update from the prior: the per-event estimator at b = b0, m = 0
    b1 = bayes.credence_after(3.0, 0.2, 0.9, 1.0)
    assert bayes.kappa_hat_cumulative(b1, 0.2, 0.9, 1.0) == pytest.approx(
        float(bayes.kappa_hat(0.2, b1, 0.9, 0.2, 0.0, 0.7)))
    assert bayes.kappa_hat_cumulative(0.2, 0.2, 0.9, 1.0) == np.inf  # never moved: committed


def _streams(kappa, gamma, n=40, per=(2, 2, 2), seed=0):
    """Readings of a belief-layer agent after each block of ``per`` updates, with the events' lags."""
    rng = np.random.default_rng(seed)
    b0s, bs, er, el, ee = [], [], [], [], []
    for _ in range(n):
        b0 = rng.uniform(0.05, 0.95)
        a0, c0 = bayes.prior_counts(kappa, b0)
        a, c, heard = a0, c0, []
        for k in per:
            for _ in range(k):
                e = rng.uniform()
                a, c = bayes.step(a, c, a0, c0, e, gamma)
                heard.append(e)
            i = len(bs)
            b0s.append(b0)
            bs.append(float(bayes.credence(a, c)))
            for j, e in enumerate(heard):
                er.append(i)
                el.append(len(heard) - 1 - j)
                ee.append(e)
    return Trajectories.from_events(b0s, bs, er, el, ee)


@pytest.mark.parametrize("kappa,gamma", [(0.5, 0.7), (4.0, 1.0), (16.0, 0.4)])
def test_kappa_and_gamma_recovered_from_sparse_readings(kappa, gamma):
    tr = _streams(kappa, gamma)
    np.testing.assert_allclose(kappa_closed_form(tr, gamma), kappa, rtol=1e-10)
    j = fit(tr)
    assert j["kappa"] == pytest.approx(kappa, rel=1e-8) and j["gamma"] == pytest.approx(gamma, rel=1e-8)
    assert j["rmse"] < 1e-9 and j["n"] == len(tr)
    assert fit(tr, gamma=gamma)["kappa"] == pytest.approx(kappa, rel=1e-10)


def test_readings_after_no_evidence_carry_nothing():
    tr = Trajectories.from_events([0.3, 0.4], [0.3, 0.5], [1], [0], [0.9])
    k = kappa_closed_form(tr, 0.7)
    assert np.isnan(k[0]) and np.isfinite(k[1])
    assert fit(tr)["n"] == 1
    with pytest.raises(ValueError, match="finite"):
        Trajectories.from_events([0.3], [0.4], [0], [0], [np.nan])


def test_observations_hear_peers_round_by_round_in_seat_order():
    """Three agents, two rounds: agent 0 at round 2 has heard agents 1, 2 of round 0, then 1, 2 of round 1
    (lags 3, 2, 1, 0); its own turns are not evidence; a NaN e is no update (the lags close up)."""
    it = validate_item({"id": "q", "domain": "values", "subdomain": "s", "family": "f", "question": "?",
                        "options": ["yes", "no"], "labels": ["yes", "no"], "reference": None})
    items = {"q": it}
    rd = [{"qid": "q", "condition": "debate", "agent": a, "round": 0, "f": SPOKE, "b": 0.1 * (a + 1)} for a in range(3)]
    rd += [{"qid": "q", "condition": "debate", "agent": a, "round": r, "f": READ, "b": 0.5} for a in range(3) for r in (1, 2)]
    e = {(0, 0): 0.9, (0, 1): 0.8, (0, 2): 0.7, (1, 0): 0.6, (1, 1): np.nan, (1, 2): 0.4}
    ev = pd.DataFrame([{"qid": "q", "round": r, "agent": a, "e": x} for (r, a), x in e.items()])
    df, tr = observations(pd.DataFrame(rd), ev, items, condition="debate")
    row = df.index[(df["agent"] == 0) & (df["round"] == 2)][0]
    g = 0.5
    assert tr.sums(g)[0][row] == pytest.approx(0.8 * g ** 2 + 0.7 * g + 0.4)  # agent 1's NaN round-1 turn left out
    assert df.at[row, "n_heard"] == 3 and df.at[row, "b0"] == pytest.approx(0.1)
    row1 = df.index[(df["agent"] == 1) & (df["round"] == 1)][0]
    assert tr.sums(g)[0][row1] == pytest.approx(0.9 * g + 0.7) and tr.sums(g)[1][row1] == pytest.approx(g + 1)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    d = tmp_path_factory.mktemp("belief")
    run = synthetic_belief_debate(d / "run", [0.5, 2.0, 8.0], gamma=0.6, n=60, rounds=3, seed=3)
    cfg = BeliefReadConfig(reading="planted", appraiser="oracle", gamma=0.6, n_boot=40)
    out, s = run_belief(run, cfg, out=d / "belief")
    return run, out, s


def test_planted_kappas_and_gamma_recovered_exactly(synthetic):
    """Belief-layer agents in a debate (bayes.step per heard peer turn, e = s): every well-conditioned reading
    inverts to its agent's kappa, the joint fit returns (kappa, gamma), the reflection agents never move."""
    run, out, s = synthetic
    obs = pd.read_parquet(out / "tables" / "observations.parquet")
    deb = obs[(obs["condition"] == "debate") & obs["keep"]]
    planted = np.array([0.5, 2.0, 8.0])[deb["agent"].to_numpy()]
    np.testing.assert_allclose(deb["kappa_hat"], planted, rtol=1e-9)
    rows = {r["agent"]: r for r in s["agents"]}
    for a, k in (("A1", 0.5), ("A2", 2.0), ("A3", 8.0)):
        r = rows[a]
        assert r["kappa"] == pytest.approx(k, rel=1e-9) and r["kappa_lo"] == pytest.approx(k, rel=1e-9)
        assert r["kappa_fit"] == pytest.approx(k, rel=1e-7) and r["gamma_fit"] == pytest.approx(0.6, rel=1e-7)
        assert r["kappa_round1"] == pytest.approx(k, rel=1e-9)
        assert r["kappa_placebo"] == np.inf and r["drift_reflection"] == 0.0 and r["drift_debate"] > 0
        assert r["toward_evidence"] == 1.0
    assert s["audit"]["pearson_s_e"] == pytest.approx(1.0)
    assert s["counts"]["observations"] == 60 * 3 * 3 and s["counts"]["no_evidence"] == 0
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["mapping"]["version"] == 2 and prov["seeds"] == {"seed": 0} and (out / "config.yaml").is_file()
    assert (out / "plots" / "belief.png").is_file() and (out / "manifest.json").is_file()
    svg = " ".join((out / "plots" / "belief.svg").read_text().split())   # issue 51 item 5: the bars' level
    assert "kappa error bars: 95%, " in svg and "question families resampled" in svg


def test_stance_items_count_what_has_no_stance_axis():
    mk = lambda q, **kw: validate_item({"id": q, "domain": "knowledge", "subdomain": "s", "family": q, "question": "?",
                                        "reference": None, **kw})
    items = {"a": mk("a", options=["yes", "no"], labels=["yes", "no"]), "b": mk("b", options=["x", "y", "z"]),
             "c": mk("c", options=None, reference=3)}
    keep, left = stance_items(items, ["a", "b", "c"])
    assert list(keep) == ["a"] and left == {"numeric": 1, "not_two_options": 1}
    with pytest.raises(BeliefReadError, match="'d'"):
        stance_items(items, ["d"])


def test_bad_input_is_one_line(synthetic, tmp_path):
    from typer.testing import CliRunner

    from chorus.cli import app
    from chorus.core.runs import RunDir
    run, _, _ = synthetic
    cli = CliRunner()

    def fails(args, msg):
        r = cli.invoke(app, ["debate", "belief", *map(str, args)])
        assert r.exit_code == 2 and msg in r.output, r.output
        assert len([x for x in r.output.strip().splitlines() if x.strip()]) <= 3, r.output

    fails([run, "--out", tmp_path / "a"], "no config.yaml")  # probe readings need the debate's model
    nr = tmp_path / "noref"
    synthetic_belief_debate(nr, [1.0, 1.0], n=4, rounds=1)
    t = RunDir(nr).read_table("turns")
    RunDir(nr).write_table("turns", t[t["condition"] == "debate"])
    fails([nr, "--set", "reading=planted", "--set", "appraiser=oracle", "--out", tmp_path / "b"], "no reflection condition")
    from chorus.simulate.debate.questions import load_items, write_bench
    three = [validate_item({**it.to_dict(), "options": ["x", "y", "z"], "labels": None})
             for it in load_items(nr).values()]
    write_bench(three, nr / "bench.jsonl")
    fails([nr, "--set", "reading=planted", "--set", "appraiser=oracle", "--set", "reflection=false",
           "--out", tmp_path / "b2"], "no question with two options")
    nb = tmp_path / "nobeliefs"
    synthetic_belief_debate(nb, [1.0, 1.0], n=4, rounds=1)
    (nb / "tables" / "beliefs.parquet").unlink()
    fails([nb, "--set", "reading=planted", "--set", "appraiser=oracle", "--out", tmp_path / "c"], "tables/beliefs.parquet")
    fails([run, "--set", "tau=0", "--out", tmp_path / "d"], "tau")
    fails([tmp_path / "missing", "--out", tmp_path / "e"], "no tables/turns.parquet")


def test_averaged_reading_hears_one_update_per_round():
    """The averaged reading: agent 0 at round 2 heard round 0's peers (0.8, 0.7) and round 1's (0.4; agent 1's
    turn is NaN) as two updates, e = 0.75 at lag 1 and 0.4 at lag 0; the rows are the sequential reading's."""
    it = validate_item({"id": "q", "domain": "values", "subdomain": "s", "family": "f", "question": "?",
                        "options": ["yes", "no"], "labels": ["yes", "no"], "reference": None})
    rd = [{"qid": "q", "condition": "debate", "agent": a, "round": 0, "f": SPOKE, "b": 0.1 * (a + 1)} for a in range(3)]
    rd += [{"qid": "q", "condition": "debate", "agent": a, "round": r, "f": READ, "b": 0.5} for a in range(3) for r in (1, 2)]
    e = {(0, 0): 0.9, (0, 1): 0.8, (0, 2): 0.7, (1, 0): 0.6, (1, 1): np.nan, (1, 2): 0.4}
    ev = pd.DataFrame([{"qid": "q", "round": r, "agent": a, "e": x} for (r, a), x in e.items()])
    seq, _ = observations(pd.DataFrame(rd), ev, {"q": it}, condition="debate")
    df, tr = observations(pd.DataFrame(rd), ev, {"q": it}, condition="debate", update="averaged")
    pd.testing.assert_frame_equal(df, seq)
    row = df.index[(df["agent"] == 0) & (df["round"] == 2)][0]
    g = 0.5
    A, M = tr.sums(g)
    assert A[row] == pytest.approx(0.75 * g + 0.4) and M[row] == pytest.approx(g + 1)
    with pytest.raises(BeliefReadError, match="sequential"):
        observations(pd.DataFrame(rd), ev, {"q": it}, condition="debate", update="mean")


@pytest.mark.parametrize("update", ["sequential", "averaged"])
def test_each_reading_recovers_its_own_planted_generator_and_is_preferred(update, tmp_path):
    """A synthetic debate planted with one reading: that reading's closed form returns every agent's kappa
    exactly and its joint fit (kappa, gamma); the other reading misreads it, and the comparison (least-squares
    residual, a Gaussian log-likelihood ratio) picks the planted one per agent, on every family resample."""
    kap, gamma = [0.5, 2.0, 8.0], 0.6
    run = synthetic_belief_debate(tmp_path / "run", kap, gamma=gamma, n=40, rounds=3, seed=5, update=update)
    out, s = run_belief(run, BeliefReadConfig(reading="planted", appraiser="oracle", gamma=gamma, n_boot=20),
                        out=tmp_path / "belief", make_plots=False)
    own, other = ("", "_avg") if update == "sequential" else ("_avg", "")
    rows = {r["agent"]: r for r in s["agents"]}
    for a, k in zip(("A1", "A2", "A3"), kap):
        r = rows[a]
        assert r[f"kappa{own}"] == pytest.approx(k, rel=1e-9)
        assert r[f"kappa_fit{own}"] == pytest.approx(k, rel=1e-7) and r[f"gamma_fit{own}"] == pytest.approx(gamma, rel=1e-7)
        assert r[f"fit_rmse{own}"] < 1e-9 < r[f"fit_rmse{other}"]
        assert abs(r[f"kappa{other}"] - k) / k > 0.1          # the wrong reading is off by more than noise
        assert r["prefer"] == update and r["prefer_share"] == 1.0
        assert (r["loglik_seq_vs_avg"] > 0) == (update == "sequential")
    # the averaged reading's updates are fewer: the same movement reads as a smaller kappa
    assert rows["A2"]["kappa_avg"] < rows["A2"]["kappa"]
    c = s["readings_compared"]
    assert c["prefer"] == update and "question families resampled" in c["sequential"]["kappa_interval"]
    obs = pd.read_parquet(out / "tables" / "observations_averaged.parquet")
    assert len(obs) == s["counts"]["observations"]


def test_a_kappa_interval_over_too_few_families_is_refused_with_its_reason(tmp_path):
    """Four questions in two families: no interval is printed (too few units to resample), and the reason
    says how many there were; the estimate stays."""
    run = synthetic_belief_debate(tmp_path / "run", [1.0, 3.0], gamma=0.7, n=4, rounds=2, seed=1)
    _, s = run_belief(run, BeliefReadConfig(reading="planted", appraiser="oracle", gamma=0.7, n_boot=20),
                      out=tmp_path / "belief", make_plots=False)
    r = s["agents"][0]
    assert r["kappa"] == pytest.approx(1.0, rel=1e-9) and np.isnan(r["kappa_lo"])
    assert r["kappa_resampled"] == "question family" and r["kappa_n_units"] == 2
    assert "only 2 question families to resample" in r["kappa_ci_refused"]
    assert np.isnan(r["kappa_fit_lo"]) and "only 2" in r["fit_ci_refused"]
