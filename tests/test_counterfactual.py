"""Counterfactual debates (issue 33 part 3): a stored debate replayed with one agent's attention to one
peer cut at one round, the rest continued with the same seeds. On a tiny random Llama (fast, every
component real but the weights): the unblocked replay reproduces the debate exactly, the cut changes
the receiver's reply and what follows, a rerun computes nothing, the debate's report carries it; bad
input is one line. The embedded model's run is in tests/test_debate_e2e.py."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from chorus.interventions.counterfactual import CounterfactualConfig, CounterfactualError, parse_layers, run_counterfactual
from chorus.simulate.debate.config import DebateConfig
from chorus.simulate.debate.questions import validate_item, write_bench

ITEMS = [{"id": f"q{k}", "domain": "knowledge", "subdomain": "toy", "family": f"f{k % 2}", "question": q,
          "options": o, "reference": "A"}
         for k, (q, o) in enumerate([("Which is a fruit?", ["apple", "chair"]), ("Which is larger?", ["sun", "moon"]),
                                     ("Which is a colour?", ["blue", "seven"])])]


@pytest.fixture(scope="module")
def tiny_debate(tiny, tmp_path_factory):
    """A 2-round debate of a tiny random Llama on a call store (short replies: garbage text, real protocol)."""
    from chorus.serving.store import CallStore
    from chorus.simulate.debate.experiment import run_debate
    d = tmp_path_factory.mktemp("cf")
    write_bench([validate_item(x) for x in ITEMS], d / "bench.jsonl")
    cfg = DebateConfig(name="cf", rounds=2, bench={"path": str(d / "bench.jsonl")},
                       model={"profile": "smollm2-135m-instruct", "backend": "hf"},
                       generation={"max_tokens": 12, "temperature": 0.7}, analysis={"n_boot": 20, "n_perm": 20})
    eng = tiny("llama")
    eng.store = CallStore(d / "calls.sqlite")
    run, _ = run_debate(cfg, d / "run", engine=eng)
    yield run.path, eng
    eng.store.close()
    eng.store = None


def test_replay_reproduces_the_debate_and_the_cut_changes_it(tiny_debate):
    src, eng = tiny_debate
    path, s = run_counterfactual(src, CounterfactualConfig(receiver=0, peer=1, round=1, n_boot=20), engine=eng)
    assert path == src / "counterfactual-a0-p1-r1"
    assert s["replay_equals_factual"] == {"questions": 3, "of": 3, "all": True}
    t = pd.read_parquet(path / "tables" / "turns.parquet")
    assert set(t["condition"]) == {"factual", "replay", "cut"} and len(t) == 3 * 3 * 3 * 3  # arms x q x agents x rounds
    at = lambda arm, r, a: t[(t["condition"] == arm) & (t["round"] == r) & (t["agent"] == a)].set_index("qid")["response"]
    # before the cut round, and the other agents at it, everything is the stored debate
    for arm in ("replay", "cut"):
        assert at(arm, 0, 0).equals(at("factual", 0, 0)) and at(arm, 1, 2).equals(at("factual", 1, 2))
    assert not at("cut", 1, 0).equals(at("replay", 1, 0))  # the receiver wrote something else
    # the next round heard it: where the receiver's reply changed, every round-2 prompt changed, so none was
    # in the store; elsewhere, and in the replay, all were
    changed = at("cut", 1, 0) != at("replay", 1, 0)
    r2 = lambda arm: t[(t["condition"] == arm) & (t["round"] == 2)].groupby("qid")["cached"]
    assert (~r2("cut").any() == changed).all() and (r2("cut").all() == ~changed).all() and r2("replay").all().all()
    assert s["cost"]["cut"]["new_tokens"] > 0 and s["cost"]["replay"]["new_tokens"] == 0  # the replay is free
    q = pd.read_parquet(path / "tables" / "questions.parquet")
    assert set(q["arm"]) == {"factual", "replay", "cut"} and len(q) == 9
    assert {(d["a"], d["b"]) for d in s["deltas"]} == {("cut", "replay"), ("cut", "factual"), ("replay", "factual")}
    assert (path / "plots" / "counterfactual.png").is_file()
    prov = json.loads((path / "provenance.json").read_text())
    assert prov["source_run"] == str(src.resolve()) and prov["masked_layers"] == [0, 1, 2, 3]

    before = eng.model_calls
    _, s2 = run_counterfactual(src, CounterfactualConfig(receiver=0, peer=1, round=1, n_boot=20), engine=eng)
    same = lambda x, y: json.dumps(x, sort_keys=True) == json.dumps(y, sort_keys=True)  # NaN-safe
    assert eng.model_calls == before and same(s2["arms"], s["arms"])  # a rerun: every call from the store

    # a band of layers, decision queries: its own folder; the debate's report carries both
    path3, _ = run_counterfactual(src, CounterfactualConfig(receiver=2, peer=0, round=2, layers=[1, 2],
                                                            queries="decision", n_boot=20), engine=eng)
    assert path3.name == "counterfactual-a2-p0-r2-L1-2-decision"
    # the debate's report asks the registry: each counterfactual's brief and figure, its own files untouched
    from chorus.core.analyses import briefs_in, check_sources
    from chorus.report import render_report
    from chorus.simulate.debate.experiment import report
    rep = report(src)
    assert "counterfactual" not in rep and not (src / "tables" / "counterfactual.parquet").exists()
    briefs = briefs_in(src)
    assert set(briefs) == {"counterfactual-a0-p1-r1", "counterfactual-a2-p0-r2-L1-2-decision"}
    assert briefs["counterfactual-a0-p1-r1"]["analysis"] == "influence counterfactual"
    assert same(briefs["counterfactual-a0-p1-r1"]["arms"], {a: {k: v for k, v in m.items() if k != "unanimity_by_round"}
                                                            for a, m in s["arms"].items()})
    html = render_report(src).read_text()
    assert "Analyses of this run" in html and "counterfactual-a2-p0-r2-L1-2-decision/" in html
    # its record names the run it read; the debate's report rewrote that run's record since
    prov = json.loads((path / "provenance.json").read_text())
    assert prov["analysis"] == "influence counterfactual" and prov["sources"][0]["resolved"] == str(src.resolve())
    assert [x.split(";")[0] for x in check_sources(path)] == [f"source changed: {src} (run"]


def test_replay_regenerates_every_later_round_on_a_fresh_store(tiny_debate, tmp_path):
    """The replay-equals-factual check above finds every round after the cut round in the debate's call store,
    so there it compares the regenerated round alone. On an empty store every replayed reply (the cut round's
    and each later round's) is computed again, and must still be the stored debate, text for text."""
    from chorus.serving.store import CallStore
    src, eng = tiny_debate
    kept = eng.store
    eng.store = CallStore(tmp_path / "fresh.sqlite")
    try:
        path, s = run_counterfactual(src, CounterfactualConfig(receiver=0, peer=1, round=1, n_boot=20), engine=eng,
                                     out=tmp_path / "cf", make_plots=False)
    finally:
        eng.store.close()
        eng.store = kept
    t = pd.read_parquet(path / "tables" / "turns.parquet")
    later = t[(t["condition"] == "replay") & (t["round"] == 2)]
    assert len(later) == 3 * 3 and not later["cached"].any()          # computed, not read back
    assert s["cost"]["replay"]["new_tokens"] > 0 and s["cost"]["receiver_replies"]["computed"] == 2 * 3
    assert s["replay_equals_factual"] == {"questions": 3, "of": 3, "all": True}
    fact = t[(t["condition"] == "factual") & (t["round"] >= 1)].set_index(["qid", "round", "agent"])["response"]
    rep = t[(t["condition"] == "replay") & (t["round"] >= 1)].set_index(["qid", "round", "agent"])["response"]
    assert rep.sort_index().equals(fact.sort_index())


def test_bad_input_is_one_line(tiny_debate, tmp_path):
    src, eng = tiny_debate
    from chorus.core.config import ConfigError, validate
    with pytest.raises(ConfigError, match="receiver and peer are the same agent"):
        validate(CounterfactualConfig, {"receiver": 1, "peer": 1})
    with pytest.raises(ConfigError, match="round"):
        validate(CounterfactualConfig, {"round": 0})
    with pytest.raises(CounterfactualError, match=r"round 3 is not in this debate \(rounds 1..2\)"):
        run_counterfactual(src, CounterfactualConfig(round=3), engine=eng)
    with pytest.raises(CounterfactualError, match=r"peer 5 is not an agent of this debate \(agents 0..2\)"):
        run_counterfactual(src, CounterfactualConfig(peer=5), engine=eng)
    from chorus.interventions.families import LayerError
    with pytest.raises(LayerError, match=r"out of range.*valid 0..3"):
        run_counterfactual(src, CounterfactualConfig(layers=[9]), engine=eng, out=tmp_path / "x")
    assert not (tmp_path / "x").exists()  # refused before its run directory
    with pytest.raises(CounterfactualError, match="no tables/turns.parquet"):
        run_counterfactual(tmp_path, CounterfactualConfig(), engine=eng)
    with pytest.raises(CounterfactualError, match="--layers '3-1'"):
        parse_layers("3-1")
    assert parse_layers("8-10") == [8, 9, 10] and parse_layers("3,7") == [3, 7] and parse_layers("all") == "all"
    # a run without the debate condition: nothing was heard
    refl = tmp_path / "refl"
    refl.mkdir()
    turns = pd.read_parquet(src / "tables" / "turns.parquet")
    (refl / "tables").mkdir()
    turns[turns["condition"] == "reflection"].to_parquet(refl / "tables" / "turns.parquet")
    for f in ("bench.jsonl", "config.yaml"):
        (refl / f).write_text((src / f).read_text())
    with pytest.raises(CounterfactualError, match="no debate condition in this run"):
        run_counterfactual(refl, CounterfactualConfig(), engine=eng)


def test_cli_names_the_problem(tiny_debate):
    from typer.testing import CliRunner

    from chorus.cli import app
    src, _ = tiny_debate
    res = CliRunner().invoke(app, ["influence", "counterfactual", str(src), "--receiver", "1", "--peer", "1"])
    assert res.exit_code == 2 and "receiver and peer are the same agent (1)" in res.output, res.output
    res = CliRunner().invoke(app, ["influence", "counterfactual", str(src), "--layers", "x-y"])
    assert res.exit_code == 2 and "--layers 'x-y'" in res.output, res.output
