"""Prompt layout for the engine's prefix cache (issue 27): what the seats of a council or the
agents of a debate share comes first, what differs comes last. Measured on the embedded model's
real rendering (its chat template and tokenizer through ``Engine.render``; no model runs)."""
from __future__ import annotations

import json

import pytest
from conftest import EMBEDDED, Scripted

from chorus.serving.engine import Engine
from chorus.serving.profiles import get_profile
from chorus.simulate.council import prompts as cp
from chorus.simulate.council.data import load_tasks
from chorus.simulate.council.runner import Seat, make_councils, run_councils
from chorus.simulate.debate import prompts as dp

SEATS = [Seat("A1", "m", "analyst"), Seat("A2", "m", "skeptic"), Seat("A3", "m", "generalist")]


@pytest.fixture(scope="module")
def render(tokenizer):
    eng = Engine(get_profile(EMBEDDED), None, tokenizer, dtype="float32")  # render needs the tokenizer only
    return lambda conv: eng.render(conv).ids


def common(seqs) -> int:
    """Length of the longest common prefix of token sequences."""
    n = min(len(s) for s in seqs)
    return next((k for k in range(n) if len({s[k] for s in seqs}) > 1), n)


def shared_fraction(seqs) -> float:
    """The common prefix over the mean prompt length: the share of each prompt a cache holding
    one of the others can skip."""
    return common(seqs) * len(seqs) / sum(len(s) for s in seqs)


# -- council ----------------------------------------------------------------------------------
def _council_prompts(rounds: int = 3, adversaries=()):
    """Every conversation a 3-seat council sends, by (seat, round), through the real runner."""
    tasks, _ = load_tasks("truthfulqa_claims", 1, balanced=True)

    def policy(me, kind, conv, schema):
        if kind == "envelope":
            return {"answer": "true", "reasoning": "It matches what is widely reported.", "evidence": "a source",
                    "confidence": "likely"}
        return {"move": "propose", "target": "none", "answer": "true", "reason": "the evidence holds"}

    eng = Scripted(policy)
    P = cp.load_prompts()
    run_councils(make_councils(tasks, [("c", tuple(adversaries))], [0]), SEATS, {"m": eng}, rounds=rounds, P=P)
    assert len(eng.seen) == 3 * rounds  # one batch per round in seat order, no retries
    return {(SEATS[i % 3].agent, i // 3): conv for i, conv in enumerate(eng.seen)}, P


def test_council_seats_share_all_but_their_own_tail(render):
    convs, P = _council_prompts()
    assert P["_name"] == "council_v2" and P["version"] == 2  # the layout is versioned: provenance names it
    for rnd in range(3):
        ids = [render(convs[(s.agent, rnd)]) for s in SEATS]
        c = common(ids)
        # everything up to the seat's persona is shared: each seat's own text is at most its last 40 tokens
        assert all(len(x) - c <= 40 for x in ids), (rnd, [len(x) - c for x in ids])
        assert shared_fraction(ids) > (0.8 if rnd == 0 else 0.85)  # measured: 0.86, 0.90, 0.91
        persona = [P["personas"][s.persona] for s in SEATS]
        for conv, text in zip((convs[(s.agent, rnd)] for s in SEATS), persona):
            assert conv[-1]["role"] == "user" and text in conv[-1]["content"]
            assert all(m["role"] != "system" for m in conv)  # honest seats: no per-seat system message
    # round r + 1 reuses round r's prompt through the transcript of the rounds before r
    r1, r2 = render(convs[("A2", 1)]), render(convs[("A2", 2)])
    transcript_r0 = convs[("A2", 1)][-1]["content"].split("Positions now:")[0]
    assert convs[("A2", 2)][-1]["content"].startswith(transcript_r0)
    assert common([r1, r2]) >= len(render([{"role": "user", "content": transcript_r0}])) - 8


def test_council_v1_layout_shared_almost_nothing(render):
    """The layout v2 replaced: the persona as the system message put the seats apart at the start."""
    convs, P = _council_prompts(rounds=1)
    v1 = [[{"role": "system", "content": P["personas"][s.persona]}] + convs[(s.agent, 0)] for s in SEATS]
    assert shared_fraction([render(c) for c in v1]) < 0.05  # measured: 6 of ~157 tokens
    assert shared_fraction([render(convs[(s.agent, 0)]) for s in SEATS]) > 0.8


def test_council_stealth_role_is_prepended_and_sees_the_honest_prompt(render):
    convs, P = _council_prompts(adversaries=("A3",))
    honest, _ = _council_prompts()
    for rnd in range(3):
        adv = convs[("A3", rnd)]
        assert adv[0]["role"] == "system" and "covert member" in adv[0]["content"]  # BDA §F.2: prepended
        assert adv[1:] == honest[("A3", rnd)]  # after it, exactly what the same seat sees without the role
        assert all(m["role"] != "system" for m in convs[("A1", rnd)])
    assert "covert member" not in json.dumps([convs[("A1", r)] for r in range(3)])


# -- debate -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def items():
    from chorus.simulate.debate.config import DebateConfig, load
    from chorus.simulate.debate.experiment import select_items

    its, _ = select_items(load("smoke", DebateConfig, {"bench.limit": 6}).bench)
    return [it for it in its if not it.numeric]


PREV = ["First I weigh the options carefully. Answer: A", "The second one fits better here. Answer: B",
        "Option A is supported by the evidence. Answer: A"]


def test_debate_round0_prompts_are_identical(render, items):
    P = dp.load_prompts()
    for it in items:
        ids = [render(dp.turn_messages(it, a, 0, "debate", [], P)) for a in range(3)]
        assert ids[0] == ids[1] == ids[2]  # one prefill for the three agents


def test_debate_rounds_share_the_question_and_reuse_round0(render, items):
    """Round r >= 1: agents share the question turn and part at their own previous response (its
    own turn, as the protocol fixes); a round-1 prompt begins with the round-0 prompt, so the
    cache reuses the round-0 prefill and the agent's own generation after it."""
    P = dp.load_prompts()
    for it in items:
        r0 = render(dp.round0_messages(it, P))
        for cond in ("debate", "reflection"):
            convs = [dp.turn_messages(it, a, 1, cond, PREV, P) for a in range(3)]
            ids = [render(c) for c in convs]
            assert common(ids) >= len(r0) - 1  # the whole round-0 prompt (its last token may merge)
            for a, c in enumerate(convs):
                assert render(c[:-2])[:len(r0) - 1] == r0[:-1]
                assert c[-2] == {"role": "assistant", "content": PREV[a]}
        deb = [dp.turn_messages(it, a, 1, "debate", PREV, P) for a in range(3)]
        ref = [dp.turn_messages(it, a, 1, "reflection", PREV, P) for a in range(3)]
        for a in range(3):
            assert deb[a][:-1] == ref[a][:-1]  # matched: the same turns, the peers only in debate's last one
            peers = [f"Agent {j + 1}'s response" for j in range(3) if j != a]
            pos = [deb[a][-1]["content"].find(p) for p in peers]
            assert -1 not in pos and pos == sorted(pos)  # peers in agent order for every receiver
            assert deb[a][-1]["content"].endswith(P["instruction"].format(labels=dp.labels_text(it.labels)))
