"""The one-coin posterior against hand-computed cases (seed C.2-C.8)."""
import math

import numpy as np
import pytest
from scipy.special import betaln, expit

from chorus import aggregate
from chorus.aggregate import Pool, Trace, one_coin_posterior
from chorus.aggregate.errors import PriorError


def unanimous(K, N):
    cands = [f"c{k}" for k in range(K)]
    return {"task_id": "t", "candidates": cands,
            "moves": [{"agent": f"A{i}", "round": 0, "force": "propose", "answer": "c0"} for i in range(N)]}


# seed C.8: symmetric Beta(1,1), N members unanimously endorsing one answer
C8 = {2: [0.5] * 6,
      3: [0.5000, 0.6667, 0.8000, 0.9412, 0.9981, 1.0000],
      4: [0.5000, 0.7500, 0.9000, 0.9878, 0.9999, 1.0000]}


@pytest.mark.parametrize("K", [2, 3, 4])
def test_c8_table_symmetric_beta11_unanimous(K):
    for N, want in zip((1, 2, 3, 5, 10, 20), C8[K]):
        p = one_coin_posterior(unanimous(K, N), {f"A{i}": (1, 1) for i in range(N)})
        assert round(p["c0"], 4) == want
        # exact closed form: each agent's factor is 1/2 for c0 and 1/(2(K-1)) for a rival
        exact = 1.0 / (1.0 + (K - 1) * (1.0 / (K - 1)) ** N)
        assert p["c0"] == pytest.approx(exact, rel=1e-12)
        assert sum(p.values()) == pytest.approx(1.0, abs=1e-15)


def test_hand_computed_k2_k3_k4_single_agent():
    # one agent, Beta(1,1), one propose of c0: F(c0) = B(2,1)/B(1,1) = 1/2,
    # F(rival) = B(1,2)/B(1,1) * (K-1)^-1 = 1/(2(K-1)) -> posterior on c0 = 1/2 for every K
    for K in (2, 3, 4):
        p = one_coin_posterior(unanimous(K, 1), {"A0": (1, 1)})
        assert p["c0"] == pytest.approx(0.5, abs=1e-15)
        for k in range(1, K):
            assert p[f"c{k}"] == pytest.approx(0.5 / (K - 1), abs=1e-15)


def test_k_minus_1_factor_reference_trace():
    # seed C.8: at K=3 the reference posterior is (0.700, 0.150, 0.150); without the (K-1)
    # factor one gets (0.538, 0.231, 0.231). Beta(7, 3), one proposal.
    tr = {"task_id": "t", "candidates": ["a", "b", "c"],
          "moves": [{"agent": "A", "round": 0, "force": "propose", "answer": "a"}]}
    p = one_coin_posterior(tr, {"A": (7, 3)})
    assert [round(p[c], 3) for c in "abc"] == [0.700, 0.150, 0.150]
    assert p["a"] == pytest.approx(0.7, abs=1e-14)
    no_factor = np.array([0.7, 0.3, 0.3]) / 1.3
    assert np.round(no_factor, 3).tolist() == [0.538, 0.231, 0.231]


def test_two_agents_with_challenge_hand_computed():
    # K=3, A1 proposes a (Beta(2,1)); A2 challenges it (Beta(3,2)).
    tr = {"task_id": "t", "candidates": ["a", "b", "c"],
          "moves": [{"agent": "A1", "round": 0, "force": "propose", "answer": "a"},
                    {"agent": "A2", "round": 1, "force": "challenge", "target": 0}]}
    p = one_coin_posterior(tr, {"A1": (2, 1), "A2": (3, 2)})
    # A1: N=1. g=a: c=1,d=0,e=1 -> B(3,1)/B(2,1) = 2/3. g=b: c=0,d=1,e=0 -> B(2,2)/B(2,1)/2 = (1/6)/(1/2)/2 = 1/6
    # A2: N=1, e=0 everywhere. g=a: c=0,d=1 -> B(3,3)/B(3,2)/2 = (1/30)/(1/12)/2 = 1/5
    #                          g=b: c=1,d=0 -> B(4,2)/B(3,2)/2 = (1/20)/(1/12)/2 = 3/10
    fa, fb = (2 / 3) * (1 / 5), (1 / 6) * (3 / 10)
    z = fa + 2 * fb
    assert p["a"] == pytest.approx(fa / z, rel=1e-12)
    assert p["b"] == pytest.approx(fb / z, rel=1e-12) and p["c"] == pytest.approx(fb / z, rel=1e-12)


def test_candidate_prior():
    tr = unanimous(2, 1)
    p = one_coin_posterior(tr, {"A0": (3, 1)}, candidate_prior={"c0": 0.2, "c1": 0.8})
    # F(c0) = 3/4, F(c1) = 1/4
    assert p["c0"] == pytest.approx(0.2 * 0.75 / (0.2 * 0.75 + 0.8 * 0.25), rel=1e-12)
    with pytest.raises(PriorError, match="summing to 1"):
        one_coin_posterior(tr, {"A0": (3, 1)}, candidate_prior={"c0": 0.2, "c1": 0.7})
    with pytest.raises(PriorError, match="missing candidate"):
        one_coin_posterior(tr, {"A0": (3, 1)}, candidate_prior={"c0": 1.0})
    with pytest.raises(PriorError, match="not candidates"):
        one_coin_posterior(tr, {"A0": (3, 1)}, candidate_prior={"c0": 0.5, "c1": 0.5, "zz": 0})


def test_agent_missing_from_priors_and_bad_priors():
    tr = unanimous(3, 2)
    with pytest.raises(PriorError, match="agent 'A1' is missing from the priors"):
        one_coin_posterior(tr, {"A0": (1, 1)})
    with pytest.raises(PriorError, match="alpha > 0 and beta > 0"):
        one_coin_posterior(tr, {"A0": (1, 1), "A1": (0, 1)})
    with pytest.raises(PriorError, match="pair"):
        one_coin_posterior(tr, {"A0": (1, 1), "A1": 3})


def test_empty_trace_is_an_error():
    with pytest.raises(aggregate.TraceError, match="empty trace"):
        one_coin_posterior({"task_id": "t", "candidates": ["a", "b"], "moves": []}, {})


def random_trace(rng, K, agents=("A1", "A2", "A3"), rounds=3, conf=True, task_id="t"):
    from chorus.aggregate.synthetic_councils import CouncilSpec, generate_council

    spec = CouncilSpec(n_tasks=1, K=K, reliabilities=tuple(rng.uniform(0.3, 0.9, len(agents))), rounds=rounds)
    return generate_council(spec, seed=int(rng.integers(1 << 30)), prefix=task_id)[0]


def test_k2_symmetric_prior_collapse():
    # seed C.3(d): K=2, alpha_0 = beta_0 for every seat -> the posterior is the candidate prior,
    # for any trace (challenges included)
    rng = np.random.default_rng(0)
    for _ in range(20):
        tr = random_trace(rng, 2)
        a = float(rng.uniform(0.5, 20))
        priors = {ag: (a, a) for ag in tr.agents}
        p = one_coin_posterior(tr, priors)
        assert p[tr.candidates[0]] == pytest.approx(0.5, abs=1e-12)
        p = one_coin_posterior(tr, priors, candidate_prior={tr.candidates[0]: 0.3, tr.candidates[1]: 0.7})
        assert p[tr.candidates[0]] == pytest.approx(0.3, abs=1e-12)


def test_k3_no_collapse_under_symmetric_prior():
    p = one_coin_posterior(unanimous(3, 1), {"A0": (5, 5)})
    assert p["c0"] > 1 / 3 + 0.1


def test_k2_ceiling():
    # seed C.8: Beta(8.8, 7.2), theta* = 0.8, I = 3: the posterior climbs 0.646, 0.810, 0.969,
    # 0.996, 0.998 at N = 1, 5, 20, 100, 500 and never reaches the ceiling 0.9987
    a, b = 8.8, 7.2
    ceiling = expit(3 * (a - b) * math.log(0.8 / 0.2))
    assert round(ceiling, 4) == 0.9987
    got = []
    for N in (1, 5, 20, 100, 500):
        c = round(0.8 * N)
        # each agent: c endorsements of g, N - c of h (general algebra: votes)
        moves = [{"agent": f"A{i}", "round": 0, "force": "vote", "answer": "g" if j < c else "h"}
                 for i in range(3) for j in range(N)]
        tr = {"task_id": "t", "candidates": ["g", "h"], "moves": moves}
        p = one_coin_posterior(tr, {f"A{i}": (a, b) for i in range(3)})["g"]
        got.append(round(p, 3))
        assert p < ceiling
    assert got == [0.646, 0.810, 0.969, 0.996, 0.998]


def test_confidence_invariance_bit_for_bit():
    # seed C.6: rewriting every self-reported confidence changes no posterior by a bit
    from chorus.aggregate import OneCoinBDA
    from chorus.aggregate.synthetic_councils import CouncilSpec, generate_council
    from chorus.aggregate.trace import Move

    trs = generate_council(CouncilSpec(n_tasks=200, K=3), seed=1)
    rng = np.random.default_rng(5)
    confs = [m.confidence for tr in trs for m in tr.moves]
    perm = rng.permutation(len(confs))
    it = iter(perm)
    rewritten = []
    for tr in trs:
        moves = tuple(Move(m.agent, m.round, m.force, m.answer, m.target,
                           None if confs[next(it)] is None else float(rng.uniform()), m.text)
                      for m in tr.moves)
        rewritten.append(Trace(tr.task_id, tr.candidates, moves, tr.gold, tr.question_id))
    assert any(a.moves[0].confidence != b.moves[0].confidence for a, b in zip(trs, rewritten))
    priors = {"A1": (5.2, 3.1), "A2": (2.0, 2.5), "A3": (9.0, 1.5)}
    for a, b in zip(trs, rewritten):
        assert one_coin_posterior(a, priors) == one_coin_posterior(b, priors)
    est = OneCoinBDA(random_state=3).fit(trs[:150])
    pa = est.predict_proba(trs[150:])["probability"].to_numpy()
    pb = est.predict_proba(rewritten[150:])["probability"].to_numpy()
    assert np.array_equal(pa, pb)
    est2 = OneCoinBDA(random_state=3).fit(rewritten[:150])
    assert est2.hyperparams_ == est.hyperparams_ and est2.priors_ == est.priors_


def test_single_endorsement_equals_log_odds_weighted_majority():
    # seed Prop. 1 / C.2: one endorsement per agent -> log posterior = log pi0 + sum_i w_i x_i(g) + const
    rng = np.random.default_rng(11)
    for trial in range(200):
        K = int(rng.integers(2, 5))
        I = int(rng.integers(1, 7))
        cands = [f"c{k}" for k in range(K)]
        answers = rng.integers(K, size=I)
        mu = rng.uniform(0.05, 0.95, I)
        s = rng.uniform(0.5, 40, I)
        priors = {f"A{i}": (mu[i] * s[i], (1 - mu[i]) * s[i]) for i in range(I)}
        p0 = rng.dirichlet(np.ones(K))
        tr = {"task_id": "t", "candidates": cands,
              "moves": [{"agent": f"A{i}", "round": 0, "force": "propose", "answer": cands[a]}
                        for i, a in enumerate(answers)]}
        post = one_coin_posterior(tr, priors, candidate_prior=dict(zip(cands, p0 / p0.sum())))
        # the committee rule: score(g) = log pi0(g) + sum_i [x_i(g) log mu_i + (1 - x_i(g)) log((1-mu_i)/(K-1))]
        w = aggregate.log_odds_weights(priors)
        score = np.log(p0 / p0.sum()).copy()
        for i, a in enumerate(answers):
            for g in range(K):
                score[g] += math.log(mu[i]) if a == g else math.log((1 - mu[i]) / (K - 1))
        want = np.exp(score - score.max())
        want /= want.sum()
        got = np.array([post[c] for c in cands])
        assert np.allclose(got, want, rtol=1e-10, atol=1e-14)
        if K == 2:  # log-odds = log pi0 ratio + sum_i w_i (x_i(c0) - x_i(c1))
            lo = math.log(p0[0] / p0[1]) + sum(w[f"A{i}"] * (1 if a == 0 else -1) for i, a in enumerate(answers))
            assert math.log(got[0] / got[1]) == pytest.approx(lo, abs=1e-9)
            assert w["A0"] == pytest.approx(math.log(mu[0] / (1 - mu[0])), rel=1e-12)


def test_sub_chance_seat_weighs_negatively():
    from chorus.aggregate.posterior import beta_params, per_agent_mu

    # fitted reliabilities: A3 far below the council mean
    r = np.array([0.74, 0.68, 0.18])
    mu = per_agent_mu(r, 0.55, 2.0)
    assert mu[2] < 0.5 < mu[0]
    alpha, beta = beta_params(mu, 16.0)
    priors = {f"A{i + 1}": (alpha[i], beta[i]) for i in range(3)}
    w = aggregate.log_odds_weights(priors)
    assert w["A3"] < 0 < w["A1"]
    # A3 alone endorsing 'true' moves the posterior toward 'false'
    tr = {"task_id": "t", "candidates": ["true", "false"],
          "moves": [{"agent": "A3", "round": 0, "force": "propose", "answer": "true"}]}
    p = one_coin_posterior(tr, {"A3": priors["A3"]})
    assert p["false"] == pytest.approx(1 - mu[2], rel=1e-12) and p["false"] > 0.5
    # and with all three: A1, A2 say false, A3 says true -> false stronger than without A3
    tr["moves"] += [{"agent": "A1", "round": 0, "force": "propose", "answer": "false"},
                    {"agent": "A2", "round": 0, "force": "propose", "answer": "false"}]
    with_a3 = one_coin_posterior(tr, priors)["false"]
    tr2 = dict(tr, moves=tr["moves"][1:])
    without = one_coin_posterior(tr2, {k: priors[k] for k in ("A1", "A2")})["false"]
    assert with_a3 > without


def test_vectorised_grid_matches_scalar_api():
    from chorus.aggregate.posterior import one_coin_grid_logits, softmax
    from chorus.aggregate.synthetic_councils import CouncilSpec, generate_council

    trs = generate_council(CouncilSpec(n_tasks=40, K=4), seed=2)
    pool = Pool.from_traces(trs)
    rng = np.random.default_rng(1)
    alpha = rng.uniform(0.5, 20, (3, pool.I))
    beta = rng.uniform(0.5, 20, (3, pool.I))
    P = softmax(one_coin_grid_logits(pool, np.arange(pool.T), alpha, beta, 1.0, np.full(4, -np.log(4))))
    for g in range(3):
        priors = {a: (alpha[g, i], beta[g, i]) for i, a in enumerate(pool.agents)}
        for t in (0, 13, 39):
            p = one_coin_posterior(trs[t], priors, protocol="strict")
            assert np.allclose([p[c] for c in pool.candidates[t]], P[g, t], rtol=1e-12, atol=1e-15)


def test_betaln_identity_lemma1():
    # Lemma 1 numerically: int theta^c (1-theta)^d Beta(theta; a, b) = B(a+c, b+d)/B(a, b)
    from scipy.integrate import quad
    from scipy.stats import beta as beta_dist

    for a, b, c, d in [(2.0, 3.0, 1, 2), (0.7, 1.3, 3, 0), (8.8, 7.2, 4, 1)]:
        num = quad(lambda th: th ** c * (1 - th) ** d * beta_dist.pdf(th, a, b), 0, 1)[0]
        assert num == pytest.approx(math.exp(betaln(a + c, b + d) - betaln(a, b)), rel=1e-8)
