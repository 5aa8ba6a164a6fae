"""Traces, validation, the protocol automaton and the counts (exact, hand-computed)."""
import gzip
import json

import numpy as np
import pytest

from chorus.aggregate import GENERAL, STRICT, Pool, Trace, extract_endorsements, load_traces
from chorus.aggregate import trace_counts as counts
from chorus.aggregate.errors import LabelError, ProtocolError, TraceError
from chorus.aggregate.moves import check_all
from chorus.aggregate.trace import dump_traces, traces_sha256


def rec(moves, candidates=("true", "false"), gold="false", task_id="t1", **kw):
    d = {"task_id": task_id, "candidates": list(candidates), "gold": gold, "moves": moves}
    d.update(kw)
    return d


SPEC_EXAMPLE = {"task_id": "tqa-0007", "candidates": ["true", "false"], "gold": "false",
                "moves": [{"agent": "A1", "round": 0, "force": "propose", "answer": "true", "confidence": 0.8},
                          {"agent": "A2", "round": 1, "force": "challenge", "target": 0}]}


def test_spec_example_parses_and_round_trips():
    tr = Trace.from_dict(SPEC_EXAMPLE)
    assert tr.task_id == "tqa-0007" and tr.K == 2 and tr.gold == "false"
    assert tr.moves[1].force == "challenge" and tr.moves[1].target == 0
    assert tr.agents == ("A1", "A2")
    back = tr.to_dict()
    assert Trace.from_dict(back) == tr
    ends = extract_endorsements(tr, "general")
    assert [(e.agent, e.sign, e.candidate) for e in ends] == [("A1", 1, "true"), ("A2", -1, "true")]


def test_extra_keys_are_kept():
    d = dict(SPEC_EXAMPLE, dataset="truthfulqa", question_id="q7")
    d["moves"] = [dict(SPEC_EXAMPLE["moves"][0], latency_ms=12), SPEC_EXAMPLE["moves"][1]]
    tr = Trace.from_dict(d)
    assert tr.extra == {"dataset": "truthfulqa"} and tr.qid == "q7"
    assert tr.to_dict()["moves"][0]["latency_ms"] == 12


@pytest.mark.parametrize("bad, match", [
    (rec([{"agent": "A1", "round": 0, "force": "propose", "answer": "maybe"}]), "answer 'maybe' is not one of the candidates"),
    (rec([{"agent": "A1", "round": 0, "force": "propose", "answer": "true"}], gold="perhaps"), "gold 'perhaps' is not one of"),
    (rec([{"agent": "A1", "round": 0, "force": "propose", "answer": "true"}], candidates=("true",), gold=None), "at least two candidates"),
    (rec([{"agent": "A1", "round": 0, "force": "propose", "answer": "true"}], candidates=("true", "true"), gold=None), "duplicate candidates"),
    (rec([]), "empty trace"),
    (rec([{"agent": "A1", "round": 0, "force": "propose", "answer": "true"},
          {"agent": "A2", "round": 1, "force": "challenge", "target": 5}]), "target 5 points forward"),
    (rec([{"agent": "A1", "round": 0, "force": "propose", "answer": "true"},
          {"agent": "A2", "round": 1, "force": "challenge", "target": 1}]), "target 1 points forward"),
    (rec([{"agent": "A1", "round": 0, "force": "propose", "answer": "true"},
          {"agent": "A2", "round": 1, "force": "challenge", "target": -1}]), "out of range"),
    (rec([{"agent": "A1", "round": 0, "force": "propose", "answer": "true"},
          {"agent": "A2", "round": 1, "force": "concede"}]), "needs a 'target'"),
    (rec([{"agent": "A1", "round": 0, "force": "propose"}]), "needs an 'answer'"),
    (rec([{"agent": "A1", "round": 0, "force": "shout", "answer": "true"}]), "unknown force 'shout'"),
    (rec([{"agent": "A1", "round": -1, "force": "propose", "answer": "true"}]), "'round' must be an integer"),
    (rec([{"agent": "A1", "round": 0, "force": "propose", "answer": "true", "confidence": 1.5}]), "confidence must be a number in"),
    ({"candidates": ["a", "b"], "moves": []}, "no 'task_id'"),
])
def test_bad_records_raise_clear_errors(bad, match):
    with pytest.raises(TraceError, match=match):
        Trace.from_dict(bad)


def test_error_names_task_and_move():
    bad = rec([{"agent": "A1", "round": 0, "force": "propose", "answer": "true"},
               {"agent": "A2", "round": 1, "force": "challenge", "target": 3}], task_id="x-9")
    with pytest.raises(TraceError, match=r"task 'x-9', move 1: target 3"):
        Trace.from_dict(bad)


def test_malformed_jsonl_line_is_named(tmp_path):
    p = tmp_path / "t.jsonl"
    good = json.dumps(SPEC_EXAMPLE)
    p.write_text(good + "\n\n" + '{"task_id": "b", "candidates": [' + "\n")
    with pytest.raises(TraceError, match=r"t\.jsonl line 3: not valid JSON"):
        load_traces(p)
    bad = dict(SPEC_EXAMPLE, task_id="c", gold="nope")
    p.write_text(good + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(TraceError, match=r"line 2: task 'c': gold 'nope'"):
        load_traces(p)
    p.write_text(good + "\n" + good + "\n")
    with pytest.raises(TraceError, match=r"line 2: duplicate task_id 'tqa-0007' \(first on line 1\)"):
        load_traces(p)
    with pytest.raises(TraceError, match="not found"):
        load_traces(tmp_path / "missing.jsonl")


def test_dump_load_gz_round_trip_and_stable_hash(tmp_path):
    trs = [Trace.from_dict(dict(SPEC_EXAMPLE, task_id=f"t{i}")) for i in range(3)]
    p1 = dump_traces(trs, tmp_path / "a.jsonl.gz")
    p2 = dump_traces(trs, tmp_path / "b" / "a.jsonl.gz")
    assert p1.read_bytes() == p2.read_bytes()  # mtime-free gzip
    assert load_traces(p1) == trs
    assert traces_sha256(load_traces(p1)) == traces_sha256(trs)
    with gzip.open(p1, "rt") as fh:
        assert json.loads(fh.readline())["task_id"] == "t0"


# -- protocol automaton ------------------------------------------------------------------------
def r0(*answers):
    return [{"agent": f"A{i + 1}", "round": 0, "force": "propose", "answer": a} for i, a in enumerate(answers)]


@pytest.mark.parametrize("extra, reason", [
    ([{"agent": "A1", "round": 1, "force": "vote", "answer": "true"}], "illegal force"),
    ([{"agent": "A1", "round": 1, "force": "concede", "target": 0}], "self-concede"),
    ([{"agent": "A1", "round": 1, "force": "challenge", "target": 0}], "own-move challenge"),
    ([{"agent": "A2", "round": 1, "force": "propose", "answer": "true"},
      {"agent": "A2", "round": 1, "force": "propose", "answer": "true"}], "second move in a round"),
    ([{"agent": "A3", "round": 1, "force": "propose", "answer": "true"}], "no round-0 proposal"),
    ([{"agent": "A2", "round": 1, "force": "challenge", "target": 0},
      {"agent": "A1", "round": 2, "force": "concede", "target": 2}], "answerless target"),
    ([{"agent": "A2", "round": 2, "force": "propose", "answer": "true"},
      {"agent": "A1", "round": 1, "force": "propose", "answer": "true"}], "out of order"),
    ([{"agent": "A2", "round": 1, "force": "concede", "target": 0, "answer": "false"}], "inconsistent concede"),
])
def test_strict_automaton_rejects_with_reason(extra, reason):
    tr = Trace.from_dict(rec(r0("true", "false") + extra))
    verdicts = STRICT.check(tr)
    bad = [v for v in verdicts if not v.accepted]
    assert bad and bad[0].reason.startswith(reason), bad
    with pytest.raises(ProtocolError, match=reason):
        extract_endorsements(tr, "strict")


def test_strict_round0_must_be_proposals():
    tr = Trace.from_dict(rec([{"agent": "A1", "round": 0, "force": "abstain"}]))
    assert STRICT.check(tr)[0].reason.startswith("illegal force")
    tr = Trace.from_dict(rec(r0("true") + [{"agent": "A2", "round": 0, "force": "concede", "target": 0}]))
    assert STRICT.check(tr)[1].reason.startswith("round 0 not a propose")


def test_max_rounds():
    from chorus.aggregate.moves import Protocol

    p = Protocol("r2", STRICT.forces, max_rounds=2)
    tr = Trace.from_dict(rec(r0("true", "false") + [{"agent": "A1", "round": 2, "force": "propose", "answer": "true"}]))
    assert p.check(tr)[2].reason.startswith("too many rounds")


def test_general_algebra_all_five_forces():
    tr = Trace.from_dict(rec([
        {"agent": "A1", "round": 0, "force": "propose", "answer": "true"},   # 0: +true
        {"agent": "A2", "round": 0, "force": "vote", "answer": "false"},     # 1: +false
        {"agent": "A2", "round": 1, "force": "concede", "target": 0},        # 2: +true (cross-agent)
        {"agent": "A1", "round": 1, "force": "concede", "target": 0},        # 3: self-concede: none
        {"agent": "A1", "round": 1, "force": "retract"},                     # 4: -true (A1's answer)
        {"agent": "A3", "round": 1, "force": "abstain"},                     # 5: none
        {"agent": "A3", "round": 2, "force": "challenge", "target": 2},      # 6: -true (concede's answer)
        {"agent": "A3", "round": 2, "force": "retract"},                     # 7: illegal: A3 holds nothing
    ]))
    verdicts, ends = GENERAL.run(tr)
    assert [v.accepted for v in verdicts] == [True] * 7 + [False]
    assert verdicts[7].reason.startswith("nothing to retract")
    assert [(e.move, e.agent, e.sign, e.candidate) for e in ends] == [
        (0, "A1", 1, "true"), (1, "A2", 1, "false"), (2, "A2", 1, "true"), (4, "A1", -1, "true"),
        (6, "A3", -1, "true")]
    with pytest.raises(ProtocolError, match="move 7"):
        extract_endorsements(tr, "general")
    # skip mode drops it and counts it
    from chorus.aggregate.moves import ProtocolReport

    rep = ProtocolReport()
    assert len(extract_endorsements(tr, "general", on_violation="skip", report=rep)) == 5
    assert rep.rejected == 1 and rep.by_reason == {"nothing to retract": 1}


def test_rejected_target_propagates():
    tr = Trace.from_dict(rec(r0("true", "false") + [
        {"agent": "A1", "round": 1, "force": "vote", "answer": "true"},
        {"agent": "A2", "round": 2, "force": "challenge", "target": 2}]))
    v = STRICT.check(tr)
    assert v[3].reason.startswith("rejected target")


def test_check_all_counts_inventory():
    trs = [Trace.from_dict(rec(r0("true", "false") + [{"agent": "A2", "round": 1, "force": "concede", "target": 0}],
                               task_id=f"t{i}")) for i in range(4)]
    rep = check_all(trs, "strict")
    d = rep.to_dict()
    assert d["traces"] == 4 and d["moves"] == 12 and d["rejected"] == 0
    assert d["forces"]["propose"] == 8 and d["forces"]["concede"] == 4 and d["forces"]["vote"] == 0


# -- counts -------------------------------------------------------------------------------------
def test_counts_hand_computed_k3():
    # K=3, A1 proposes yes; A2 proposes no; A1 challenges A2's no; A2 concedes to A1's yes;
    # A3 proposes maybe, then challenges A1's yes.
    tr = Trace.from_dict(rec([
        {"agent": "A1", "round": 0, "force": "propose", "answer": "yes"},
        {"agent": "A2", "round": 0, "force": "propose", "answer": "no"},
        {"agent": "A3", "round": 0, "force": "propose", "answer": "maybe"},
        {"agent": "A1", "round": 1, "force": "challenge", "target": 1},
        {"agent": "A2", "round": 1, "force": "concede", "target": 0},
        {"agent": "A3", "round": 1, "force": "challenge", "target": 0},
    ], candidates=("yes", "no", "maybe"), gold="yes"))
    df = counts(tr, "strict").set_index(["agent", "candidate"])
    # A1: +yes, -no. N=2. e = (1,0,0); c(yes)=1+1=2, c(no)=0+0=0, c(maybe)=0+1=1
    assert df.loc["A1", "e"].tolist() == [1, 0, 0]
    assert df.loc["A1", "c"].tolist() == [2, 0, 1]
    assert df.loc["A1", "d"].tolist() == [0, 2, 1]
    assert df.loc["A1", "N"].tolist() == [2, 2, 2]
    # A2: +no, +yes. c = e = (1,1,0); d = (1,1,2)
    assert df.loc["A2", "c"].tolist() == [1, 1, 0] and df.loc["A2", "d"].tolist() == [1, 1, 2]
    # A3: +maybe, -yes. c(yes)=0, c(no)=1, c(maybe)=2
    assert df.loc["A3", "c"].tolist() == [0, 1, 2] and df.loc["A3", "e"].tolist() == [0, 0, 1]
    # expanded pseudo-observations: propose a -> {a}; challenge a -> every g' != a; n == c
    assert (df["n"] == df["c"]).all()


def test_pool_vectorised_matches_single_trace_counts():
    from chorus.aggregate.synthetic_councils import CouncilSpec, generate_council

    trs = generate_council(CouncilSpec(n_tasks=30, K=3), seed=3)
    pool = Pool.from_traces(trs)
    for t in (0, 7, 29):
        one = counts(trs[t], "strict").set_index(["agent", "candidate"])
        for i, a in enumerate(pool.agents):
            assert one.loc[a, "c"].tolist() == pool.c[t, i].tolist()
            assert one.loc[a, "e"].tolist() == pool.e[t, i].tolist()
            assert one.loc[a, "d"].tolist() == pool.d[t, i].tolist()
    assert (pool.d >= 0).all() and (pool.c <= pool.N[..., None]).all()
    key, ck, dk = pool.pair_keys
    assert np.array_equal(ck[key], pool.c) and np.array_equal(dk[key], pool.d)


def test_pool_errors():
    a = Trace.from_dict(rec(r0("true", "false")))
    b = Trace.from_dict(rec(r0("yes", "no"), candidates=("yes", "no", "maybe"), gold=None, task_id="t2"))
    with pytest.raises(TraceError, match="K=3 candidates but task 't1' has K=2"):
        Pool.from_traces([a, b])
    with pytest.raises(TraceError, match="duplicate task_id"):
        Pool.from_traces([a, a])
    with pytest.raises(TraceError, match=r"agent\(s\) \['A2'\] were not seen"):
        Pool.from_traces([a], agents=("A1",))
    with pytest.raises(LabelError, match="gold 'x' is not one of"):
        Pool.from_traces([a], gold={"t1": "x"})
    p = Pool.from_traces([a], gold={"t1": "true"})
    assert p.gold.tolist() == [0]


def test_truncate_keeps_round0_and_reindexes():
    tr = Trace.from_dict(rec(r0("true", "false") + [
        {"agent": "A2", "round": 1, "force": "concede", "target": 0},
        {"agent": "A1", "round": 2, "force": "challenge", "target": 1}]))
    t0 = tr.truncate(0)
    assert len(t0.moves) == 2 and all(m.round == 0 for m in t0.moves)
    assert tr.truncate(1).moves[-1].target == 0


def test_pool_skip_mode_counts_and_reports():
    vocal = Trace.from_dict(rec(r0("true", "false") + [
        {"agent": "A2", "round": 1, "force": "propose", "answer": "false"},
        {"agent": "A2", "round": 1, "force": "propose", "answer": "false"},  # the vocal adversary
        {"agent": "A1", "round": 1, "force": "concede", "target": 2}]))
    with pytest.raises(ProtocolError, match=r"task 't1', move 3 \(A2, round 1, propose\): second move"):
        Pool.from_traces([vocal])
    pool = Pool.from_traces([vocal], on_violation="skip")
    rep = pool.report.to_dict()
    assert rep["rejected"] == 1 and rep["by_reason"] == {"second move in a round": 1}
    i2 = pool.agents.index("A2")
    assert pool.pos[0, i2].tolist() == [0, 2]  # round-0 + one round-1 proposal, not three
    assert pool.r0_answer[0].tolist() == [0, 1]
