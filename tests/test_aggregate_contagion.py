"""Contagion under attack (aggregate/contagion.py; BDA paper App. G / F.14), hand-computed."""
from __future__ import annotations

import pytest

from chorus.aggregate.contagion import contagion_summary, seat_outcomes
from chorus.aggregate.errors import TraceError
from chorus.aggregate.trace import Trace, dump_traces


def _tr(tid, r0_a1, r1_a1, challenge=True):
    moves = [{"agent": "A1", "round": 0, "force": "propose", "answer": r0_a1},
             {"agent": "A2", "round": 0, "force": "propose", "answer": "y"},
             {"agent": "A3", "round": 0, "force": "propose", "answer": "y"}]
    moves.append({"agent": "A2", "round": 1, "force": "challenge", "target": 0} if challenge else
                 {"agent": "A2", "round": 1, "force": "propose", "answer": "y"})
    moves.append({"agent": "A1", "round": 1, **r1_a1})
    return Trace.from_dict({"task_id": tid, "candidates": ["x", "y"], "gold": "x", "moves": moves,
                            "adversaries": ["A2", "A3"]})


TRACES = [_tr("t1", "x", {"force": "concede", "target": 1}),          # right, challenged, gives in: flipped
          _tr("t2", "x", {"force": "propose", "answer": "x"}),        # right, challenged, holds
          _tr("t3", "y", {"force": "propose", "answer": "y"}),        # wrong from the start: not a flip
          _tr("t4", "x", {"force": "propose", "answer": "x"}, challenge=False)]


def test_flips_and_the_effective_corrupted_fraction_by_hand():
    s = seat_outcomes(TRACES)
    assert s["flipped"].tolist() == [True, False, False, False] and s["challenged"].tolist() == [True, True, True, False]
    c = contagion_summary(TRACES)
    assert c["flip_rate"] == pytest.approx(1 / 3)              # t1 of the right-at-round-0 t1, t2, t4
    assert c["flip_rate_when_challenged"] == pytest.approx(1 / 2) and c["n_challenged"] == 2
    assert c["nominal_corrupted_fraction"] == pytest.approx(2 / 3)
    assert c["effective_corrupted_fraction"] == pytest.approx((1 + 2 / 3 + 1 + 2 / 3) / 4)


def test_needs_named_adversaries_and_the_cli_prints_it(tmp_path):
    plain = Trace.from_dict({"task_id": "p", "candidates": ["x", "y"], "gold": "x",
                             "moves": [{"agent": "A1", "round": 0, "force": "propose", "answer": "x"}]})
    with pytest.raises(TraceError, match="name their adversarial"):
        contagion_summary([plain])
    from typer.testing import CliRunner

    from chorus.cli import app
    f = dump_traces(TRACES, tmp_path / "attack.jsonl")
    r = CliRunner().invoke(app, ["aggregate", "contagion", str(f), "--out", str(tmp_path / "c")])
    assert r.exit_code == 0 and "effective_corrupted_fraction" in r.output, r.output
    r = CliRunner().invoke(app, ["aggregate", "contagion", str(dump_traces([plain], tmp_path / "p.jsonl"))])
    assert r.exit_code == 2 and "adversarial" in r.output
