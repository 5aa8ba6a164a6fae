"""What r_i is estimated from (BDA paper Table 7's reliability-estimator ablation): all informative
moves, proposals only, round-0 proposals only; hand-computed."""
from __future__ import annotations

import numpy as np
import pytest

from chorus.aggregate.counts import Pool
from chorus.aggregate.methods import make_method
from chorus.aggregate.posterior import reliabilities
from chorus.aggregate.synthetic_councils import CouncilSpec, generate_council
from chorus.aggregate.trace import Trace

T1 = {"task_id": "t1", "candidates": ["x", "y"], "gold": "x", "moves": [
    {"agent": "A1", "round": 0, "force": "propose", "answer": "x"},
    {"agent": "A2", "round": 0, "force": "propose", "answer": "y"},
    {"agent": "A1", "round": 1, "force": "challenge", "target": 1},   # rejects y: consistent with x
    {"agent": "A2", "round": 1, "force": "concede", "target": 0}]}    # endorses x, but not a proposal
T2 = {"task_id": "t2", "candidates": ["x", "y"], "gold": "y", "moves": [
    {"agent": "A1", "round": 0, "force": "propose", "answer": "x"},
    {"agent": "A2", "round": 0, "force": "propose", "answer": "y"},
    {"agent": "A1", "round": 1, "force": "propose", "answer": "y"},
    {"agent": "A2", "round": 1, "force": "propose", "answer": "y"}]}


def test_each_basis_by_hand():
    pool = Pool.from_traces([Trace.from_dict(T1), Trace.from_dict(T2)])
    idx = np.arange(2)
    assert reliabilities(pool, idx, "all").tolist() == [3 / 4, 3 / 4]
    assert reliabilities(pool, idx, "proposals").tolist() == pytest.approx([2 / 3, 2 / 3])
    assert reliabilities(pool, idx, "round0").tolist() == [1 / 2, 1 / 2]
    with pytest.raises(ValueError, match="reliability basis"):
        reliabilities(pool, idx, "rounds")


def test_the_ablation_arms_fit_their_basis():
    trs = generate_council(CouncilSpec(n_tasks=200, K=2, rounds=3, reliabilities=(0.8, 0.6, 0.55)), seed=2)
    pool = Pool.from_traces(trs)
    for name, basis in (("bda_per_agent", "all"), ("bda_rel_proposals", "proposals"), ("bda_rel_round0", "round0")):
        est = make_method(name).fit(trs)
        assert est.reliabilities_.to_numpy() == pytest.approx(reliabilities(pool, np.arange(pool.T), basis)), name
    with pytest.raises(ValueError, match="reliability must be one of"):
        from chorus.aggregate.estimators import OneCoinBDA
        OneCoinBDA(reliability="moves")
