"""K-way beliefs: the Dirichlet math against the Beta layer (K = 2, bit for bit) and the closed
forms, the multi-concept oracle engine (reproducing the single-concept engine, per-stance FJ
fixed points, exact kappa recovery for K = 3, couplings), topics and configs that fail by name,
and the ``chorus belief multi`` command."""
import json

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from chorus.core.config import ConfigError
from chorus.simulate.belief import bayes, dirichlet
from chorus.simulate.belief.lockstep import plan as multi_plan
from chorus.simulate.belief.lockstep import simulate
from chorus.simulate.belief.experiment import plan as beta_plan
from chorus.simulate.belief.config import CONFIGS_DIR, BeliefConfig, MultiBeliefConfig, load_multi_config
from chorus.simulate.belief.concept_analysis import analyse
from chorus.simulate.belief.topics import list_multi_topics, load_multi_topic
from chorus.simulate.belief.tables import concept_events_table, concept_tables
from chorus.simulate.belief.tables import events_table as beta_events

LEVELS = ["torn between {top} and {second}", "slightly for {top}", "clearly for {top}", "strongly for {top}",
          "committed to {top}"]
PROMPTS = {"generator": {"system": "You live in {setting}.", "user": "{issues}\n{views}"},
           "appraiser": {"system": "Classify.", "user": "{issues}\n{statement}\n{format}"}}


def _concept(cid, stances):
    return {"id": cid, "title": cid, "question": f"{cid}?",
            "stances": [{"id": s, "assertion": f"do {s}", "phrase": f"doing {s}"} for s in stances]}


def _topic(tmp_path, concepts, couplings=(), name="t"):
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump({"id": name, "title": name, "setting": "Aldenvale", "concepts": list(concepts),
                                 "couplings": list(couplings), "levels": LEVELS, "prompts": PROMPTS}))
    return str(p)


@pytest.fixture
def binary_topic(tmp_path):
    return _topic(tmp_path, [_concept("transit", ["rail", "roads"])], name="binary")


def _tables(cfg):
    return concept_tables(simulate(multi_plan(cfg), cfg.seed)[0])


# -- the math: K = 2 is the Beta layer, bit for bit -------------------------------------------------
def test_k2_math_is_the_beta_layer_bit_for_bit():
    g = np.random.default_rng(0)
    n = 500
    kappa = g.uniform(0.1, 40, n)
    b0 = g.uniform(0.01, 0.99, n)
    a0, be0 = bayes.prior_counts(kappa, b0)
    A0 = dirichlet.prior_counts(kappa, dirichlet.binary(b0))
    assert np.array_equal(A0[:, 0], a0) and np.array_equal(A0[:, 1], be0)
    a, be = a0 + g.uniform(0, 5, n), be0 + g.uniform(0, 5, n)
    e, gamma, w = g.uniform(0, 1, n), g.uniform(0.3, 1.0, n), g.uniform(0.2, 3, n)
    a1, be1 = bayes.step(a, be, a0, be0, e, gamma, w)
    A1 = dirichlet.step(np.stack([a, be], -1), A0, dirichlet.binary(e), gamma[:, None], w[:, None])
    assert np.array_equal(A1[:, 0], a1) and np.array_equal(A1[:, 1], be1)
    assert np.array_equal(dirichlet.credence(A1)[:, 0], bayes.credence(a1, be1))
    b, b1 = bayes.credence(a, be), bayes.credence(a1, be1)
    c = g.integers(0, 30, n)
    assert np.array_equal(dirichlet.fj_step(dirichlet.binary(b), dirichlet.binary(e), dirichlet.binary(b0),
                                            kappa, c, gamma, w)[:, 0],
                          bayes.fj_step(b, e, b0, kappa, c, gamma, w))
    m = (a + be) - kappa
    assert np.array_equal(dirichlet.kappa_hat(dirichlet.binary(b), dirichlet.binary(b1), dirichlet.binary(e),
                                              dirichlet.binary(b0), m, gamma, w)[:, 0],
                          bayes.kappa_hat(b, b1, e, b0, m, gamma, w))
    # the oracle's evidence for K = 2 is the Beta layer's pair (s, 1 - s)
    assert np.array_equal(dirichlet.close_simplex(np.stack([b, be / (a + be)], -1)), dirichlet.binary(b))


def test_kway_step_obeys_the_count_and_fj_identities():
    g = np.random.default_rng(1)
    K, steps, kappa, gamma, w = 4, 12, 3.0, 0.8, 1.5
    b0 = g.dirichlet(np.ones(K))
    a0 = dirichlet.prior_counts(kappa, b0)
    alpha = a0.copy()
    for c in range(steps):
        e = g.dirichlet(np.ones(K))
        b = dirichlet.credence(alpha)
        alpha = dirichlet.step(alpha, a0, e, gamma, w)
        np.testing.assert_allclose(alpha.sum(), bayes.total_count(kappa, c + 1, gamma, w), rtol=1e-13)
        np.testing.assert_allclose(dirichlet.credence(alpha), dirichlet.fj_step(b, e, b0, kappa, c, gamma, w),
                                   rtol=1e-12, atol=1e-14)


def test_kway_fixed_point_is_per_stance_and_on_the_simplex():
    g = np.random.default_rng(2)
    N, K = 7, 3
    b0 = g.dirichlet(np.ones(K), N)
    kappa = g.uniform(0.5, 20, N)
    bs = dirichlet.fj_fixed_point(kappa, b0, 0.7, 1.0)
    for k in range(K):
        np.testing.assert_array_equal(bs[:, k], bayes.fj_fixed_point(kappa, b0[:, k], 0.7, 1.0))
    np.testing.assert_allclose(bs.sum(-1), 1.0, rtol=1e-12)
    with pytest.raises(ValueError, match="singular"):
        dirichlet.fj_fixed_point(kappa, b0, 1.0, 1.0)


def test_pooled_kappa_is_exact_with_the_consumed_evidence_and_tau_generalises_the_sigmoid():
    g = np.random.default_rng(3)
    n, K = 200, 3
    kappa, gamma, w = g.uniform(0.5, 30, n), 0.7, 1.0
    b0 = g.dirichlet(np.ones(K), n)
    m = g.uniform(0, 3, n)
    b = g.dirichlet(np.ones(K), n)
    e = g.dirichlet(np.ones(K), n)
    c = np.log1p(-(1 - gamma) * m / w) / np.log(gamma)  # the update count that gives this m
    b1 = dirichlet.fj_step(b, e, b0, kappa, c, gamma, w)
    np.testing.assert_allclose(dirichlet.kappa_hat_pooled(b, b1, e, b0, m, gamma, w), kappa, rtol=1e-8)
    p = np.linspace(0.02, 0.98, 30)
    np.testing.assert_allclose(dirichlet.temperature_scale(dirichlet.binary(p), 2.5)[:, 0],
                               1 / (1 + np.exp(-np.log(p / (1 - p)) / 2.5)), rtol=1e-10)


def test_coupling_mixture_stays_on_the_simplex_and_is_the_identity_at_zero():
    g = np.random.default_rng(4)
    e_a, e_b = g.dirichlet(np.ones(3), 50), g.dirichlet(np.ones(4), 50)
    M = np.array([[1, 0, 0, 0], [0, 0, 1, 0], [.25, .25, .25, .25]])
    for wgt in (0.4, -0.4):
        t = dirichlet.coupling_target(e_a, M, wgt)
        mixed = dirichlet.mix_evidence(e_b, [t], [wgt])
        assert (mixed >= 0).all()
        np.testing.assert_allclose(mixed.sum(-1), 1.0, rtol=1e-12)
    assert np.array_equal(dirichlet.mix_evidence(e_b, [dirichlet.coupling_target(e_a, M, 0.0)], [0.0]), e_b)
    # K = 2 and a negative weight: the target is the mirrored evidence
    e2 = dirichlet.binary(np.array([0.9]))
    np.testing.assert_allclose(dirichlet.coupling_target(e2, np.eye(2), -1.0), [[0.1, 0.9]])
    # a failed source gives its weight back
    t = np.full((1, 4), np.nan)
    assert np.array_equal(dirichlet.mix_evidence(e_b[:1], [t], [0.5]), e_b[:1])


# -- the engine --------------------------------------------------------------------------------------
@pytest.mark.parametrize("pop,topo", [({"kind": "degroot"}, {"kind": "complete"}),
                                      ({"kind": "fj"}, {"kind": "complete"}),
                                      ({"kind": "fj", "b0": {"kind": "uniform"}}, {"kind": "small_world", "k": 4})])
def test_one_binary_concept_reproduces_the_single_concept_engine_bit_for_bit(binary_topic, pop, topo):
    kw = {"n_agents": 10, "rounds": 6, "seeds": [0, 3], "gamma": 0.7, "w": 1.0, "topology": topo}
    bc = BeliefConfig(population=pop, **kw)
    beta = simulate(beta_plan(bc, sweep=False)[1], bc.seed)[0]
    mc = MultiBeliefConfig(topic=binary_topic, population=pop, **kw)
    res = simulate(multi_plan(mc), mc.seed)[0]
    assert np.array_equal(beta.alpha, res.alpha[..., 0, 0]) and np.array_equal(beta.beta, res.alpha[..., 0, 1])
    assert np.array_equal(beta.b, res.b[..., 0, 0])
    assert np.array_equal(beta.listen, res.listen[..., 0])
    ev_b = beta_events(beta)
    ev_m = concept_events_table(res)
    ev_m = ev_m[ev_m.k == 0].reset_index(drop=True)
    for col in ("run", "seed", "round", "turn", "speaker", "listener", "s", "e", "b_before", "b_after",
                "kappa", "b0", "m", "c"):
        assert np.array_equal(ev_b[col].to_numpy(), ev_m[col].to_numpy()), col


def test_one_binary_concept_reproduces_the_single_concept_summary(binary_topic):
    from chorus.simulate.belief.analysis import analyse as beta_analyse
    from chorus.simulate.belief.tables import all_tables as beta_tables
    kw = {"n_agents": 12, "rounds": 10, "seeds": 3, "population": {"kind": "fj"}}
    bc = BeliefConfig(**kw)
    conds, specs = beta_plan(bc, sweep=False)
    b = beta_analyse(beta_tables(simulate(specs, bc.seed), conds), bc)[0]
    mc = MultiBeliefConfig(topic=binary_topic, **kw)
    m = analyse(_tables(mc), mc)[0]
    bcond, mst = b["conditions"][0], m["stances"][0]
    for key in ("initial_mean", "final_mean", "initial_variance", "final_variance", "fj_r2"):
        assert mst[key] == pytest.approx(bcond[key], rel=1e-12, abs=1e-15), key
    assert m["concepts"][0]["persists"] == bcond["persists"]
    bk = {r["kappa"]: r for r in b["kappa_recovery"]}
    for r in m["kappa_recovery"]:
        assert r["kappa_hat_coord_median"] == pytest.approx(bk[r["kappa"]]["kappa_hat_median"], rel=1e-9)
        assert r["kappa_hat_median"] == pytest.approx(bk[r["kappa"]]["kappa_hat_median"], rel=1e-9)


def test_batched_equals_alone():
    cfg = MultiBeliefConfig(n_agents=6, rounds=3, seeds=[2, 5, 9], couplings=True)
    batched = concept_events_table(simulate(multi_plan(cfg), cfg.seed)[0])
    for sp in multi_plan(cfg):
        alone = concept_events_table(simulate([sp], cfg.seed)[0])
        mine = batched[batched.run == sp.run].reset_index(drop=True)
        pd.testing.assert_frame_equal(alone.drop(columns="run"), mine.drop(columns="run"))


def test_three_way_events_obey_the_closed_forms_and_recover_kappa_exactly_with_e():
    cfg = MultiBeliefConfig(n_agents=8, rounds=5, seeds=2, gamma=0.8, w=1.5,
                            population={"kind": "fj", "stubborn_kappa": 9, "pliable_kappa": 0.7})
    ev = _tables(cfg)["events"]
    ev = ev[ev.concept == "transit"]  # K = 3
    assert ev.k.max() == 2 and len(ev) == 2 * 5 * 8 * 7 * 3
    np.testing.assert_allclose(ev.m, bayes.discounted_count(ev.c, 0.8, 1.5), rtol=1e-11, atol=1e-12)
    pred = bayes.fj_step(ev.b_before, ev.e, ev.b0, ev.kappa, ev.c, 0.8, 1.5)
    np.testing.assert_allclose(ev.b_after, pred, rtol=1e-11, atol=1e-13)
    ok = dirichlet.well_conditioned(ev.e, ev.b_before)
    k = bayes.kappa_hat(ev.b_before, ev.b_after, ev.e, ev.b0, ev.m, 0.8, 1.5)
    np.testing.assert_allclose(k[ok], ev.kappa[ok], rtol=1e-7)
    _, derived = analyse(_tables(cfg), cfg)
    kr = derived["kappa_recovery"]
    assert set(kr.kappa[kr.concept == "transit"]) == {9.0, 0.7}
    assert kr.exact_max_rel_error.max() < 1e-7
    assert kr.rel_error.max() < 1e-8  # oracle: s is the consumed evidence
    assert kr.kappa_hat_ci_low.isna().all() and kr.kappa_hat_ci_refused.str.contains("runs to resample").all()
    bs = derived["kappa_recovery_by_seed"]  # two kappa levels per seed and concept: no rank to correlate
    assert len(bs) == 2 * 3 and (bs.levels == 2).all() and bs.spearman.isna().all() and (bs.median_rel_error < 1e-8).all()


def test_kway_fj_fixed_point_matches_the_engine_per_concept():
    cfg = load_multi_config("multi_fj")  # N = 20, 5 seeds, 20 rounds, K = 3, 2, 4
    summary, _ = analyse(_tables(cfg), cfg)
    by = {c["concept"]: c for c in summary["concepts"]}
    assert set(by) == {"transit", "levy", "surplus"}
    for c in by.values():
        assert c["fj_r2"] >= 0.9 and c["persists"], c
    assert summary["headline"]["kappa_exact_max_rel_error"] < 1e-6


def test_kway_degroot_reaches_consensus_near_each_stances_initial_mean():
    cfg = load_multi_config("multi_degroot")
    summary, _ = analyse(_tables(cfg), cfg)
    for c in summary["concepts"]:
        assert c["final_variance"] < 1e-2 * c["initial_variance"]
    for s in summary["stances"]:
        assert abs(s["landing_shift"]) < 0.02, s


def test_couplings_at_weight_zero_change_nothing_and_otherwise_move_the_linked_concept(tmp_path):
    concepts = [_concept("a", ["x", "y", "z"]), _concept("b", ["x", "y"])]
    zero = _topic(tmp_path, concepts, [{"from": "a", "to": "b", "weight": 0.0}], name="zero")
    half = _topic(tmp_path, concepts, [{"from": "a", "to": "b", "weight": 0.5}], name="half")
    kw = {"n_agents": 6, "rounds": 4, "seeds": 2}
    off = simulate(multi_plan(MultiBeliefConfig(topic=zero, **kw)), 0)[0]
    on0 = simulate(multi_plan(MultiBeliefConfig(topic=zero, couplings=True, **kw)), 0)[0]
    assert len(on0.group.couplings) == 1 and not off.group.couplings
    assert np.array_equal(off.alpha, on0.alpha)
    on = simulate(multi_plan(MultiBeliefConfig(topic=half, couplings=True, **kw)), 0)[0]
    assert np.array_equal(on.alpha[..., 0, :], off.alpha[..., 0, :])  # the source is untouched
    assert not np.allclose(on.alpha[..., 1, :], off.alpha[..., 1, :])
    # consumed evidence on b = half own + half a's (z unmapped: spread evenly)
    e_a, e_b = on.e_appraised[:, :, 0, :3], on.e_appraised[:, :, 1, :2]
    target = np.stack([e_a[..., 0] + e_a[..., 2] / 2, e_a[..., 1] + e_a[..., 2] / 2], -1)
    np.testing.assert_allclose(on.e[:, :, 1, :2], 0.5 * e_b + 0.5 * target, rtol=1e-12)


# -- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize("concepts,couplings,needle", [
    ([_concept("a", ["x"])], [], r"concepts\[0\]\.stances: .*K = 1"),
    ([_concept("a", ["x", "y", "x"])], [], r"concepts\[0\]\.stances: duplicate stance id 'x'"),
    ([_concept("a", ["x", "y"]), _concept("a", ["u", "v"])], [], r"concepts\[1\]\.id: duplicate concept id"),
    ([_concept("a", ["x", "y"])], [{"from": "a", "to": "nope", "weight": 0.2}], r"couplings\[0\]\.to: no concept 'nope'"),
    ([_concept("a", ["x", "y"])], [{"from": "a", "to": "a", "weight": 0.2}], r"couplings\[0\]: .*itself"),
    ([_concept("a", ["x", "y"]), _concept("b", ["u", "v"])], [{"from": "a", "to": "b", "weight": 0.2}],
     r"couplings\[0\]\.map: .*share no stance"),
    ([_concept("a", ["x", "y"]), _concept("b", ["u", "v"])],
     [{"from": "a", "to": "b", "weight": 0.2, "map": {"x": "w"}}], r"couplings\[0\]\.map: 'w' is not a stance of 'b'"),
    ([_concept("a", ["x", "y"]), _concept("b", ["x", "y"]), _concept("c", ["x", "y"])],
     [{"from": "a", "to": "c", "weight": 0.7}, {"from": "b", "to": "c", "weight": -0.6}], r"into 'c' sum to 1.3"),
    ([_concept("a", ["x", "y"]), _concept("b", ["x", "y"])], [{"from": "a", "to": "b", "weight": 1.5}],
     r"couplings\.0\.weight"),
])
def test_inconsistent_topics_name_the_field(tmp_path, concepts, couplings, needle):
    with pytest.raises(ConfigError, match=needle):
        load_multi_topic(_topic(tmp_path, concepts, couplings))


def test_configs_that_do_not_fit_the_topic_name_the_field(binary_topic):
    with pytest.raises(ConfigError, match=r"population\.b0\.kind = 'spread' .*K = 2.*'transit' has K = 3"):
        multi_plan(MultiBeliefConfig(population={"kind": "fj", "b0": {"kind": "spread"}}))
    with pytest.raises(ConfigError, match=r"concepts\.nope: topic 'aldenvale_council' has no concept"):
        multi_plan(MultiBeliefConfig(concepts={"nope": {"gamma": 0.5}}))
    with pytest.raises(ConfigError, match=r"concepts\.levy\.population\.b0\.values\[1\]"):
        multi_plan(MultiBeliefConfig(n_agents=2, concepts={"levy": {"population": {
            "b0": {"kind": "values", "values": [[0.5, 0.5], [0.5, 0.2]]}}}}))
    with pytest.raises(ConfigError, match="no such multi-concept topic"):
        multi_plan(MultiBeliefConfig(topic="transit_priority"))


@pytest.mark.parametrize("path", sorted(CONFIGS_DIR.glob("multi_*.yaml")), ids=lambda p: p.stem)
def test_shipped_multi_configs_load_and_plan(path):
    cfg = load_multi_config(path)
    assert len(multi_plan(cfg)) == len(cfg.seed_list)


def test_shipped_multi_topics_render_without_numbers():
    assert "aldenvale_council" in list_multi_topics()
    for name in list_multi_topics():
        t = load_multi_topic(name)
        assert t.C >= 2 and min(t.Ks) >= 2 and len(set(t.Ks)) > 1 and t.sha256
        g = np.random.default_rng(0)
        for _ in range(50):
            b = np.zeros((t.C, max(t.Ks)))
            for i, K in enumerate(t.Ks):
                b[i, :K] = g.dirichlet(np.full(K, 0.5))
            text = " ".join(m["content"] for m in t.generator_messages(b))
            assert not any(ch.isdigit() for ch in text), text
        assert set(t.appraiser_schema()["required"]) == set(t.concept_ids)


# -- the command -------------------------------------------------------------------------------------
def test_multi_command_then_report(tmp_path):
    from chorus.simulate.belief.cli import app
    runner = CliRunner()
    out = tmp_path / "m"
    r = runner.invoke(app, ["multi", "multi_fj", "--set", "seeds=2", "--set", "n_agents=8", "--set", "rounds=5",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    for f in ("config.yaml", "provenance.json", "summary.json", "tables/events.parquet", "tables/beliefs.parquet",
              "plots/multi_trajectories.png", "plots/multi_kappa_recovery.png", "plots/multi_fj.png"):
        assert (out / f).is_file(), f
    s = json.loads((out / "summary.json").read_text())
    assert s["kind"] == "multi" and s["headline"]["kappa_exact_max_rel_error"] < 1e-7
    assert json.loads((out / "provenance.json").read_text())["topics_sha256"]["aldenvale_council"]
    (out / "summary.json").unlink()
    r = runner.invoke(app, ["recompute", str(out), "--no-plots"])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "summary.json").read_text())["headline"] == s["headline"]
    bad = runner.invoke(app, ["multi", "multi_fj", "--set", "population.b0.kind=spread", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "population.b0.kind" in bad.output and not (tmp_path / "x").exists()
