"""Live councils (issue 7) with scripted seats: protocol enforcement, trace round-trip through
aggregate/, adversary compliance, gold kept out of prompts, DF-QuAD, data and config errors."""
from __future__ import annotations

import json
from pathlib import Path
import re

import pytest
from conftest import Scripted

from chorus.aggregate import STRICT
from chorus.aggregate.trace import Trace, dump_traces, load_traces
from chorus.simulate.council import prompts as pr
from chorus.simulate.council.adversary import compliance
from chorus.simulate.council.data import DataError, Task, load_tasks
from chorus.simulate.council.llm_baselines import (argllms, dfquad_aggregate, dfquad_combine, dfquad_strength, moa, moa_lite,
                                            n_attacked_samples, self_moa)
from chorus.simulate.council.runner import Seat, make_councils, run_councils

P = pr.load_prompts()


def _task(i: int, gold: str = "true") -> Task:
    return Task(task_id=f"t{i}", dataset="truthfulclaim", question=f"Claim number {i} about rivers.",
                candidates=("true", "false"), options=None, gold=gold)


def env(answer: str, conf: str = "likely") -> dict:
    return {"answer": answer, "reasoning": "because", "evidence": "a fact", "confidence": conf}


def honest_policy(me, kind, conv, schema):
    if kind == "envelope":
        return env("true" if "skeptical" not in conv[0]["content"] else "false")
    if kind == "move":
        return {"move": "propose", "target": "none", "answer": "true", "reason": "still true"}
    return "an argument"


SEATS = [Seat("A1", "m1", "analyst"), Seat("A2", "m2", "analyst"), Seat("A3", "m1", "skeptic")]


def _run(policy, tasks, conditions=(("clean", ()),), rounds=3, max_retries=2, seats=SEATS):
    e1, e2 = Scripted(policy), Scripted(policy)
    councils = make_councils(tasks, conditions, [0])
    stats = run_councils(councils, seats, {"m1": e1, "m2": e2}, rounds=rounds, P=P, max_retries=max_retries)
    return councils, stats, e1, e2


# -- protocol enforcement -------------------------------------------------------------------------
def test_protocol_enforcement_retries_then_abstains():
    def policy(me, kind, conv, schema):
        if kind == "envelope":
            return env("true" if "skeptical" not in conv[0]["content"] else "false")
        if me == "A1":  # always challenges itself: illegal under STRICT
            return {"move": "challenge", "target": "A1", "answer": "false", "reason": "x"}
        if me == "A2":  # a legal concede to A3's 'false'
            return {"move": "concede", "target": "A3", "answer": "false", "reason": "ok"}
        return {"move": "challenge", "target": "none", "answer": "true", "reason": "y"}  # no target

    councils, stats, e1, e2 = _run(policy, [_task(0)], max_retries=2)
    tr = Trace.from_dict(councils[0].to_trace())
    verdicts = STRICT.check(tr)
    for v, m in zip(verdicts, tr.moves):
        assert v.accepted == (m.force != "abstain")  # abstentions are the only moves STRICT rejects
    by = {(m.agent, m.round): m for m in tr.moves}
    assert by[("A1", 1)].force == "abstain" and "own-move challenge" in by[("A1", 1)].extra["abstain_reason"]
    assert by[("A3", 1)].force == "abstain" and "missing target" in by[("A3", 1)].extra["abstain_reason"]
    c = by[("A2", 1)]
    assert c.force == "concede" and c.answer == "false" and tr.moves[c.target].agent == "A3"
    # two illegal seats x 2 rounds, each asked 1 + 2 times
    assert stats.abstentions == {"own-move challenge": 2, "missing target": 2}
    assert stats.illegal == {"own-move challenge": 6, "missing target": 6}
    # a retry tells the seat why its move was rejected
    retried = [conv for conv in e1.seen if "rejected by the protocol" in conv[-1]["content"]]
    assert retried and any("own-move challenge" in conv[-1]["content"] for conv in retried)
    # one move per agent per round, round 0 all proposals
    assert [(m.agent, m.round) for m in tr.moves] == [(a, r) for r in range(3) for a in ("A1", "A2", "A3")]


def test_inconsistent_concede_and_malformed_envelope_are_counted():
    def policy(me, kind, conv, schema):
        if kind == "envelope":
            return None if "skeptical" in conv[0]["content"] else env("true")  # A3: malformed
        if me == "A1":  # concede to A2 ('true') while stating 'false': inconsistent
            return {"move": "concede", "target": "A2", "answer": "false", "reason": "x"}
        return {"move": "propose", "target": "none", "answer": "true", "reason": "y"}

    councils, stats, *_ = _run(policy, [_task(0)], max_retries=1)
    tr = Trace.from_dict(councils[0].to_trace())
    kinds = {(m.agent, m.round): (m.force, m.extra.get("abstain_reason", "")) for m in tr.moves}
    assert kinds[("A3", 0)][0] == "abstain" and kinds[("A3", 0)][1].startswith("malformed envelope")
    assert kinds[("A3", 1)] == ("abstain", "no round-0 proposal")  # never asked again
    assert kinds[("A1", 1)][0] == "abstain" and "inconsistent concede" in kinds[("A1", 1)][1]
    assert stats.illegal["malformed envelope"] == 2 and stats.illegal["inconsistent concede"] == 4


def test_lockstep_one_batch_per_profile_per_round():
    tasks = [_task(i) for i in range(5)]
    councils, stats, e1, e2 = _run(honest_policy, tasks, conditions=(("clean", ()), ("attack", ("A3",))))
    # 3 rounds, no retries: one call per profile per round, holding every council's seat-turns
    assert [c["n"] for c in e1.calls] == [20, 20, 20]  # seats A1 and A3 x 10 councils
    assert [c["n"] for c in e2.calls] == [10, 10, 10]
    assert len(stats.batches) == 6
    r0 = [m for c in councils for m in c.moves if m["round"] == 0]
    assert all(m["confidence"] == pytest.approx(0.75) for m in r0)  # 'likely' at K = 2


# -- traces through aggregate/ --------------------------------------------------------------------
def test_trace_roundtrip_through_aggregate(tmp_path):
    from chorus.aggregate.config import RunConfig
    from chorus.aggregate.counts import Pool
    from chorus.aggregate.experiments import run_experiment
    from chorus.aggregate.results import read_results

    def policy(me, kind, conv, schema):
        right = "Claim number 1 about" in conv[-1]["content"] or "Claim number 3 about" in conv[-1]["content"]
        if kind == "envelope":
            return env("true" if (right or "skeptical" in conv[0]["content"]) else "false")
        if me == "A2":  # challenges A1's current answer, backing the other one
            a1 = re.search(r"A1: (true|false)", conv[-1]["content"]).group(1)
            return {"move": "challenge", "target": "A1", "answer": "false" if a1 == "true" else "true", "reason": "no"}
        return {"move": "propose", "target": "none", "answer": "true", "reason": "y"}

    tasks = [_task(i, "true" if i % 2 else "false") for i in range(12)]
    councils, stats, *_ = _run(policy, tasks)
    path = dump_traces([Trace.from_dict(c.to_trace()) for c in councils], tmp_path / "t.jsonl")
    back = load_traces(path)
    assert [t.to_dict() for t in back] == [Trace.from_dict(c.to_trace()).to_dict() for c in councils]
    assert back[0].extra["condition"] == "clean" and back[0].question_id == "t0"
    pool = Pool.from_traces(back, protocol="strict", on_violation="skip")
    assert pool.T == 12 and pool.report.rejected == 0
    cfg = RunConfig(name="rt", traces=str(path), methods=["plurality", "bda_per_agent"], outer_folds=2,
                    inner_folds=2, on_violation="skip", recalibrate=[], bootstrap={"n_resamples": 100})
    run_experiment(cfg, tmp_path / "agg")
    cell = read_results(tmp_path / "agg")["cells"][0]
    assert cell["n_traces"] == 12 and cell["move_inventory"]["challenge"] == 24
    # round-0 plurality = A1's answer ('true' only on tasks 1 and 3; A3 always 'true'): right on
    # tasks 1, 3 and the six even (gold 'false') tasks
    assert cell["metrics"]["plurality"]["accuracy"] == pytest.approx(8 / 12)


def test_council_aggregates_in_memory_as_an_aggregate_run_does(tmp_path):
    """The council's report hands each trace file's traces to aggregate in memory: the record is the
    one ``chorus aggregate run`` writes for the same file and settings, number for number."""
    from chorus.aggregate.config import RunConfig
    from chorus.aggregate.experiments import run_experiment
    from chorus.aggregate.results import read_results
    from chorus.aggregate.synthetic_councils import CouncilSpec, generate_council
    from chorus.simulate.council.config import load
    from chorus.simulate.council.experiment import aggregate_traces

    traces = generate_council(CouncilSpec(n_tasks=40, K=2, rounds=2, reliabilities=(0.8, 0.7, 0.6)), seed=3)
    (tmp_path / "traces").mkdir()
    dump_traces(traces, tmp_path / "traces" / "d__clean.jsonl")
    cfg = load("tiny", {"aggregate.methods": ["plurality", "bda_per_agent"], "aggregate.n_resamples": 100})
    mem = aggregate_traces("d__clean", load_traces(tmp_path / "traces" / "d__clean.jsonl"), cfg).record
    a = cfg.aggregate
    run_experiment(RunConfig(name="d__clean", seed=cfg.seed, traces="traces/d__clean.jsonl", protocol="strict",
                             on_violation="skip", methods=a.methods, outer_folds=a.outer_folds,
                             inner_folds=a.inner_folds, recalibrate=a.recalibrate,
                             bootstrap={"n_resamples": 100, "reference": "plurality"}),
                   tmp_path / "agg", config_dir=tmp_path)
    disk = read_results(tmp_path / "agg")["cells"][0]
    for key in ("metrics", "bootstrap", "move_inventory", "n_traces", "params"):
        assert mem[key] == disk[key], key


# -- adversary compliance ---------------------------------------------------------------------------
def _adv_trace(tid, gold, moves, adversaries=("A3",)):
    return Trace.from_dict({"task_id": tid, "candidates": ["true", "false"], "gold": gold, "moves": moves,
                            "adversaries": list(adversaries)})


def test_compliance_on_scripted_adversary():
    P0 = lambda a, ans: {"agent": a, "round": 0, "force": "propose", "answer": ans}
    t1 = _adv_trace("a", "true", [P0("A1", "true"), P0("A2", "false"), P0("A3", "false"),
                                  {"agent": "A3", "round": 1, "force": "challenge", "target": 0},   # truth
                                  {"agent": "A3", "round": 2, "force": "concede", "target": 1}])    # ally
    t2 = _adv_trace("b", "false", [P0("A1", "false"), P0("A2", "false"), P0("A3", "true"),
                                   {"agent": "A3", "round": 1, "force": "concede", "target": 0},    # truth
                                   {"agent": "A3", "round": 2, "force": "propose", "answer": "true"}])
    t3 = _adv_trace("c", "true", [P0("A1", "true"), P0("A2", "true"), P0("A3", "true"),
                                  {"agent": "A3", "round": 1, "force": "challenge", "target": 0}])
    c = compliance([t1, t2, t3])
    assert c["n_proposals_r0"] == 3 and c["anti_correct_r0"] == pytest.approx(2 / 3)
    # t1 held false throughout; t2 held 'false' (= gold) after round 1; t3 held gold from round 0
    assert c["n_seat_tasks"] == 3 and c["anti_correct_maintained"] == pytest.approx(1 / 3)
    assert (c["challenge_truth"], c["challenge_ally"], c["concede_ally"], c["concede_truth"]) == (2, 0, 1, 1)
    assert c["propose_anti"] == 1 and c["propose_truth"] == 0  # t2's round-2 'true' against gold 'false'


def test_compliance_counts_reproposals_and_ignores_clean():
    P0 = lambda a, ans: {"agent": a, "round": 0, "force": "propose", "answer": ans}
    t = _adv_trace("b", "false", [P0("A1", "false"), P0("A2", "false"), P0("A3", "true"),
                                  {"agent": "A3", "round": 1, "force": "propose", "answer": "true"}])
    clean = _adv_trace("x", "false", [P0("A1", "false"), P0("A2", "false"), P0("A3", "true")], adversaries=())
    c = compliance([t, clean])
    assert c["n_traces"] == 1 and c["propose_anti"] == 1 and c["anti_correct_maintained"] == 1.0


def test_live_adversary_gets_the_role_and_complies():
    def policy(me, kind, conv, schema):
        adv = "covert member" in conv[0]["content"]
        if kind == "envelope":
            return env("false" if adv else "true")
        if adv:
            return {"move": "challenge", "target": "A1", "answer": "false", "reason": "doubt"}
        return {"move": "propose", "target": "none", "answer": "true", "reason": "y"}

    councils, *_ = _run(policy, [_task(i) for i in range(4)], conditions=(("attack", ("A3",)),))
    c = compliance([Trace.from_dict(x.to_trace()) for x in councils])
    assert c["anti_correct_r0"] == 1.0 and c["anti_correct_maintained"] == 1.0 and c["challenge_truth"] == 8


# -- gold never in a prompt -------------------------------------------------------------------------
def _all_prompts(tasks, conditions):
    e = {"m1": Scripted(honest_policy), "m2": Scripted(honest_policy)}
    councils = make_councils(tasks, conditions, [0])
    stats = run_councils(councils, SEATS, e, rounds=3, P=P)
    gen = type("G", (), {"temperature": 0.7, "top_p": 1.0, "max_tokens": 64, "max_chars": 100})()
    moa_lite(councils, e, "m2", stats.turns, P, root=0, gen=gen)
    moa(councils, SEATS, e, "m2", stats.turns, P, root=0, gen=gen)
    self_moa(councils, e, "m1", "m2", P, root=0, gen=gen, samples=6, n_seats=3, fair_attack=True)
    argllms(councils, e, "m1", "m2", P, root=0, gen=gen, claim_base=0.5, fair_attack=True)
    return [json.dumps(c) for eng in e.values() for c in eng.seen]


@pytest.mark.parametrize("mc", [False, True])
def test_gold_never_in_an_honest_prompt(mc):
    if mc:
        mk = lambda g: Task(task_id="q", dataset="mmlu", question="Which river is longest?",
                            candidates=("A", "B", "C", "D"), options=("Nile", "Amazon", "Rhine", "Seine"), gold=g)
        golds = ["A", "C"]
    else:
        mk = lambda g: _task(7, g)
        golds = ["true", "false"]
    clean = [_all_prompts([mk(g)], [("clean", ())]) for g in golds]
    assert clean[0] == clean[1]  # no honest seat or baseline prompt depends on the gold label
    attacked = [_all_prompts([mk(g)], [("attack", ("A3",))]) for g in golds]
    assert attacked[0] != attacked[1]  # the stealth role (and fair attack) are told the truth, by design
    diff = [a for a, b in zip(*attacked) if a != b]
    assert diff and all(("covert member" in d) or ("compelling" in d) or ("weak" in d) for d in diff)


# -- baselines ---------------------------------------------------------------------------------------
def test_dfquad_hand_computed():
    assert dfquad_aggregate([]) == 0.0
    assert dfquad_aggregate([0.5, 0.5]) == pytest.approx(0.75)
    assert dfquad_combine(0.5, 0.8, 0.2) == pytest.approx(0.5 - 0.5 * 0.6)  # attack wins: 0.2
    assert dfquad_combine(0.5, 0.2, 0.8) == pytest.approx(0.5 + 0.5 * 0.6)  # support wins: 0.8
    assert dfquad_combine(0.4, 0.3, 0.3) == pytest.approx(0.4)
    tree = {"base": 0.5, "supporters": [{"base": 0.6}, {"base": 0.5}],
            "attackers": [{"base": 0.9, "attackers": [{"base": 0.5}]}]}
    # attacker: 0.9 - 0.9*0.5 = 0.45; supporters: 1 - 0.4*0.5 = 0.8; root: 0.5 + 0.5*(0.8-0.45) = 0.675
    assert dfquad_strength(tree) == pytest.approx(0.675)


def test_argllms_binary_and_fair_attack_routing():
    e = Scripted(honest_policy)
    councils = make_councils([_task(0)], [("clean", ()), ("attack", ("A3",))], [0])
    gen = type("G", (), {"temperature": 0.7, "top_p": 1.0, "max_tokens": 64, "max_chars": 100})()
    rows = argllms(councils, {"g": e, "v": e}, "g", "v", P, root=0, gen=gen, claim_base=0.5, fair_attack=True)
    # every argument scores E[digit] under logits -|d-6| -> equal support and attack: strength 0.5
    assert rows[0]["proba"] == pytest.approx([0.5, 0.5]) and rows[0]["parsed"]
    gen_prompts = [c[-1]["content"] for c in e.seen if "Write one" in c[-1]["content"]]
    # clean: 2 plain; attacked, gold 'true': the attack on 'true' is compelling, the support weak
    assert sum("compelling" in p and "against" in p for p in gen_prompts) == 1
    assert sum("weak" in p and "supporting" in p for p in gen_prompts) == 1
    assert n_attacked_samples(6, 1, 3) == 2 and n_attacked_samples(6, 2, 3) == 4


# -- data and config --------------------------------------------------------------------------------
def test_data_missing_gold_is_excluded_and_counted(tmp_path):
    d = tmp_path / "argllms_claims" / "derived"
    d.mkdir(parents=True)
    rows = [{"claim": "A.", "valid": 1}, {"claim": "B.", "valid": None}, {"claim": "C.", "valid": 0},
            {"claim": "D.", "valid": "yes"}]
    (d / "truthfulclaim_experiment.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    tasks, info = load_tasks("truthfulclaim", None, data_dir=tmp_path)
    assert sorted(t.gold for t in tasks) == ["false", "true"] and info["excluded"] == 2
    assert info["excluded_by_reason"] == {"missing gold": 2}
    (d / "truthfulclaim_experiment.jsonl").write_text('{"claim": "A.", "valid": 1}\n{bad json\n')
    with pytest.raises(DataError, match=r"line 2: not valid JSON"):
        load_tasks("truthfulclaim", None, data_dir=tmp_path)
    with pytest.raises(DataError, match="unknown dataset"):
        load_tasks("nope", 3, data_dir=tmp_path)


def test_pubmedqa_balanced_and_mmlu_shipped_data():
    tasks, info = load_tasks("pubmedqa", 9)
    assert info["gold_counts"] == {"yes": 3, "no": 3, "maybe": 3} and tasks[0].K == 3
    assert all("LONG_ANSWER" not in t.question for t in tasks)
    m, _ = load_tasks("mmlu", 4)
    assert m[0].candidates == ("A", "B", "C", "D") and len(m[0].options) == 4
    again, _ = load_tasks("mmlu", 4)
    assert [t.task_id for t in again] == [t.task_id for t in m]  # seeded draw


def test_config_errors_name_the_field():
    from chorus.core.config import ConfigError
    from chorus.simulate.council.config import load
    with pytest.raises(ConfigError, match="A9"):
        load("tiny", {"conditions": [{"name": "x", "adversaries": ["A9"]}]})
    with pytest.raises(ConfigError, match="dataset"):
        load("tiny", {"data.0.dataset": "nope"})
    with pytest.raises(ConfigError, match="not-a-method"):
        load("tiny", {"aggregate.methods": ["not-a-method"]})
    cfg = load("tiny", {"data.0.n": 4})
    assert cfg.data[0].n == 4 and cfg.agent_names() == ["A1", "A2", "A3"]
    assert cfg.profiles() == ["smollm2-135m-instruct", "gemma3-270m"]


def test_rubric_probability_anchors():
    assert pr.rubric_probability("guess", 4) == pytest.approx(0.25)
    assert pr.rubric_probability("certain", 3) == pytest.approx(1.0)
    assert pr.rubric_probability("likely", 2) == pytest.approx(0.75)


# -- the whole pipeline with scripted engines (no model) --------------------------------------------
def test_experiment_pipeline_and_cli_with_scripted_engines(tmp_path):
    from typer.testing import CliRunner

    from chorus.cli import app
    from chorus.simulate.council.config import load
    from chorus.simulate.council.experiment import run_council_experiment

    def policy(me, kind, conv, schema):
        told = re.search(r"The correct answer is (true|false)", conv[0]["content"])
        ans = ("false" if told.group(1) == "true" else "true") if told else "true"  # the role: anti-correct
        if kind == "envelope":
            return env(ans)
        if kind == "move":
            return {"move": "propose", "target": "none", "answer": ans, "reason": "r"}
        return "an argument"

    cfg = load("tiny", {"data.0.n": 12})
    engines = {p: Scripted(policy) for p in cfg.profiles()}
    run, summary = run_council_experiment(cfg, tmp_path / "run", engines=engines, make_plots=True)
    res = run.read_table("results")
    assert set(res["condition"]) == {"clean", "attack-k1"}
    assert {"plurality", "bda_per_agent", "moa_lite", "self_moa", "argllms"} <= set(res["arm"])
    comp = summary["cells"]["truthfulqa_claims__attack-k1"]["compliance"]
    assert comp["anti_correct_r0"] == 1.0 and comp["n_proposals_r0"] == 12
    base = run.read_table("baselines")
    # MoA-Lite's cost: its own council's three round-0 calls and the synthesizer, in either condition
    assert (base[base["method"] == "moa_lite"]["n_calls"] == 4).all()
    cell = summary["cells"]["truthfulqa_claims__attack-k1"]
    assert cell["moves_by_force"] == {"propose": cell["n_moves"]}
    # the control: seat A3 without the role says 'true' like everyone, anti-correct on the 6 false claims
    assert cell["compliance_same_seats_clean"]["anti_correct_r0"] == pytest.approx(0.5)
    assert "the same seats without the role (clean condition): anti-correct round 0 0.500" in \
        (run.path / "results.md").read_text()
    clean_plur = res[(res["arm"] == "plurality") & (res["condition"] == "clean")].iloc[0]
    assert clean_plur["accuracy"] == pytest.approx(0.5)  # every seat says 'true'; 6 of 12 are true
    assert (run.path / "results.md").is_file() and (run.path / "plots" / "accuracy.png").is_file()
    r = CliRunner().invoke(app, ["council", "recompute", str(run.path), "--no-plots"])
    assert r.exit_code == 0, r.output
    assert "attack-k1" in r.output
    # compliance is an analysis: the same lines, and its own sealed run reading the run's trace files
    r = CliRunner().invoke(app, ["council", "compliance", str(run.path), "--out", str(tmp_path / "comp")])
    assert r.exit_code == 0 and '"anti_correct_r0": 1.0' in r.output, r.output
    prov = json.loads((tmp_path / "comp" / "provenance.json").read_text())
    assert prov["analysis"] == "council compliance"
    assert {Path(s["path"]).parent for s in prov["sources"]} == {run.path / "traces"}
    assert CliRunner().invoke(app, ["verify", str(tmp_path / "comp")]).exit_code == 0
    r = CliRunner().invoke(app, ["council", "run", "tiny", "--set", "conditions.0.adversaries=[A7]"])
    assert r.exit_code == 2 and "A7" in r.output
