"""A debate run read as council traces, and BDA over them (simulate/debate/bda.py)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from chorus.aggregate.counts import Pool
from chorus.aggregate.trace import load_traces
from chorus.simulate.debate.bda import DebateTraceError, debate_traces, question_moves, run_bda
from chorus.simulate.debate.questions import validate_item


def _turns(rows, condition="debate"):
    """rows: (qid, agent, round, answer or None)."""
    return pd.DataFrame([{"qid": q, "agent": a, "round": r, "condition": condition, "answer": ans,
                          "parsed": ans is not None} for q, a, r, ans in rows])


def test_every_move_of_a_hand_made_debate():
    t = _turns([("q", 0, 0, "A"), ("q", 1, 0, "B"), ("q", 2, 0, None),
                ("q", 0, 1, "A"), ("q", 1, 1, "A"), ("q", 2, 1, "C"),      # 1 switches to 0's answer
                ("q", 0, 2, "C"), ("q", 1, 2, "B"), ("q", 2, 2, "A")])     # 0 -> C (nobody's at r1: propose)
    moves, unparsed = question_moves(t, peers_visible=True)
    got = [m.to_dict() for m in moves]
    assert got == [
        {"agent": "A1", "round": 0, "force": "propose", "answer": "A"},
        {"agent": "A2", "round": 0, "force": "propose", "answer": "B"},
        {"agent": "A1", "round": 1, "force": "propose", "answer": "A"},     # kept: renewed proposal
        {"agent": "A2", "round": 1, "force": "concede", "target": 0},      # to A1's round-0 move
        {"agent": "A1", "round": 2, "force": "propose", "answer": "C"},     # switched to nobody's answer
        {"agent": "A2", "round": 2, "force": "propose", "answer": "B"},     # back to its own: no peer had B at r1
    ]
    # agent 2 never proposed in round 0: its parsed later turns are counted, not moved
    assert unparsed == {0: 1, "without_round_0": 2}
    # the lowest-numbered peer of the previous round is the one conceded to
    t2 = _turns([("q", 0, 0, "A"), ("q", 1, 0, "A"), ("q", 2, 0, "B"), ("q", 0, 1, "A"), ("q", 1, 1, "A"),
                 ("q", 2, 1, "A")])
    m2, _ = question_moves(t2, peers_visible=True)
    assert m2[5].to_dict() == {"agent": "A3", "round": 1, "force": "concede", "target": 0}
    # reflection reads no peer: every changed answer is a proposal
    m3, _ = question_moves(t2, peers_visible=False)
    assert [m.force for m in m3] == ["propose"] * 6 and m3[5].answer == "A"


def _item(qid, ref, options=("yes", "no"), labels=("yes", "no"), domain="knowledge"):
    return validate_item({"id": qid, "domain": domain, "subdomain": "toy", "family": qid, "question": "?",
                          "options": None if options is None else list(options),
                          "labels": None if labels is None else list(labels), "reference": ref})


def test_traces_are_strict_legal_and_name_what_they_leave_out():
    items = {"a": _item("a", "yes"), "b": _item("b", None), "c": _item("c", 4, options=None, labels=None),
             "d": _item("d", "no"), "e": _item("e", "A", options=["x", "y", "z"], labels=None)}
    rows = []
    for q in "abde":
        for a in range(3):
            for r in range(2):
                rows.append((q, a, r, None if q == "d" else (["yes", "no"][(a + r) % 2] if q != "e" else "ABC"[a])))
    rows.append(("c", 0, 0, None))
    votes = pd.DataFrame({"qid": ["a", "a", "a", "e"], "answer": ["yes", "no", None, "B"],
                          "parsed": [True, True, False, True]})
    traces, info = debate_traces(_turns(rows), items, votes=votes)
    assert [tr.task_id for tr in traces] == ["a", "e"]
    assert info["left_out"] == {"numeric": 1, "unlabelled": 1, "no_parsed_turn": 1}
    assert info["n_unparsed_turns"] == 6 and info["vote_arm"] is True
    assert traces[0].candidates == ("yes", "no") and traces[0].gold == "yes"
    assert traces[0].question_id == items["a"].family  # the bootstrap clusters a scenario family's variants
    assert traces[1].candidates == ("A", "B", "C") and traces[1].extra["vote_arm"] == {"B": 1}
    assert traces[0].extra["vote_arm"] == {"yes": 1, "no": 1}
    pool = Pool.from_traces(traces[:1], protocol="strict", on_violation="error")  # no move is rejected
    assert pool.report.rejected == 0
    # the last round's endorsements and the vote arm reach the pool
    assert pool.final_votes[0].tolist() == [1.0, 2.0] and pool.arm_votes[0].tolist() == [1.0, 1.0]
    with pytest.raises(DebateTraceError, match="condition 'vote' is not in this run"):
        debate_traces(_turns(rows), items, condition="vote")
    with pytest.raises(DebateTraceError, match="question 'zz'"):
        debate_traces(_turns([("zz", 0, 0, "yes")]), items)


def _synthetic_debate(tmp_path, rel, n=600, rounds=2, seed=0):
    from chorus.simulate.debate.bda import synthetic_debate
    return synthetic_debate(tmp_path / "debate", rel, n=n, rounds=rounds, seed=seed)


def test_bda_over_a_synthetic_debate_recovers_planted_reliabilities(tmp_path):
    rel = [0.9, 0.62, 0.58, 0.55, 0.55]
    src = _synthetic_debate(tmp_path, rel)
    out, s = run_bda(src, overrides={"bootstrap.n_resamples": 200,
                                     "methods": ["plurality", "final_plurality", "bda_per_agent"],
                                     "recalibrate": []}, make_plots=True)
    assert out == src / "bda-debate" and list(s["groups"]) == ["no-yes"]
    g = s["groups"]["no-yes"]
    assert g["n_traces"] == 600 and g["n_agents"] == 5
    res = json.loads((out / "no-yes" / "results.json").read_text())
    folds = [f for f in res["cells"][0]["folds"] if f["method"] == "bda_per_agent"]
    fitted = np.mean([[f[f"r[A{i + 1}]"] for i in range(5)] for f in folds], axis=0)
    assert np.abs(fitted - rel).max() < 0.03
    # weighting by fitted reliability beats both majorities when one seat is far better than the rest
    acc = {m: v["accuracy"] for m, v in g["metrics"].items()}
    assert acc["bda_per_agent"] > acc["final_plurality"] + 0.05 and acc["bda_per_agent"] > acc["plurality"] + 0.05
    # the traces written are exactly the ones aggregated, and the aggregate run verifies
    assert len(load_traces(out / "traces" / "no-yes.jsonl")) == 600
    from chorus.aggregate.results import verify
    assert all(c.ok for c in verify(out / "no-yes"))
    assert (out / "plots" / "bda_methods.png").is_file() and (out / "mapping.json").is_file()


def test_bda_cli_names_bad_input(tmp_path):
    from typer.testing import CliRunner

    from chorus.cli import app
    r = CliRunner().invoke(app, ["debate", "bda", str(tmp_path)])
    assert r.exit_code == 2 and "no tables/turns.parquet" in r.output
    src = _synthetic_debate(tmp_path, [0.7, 0.6, 0.6], n=6, rounds=1)
    r = CliRunner().invoke(app, ["debate", "bda", str(src), "--condition", "reflection"])
    assert r.exit_code == 2 and "condition 'reflection' is not in this run" in r.output
    r = CliRunner().invoke(app, ["debate", "bda", str(src)])   # 6 questions cannot fill 5x5 folds
    assert r.exit_code == 2 and "no candidate group can be cross-validated" in r.output and "no-yes (6 questions)" in r.output
    assert not (src / "bda-debate").exists()  # refused before any write: the debate's report is not stopped

