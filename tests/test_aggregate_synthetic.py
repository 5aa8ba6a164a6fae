"""The synthetic council generator, adversaries, controls, and the seed's dose-response shape."""
import numpy as np
import pytest

from chorus.aggregate import (Adversary, CouncilSpec, OneCoinBDA, Plurality, Pool, generate_council, nested_cv,
                       one_coin_posterior, permute_labels, sleeper_traces, truncate_traces)
from chorus.aggregate.moves import check_all
from chorus.aggregate.posterior import reliabilities


def test_generated_traces_are_protocol_legal():
    for K in (2, 3, 4):
        trs = generate_council(CouncilSpec(n_tasks=60, K=K, rounds=3), seed=K)
        rep = check_all(trs, "strict")
        assert rep.rejected == 0 and rep.moves == 60 * 9
        for tr in trs:
            assert [m.round for m in tr.moves] == [0] * 3 + [1] * 3 + [2] * 3
            assert all(m.force == "propose" for m in tr.moves[:3])
    inv = rep.to_dict()["forces"]
    assert inv["concede"] > 0 and inv["challenge"] > 0 and inv["vote"] == 0


def test_seat_reliabilities_are_recovered():
    trs = generate_council(CouncilSpec(n_tasks=1500, reliabilities=(0.85, 0.6, 0.4), p_stay=0.0), seed=0)
    pool = Pool.from_traces(trs)
    r0 = ((pool.r0_answer == pool.gold[:, None]).mean(0))
    assert r0 == pytest.approx([0.85, 0.6, 0.4], abs=0.04)
    assert reliabilities(pool, np.arange(pool.T)) == pytest.approx([0.85, 0.6, 0.4], abs=0.04)


def test_generation_is_deterministic_and_validates():
    a = generate_council(CouncilSpec(n_tasks=20), seed=3)
    b = generate_council(CouncilSpec(n_tasks=20), seed=3)
    assert a == b and a != generate_council(CouncilSpec(n_tasks=20), seed=4)
    with pytest.raises(ValueError, match="p_wrong"):
        Adversary(p_wrong=1.5)
    with pytest.raises(ValueError, match="exceeds the 3 seats"):
        generate_council(CouncilSpec(n_tasks=2), adversary=Adversary(k=4))
    with pytest.raises(ValueError, match="K must be"):
        CouncilSpec(K=1)


def test_persistent_and_rotating_adversaries():
    spec = CouncilSpec(n_tasks=300)
    pers = Pool.from_traces(generate_council(spec, adversary=Adversary("persistent", k=1, p_wrong=1.0), seed=1))
    r = reliabilities(pers, np.arange(pers.T))
    assert r[2] == 0.0 and r[0] > 0.6  # default seat: the last; every move anti-gold at K=2
    rot = Pool.from_traces(generate_council(spec, adversary=Adversary("rotating", k=1, p_wrong=1.0), seed=1))
    r = reliabilities(rot, np.arange(rot.T))
    assert (r < 0.55).all() and (r > 0.3).all()  # each seat corrupted on ~1/3 of tasks
    # same tasks, same gold: common random numbers across conditions
    clean = generate_council(spec, seed=1)
    assert [t.gold for t in clean] == [t.gold for t in generate_council(
        spec, adversary=Adversary("rotating", k=2, p_wrong=0.5), seed=1)]


def test_fixed_target_coalition_is_systematic():
    trs = generate_council(CouncilSpec(n_tasks=200, K=3), adversary=Adversary(k=1, p_wrong=1.0, target="fixed"), seed=0)
    for tr in trs:
        g = tr.candidates.index(tr.gold)
        assert tr.moves[2].answer == tr.candidates[(g + 1) % 3]


def test_label_permutation_control():
    trs = generate_council(CouncilSpec(n_tasks=50, K=4), seed=2)
    perm = permute_labels(trs, seed=0)
    priors = {"A1": (6, 2), "A2": (3, 3), "A3": (2, 5)}
    moved = 0
    for a, b in zip(trs, perm):
        assert a.candidates == b.candidates and len(a.moves) == len(b.moves)
        m = {}
        for x, y in zip(a.moves, b.moves):
            assert (x.agent, x.round, x.force, x.target) == (y.agent, y.round, y.force, y.target)
            if x.answer is not None:
                assert m.setdefault(x.answer, y.answer) == y.answer  # one consistent relabelling
        if a.gold in m:
            assert m[a.gold] == b.gold
        moved += a.gold != b.gold
        pa, pb = one_coin_posterior(a, priors), one_coin_posterior(b, priors)
        for c_old, c_new in m.items():  # the one-coin is label-symmetric under a uniform prior
            assert pa[c_old] == pytest.approx(pb[c_new], rel=1e-12)
    assert moved > 25


def test_round0_truncation():
    trs = generate_council(CouncilSpec(n_tasks=10), seed=0)
    t0 = truncate_traces(trs, 0)
    assert all(len(t.moves) == 3 and all(m.round == 0 for m in t.moves) for t in t0)
    assert check_all(t0, "strict").rejected == 0


def test_sleeper_design():
    spec = CouncilSpec(n_tasks=1)
    adv = Adversary("persistent", k=2, p_wrong=1.0)
    cal0, dep = sleeper_traces(spec, n_calibration=100, n_deploy=50, f=0.0, adversary=adv, seed=0)
    cal1, dep1 = sleeper_traces(spec, n_calibration=100, n_deploy=50, f=1.0, adversary=adv, seed=0)
    assert [t.gold for t in cal0] == [t.gold for t in cal1] and dep == dep1
    assert not {t.task_id for t in cal0} & {t.task_id for t in dep}
    pc0, pc1, pd = (Pool.from_traces(x) for x in (cal0, cal1, dep))
    assert reliabilities(pc0, np.arange(100))[1:].min() > 0.5  # clean window
    assert reliabilities(pc1, np.arange(100))[1:].max() == 0.0  # fully adversarial window
    assert reliabilities(pd, np.arange(50))[1:].max() == 0.0
    calh, _ = sleeper_traces(spec, n_calibration=200, n_deploy=10, f=0.5, adversary=adv, seed=0)
    attacked = sum(t.moves[1].answer != t.gold and t.moves[2].answer != t.gold for t in calh)
    assert 70 < attacked < 140


def test_dose_response_shape_persistent_adversary():
    """Seed F.3: under a persistent adversary per-agent BDA recovers as p_wrong grows (its fitted
    weight turns negative) while plurality decays."""
    spec = CouncilSpec(n_tasks=500)
    acc = {}
    for p in (0.0, 0.5, 1.0):
        pool = Pool.from_traces(generate_council(spec, adversary=Adversary("persistent", k=1, p_wrong=p), seed=0))
        cv = nested_cv(pool, {"plurality": Plurality(), "bda": OneCoinBDA()}, seed=0)
        acc[p] = {m: float((cv.answer[m] == pool.gold).mean()) for m in cv.methods}
    assert acc[1.0]["plurality"] < acc[0.5]["plurality"] < acc[0.0]["plurality"] - 0.05
    assert acc[1.0]["bda"] > acc[0.5]["bda"]
    assert acc[1.0]["bda"] > acc[0.0]["bda"]  # a reliably wrong voice, once identified, informs
    assert acc[1.0]["bda"] - acc[1.0]["plurality"] > 0.3


def test_permutation_control_removes_the_confusion_models_label_identity_gain():
    """Seed F (permutation control): against a systematic K=3 coalition (each adversary always
    names the same wrong label for a given truth) the learned confusion rows invert the
    coalition and beat the one-coin; a per-task label permutation destroys exactly that gain."""
    from chorus.aggregate import ConfusionBDA

    trs = generate_council(CouncilSpec(n_tasks=450, K=3),
                           adversary=Adversary("persistent", k=2, p_wrong=0.9, target="fixed"), seed=0)
    acc = {}
    for name, t in (("orig", trs), ("perm", permute_labels(trs, seed=1))):
        pool = Pool.from_traces(t)
        cv = nested_cv(pool, {"one_coin": OneCoinBDA(), "confusion": ConfusionBDA()}, seed=0)
        acc[name] = {m: float((cv.answer[m] == pool.gold).mean()) for m in cv.methods}
    assert acc["orig"]["confusion"] > acc["orig"]["one_coin"] + 0.1
    assert acc["perm"]["confusion"] < acc["orig"]["confusion"] - 0.1
    assert abs(acc["perm"]["one_coin"] - acc["orig"]["one_coin"]) < 0.05  # label-symmetric
