"""Reliability keys (aggregate/keys.py) and Table 7 in one command (aggregate/granularity.py; BDA paper E.2)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from chorus.aggregate.counts import Pool
from chorus.aggregate.estimators import OneCoinBDA
from chorus.aggregate.keys import keyed_pool
from chorus.aggregate.synthetic_councils import CouncilSpec, generate_council
from chorus.aggregate.trace import Move, Trace, dump_traces

PRIOR = {"b": 0.58, "kappa": 1.0, "s": 16.0}


def _hand():
    # t1 (gold x): A1 proposes x, A2 proposes y; round 1: A1 challenges A2's y, A2 concedes to A1's x
    t1 = Trace("t1", ("x", "y"), (Move("A1", 0, "propose", "x"), Move("A2", 0, "propose", "y"),
                                  Move("A1", 1, "challenge", target=1), Move("A2", 1, "concede", target=0)), gold="x")
    # t2 (gold y): both propose y; round 1: A1 re-proposes y, A2 switches to x
    t2 = Trace("t2", ("x", "y"), (Move("A1", 0, "propose", "y"), Move("A2", 0, "propose", "y"),
                                  Move("A1", 1, "propose", "y"), Move("A2", 1, "propose", "x")), gold="y")
    return [t1, t2]


def test_keyed_tallies_by_hand():
    pool = Pool.from_traces(_hand())
    s = keyed_pool(pool, "shared")
    assert s.agents == ("*",)
    assert s.pos[0, 0].tolist() == [2, 1] and s.neg[0, 0].tolist() == [0, 1]     # t1: x by A1 and A2, y by A2; y rejected
    r = keyed_pool(pool, "agent_round")
    assert r.agents == ("A1@r0", "A1@r1", "A2@r0", "A2@r1")
    assert r.pos[0].tolist() == [[1, 0], [0, 0], [0, 1], [1, 0]] and r.neg[0].tolist() == [[0, 0], [0, 1], [0, 0], [0, 0]]
    f = keyed_pool(pool, "agent_force")
    assert f.agents == ("A1:challenge", "A1:propose", "A2:concede", "A2:propose")
    assert f.N[0].tolist() == [1, 1, 1, 1] and f.N[1].tolist() == [0, 2, 0, 2]
    assert keyed_pool(pool, "agent") is pool and keyed_pool(pool, "shared") is s   # cached per pool


def test_keyed_tallies_sum_back_to_the_seats():
    pool = Pool.from_traces(generate_council(CouncilSpec(n_tasks=80, K=3, rounds=3), seed=2))
    for key in ("agent_round", "agent_force"):
        kp = keyed_pool(pool, key)
        for i, a in enumerate(pool.agents):
            mine = [j for j, s in enumerate(kp.agents) if s.split("@")[0].split(":")[0] == a]
            assert (kp.pos[:, mine].sum(1) == pool.pos[:, i]).all() and (kp.neg[:, mine].sum(1) == pool.neg[:, i]).all()
    sh = keyed_pool(pool, "shared")
    assert (sh.pos[:, 0] == pool.pos.sum(1)).all() and (sh.N[:, 0] == pool.N.sum(1)).all()


def test_one_coin_over_keys_by_hand():
    trs = _hand()
    # agent_round: r = 1 (A1@r0: x in t1, y in t2), 1 (A1@r1), 1/2 (A2@r0), 1/2 (A2@r1); mean 3/4
    est = OneCoinBDA(hyperparams=PRIOR, key="agent_round").fit(trs)
    assert est.reliabilities_.to_dict() == pytest.approx({"A1@r0": 1.0, "A1@r1": 1.0, "A2@r0": 0.5, "A2@r1": 0.5})
    mu1, mu2 = 0.58 + 0.25, 0.58 - 0.25
    assert est.mu_.to_dict() == pytest.approx({"A1@r0": mu1, "A1@r1": mu1, "A2@r0": mu2, "A2@r1": mu2})
    # t1: each pseudo-seat has one move, so F = mu (consistent) or 1 - mu; A2's two cancel, A1's two favour x
    px = est.predict_proba(trs[:1]).set_index("candidate")["probability"]["x"]
    assert px == pytest.approx(mu1 ** 2 / (mu1 ** 2 + (1 - mu1) ** 2), abs=1e-12)
    # the agent key counts A1's two t1 moves in one Beta-marginalised coin: a(a+1) / (a(a+1) + b(b+1))
    ag = OneCoinBDA(hyperparams=PRIOR).fit(trs)
    assert ag.reliabilities_.to_dict() == pytest.approx({"A1": 1.0, "A2": 0.5})
    a, b = mu1 * 16, (1 - mu1) * 16
    px = ag.predict_proba(trs[:1]).set_index("candidate")["probability"]["x"]
    assert px == pytest.approx(a * (a + 1) / (a * (a + 1) + b * (b + 1)), abs=1e-12)
    # shared key: one coin, mu = b whatever kappa; t1 has c(x) = 3, d(x) = 1 and c(y) = 1, d(y) = 3
    sh = OneCoinBDA(hyperparams=PRIOR, key="shared").fit(trs)
    a, b = 0.58 * 16, 0.42 * 16
    px = sh.predict_proba(trs[:1]).set_index("candidate")["probability"]["x"]
    assert px == pytest.approx((a + 1) * (a + 2) / ((a + 1) * (a + 2) + (b + 1) * (b + 2)), abs=1e-12)
    # a pseudo-seat unseen in fitting (round 2) gets mu = b at prediction
    t3 = Trace("t3", ("x", "y"), trs[0].moves + (Move("A1", 2, "propose", "y"), Move("A2", 2, "propose", "x")), gold="x")
    p3 = est.predict_proba([t3]).set_index("candidate")["probability"]
    assert p3["x"] == pytest.approx(mu1 ** 2 / (mu1 ** 2 + (1 - mu1) ** 2), abs=1e-12)   # the two r2 moves cancel at mu = b


def test_key_validation_and_default_is_unchanged():
    with pytest.raises(ValueError, match="reliability key"):
        OneCoinBDA(key="seat_round")
    with pytest.raises(ValueError, match="round0"):
        OneCoinBDA(key="shared", reliability="round0")
    trs = generate_council(CouncilSpec(n_tasks=120, K=2, rounds=2), seed=4)
    a = OneCoinBDA(inner_folds=3).fit(trs).predict_proba(trs)
    b = OneCoinBDA(inner_folds=3, key="agent").fit(trs).predict_proba(trs)
    assert np.array_equal(a["probability"].to_numpy(), b["probability"].to_numpy())


def test_table7_command_writes_both_halves_and_names_bad_input(tmp_path):
    from typer.testing import CliRunner

    from chorus.cli import app
    f = dump_traces(generate_council(CouncilSpec(n_tasks=120, K=2, rounds=2, reliabilities=(0.8, 0.65, 0.6)), seed=5),
                    tmp_path / "t.jsonl")
    r = CliRunner().invoke(app, ["aggregate", "keys", str(f), "--outer-folds", "2", "--inner-folds", "2",
                                 "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "out" / "summary.json").read_text())
    rows = {(x["half"], x["arm"]): x for x in res["rows"]}
    assert set(rows) == {("granularity", k) for k in ("shared", "agent", "agent_round", "agent_force")} | \
        {("estimator", e) for e in ("all", "proposals", "round0")}
    assert rows[("granularity", "agent_round")]["n_seats"] == 6 and rows[("granularity", "shared")]["n_seats"] == 1
    assert (tmp_path / "out" / "plots" / "keys.png").is_file()
    r = CliRunner().invoke(app, ["aggregate", "keys", str(f), "--b", "1.5"])
    assert r.exit_code == 2 and "b must lie in (0, 1), got 1.5" in r.output and len(r.output.strip().splitlines()) == 1
