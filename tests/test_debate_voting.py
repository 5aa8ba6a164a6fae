"""The compute-matched vote arm (simulate/debate/voting.py): token matching within one
generation, plurality / ties, the sample cap, seeds independent of batching (a scripted engine
double: fixed completion token counts, control flow only), and one tiny run on the embedded model."""
import json
from types import SimpleNamespace

import pandas as pd
import pytest

from chorus.core.config import ConfigError
from chorus.core.seeding import rng as make_rng
from chorus.serving.types import Completion
from chorus.simulate.debate.config import DebateConfig, load
from chorus.simulate.debate.metrics import plurality, question_table
from chorus.simulate.debate.prompts import load_prompts
from chorus.simulate.debate.protocol import TURN_COLUMNS, qkey, run_protocol, turn_seed
from chorus.simulate.debate.questions import validate_item, write_bench
from chorus.simulate.debate.voting import (VOTE_COLUMNS, plot_arms, run_voting, vote_question_table, vote_seed,
                                    vote_summary)

P = load_prompts()
ITEMS = [validate_item({"id": f"q{i}", "domain": "knowledge", "subdomain": "toy", "family": f"f{i % 2}",
                        "question": f"Question {i}?", "options": ["x", "y", "z"], "reference": "A"})
         for i in range(4)]


class Script:
    """Engine double. A call's completion tokens and answer are functions of its seed only (so
    they do not depend on batching); ``fixed`` maps a seed to a token count."""
    max_model_len = 10 ** 6

    def __init__(self, tokens=lambda s: 5 + s % 17, answer=lambda s: "ABC"[s % 3] if s % 5 else None, fixed=None):
        self.tokens, self.answer, self.fixed = tokens, answer, fixed or {}
        self.batches: list[int] = []
        self.seeds: list[int] = []

    def render(self, messages):
        return SimpleNamespace(ids=[0] * 10)

    def provenance(self):
        return {"profile": "script"}

    def chat(self, convs, *, temperature, top_p, max_tokens, seed, progress=None):
        self.batches.append(len(convs))
        self.seeds.extend(seed)
        out = []
        for s in seed:
            a = self.answer(s)
            out.append(Completion(text=f"So the answer is {a}." if a else "I am not sure.", prompt_tokens=10,
                                  completion_tokens=self.fixed.get(s, self.tokens(s)), finish_reason="stop"))
        return out


def _turns(r0_tokens, r1_tokens, qid="q0", seed=0):
    """A hand-built one-question turns table (debate only): round-0 and round-1 token counts."""
    rows = []
    for r, toks in ((0, r0_tokens), (1, r1_tokens)):
        for a, t in enumerate(toks):
            rows.append({"qid": qid, "family": "f0", "domain": "knowledge", "subdomain": "toy", "agent": a,
                         "round": r, "condition": "debate", "shared": r == 0, "response": "So the answer is A.",
                         "answer": "A", "parsed": True, "truncated": False, "reference": "A", "correct": True,
                         "prompt_tokens": 10, "completion_tokens": t, "cached": False,
                         "seed": turn_seed(seed, qid, a, r, "debate")})
    return pd.DataFrame(rows, columns=TURN_COLUMNS)


def _vote(eng, turns, items=ITEMS, **kw):
    kw = {"agents": 3, "max_tokens": 100, "prompts": P, **kw}
    return run_voting(eng, items, turns, **kw)


def test_matching_hand_computed_case_and_waves():
    # debate: round 0 = 10 + 20 + 30 = 60 tokens, round 1 = 40 + 50 + 60 -> budget 210. Every vote
    # sample generates 70: 60 -> 130 -> 200 -> 270 >= 210, so 3 extra samples, 270 tokens, gap 60 < 70.
    turns = _turns([10, 20, 30], [40, 50, 60])
    eng = Script(tokens=lambda s: 70)
    votes, info = _vote(eng, turns)
    assert list(votes.columns) == VOTE_COLUMNS
    assert list(votes["sample"]) == [0, 1, 2, 3, 4, 5]
    assert list(votes["completion_tokens"]) == [10, 20, 30, 70, 70, 70]
    assert list(votes["shared"]) == [True] * 3 + [False] * 3
    assert list(votes["seed"][:3]) == [turn_seed(0, "q0", a, 0, "shared") for a in range(3)]
    assert list(votes["seed"][3:]) == [vote_seed(0, "q0", k) for k in (3, 4, 5)]
    # one wave asked ceil(150 / mean 20) = 8 samples; the 5 past the stop are overdrawn, not votes
    assert info["waves"][0]["batch_size"] == 8 and info["n_overdrawn"] == 5 and len(info["waves"]) == 1
    vq = vote_question_table(votes, turns)
    r = vq.iloc[0]
    assert (r["vote_tokens"], r["debate_tokens"], r["token_gap"], r["n_extra"]) == (270, 210, 60, 3)
    assert r["matched"] and not r["cap_hit"]
    # the same arm one sample per wave: 3 waves, nothing overdrawn, identical table
    eng1 = Script(tokens=lambda s: 70)
    votes1, info1 = _vote(eng1, turns, per_wave=1)
    assert eng1.batches == [1, 1, 1] and info1["n_overdrawn"] == 0
    pd.testing.assert_frame_equal(votes, votes1)


def test_exact_budget_and_round0_alone():
    # a sample that lands exactly on the budget stops the arm with gap 0
    votes, _ = _vote(Script(tokens=lambda s: 25), _turns([10, 10, 10], [20, 20, 10]))
    vq = vote_question_table(votes, _turns([10, 10, 10], [20, 20, 10]))
    assert (vq.at[0, "vote_tokens"], vq.at[0, "token_gap"], vq.at[0, "n_samples"]) == (80, 0, 5)
    # a debate that generated nothing after round 0: round 0 already meets the budget, no extra sample
    eng = Script()
    votes, info = _vote(eng, _turns([10, 10, 10], [0, 0, 0]))
    assert len(votes) == 3 and eng.batches == [] and info["waves"] == []
    vq = vote_question_table(votes, _turns([10, 10, 10], [0, 0, 0]))
    assert vq.at[0, "matched"] and vq.at[0, "token_gap"] == 0


def test_protocol_then_vote_matches_within_one_generation_and_ignores_batching():
    eng = Script()
    turns, _ = run_protocol(eng, ITEMS, agents=3, rounds=2, max_tokens=100, prompts=P)
    votes, info = _vote(eng, turns)
    vq = vote_question_table(votes, turns)
    assert len(vq) == 4 and vq["matched"].all() and not vq["cap_hit"].any()
    for qid, g in votes.groupby("qid"):
        c = g.sort_values("sample")["completion_tokens"].cumsum().to_numpy()
        b = int(turns[(turns["qid"] == qid) & (turns["condition"] == "debate")]["completion_tokens"].sum())
        assert c[-1] >= b and (len(c) == 3 or c[-2] < b)  # the first sample that reaches debate's total
    # vote seeds are new (condition key 3), never a debate or reflection seed
    extra = votes[~votes["shared"]]
    assert not set(extra["seed"]) & set(turns["seed"])
    # per question alone, one sample per wave, or in one batch: the same arm
    for kw in ({"per_wave": 1}, {"per_wave": 2}):
        v2, _ = _vote(Script(), turns, **kw)
        pd.testing.assert_frame_equal(votes, v2)
    alone = pd.concat([_vote(Script(), turns[turns["qid"] == it.id], items=[it])[0] for it in ITEMS], ignore_index=True)
    pd.testing.assert_frame_equal(votes, alone)


def test_cap_is_counted():
    turns = _turns([10, 10, 10], [40, 40, 40])  # budget 150
    votes, _ = _vote(Script(tokens=lambda s: 20), turns, max_samples=5)  # 30 + 2 x 20 = 70 < 150
    assert len(votes) == 5
    vq = vote_question_table(votes, turns, max_samples=5)
    assert vq.at[0, "cap_hit"] and not vq.at[0, "matched"] and vq.at[0, "token_gap"] == 70 - 150
    s = vote_summary(vq, votes, question_table(turns), n_boot=0, n_perm=0)
    assert s["n_cap_hits"] == 1 and s["n_matched"] == 0
    with pytest.raises(ValueError, match="max_samples = 2 is below agents = 3"):
        _vote(Script(), turns, max_samples=2)


def _votes(qid, answers):
    return pd.DataFrame([{"qid": qid, "sample": k, "shared": k < 3, "response": "", "answer": a,
                          "parsed": a is not None, "truncated": False, "completion_tokens": 10, "seed": k,
                          "cached": False}
                         for k, a in enumerate(answers)], columns=VOTE_COLUMNS)


@pytest.mark.parametrize("answers, maj, uniq, wu, wm, n_unparsed", [
    (["B", "B", None, "B"], "B", True, True, True, 1),        # unanimous among the parsed, wrong
    (["B", "B", "A"], "B", True, False, True, 0),             # 2 of 3 on B: wrong majority, not unanimous
    (["B", "C", "A", "A"], "A", True, False, False, 0),       # plurality right; no wrong answer over half
    (["B", None, None], "B", True, False, True, 2),           # one parsed vote: a (wrong) majority, not unanimity
    (["B", "B", "C", "C"], None, False, False, False, 0),     # a B/C tie: the seeded draw decides
])
def test_plurality_unanimity_and_ties(answers, maj, uniq, wu, wm, n_unparsed):
    turns = _turns([10] * 3, [10] * 3)
    vq = vote_question_table(_votes("q0", answers), turns, seed=4)
    r = vq.iloc[0]
    expect = maj or plurality(answers, make_rng(4, 7, qkey("q0"), 1))[0]  # the final round's draw
    assert r["majority"] == expect and r["majority_unique"] == uniq
    assert (r["wrong_unanimous"], r["wrong_majority"], r["n_unparsed"]) == (wu, wm, n_unparsed)
    assert r["majority_correct"] == (expect == "A")
    if not uniq:  # ties do not follow position: over seeds both tied answers win
        wins = {vote_question_table(_votes("q0", answers), turns, seed=s).at[0, "majority"] for s in range(20)}
        assert wins == {"B", "C"}


def test_summary_three_arms_and_paired_deltas(tmp_path):
    from chorus.simulate.debate.experiment import run_debate
    bench = tmp_path / "bench.jsonl"
    write_bench(ITEMS, bench)
    cfg = DebateConfig(name="vote", rounds=1, bench={"path": str(bench)}, generation={"max_tokens": 100},
                       analysis={"n_boot": 20, "n_perm": 20}, voting={"enabled": True})
    # the other report figures are not this test's business; the vote figure is drawn below
    run, s = run_debate(cfg, tmp_path / "run", engine=Script(answer=lambda s: "ABC"[s % 3]), make_plots=False)
    v = s["vote"]
    vq = run.read_table("vote_questions")
    assert len(run.read_table("votes")) == v["n_samples"] == vq["n_samples"].sum()
    assert v["n_matched"] == 4 and v["n_cap_hits"] == 0 and v["parse_rate"] == 1.0
    assert set(v["arms"]) == {"debate", "reflection", "vote"} and v["n_paired"] == 4
    assert v["arms"]["vote"]["accuracy"]["estimate"] == pytest.approx(vq["majority_correct"].astype(float).mean())
    assert v["tokens_per_question"]["gap_vote_minus_debate"]["min"] >= 0
    pairs = {(d["a"], d["b"]) for d in v["deltas"]}
    assert {("debate_final_majority", "vote_majority"), ("debate_wrong_unanimous", "vote_wrong_unanimous")} <= pairs
    d = next(d for d in v["deltas"] if d["a"] == "debate_final_majority")
    acc = {a: m["accuracy"]["estimate"] for a, m in v["arms"].items()}
    assert d["delta"] == pytest.approx(acc["debate"] - acc["vote"])
    assert plot_arms(v, tmp_path / "vote_arms.png").is_file()
    assert json.loads((run.path / "summary.json").read_text())["vote"]["n_samples"] == v["n_samples"]


def test_config_voting_block():
    assert DebateConfig().conditions == ["debate", "reflection"] and not DebateConfig().voting.enabled
    assert load("smoke", DebateConfig, {"voting.enabled": True}).voting.max_samples == 64
    with pytest.raises(ConfigError, match="voting.enabled needs 'debate'"):
        load("smoke", DebateConfig, {"voting.enabled": True, "conditions": ["reflection"]})
    with pytest.raises(ConfigError, match="max_samples"):
        load("smoke", DebateConfig, {"voting.enabled": True, "voting.max_samples": 2})
    with pytest.raises(ConfigError, match="voting.per_wave"):
        load("smoke", DebateConfig, {"voting.per_wave": 0})


@pytest.mark.slow
def test_vote_arm_on_embedded_model(hf_engine, tmp_path):
    """Plumbing on SmolLM2-135M: 2 questions, 1 round, 32 tokens; the numbers are not findings."""
    from chorus.simulate.debate.experiment import report, run_debate
    bench = tmp_path / "bench.jsonl"
    write_bench(ITEMS[:2], bench)
    cfg = DebateConfig(name="vote-e2e", rounds=1, bench={"path": str(bench)}, conditions=["debate"], agents=2,
                       model={"profile": "smollm2-135m-instruct", "backend": "hf"},
                       generation={"max_tokens": 32}, analysis={"n_boot": 20, "n_perm": 20}, voting={"enabled": True})
    run, s = run_debate(cfg, tmp_path / "run", engine=hf_engine, make_plots=False)
    votes, vq, turns = run.read_table("votes"), run.read_table("vote_questions"), run.read_table("turns")
    assert len(vq) == 2 and vq["matched"].all() and s["vote"]["n_cap_hits"] == 0
    assert ((vq["token_gap"] >= 0) & (vq["token_gap"] < vq["last_sample_tokens"].clip(lower=1))).all()
    r0 = turns[turns["round"] == 0].sort_values(["qid", "agent"])
    assert list(votes[votes["shared"]].sort_values(["qid", "sample"])["response"]) == list(r0["response"])
    assert votes.loc[~votes["parsed"], "answer"].isna().all()  # unparsed samples are no votes
    calls = hf_engine.model_calls
    s2 = report(run.path, make_plots=False)  # from the files alone
    assert s2["vote"]["n_samples"] == s["vote"]["n_samples"] and hf_engine.model_calls == calls
