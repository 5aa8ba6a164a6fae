"""Count-level corruption of real council traces (issue 19 item 6): a trace file written by
``simulate/council`` with scripted seats (no model), corrupted by ``chorus.aggregate.corrupt``."""
from __future__ import annotations

import re
import zlib

import numpy as np
import pytest
from conftest import Scripted

from chorus.aggregate.corrupt import corrupt_traces, corruption_counts, sleeper_from_traces
from chorus.aggregate.counts import Pool
from chorus.aggregate.moves import STRICT
from chorus.aggregate.synthetic_councils import Adversary
from chorus.aggregate.trace import Trace, dump_traces, load_traces


def _h(*parts) -> int:
    return zlib.crc32("|".join(map(str, parts)).encode())


def _policy(me, kind, conv):
    """Varied legal moves: A1 concedes to A2, A2 challenges A3, A3 re-proposes; answers by hash."""
    claim = re.search(r"Claim number (\d+)", conv[-1]["content"]).group(1)
    if kind == "envelope":
        return {"answer": "true" if _h(me, claim) % 3 else "false", "reasoning": "r", "evidence": "e",
                "confidence": "likely"}
    held = dict(re.findall(r"(A\d): (true|false)", conv[-1]["content"]))
    if me == "A1" and "A2" in held:
        return {"move": "concede", "target": "A2", "answer": held["A2"], "reason": "ok"}
    if me == "A2" and "A3" in held:
        return {"move": "challenge", "target": "A3", "answer": "false" if held["A3"] == "true" else "true",
                "reason": "no"}
    return {"move": "propose", "target": "none", "answer": "true" if _h(me, claim, len(conv)) % 2 else "false",
            "reason": "y"}


@pytest.fixture(scope="module")
def council_file(tmp_path_factory):
    from chorus.simulate.council import prompts as pr
    from chorus.simulate.council.data import Task
    from chorus.simulate.council.runner import Seat, make_councils, run_councils

    tasks = [Task(task_id=f"t{i}", dataset="truthfulclaim", question=f"Claim number {i} about rivers.",
                  candidates=("true", "false"), options=None, gold="true" if i % 2 else "false") for i in range(40)]
    seats = [Seat("A1", "m", "analyst"), Seat("A2", "m", "analyst"), Seat("A3", "m", "skeptic")]
    councils = make_councils(tasks, [("clean", ())], [0])
    engine = Scripted(lambda me, kind, conv, _schema: _policy(me, kind, conv))
    run_councils(councils, seats, {"m": engine}, rounds=3, P=pr.load_prompts())
    path = tmp_path_factory.mktemp("council") / "truthfulclaim__clean.jsonl"
    dump_traces([Trace.from_dict(c.to_trace()) for c in councils], path)
    return path


def _forces(traces):
    return {m.force for t in traces for m in t.moves}


def test_the_fixture_is_a_real_council_file(council_file):
    trs = load_traces(council_file)
    assert len(trs) == 40 and {"propose", "concede", "challenge"} <= _forces(trs)
    assert trs[0].extra["condition"] == "clean" and "target_agent" in next(
        m.extra for t in trs for m in t.moves if m.force == "concede")


def test_p_wrong_zero_is_identity_and_k_too_large_is_refused(council_file):
    trs = load_traces(council_file)
    for kind in ("persistent", "rotating"):
        out = corrupt_traces(trs, Adversary(kind=kind, k=2, p_wrong=0.0), seed=3)
        assert [t.to_dict() for t in out] == [t.to_dict() for t in trs]
    with pytest.raises(ValueError, match=r"k=4 exceeds the 3 seats of task 't0-s0'"):
        corrupt_traces(trs, Adversary(kind="rotating", k=4, p_wrong=0.5), seed=0)
    with pytest.raises(ValueError, match=r"adversary seats \['A9'\]"):
        corrupt_traces(trs, Adversary(k=1, seats=("A9",)), seed=0)


@pytest.mark.parametrize("p", [0.5, 1.0])
def test_only_the_chosen_seats_informative_moves_change(council_file, p):
    trs = load_traces(council_file)
    out = corrupt_traces(trs, Adversary(kind="persistent", k=1, p_wrong=p), seed=7)  # seat A3
    seen_flip = 0
    for a, b in zip(trs, out):
        assert (a.task_id, a.candidates, a.gold, a.question_id) == (b.task_id, b.candidates, b.gold, b.question_id)
        info = {e.move for e in STRICT.run(a)[1]}
        rec = b.extra.get("corruption", {"flipped": [], "repaired": [], "changed": []})
        assert rec["changed"] == []  # K = 2: every reply to a flipped move keeps its counts
        for j, (m0, m1) in enumerate(zip(a.moves, b.moves)):
            if j in rec["flipped"]:
                seen_flip += 1
                assert m0.agent == "A3" and j in info and m1.round == m0.round
                assert m1.extra["corrupted_from"]["force"] == m0.force
            elif j in rec["repaired"]:
                assert m0.agent != "A3" and m1.extra["repointed_from"] == m0.target
            else:
                assert m0.to_dict() == m1.to_dict()  # byte-identical
        # at p_wrong = 1 every informative move of A3 is flipped (and nothing else is)
        if p == 1.0:
            assert sorted(rec["flipped"]) == sorted(j for j in info if a.moves[j].agent == "A3")
        assert [v.accepted for v in STRICT.check(a)] == [v.accepted for v in STRICT.check(b)]  # still legal
    assert seen_flip > 0
    # counts: A3's endorsements now point away from gold; the other seats' c and d are unchanged
    P0, P1 = Pool.from_traces(trs, on_violation="skip"), Pool.from_traces(out, on_violation="skip")
    for P in (P0, P1):
        assert P.agents == ("A1", "A2", "A3")
    # c(g) = positive endorsements of g + rejections of any a != g; N = all informative moves
    cons0 = P0.pos + (P0.neg.sum(-1, keepdims=True) - P0.neg)
    cons1 = P1.pos + (P1.neg.sum(-1, keepdims=True) - P1.neg)
    np.testing.assert_array_equal(cons0[:, :2], cons1[:, :2])
    np.testing.assert_array_equal((P0.pos + P0.neg).sum(-1), (P1.pos + P1.neg).sum(-1))
    g = P1.gold
    a3_gold = cons1[np.arange(len(g)), 2, g]
    if p == 1.0:
        assert (a3_gold == 0).all()  # no A3 move is consistent with gold any more
    assert a3_gold.sum() < cons0[np.arange(len(g)), 2, g].sum()


def test_rotating_seats_differ_per_task_and_the_streams_pair(council_file):
    trs = load_traces(council_file)
    out = corrupt_traces(trs, Adversary(kind="rotating", k=1, p_wrong=1.0), seed=1)
    seats = [tuple(t.extra["corruption"]["seats"]) for t in out]
    assert len(set(seats)) == 3
    # a task's corruption does not depend on file order, and a move flipped at p is flipped at p' > p
    rev = corrupt_traces(trs[::-1], Adversary(kind="rotating", k=1, p_wrong=1.0), seed=1)[::-1]
    assert [t.to_dict() for t in rev] == [t.to_dict() for t in out]
    lo = corrupt_traces(trs, Adversary(kind="rotating", k=1, p_wrong=0.4), seed=1)
    for a, b in zip(lo, out):
        assert set(a.extra.get("corruption", {}).get("flipped", [])) <= set(b.extra["corruption"]["flipped"])


def test_fixed_target_and_k2_and_sleeper_split(council_file):
    trs = load_traces(council_file)
    out = corrupt_traces(trs, Adversary(kind="persistent", k=2, p_wrong=1.0, target="fixed"), seed=0)
    for t in out:
        for j in t.extra["corruption"]["flipped"]:
            m = t.moves[j]
            assert m.agent in ("A2", "A3")
            if m.force == "propose":
                assert m.answer != t.gold
    cal, dep = sleeper_from_traces(trs, n_calibration=10, f=0.0, adversary=Adversary(k=1), seed=0)
    assert len(cal) == 10 and len(dep) == 30
    assert not {t.qid for t in cal} & {t.qid for t in dep}
    assert all("corruption" not in t.extra for t in cal)
    assert corruption_counts(dep)["traces_changed"] == 30
    cal1, _ = sleeper_from_traces(trs, n_calibration=10, f=1.0, adversary=Adversary(k=1), seed=0)
    assert [t.task_id for t in cal1] == [t.task_id for t in cal]
    assert all("corruption" in t.extra for t in cal1)


def test_sweep_over_a_real_trace_file(council_file, tmp_path):
    from typer.testing import CliRunner

    from chorus.aggregate.results import read_results, verify
    from chorus.cli import app

    args = ["aggregate", "sweep", "aggregate/configs/sweep_dose_traces.yaml", "--traces", str(council_file),
            "--out", str(tmp_path / "sw"), "--quiet", "--set", "regimes=[persistent]", "--set", "ks=[1]",
            "--set", "p_wrong=[0.0,1.0]", "--set", "methods=[plurality,bda_per_agent]",
            "--set", "outer_folds=2", "--set", "inner_folds=2", "--set", "grids.s=[8.0]", "--set", "grids.b=[0.55]"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    res = read_results(tmp_path / "sw")
    assert res["source_traces"]["n_traces"] == 40 and len(res["cells"]) == 2
    clean, hit = res["cells"]
    assert clean["corruption"]["flipped"] == 0 and hit["corruption"]["flipped"] > 0
    assert clean["traces_sha256"] == res["source_traces"]["sha256"]  # p_wrong = 0: the file itself
    assert (tmp_path / "sw" / "plots" / "dose_response.png").is_file()
    assert all(c.ok for c in verify(tmp_path / "sw", bootstrap=False))
    # bad input: a k the council cannot hold, and a config without a trace file
    r = CliRunner().invoke(app, args[:-2] + ["--set", "ks=[5]"])
    assert r.exit_code != 0 and "k=5 exceeds the 3 seats" in r.output
    r = CliRunner().invoke(app, ["aggregate", "sweep", "aggregate/configs/sweep_dose_traces.yaml",
                                 "--out", str(tmp_path / "x"), "--quiet"])
    assert r.exit_code != 0 and "council-traces.jsonl" in r.output
