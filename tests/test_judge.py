"""The frozen judge pass (issue 19 item 5, BDA paper D.3): the ledger is rebuilt from the call store
with no model call, a reply outside the candidates is NONE with its raw text, records the parser reads
never reach the judge, parse rates before / after on hand-built tables, both parts' run directories
(council and debate) re-rendered with the judged answers, and one tiny pass through the embedded model."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pandas as pd
import pytest

from chorus.serving.engine import Engine
from chorus.serving.profiles import get_profile
from chorus.serving.store import CallStore
from chorus.simulate.council.judged import council_judged
from chorus.simulate.debate.judged import apply_debate_verdicts
from chorus.simulate.judge import JudgeError, NONE, judge_pass, ledger_counts, parse_verdict

EMBEDDED = "smollm2-135m-instruct"


# -- a real Engine (store, keys, structured-output checks) over a scripted backend ----------------------
class CharTok:
    chat_template = None
    bos_token = None

    def __call__(self, text, add_special_tokens=False):
        # one text or a batch, as a Hugging Face tokenizer (Engine.prepare encodes a batch in one call)
        if isinstance(text, str):
            return SimpleNamespace(input_ids=[ord(c) for c in text])
        return {"input_ids": [[ord(c) for c in t] for t in text]}


class ScriptBackend:
    """Replies come from ``policy(prompt_text, sampling)``; ``raise_on_call`` models an engine that
    must not compute anything (everything has to come from the store)."""
    name = "script"
    max_model_len = 1_000_000

    def __init__(self, policy, raise_on_call: bool = False):
        self.policy, self.raise_on_call, self.prompts = policy, raise_on_call, []

    def generate(self, prompts, samplings):
        if self.raise_on_call:
            raise AssertionError(f"a model call was made for {len(prompts)} requests")
        done = []
        for j, (ids, s) in enumerate(zip(prompts, samplings)):
            text = "".join(map(chr, ids))
            self.prompts.append(text)
            done.append((j, {"text": self.policy(text, s), "prompt_tokens": len(ids), "completion_tokens": 3,
                             "finish_reason": "stop"}))
        yield done

    def settings(self):
        return {"backend": "script"}

    def close(self):
        pass


def script_engine(policy, store=None, raise_on_call=False) -> Engine:
    return Engine(get_profile(EMBEDDED), ScriptBackend(policy, raise_on_call), CharTok(), dtype="float32",
                  store=store if store is None or isinstance(store, CallStore) else CallStore(store),
                  weights_sha256="scripted")


def judge_reply(table: dict[str, str]):
    """A judge that looks the answer up in ``table`` (answer substring -> reply), else says NONE."""
    def policy(text, s):
        ans = text.split('"""')[1]
        return next((v for k, v in table.items() if k in ans), "NONE")
    return policy


MC = dict(candidates=["A", "B", "C", "D"], options=["Taxing imports", "Coining money", "Raising armies", "None"])
RECORDS = [
    {"record_id": "r1", **MC, "answer_text": "Congress has the authority to coin money, so that is the power."},
    {"record_id": "r2", **MC, "answer_text": "I cannot say; several seem plausible.", "condition": "debate"},
    {"record_id": "r3", **MC, "answer_text": "It is about armies, and also taxes."},
    {"record_id": "r4", **MC, "answer_text": "The answer is B."},
    {"record_id": "r5", "candidates": ["true", "false"], "answer_text": '{"answer": "false", "reasoning": "the cl'},
]
TABLE = {"coin money": "B", "several": "NONE", "armies": "Paris is lovely."}


def test_ledger_reproducible_from_the_store_with_no_model_call(tmp_path):
    store = tmp_path / "calls.sqlite"
    eng = script_engine(judge_reply(TABLE), store)
    first = judge_pass(eng, RECORDS, seed=3)
    assert eng.backend.prompts and len(eng.backend.prompts) == 3
    assert list(first.loc[first["sent"], "cached"]) == [False] * 3
    # the same pass on the same store through an engine that fails on any generation
    replay = script_engine(judge_reply({}), store, raise_on_call=True)
    again = judge_pass(replay, RECORDS, seed=3)
    assert replay.model_calls == 0
    assert list(again.loc[again["sent"], "cached"]) == [True] * 3
    pd.testing.assert_frame_equal(first.drop(columns="cached"), again.drop(columns="cached"))
    row = first.set_index("record_id")
    assert row.loc["r1", "judge_verdict"] == "B" and row.loc["r1", "judged_answer"] == "B"
    assert row.loc["r2", "judge_verdict"] == NONE and bool(row.loc["r2", "judge_parsed"])
    assert row.loc["r2", "condition"] == "debate"  # pass-through keys kept
    assert set(first["prompt_name"]) == {"judge_v1"} and first["prompt_sha256"].str.len().eq(64).all()
    assert set(first.loc[first["sent"], "judge_profile"]) == {EMBEDDED}
    assert ledger_counts(first) == {"records": 5, "read_by_parser": 2, "sent": 3, "mapped": 1, "none": 1,
                                    "judge_unparsed": 1}


def test_a_reply_outside_the_candidates_is_none_with_its_raw_text(tmp_path):
    led = judge_pass(script_engine(judge_reply(TABLE)), RECORDS[2:3]).iloc[0]
    assert led["judge_raw"] == "Paris is lovely."
    assert led["judge_verdict"] == NONE and not led["judge_parsed"] and led["judged_answer"] is None
    cands = ["A", "B", "C", "D"]
    assert parse_verdict("B", cands) == ("B", True)
    assert parse_verdict("**C**.", cands) == ("C", True)
    assert parse_verdict("NONE.", cands) == (NONE, True)
    assert parse_verdict("The answer commits to option D", cands) == ("D", True)
    assert parse_verdict("B or NONE", cands) == (NONE, False)  # both: recorded, never guessed
    assert parse_verdict("A: Taxing imports\nB: Coining money", cands) == (NONE, False)  # lists the options
    assert parse_verdict("B\nbecause the answer names coining money, not A", cands) == ("B", True)
    assert parse_verdict("a", cands) == (NONE, False)  # lower-case "a" is an article, not a label
    assert parse_verdict("", cands) == (NONE, False)
    assert parse_verdict("False", ["true", "false"]) == ("false", True)
    assert parse_verdict("maybe", ["true", "false"]) == (NONE, False)


def test_records_the_parser_reads_never_reach_the_judge():
    eng = script_engine(judge_reply(TABLE))
    recs = RECORDS + [{"record_id": "r6", **MC, "answer_text": "whatever text", "parser_answer": "C"}]
    led = judge_pass(eng, recs).set_index("record_id")
    seen = "\n".join(eng.backend.prompts)
    assert "The answer is B." not in seen and '"answer": "false"' not in seen and "whatever text" not in seen
    assert "coin money" in seen and "Coining money" in seen  # the judge reads the option texts
    assert "Who" not in seen  # ... and no question (there is none in a record)
    assert led.loc["r4", "parser_answer"] == "B" and not led.loc["r4", "sent"] and pd.isna(led.loc["r4", "judge_raw"])
    assert led.loc["r5", "judged_answer"] == "false" and led.loc["r6", "judged_answer"] == "C"
    assert list(led["sent"]) == [True, True, True, False, False, False]


def test_bad_records_name_the_field():
    eng = script_engine(judge_reply({}))
    with pytest.raises(JudgeError, match="'answer_text' is missing"):
        judge_pass(eng, [{"record_id": "x", "candidates": ["A", "B"]}])
    with pytest.raises(JudgeError, match="3 option texts for 2 candidates"):
        judge_pass(eng, [{"record_id": "x", "candidates": ["A", "B"], "options": ["a", "b", "c"], "answer_text": ""}])
    with pytest.raises(JudgeError, match="other than 'NONE'"):
        judge_pass(eng, [{"record_id": "x", "candidates": ["A", "NONE"], "answer_text": "A"}])
    with pytest.raises(JudgeError, match="repeats"):
        judge_pass(eng, [{"record_id": "x", "candidates": ["A", "B"], "answer_text": "A."}] * 2)


def _ledger(rows):
    return pd.DataFrame([{"record_id": r, "judged_answer": a, "sent": True, "judge_verdict": a or NONE,
                          "judge_parsed": True} for r, a in rows])


def test_parse_rate_before_and_after_hand_built():
    # council: 4 MoA-Lite tasks, 2 parsed (1 right), 2 unparsed; the judge maps one (to gold), NONE for the other
    base = pd.DataFrame({"dataset": "mmlu", "condition": "clean", "method": "moa_lite",
                         "trace_id": ["t0", "t1", "t2", "t3"], "gold": ["A", "B", "C", "D"],
                         "answer": ["A", "C", None, None], "parsed": [True, True, False, False]})
    led = _ledger([("mmlu|clean|moa_lite|t2", "C"), ("mmlu|clean|moa_lite|t3", None)])
    r = council_judged(base, led).iloc[0]
    assert (r["parse_rate"], r["parse_rate_judged"]) == (0.5, 0.75)
    assert (r["accuracy_all"], r["accuracy_all_judged"]) == (0.25, 0.5)
    assert r["n_judge_mapped"] == 1
    assert list(base["answer"].isna()) == [False, False, True, True]  # the originals are not touched
    # debate: 1 question, 2 agents, rounds 0-1; a shared round-0 turn is one record serving both conditions
    rows = []
    for cond in ("debate", "reflection"):
        for rnd in (0, 1):
            for a in (0, 1):
                unparsed = (rnd == 0 and a == 1) or (cond == "reflection" and rnd == 1 and a == 0)
                rows.append({"qid": "q", "agent": a, "round": rnd, "condition": cond, "shared": rnd == 0,
                             "answer": None if unparsed else "A", "parsed": not unparsed, "reference": "A"})
    turns = pd.DataFrame(rows)
    t = apply_debate_verdicts(turns, _ledger([("q|a1|r0|shared", "A"), ("q|a0|r1|reflection", None)]))
    by = t.groupby("condition")
    assert by["parsed_original"].mean().to_dict() == {"debate": 0.75, "reflection": 0.5}
    assert by["parsed"].mean().to_dict() == {"debate": 1.0, "reflection": 0.75}
    assert int(t["judged"].sum()) == 2 and t.loc[t["judged"], "correct"].all()
    assert int(turns["answer"].isna().sum()) == 3


# -- both parts' run directories -------------------------------------------------------------------
def test_council_run_judge_pass_rerenders_the_report(tmp_path):
    from typer.testing import CliRunner

    from chorus.cli import app
    from chorus.simulate.council.config import load
    from chorus.simulate.council.experiment import run_council_experiment

    def policy(text, s):
        if s.json_schema is None:  # the judge
            return "true" if "holds up" in text.split('"""')[1] else "Paris"
        props = s.json_schema["properties"]
        if "move" in props:
            return json.dumps({"move": "propose", "target": "none", "answer": "true", "reason": "r"})
        if "evidence" in props:
            return json.dumps({"answer": "true", "reasoning": "r", "evidence": "e", "confidence": "likely"})
        return "The claim holds up." if s.seed % 2 else "Hmm."  # the synthesizer, in prose: never parsed

    cfg = load("tiny", {"data.0.n": 4, "conditions": [{"name": "clean"}], "baselines.methods": ["moa_lite"],
                        "judge": {"profile": EMBEDDED}})
    eng = script_engine(policy, tmp_path / "calls.sqlite")
    run, summary = run_council_experiment(cfg, tmp_path / "run", engines={p: eng for p in cfg.profiles()},
                                          make_plots=False, aggregate=False)
    info = json.loads((run.path / "judge.json").read_text())
    base = run.read_table("baselines")
    assert info["counts"]["sent"] == int((~base["parsed"]).sum()) == 4 and info["counts"]["records"] == 4
    led = run.read_table("judge_ledger")
    assert set(led["judge_verdict"]) <= {"true", NONE}
    assert led["answer_text"].isin(["The claim holds up.", "Hmm."]).all()
    assert info["counts"]["mapped"] + info["counts"]["judge_unparsed"] == 4  # "Paris" is no verdict
    res = run.read_table("results").set_index("arm").loc["moa_lite"]
    mapped = int((led["judge_verdict"] == "true").sum())
    assert res["parse_rate"] == 0.0 and res["parse_rate_judged"] == mapped / 4
    assert "parse_rate_judged" in (run.path / "results.md").read_text()
    assert json.loads((run.path / "provenance.json").read_text())["judge"]["prompt"]["name"] == "judge_v1"
    # the CLI again on the same store: every verdict cached (the real engine would make no call)
    r = CliRunner().invoke(app, ["council", "judge", str(tmp_path / "nope")])
    assert r.exit_code != 0 and "nope" in r.output
    from chorus.simulate.council.judged import council_judge
    again = council_judge(run.path, engine=script_engine(policy, tmp_path / "calls.sqlite", raise_on_call=True),
                          make_plots=False, aggregate=False)
    assert again["cached"] == 4 and again["counts"] == info["counts"]


def test_debate_run_judge_pass_rerenders_the_summary(tmp_path):
    from chorus.simulate.debate.config import DebateConfig, load
    from chorus.simulate.debate.experiment import run_debate
    from chorus.simulate.debate.judged import debate_judge

    def judge(text, s):  # the first label offered
        return re.search(r"Reply with exactly one of: ([^,]+),", text).group(1)

    from chorus.simulate.debate.questions import Item, write_bench

    items = [Item(id="q1", domain="knowledge", subdomain="mmlu", family="f1", question="Which power has Congress?",
                  options=["Taxing imports", "Coining money"], labels=["A", "B"], reference="B"),
             Item(id="q2", domain="knowledge", subdomain="strategyqa", family="f2", question="Is ice cold?",
                  options=["yes", "no"], labels=["yes", "no"], reference="yes"),
             Item(id="q3", domain="values", subdomain="scenarios", family="f3", question="Pick one.",
                  options=["Left", "Right", "Neither"], labels=["A", "B", "C"], reference=None)]
    write_bench(items, tmp_path / "bench.jsonl")
    cfg = load("smoke", DebateConfig, {"bench.path": str(tmp_path / "bench.jsonl"), "agents": 2, "rounds": 1,
                                       "analysis.n_boot": 0, "analysis.n_perm": 0})
    eng = script_engine(lambda text, s: "I lean towards the second idea." if s.seed % 3 == 0 else "Answer: A")
    run, _ = run_debate(cfg, tmp_path / "run", engine=eng, make_plots=False)
    turns = run.read_table("turns")
    assert not turns["parsed"].all()
    info = debate_judge(run.path, engine=script_engine(judge), make_plots=False)
    # a shared round-0 turn is listed under both conditions but judged once
    bad = turns[~turns["parsed"]]
    n_records = len(bad[~bad["shared"]]) + len(bad[bad["shared"]].drop_duplicates(["qid", "agent", "round"]))
    assert info["counts"]["records"] == info["counts"]["sent"] == info["counts"]["mapped"] == n_records
    s = json.loads((run.path / "summary.json").read_text())
    for c, j in s["judge"]["conditions"].items():
        assert j["parse_rate_before"] == pytest.approx(turns[turns["condition"] == c]["parsed"].mean())
        assert j["parse_rate_after"] == 1.0 and j["metrics_after"]["parse_rate"] == 1.0
        assert s["conditions"][c]["parse_rate"] == j["parse_rate_before"]  # the originals stay
    assert {r["condition"] for r in info["parse_rates"]} == set(turns["condition"])


# -- one tiny real pass ------------------------------------------------------------------------------
@pytest.mark.slow
def test_real_judge_pass_on_the_embedded_model(hf_engine, tmp_path):
    """Plumbing only: SmolLM2-135M's verdicts are not a finding."""
    import torch

    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a shared 2-core CPU: oversubscription costs far more than one thread
    try:
        _real_pass(hf_engine, tmp_path)
    finally:
        torch.set_num_threads(n_threads)


def _real_pass(hf_engine, tmp_path):
    eng = hf_engine.with_store(tmp_path / "calls.sqlite")
    recs = [RECORDS[0], RECORDS[1], RECORDS[3]]  # two prose answers, one the parser reads
    led = judge_pass(eng, recs, max_tokens=8)
    sent = led[led["sent"]]
    assert len(sent) == 2 and eng.model_calls == 2 and not sent["cached"].any()
    assert set(sent["judge_verdict"]) <= {"A", "B", "C", "D", NONE}
    assert sent["judge_raw"].map(lambda t: isinstance(t, str)).all()
    assert (~sent["judge_parsed"].astype(bool) <= (sent["judge_verdict"] == NONE)).all()
    again_eng = hf_engine.with_store(tmp_path / "calls.sqlite")
    again = judge_pass(again_eng, recs, max_tokens=8)
    assert again_eng.model_calls == 0 and again.loc[again["sent"], "cached"].all()
    pd.testing.assert_frame_equal(led.drop(columns="cached"), again.drop(columns="cached"))
