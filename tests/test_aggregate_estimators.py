"""Estimator API, the confusion model, nested CV (leak-freeness), baselines, crowd-kit agreement."""
import math

import numpy as np
import pandas as pd
import pytest

from chorus.aggregate import (Adversary, BestMember, ConfusionBDA, CouncilSpec, DawidSkeneEM, GatedVote, IsotonicRecalibrated,
                       LogisticStacker, OneCoinBDA, Plurality, Pool, Trace, VerbalizedVote, generate_council, nested_cv,
                       one_coin_posterior, outer_splits)
from chorus.aggregate.errors import LabelError, TraceError
from chorus.aggregate.selection import argmax_random, argmin_random


@pytest.fixture(scope="module")
def attacked():
    spec = CouncilSpec(n_tasks=400, K=2)
    return generate_council(spec, adversary=Adversary("persistent", k=1, p_wrong=0.9), seed=7)


@pytest.fixture(scope="module")
def clean3():
    return generate_council(CouncilSpec(n_tasks=300, K=3), seed=4)


def tr(task_id, gold, moves, cands=("true", "false")):
    return Trace.from_dict({"task_id": task_id, "candidates": list(cands), "gold": gold, "moves": moves})


def props(*answers, confs=None):
    out = []
    for i, a in enumerate(answers):
        m = {"agent": f"A{i + 1}", "round": 0, "force": "propose", "answer": a}
        if confs is not None:
            m["confidence"] = confs[i]
        out.append(m)
    return out


# -- the estimator API ---------------------------------------------------------------------
def test_one_coin_estimator_api(attacked):
    est = OneCoinBDA(random_state=1).fit(attacked[:300])
    assert est.agents_ == ("A1", "A2", "A3")
    assert set(est.hyperparams_) == {"b", "kappa", "s", "tau"}
    assert len(est.cv_results_) == 80 and "brier" in est.cv_results_
    best = est.cv_results_.loc[est.cv_results_["brier"].idxmin()]
    assert est.hyperparams_["b"] == best["b"] and est.hyperparams_["s"] == best["s"]
    assert est.weights_["A3"] < 0 < est.weights_["A1"]  # the adversarial seat weighs negatively
    proba = est.predict_proba(attacked[300:])
    assert list(proba.columns) == ["task_id", "candidate", "probability"]
    assert len(proba) == 200 and np.allclose(proba.groupby("task_id")["probability"].sum(), 1.0)
    pred = est.predict(attacked[300:])
    assert list(pred.columns) == ["task_id", "answer", "confidence"]
    assert (pred["answer"] == [t.gold for t in attacked[300:]]).mean() > 0.85
    # the fitted priors reproduce predict_proba through the stable single-trace API
    p = one_coin_posterior(attacked[300], est.priors_)
    row = proba[proba["task_id"] == attacked[300].task_id].set_index("candidate")["probability"]
    assert p["true"] == pytest.approx(row["true"], rel=1e-12)
    # priors_ are Eq. 3 of the fitted reliabilities
    hp = est.hyperparams_
    r = est.reliabilities_
    mu = np.clip(hp["b"] + hp["kappa"] * (r - r.mean()), 0.01, 0.99)
    for a in est.agents_:
        assert est.priors_[a][0] == pytest.approx(mu[a] * hp["s"], rel=1e-12)


def test_shared_prior_is_kappa_zero_slice(attacked):
    est = OneCoinBDA("shared", random_state=1).fit(attacked[:300])
    assert len(est.cv_results_) == 16 and est.hyperparams_["kappa"] == 0.0
    assert len(set(est.priors_.values())) == 1


def test_fixed_hyperparams_and_reliabilities_hand_computed():
    # A1 right on both tasks (2 moves each: propose + concede), A2 wrong then right
    t1 = tr("t1", "true", props("true", "false") + [
        {"agent": "A1", "round": 1, "force": "challenge", "target": 1},
        {"agent": "A2", "round": 1, "force": "concede", "target": 0}])
    t2 = tr("t2", "false", props("false", "false"))
    est = OneCoinBDA(hyperparams={"b": 0.55, "kappa": 2.0, "s": 8.0}).fit([t1, t2])
    # A1: consistent moves 2 (t1) + 1 (t2) of 3 -> 1.0; A2: t1 propose false (inconsistent),
    # concede to true (consistent) -> 1 of 2, t2: 1 of 1 -> 2/3
    assert est.reliabilities_["A1"] == pytest.approx(1.0)
    assert est.reliabilities_["A2"] == pytest.approx(2 / 3)
    rbar = (1 + 2 / 3) / 2
    assert est.mu_["A1"] == pytest.approx(0.55 + 2 * (1 - rbar))
    assert est.priors_["A2"][1] == pytest.approx((1 - (0.55 + 2 * (2 / 3 - rbar))) * 8)
    assert est.cv_results_ is None


def test_unfitted_and_unknown_agent_errors(attacked):
    with pytest.raises(RuntimeError, match="not fitted"):
        OneCoinBDA().predict_proba(attacked[:5])
    est = OneCoinBDA(hyperparams={"b": 0.55, "s": 8}).fit(attacked[:50])
    stranger = tr("x", "true", props("true") + [{"agent": "A9", "round": 0, "force": "propose", "answer": "true"}])
    with pytest.raises(TraceError, match=r"agent\(s\) \['A9'\] were not seen when fitting"):
        est.predict_proba([stranger])


def test_fit_needs_labels():
    trs = generate_council(CouncilSpec(n_tasks=40), seed=0)
    unl = [Trace(t.task_id, t.candidates, t.moves, None) for t in trs]
    with pytest.raises(LabelError, match="40 of 40 tasks have none"):
        OneCoinBDA().fit(unl)
    # gold passed separately works
    est = OneCoinBDA(hyperparams={"b": 0.55, "s": 8}).fit(unl, gold={t.task_id: t.gold for t in trs})
    assert est.n_labels_ == 40


def test_labels_too_few_for_folds():
    trs = generate_council(CouncilSpec(n_tasks=12), seed=0)
    with pytest.raises(LabelError, match="too few labels for 5 stratified folds"):
        OneCoinBDA().fit(trs[:7])
    pool = Pool.from_traces(trs[:9])
    with pytest.raises(LabelError, match="too few labels"):
        outer_splits(pool, 5)


def test_bad_constructor_values():
    with pytest.raises(ValueError, match="prior must be"):
        OneCoinBDA("flat")
    with pytest.raises(ValueError, match="b_grid values must lie in"):
        OneCoinBDA(b_grid=(0.5, 1.2))
    with pytest.raises(ValueError, match="tau_grid"):
        ConfusionBDA(tau_grid=(0.5, 2.0))


# -- confusion model ---------------------------------------------------------------------------
def test_confusion_rows_and_posterior_hand_computed():
    cands = ("yes", "no", "maybe")
    t1 = tr("t1", "yes", props("yes", "no"), cands)
    t2 = tr("t2", "no", props("no", "no") + [{"agent": "A1", "round": 1, "force": "challenge", "target": 0}], cands)
    # A1 on t2: propose no, then challenges... its own move? not legal -> challenge A2's move instead
    t2 = tr("t2", "no", props("no", "no") + [{"agent": "A1", "round": 1, "force": "challenge", "target": 1}], cands)
    est = ConfusionBDA(hyperparams={"lambda": 2.0, "tau": 0.5}).fit([t1, t2])
    # reliabilities: A1 moves: t1 +yes (gold yes: consistent), t2 +no (consistent), t2 -no (inconsistent) -> 2/3
    assert est.reliabilities_["A1"] == pytest.approx(2 / 3)
    assert est.reliabilities_["A2"] == pytest.approx(1 / 2)
    # A1 counts: gold yes -> n = (1,0,0); gold no -> +no (0,1,0) + challenge no (1,0,1) = (1,1,1)
    r = 2 / 3
    R = np.full((3, 3), (1 - r) / 2)
    np.fill_diagonal(R, r)
    M = np.array([[1, 0, 0], [1, 1, 1], [0, 0, 0]], float)
    P = (M + 2.0 * R) / (M.sum(1, keepdims=True) + 2.0)
    got = est.confusion_["A1"].to_numpy()
    assert np.allclose(got, P, rtol=1e-12)
    assert np.allclose(got.sum(1), 1.0)
    # candidate prior: add-one smoothed training label frequencies (1 yes, 1 no, 0 maybe)
    assert est.candidate_prior_.tolist() == pytest.approx([2 / 5, 2 / 5, 1 / 5])
    # posterior of a new trace
    t3 = tr("t3", None, props("maybe", "yes"), cands)
    logp = np.log(est.candidate_prior_.to_numpy()).copy()
    P2 = est.confusion_["A2"].to_numpy()
    for g in range(3):
        logp[g] += 0.5 * (math.log(P[g, 2]) + math.log(P2[g, 0]))
    want = np.exp(logp - logp.max())
    want /= want.sum()
    got = est.predict_proba([t3])["probability"].to_numpy()
    assert np.allclose(got, want, rtol=1e-12)


def test_confusion_cv_grid_and_shared_labels(clean3):
    est = ConfusionBDA(random_state=0).fit(clean3)
    assert len(est.cv_results_) == 30
    assert est.hyperparams_["lambda"] in est.lambda_grid and 0 < est.hyperparams_["tau"] <= 1
    mixed = [Trace(t.task_id, ("p", "q", "r") if j % 2 else t.candidates, t.moves if not j % 2 else tuple(
        type(m)(m.agent, m.round, m.force, None if m.answer is None else {"yes": "p", "no": "q", "maybe": "r"}[m.answer],
                m.target, m.confidence) for m in t.moves), t.gold if not j % 2 else {"yes": "p", "no": "q", "maybe": "r"}[t.gold])
             for j, t in enumerate(clean3[:40])]
    with pytest.raises(TraceError, match="share one candidate set"):
        ConfusionBDA(hyperparams={"lambda": 1.0}).fit(mixed)
    OneCoinBDA(hyperparams={"b": 0.55, "s": 8}).fit(mixed)  # the one-coin only needs K


def test_tempered_one_coin_is_argmax_preserving(clean3):
    a = OneCoinBDA(hyperparams={"b": 0.58, "kappa": 2, "s": 16, "tau": 1.0}).fit(clean3[:200])
    b = OneCoinBDA(hyperparams={"b": 0.58, "kappa": 2, "s": 16, "tau": 0.3}).fit(clean3[:200])
    pa = a.predict_proba(clean3[200:]).pivot(index="task_id", columns="candidate", values="probability")
    pb = b.predict_proba(clean3[200:]).pivot(index="task_id", columns="candidate", values="probability")
    assert (pa.to_numpy().argmax(1) == pb.to_numpy().argmax(1)).all()
    assert pb.max(axis=1).mean() < pa.max(axis=1).mean()


# -- nested CV --------------------------------------------------------------------------------
def test_nested_cv_leak_free(attacked):
    """Changing the held-out labels of a fold cannot change what was chosen for that fold."""
    pool = Pool.from_traces(attacked)
    splits = outer_splits(pool, 5, seed=3)
    methods = {"bda": OneCoinBDA(), "conf": ConfusionBDA(), "stack": LogisticStacker(C_grid=(0.1, 10.0)),
               "iso": IsotonicRecalibrated(OneCoinBDA("shared"))}
    a = nested_cv(pool, methods, seed=3, splits=splits)
    _, test0 = splits[0]
    pool2 = Pool.from_traces(attacked)
    pool2.gold = pool.gold.copy()
    pool2.gold[test0] = 1 - pool2.gold[test0]  # flip every held-out label of fold 0
    b = nested_cv(pool2, methods, seed=3, splits=splits)
    fa = a.fitted_frame().query("fold == 0").reset_index(drop=True)
    fb = b.fitted_frame().query("fold == 0").reset_index(drop=True)
    pd.testing.assert_frame_equal(fa, fb)
    for m in methods:
        assert np.array_equal(a.proba[m][test0], b.proba[m][test0])
        assert np.array_equal(a.answer[m][test0], b.answer[m][test0])
    # ...while other folds (which train on those labels) do change
    assert not a.fitted_frame().query("fold == 1").equals(b.fitted_frame().query("fold == 1"))


def test_nested_cv_deterministic_and_complete(attacked):
    pool = Pool.from_traces(attacked)
    m = {"bda": OneCoinBDA(), "plur": Plurality()}
    a = nested_cv(pool, m, seed=5)
    b = nested_cv(pool, m, seed=5)
    assert (a.fold >= 0).all() and sorted(np.bincount(a.fold)) == [80] * 5
    for k in m:
        assert np.array_equal(a.proba[k], b.proba[k]) and np.array_equal(a.answer[k], b.answer[k])
    # stratified: each fold has the class balance of the pool
    for k in range(5):
        assert abs(pool.gold[a.fold == k].mean() - pool.gold.mean()) < 0.02
    df = a.predictions_frame()
    assert set(df.columns) >= {"task_id", "fold", "method", "gold", "answer", "confidence", "correct"}


def test_label_budget_shared_by_arms(attacked):
    pool = Pool.from_traces(attacked)
    cv = nested_cv(pool, {"bda": OneCoinBDA(), "gated": GatedVote()}, seed=0, label_budget=25,
                   inner_folds=3)
    assert set(cv.fitted_frame()["n_train"]) == {25}


# -- tie-breaks --------------------------------------------------------------------------------
def test_seeded_random_tie_breaks():
    P = np.array([[0.5, 0.5]] * 2000 + [[0.2, 0.8]])
    a = argmax_random(P, np.random.default_rng(0))
    assert a[-1] == 1
    frac = a[:-1].mean()
    assert 0.45 < frac < 0.55  # not lexicographic
    assert np.array_equal(a, argmax_random(P, np.random.default_rng(0)))
    picks = {argmin_random(np.array([1.0, 0.2, 0.2, 0.2]), np.random.default_rng(s)) for s in range(40)}
    assert picks == {1, 2, 3}


# -- baselines ----------------------------------------------------------------------------------
def test_plurality_and_verbalized_hand_computed():
    cands = ("a", "b", "c")
    t1 = tr("t1", "a", props("a", "a", "b", confs=[0.9, 0.5, 0.95]), cands)
    t2 = tr("t2", "b", props("a", "b", "c", confs=[0.6, 0.7, 0.65]), cands)
    p = Plurality().predict_proba([t1, t2]).pivot(index="task_id", columns="candidate", values="probability")
    assert p.loc["t1"].tolist() == pytest.approx([2 / 3, 1 / 3, 0])
    assert p.loc["t2"].tolist() == pytest.approx([1 / 3, 1 / 3, 1 / 3])
    d = VerbalizedVote().predict([t1, t2]).set_index("task_id")
    # t1: a weighs 1.4 > b 0.95 -> a, confidence = mean(0.9, 0.5) = 0.7; t2: b (0.7) wins
    assert d.loc["t1", "answer"] == "a" and d.loc["t1", "confidence"] == pytest.approx(0.7)
    assert d.loc["t2", "answer"] == "b" and d.loc["t2", "confidence"] == pytest.approx(0.7)
    no_conf = tr("t3", "a", props("a", "b"), cands)
    with pytest.raises(TraceError, match="without a stated confidence"):
        VerbalizedVote().predict([no_conf])


def test_best_member_and_gated_vote():
    trs = []
    for j in range(20):
        g = "true" if j % 2 else "false"
        w = "false" if g == "true" else "true"
        # A1 always right, A2 right on j % 4 != 0, A3 always wrong
        trs.append(tr(f"t{j}", g, props(g, g if j % 4 else w, w)))
    bm = BestMember().fit(trs)
    assert bm.seat_ == "A1" and bm.seat_accuracy_["A3"] == 0.0
    gv = GatedVote().fit(trs)
    assert gv.seats_ == ["A1", "A2"]
    p = gv.predict(trs)
    assert (p["answer"] == [t.gold for t in trs]).mean() >= 0.75


def test_stacker_label_indifferent_and_exact_ties_broken_at_random():
    """Seed D.6: when the seats that endorse are anti-reliable, the two un-endorsed candidates of
    a K=3 task present identical feature rows; the stacker's scores tie exactly and the tie
    must be broken at random, not by candidate order."""
    cands = ("a", "b", "c")
    trs = []
    rng = np.random.default_rng(0)
    for j in range(90):
        g = int(rng.integers(3))
        wrong = (g + 1 + int(rng.integers(2))) % 3
        trs.append(tr(f"t{j}", cands[g], props(cands[wrong], cands[wrong]), cands))
    st = LogisticStacker(random_state=0).fit(trs)
    assert st.coef_.index.tolist() == ["c[A1]", "c[A2]", "d[A1]", "d[A2]"]
    assert st.coef_["c[A1]"] < 0  # endorsement is counter-evidence
    test = [tr(f"z{j}", "b", props("a", "a"), cands) for j in range(400)]
    p = st.predict_proba(test).pivot(index="task_id", columns="candidate", values="probability")
    assert np.allclose(p["b"], p["c"]) and (p["b"] > p["a"]).all()
    pool = Pool.from_traces(test)
    ans, _ = st._decide(pool, np.arange(pool.T), np.random.default_rng(3))
    assert set(ans) == {1, 2} and 0.4 < (ans == 1).mean() < 0.6


def test_dawid_skene_matches_crowdkit_e_step():
    """Agreement with crowd-kit on the unsupervised case: with the skills crowd-kit's one-coin
    EM fitted, BDA's one-coin posterior under Beta priors centred on those skills equals
    crowd-kit's E-step (single endorsement per worker: F_i = mu_i, (1 - mu_i)/(K-1))."""
    import warnings

    from crowdkit.aggregation import OneCoinDawidSkene

    warnings.simplefilter("ignore", DeprecationWarning)
    trs = generate_council(CouncilSpec(n_tasks=150, K=3, reliabilities=(0.8, 0.6, 0.45, 0.7), rounds=1), seed=9)
    pool = Pool.from_traces(trs)
    dse = DawidSkeneEM()
    data = dse.votes_frame(pool, np.arange(pool.T))
    ds = OneCoinDawidSkene(n_iter=100).fit(data)
    e_step = OneCoinDawidSkene._e_step(data, ds.priors_.copy(), ds.errors_)
    skills = ds.skills_
    s = 10.0
    priors = {a: (float(skills[a]) * s, (1 - float(skills[a])) * s) for a in pool.agents}
    cp = {pool.candidates[0][k]: float(ds.priors_.get(k, 0.0)) for k in range(3)}
    z = sum(cp.values())
    cp = {k: v / z for k, v in cp.items()}
    for t in range(0, 150, 7):
        mine = one_coin_posterior(trs[t], priors, candidate_prior=cp)
        theirs = e_step.loc[t].reindex(range(3), fill_value=0.0).to_numpy()
        assert np.allclose([mine[c] for c in pool.candidates[t]], theirs, atol=1e-9)
    # and our wrapper returns crowd-kit's EM continued to its fixed point (crowd-kit stops after 4
    # steps here, its bound having gone down: issue 19; tests/test_aggregate_fixes.py)
    P = dse._proba(pool, np.arange(pool.T))
    fixed, steps, ok = DawidSkeneEM().converge(data, ds.probas_)
    assert ok and steps > 0 and len(ds.loss_history_) == 4
    assert np.allclose(P, fixed.reindex(columns=range(3), fill_value=0.0).sort_index().to_numpy(), atol=1e-12)


def test_isotonic_recalibration_keeps_decisions(attacked):
    pool = Pool.from_traces(attacked)
    cv = nested_cv(pool, {"plur": Plurality(), "plur+iso": IsotonicRecalibrated(Plurality())}, seed=2)
    assert np.array_equal(cv.answer["plur"], cv.answer["plur+iso"])
    from chorus.aggregate.metrics import ece

    e0 = ece(cv.confidence("plur"), cv.correct("plur"))
    e1 = ece(cv.confidence("plur+iso"), cv.correct("plur+iso"))
    assert e1 < e0
    assert np.allclose(cv.proba["plur+iso"].sum(1), 1.0)
