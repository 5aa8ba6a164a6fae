"""The decision-flip diagnostic (aggregate/flips.py; BDA paper App. E.4)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from chorus.aggregate.flips import decision_flips, flip_summary
from chorus.aggregate.posterior import one_coin_posterior
from chorus.aggregate.synthetic_councils import CouncilSpec, generate_council
from chorus.aggregate.trace import Trace, dump_traces


def _trace(tid, gold, moves, cands=("x", "y")):
    return Trace.from_dict({"task_id": tid, "candidates": list(cands), "gold": gold, "moves": moves})


R0 = [{"agent": "A1", "round": 0, "force": "propose", "answer": "x"},
      {"agent": "A2", "round": 0, "force": "propose", "answer": "y"},
      {"agent": "A3", "round": 0, "force": "propose", "answer": "y"}]
BOTH_CONCEDE = R0 + [{"agent": "A2", "round": 1, "force": "concede", "target": 0},
                     {"agent": "A3", "round": 1, "force": "concede", "target": 0}]
HOLD = R0 + [{"agent": "A2", "round": 1, "force": "concede", "target": 0},
             {"agent": "A3", "round": 1, "force": "propose", "answer": "y"}]


def test_hand_made_fix_break_and_no_change():
    trs = [_trace("fix", "x", BOTH_CONCEDE), _trace("break", "y", BOTH_CONCEDE), _trace("hold", "x", HOLD),
           _trace("unlabelled", None, BOTH_CONCEDE)]
    d = decision_flips(trs)
    assert list(d["task_id"]) == ["fix", "break", "hold"]  # no gold, no flip to count
    # round 0: two seats say y; after both concede to A1, A1's x is the only net evidence
    assert list(d["answer_round0"]) == ["y", "y", "y"] and list(d["answer_full"]) == ["x", "x", "y"]
    assert list(d["flip"]) == ["fix", "break", "none"]
    s = flip_summary(d).iloc[0]
    assert (s.K, s.n_tasks, s.changed, s.fixed, s.broken, s.net, s.ratio) == (2, 3, 2, 1, 1, 0, 1.0)
    # the same decisions as the single-trace posterior under every seat's neutral prior Beta(0.58*16, 0.42*16)
    pri = {a: (0.58 * 16, 0.42 * 16) for a in ("A1", "A2", "A3")}
    for tr, row in zip(trs, d.itertuples()):
        full, r0 = one_coin_posterior(tr, pri), one_coin_posterior(tr.truncate(0), pri)
        assert max(full, key=full.get) == row.answer_full and max(r0, key=r0.get) == row.answer_round0
        assert row.confidence_full == pytest.approx(full[row.answer_full], abs=1e-12)


def test_vectorised_decisions_equal_the_single_trace_posterior_and_count_swaps_at_k3():
    trs = generate_council(CouncilSpec(n_tasks=300, K=3, rounds=3, reliabilities=(0.7, 0.55, 0.5)), seed=3)
    d = decision_flips(trs, b=0.6, s=8.0)
    pri = {a: (0.6 * 8, 0.4 * 8) for a in trs[0].agents}
    for tr, row in zip(trs, d.itertuples()):
        full = one_coin_posterior(tr, pri)
        p = np.array(sorted(full.values()))
        if p[-1] - p[-2] > 1e-9:  # a tie goes to the seeded draw
            assert max(full, key=full.get) == row.answer_full
    s = flip_summary(d).iloc[0]
    assert s.changed == s.fixed + s.broken + s.swapped and s.changed > 0
    assert s.net == s.fixed - s.broken
    assert s.accuracy_full - s.accuracy_round0 == pytest.approx(s.net / s.n_tasks)
    # a persisting tie is never a flip: the same draw decides both
    tie = [{"agent": "A1", "round": 0, "force": "propose", "answer": "x"},
           {"agent": "A2", "round": 0, "force": "propose", "answer": "y"},
           {"agent": "A1", "round": 1, "force": "propose", "answer": "x"},
           {"agent": "A2", "round": 1, "force": "propose", "answer": "y"}]
    assert (decision_flips([_trace(f"t{k}", "x", tie) for k in range(20)])["flip"] == "none").all()


def test_flips_cli_writes_its_files_and_names_bad_input(tmp_path):
    from typer.testing import CliRunner

    from chorus.cli import app
    f = dump_traces([_trace("fix", "x", BOTH_CONCEDE), _trace("hold", "x", HOLD)], tmp_path / "t.jsonl")
    r = CliRunner().invoke(app, ["aggregate", "flips", str(f), "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    by_k = json.loads((tmp_path / "out" / "summary.json").read_text())["by_K"]
    assert by_k[0]["fixed"] == 1 and by_k[0]["broken"] == 0 and (tmp_path / "out" / "plots" / "flip_ratios.png").is_file()
    u = dump_traces([_trace("u", None, R0)], tmp_path / "u.jsonl")
    r = CliRunner().invoke(app, ["aggregate", "flips", str(u)])
    assert r.exit_code == 2 and "needs labelled traces" in r.output
    r = CliRunner().invoke(app, ["aggregate", "flips", str(f), "--b", "1.5"])
    assert r.exit_code == 2 and "b=1.5" in r.output
