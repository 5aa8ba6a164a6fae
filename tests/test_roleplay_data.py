"""The group format, its loader and bad input, the golden-group mask, splits, reverse coding, the
memory module (closed world: exactly what the human saw) and the turn-step schedule."""
from __future__ import annotations

import json

import pytest

from chorus.simulate.roleplay.data import (FIXTURE, GroupFormatError, golden_mask, load_groups, mask_reasons, parse_group,
                                    select_split, to_record)
from chorus.simulate.roleplay.agent_memory import build_memory
from chorus.simulate.roleplay.prompts import load_prompts, render
from chorus.simulate.roleplay.setups import human_rows, steps


@pytest.fixture(scope="module")
def groups():
    return load_groups(FIXTURE)


def _rec(groups, i=0):
    return to_record(groups[i])


def _write(tmp_path, recs):
    p = tmp_path / "g.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return p


def test_fixture_is_marked_synthetic(groups):
    head = FIXTURE.read_text().splitlines()[0]
    assert "SYNTHETIC" in head
    assert "SYNTHETIC" in (FIXTURE.parent / "README.md").read_text()
    assert all(g.synthetic for g in groups)
    assert len({g.topic for g in groups}) == 2 and len(groups) == 9


def test_mask_excludes_and_counts_dropout(groups):
    kept, excluded = golden_mask(groups)
    assert len(kept) == 8
    assert excluded == [{"group_id": "SYNTH-A6-dropout", "topic": "Angels are real.", "reasons": ["p4 final: missing"]}]


def test_mask_off_topic_labels(groups):
    g = parse_group(_rec(groups), "x")
    g.rounds[1].tweet_on_topic["p2"] = False
    g.rounds[2].chats[0].utterances[1].on_topic = False
    why = mask_reasons(g)
    assert "p2 tweet round 2: off-topic" in why
    assert any(w.endswith("chat round 3: off-topic") for w in why)
    # classifier labels keyed by text apply where the record has none
    g2 = parse_group(_rec(groups), "x")
    why2 = mask_reasons(g2, on_topic={g2.participants[0].initial.text: False})
    assert "p1 initial: off-topic" in why2 and all(w.endswith("off-topic") for w in why2)


def test_roundtrip(groups, tmp_path):
    p = _write(tmp_path, [to_record(g) for g in groups])
    again = load_groups(p)
    assert [to_record(g) for g in again] == [to_record(g) for g in groups]


def test_reverse_coding(groups):
    sci = [g for g in groups if g.truth_framed][0]
    ang = [g for g in groups if not g.truth_framed][0]
    assert sci.coded(2.0) == 5.0 and sci.coded(6) == 1.0
    assert ang.coded(2.0) == 2.0


def test_splits(groups):
    kept, _ = golden_mask(groups)
    assert [g.group_id for g in select_split(kept, "group", "test")] == ["SYNTH-A2", "SYNTH-B2"]
    assert {g.topic for g in select_split(kept, "topic", "test")} == {
        "Everything that happens can eventually be explained by science."}
    assert len(select_split(kept, "topic", "train")) == 5
    with pytest.raises(ValueError, match="split kind"):
        select_split(kept, "person", "test")


@pytest.mark.parametrize("mutate,match", [
    (lambda r: r.pop("topic"), r":1 \(group 'SYNTH-A1'\): missing field topic"),
    (lambda r: r["participants"][2]["initial"].update(stance=7), r"participants\[2\]\.initial\.stance = 7 is off the 1-6"),
    (lambda r: r["participants"][0]["final"].update(stance=0.5), r"final\.stance = 0\.5 is off"),
    (lambda r: r["participants"][0]["final"].update(stance="high"), r"final.stance must be int/float, got 'high'"),
    (lambda r: r["rounds"][1]["chats"][0]["utterances"][0].update(speaker="p9"), r"rounds\[1\]\.chats\[0\]\.utterances\[0\]\.speaker = 'p9'"),
    (lambda r: r.update(truth_framed="yes"), r"truth_framed must be bool, got 'yes'"),
    (lambda r: r.update(split={"group": "dev"}), r"split.group = 'dev'"),
    (lambda r: r["rounds"][0]["tweets"].update(p7="hi"), r"tweets names unknown participant 'p7'"),
])
def test_malformed_records_name_group_and_field(groups, tmp_path, mutate, match):
    rec = _rec(groups)
    mutate(rec)
    with pytest.raises(GroupFormatError, match=match) as e:
        load_groups(_write(tmp_path, [rec]))
    assert "g.jsonl:1" in str(e.value)


def test_bad_json_and_duplicates(groups, tmp_path):
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps(_rec(groups)) + "\n{not json\n")
    with pytest.raises(GroupFormatError, match=r"g.jsonl:2: not valid JSON"):
        load_groups(p)
    with pytest.raises(GroupFormatError, match=r"duplicate group_id 'SYNTH-A1' \(first on line 1\)"):
        load_groups(_write(tmp_path, [_rec(groups), _rec(groups)]))


def _unique(g):
    """The same group with every text replaced by a unique tag, so set comparisons are exact."""
    g = parse_group(to_record(g), "x")
    for p in g.participants:
        p.initial.text, p.final.text = f"{p.id}-initial", f"{p.id}-final"
    for r, rd in enumerate(g.rounds):
        rd.tweets = {pid: f"{pid}-post-r{r + 1}" for pid in rd.tweets}
        for c in rd.chats:
            for k, u in enumerate(c.utterances):
                u.text = f"{c.a}{c.b}-r{r + 1}-u{k}-{u.speaker}"
    return g


def test_memory_is_exactly_what_the_human_saw(groups):
    g = _unique(groups[0])
    # p1 chats with p2 in round 1 and with p3 in round 2; writes utterance k=2 of the round-2 chat
    assert g.partner("p1", 0) == "p2" and g.partner("p1", 1) == "p3"
    m = build_memory(g, "p1", ("chat", 1, 2))
    assert m.texts() == ["p1-initial", "p1-post-r1", "p2-post-r1", "p1p2-r1-u0-p1", "p1p2-r1-u1-p2", "p1p2-r1-u2-p1",
                         "p1p2-r1-u3-p2", "p1-post-r2", "p3-post-r2", "p1p3-r2-u0-p1", "p1p3-r2-u1-p3"]
    assert [rv.utterances[0][0] for rv in m.rounds] == [True, True]      # who spoke is kept
    assert m.demographics == g.participant("p1").demographics and m.initial_stance == g.participant("p1").initial.stance
    conv = render(m, load_prompts())
    assert [x["role"] for x in conv] == ["system", "user"]
    for t in m.texts():
        assert t in conv[1]["content"]
    every = {p.id + "-final" for p in g.participants} | {f"{p}-initial" for p in ("p2", "p3", "p4")} | \
            {"p3-post-r1", "p4-post-r1", "p2-post-r2", "p4-post-r2", "p1p3-r2-u2-p1", "p1-post-r3"}
    for t in every:  # other dyads, non-partners' posts, private opinions, the future: never shown
        assert t not in conv[1]["content"]
    assert "p3p4-r1" not in conv[1]["content"]
    assert "age: " in conv[0]["content"]


def test_memory_before_first_post_and_final(groups):
    g = _unique(groups[1])
    m0 = build_memory(g, "p3", ("tweet", 0, None))
    assert m0.texts() == ["p3-initial"] and m0.rounds == []
    m1 = build_memory(g, "p3", ("tweet", 1, None))
    assert m1.texts()[:3] == ["p3-initial", "p3-post-r1", "p4-post-r1"] and "p3-post-r2" not in m1.texts()
    mf = build_memory(g, "p4", ("final", None, None))
    assert [rv.partner for rv in mf.rounds] == ["p3", "p2", "p1"]
    assert len(mf.texts()) == 1 + 3 * (2 + 4) and "p4-final" not in mf.texts()


def test_one_step_per_turn_across_groups(groups):
    kept, _ = golden_mask(groups)
    plan = steps(kept[:3])
    # per round: one post step + one step per utterance index (4 in the fixture); then the finals
    assert len(plan) == 3 * (1 + 4) + 1
    assert [len(v) for _, v in plan][:2] == [12, 6]      # 3 groups x 4 posts; 3 groups x 2 chats
    assert plan[-1][0][1] == 2 and len(plan[-1][1]) == 12
    hr = human_rows(kept[:1])
    assert hr["kind"].value_counts().to_dict() == {"chat": 24, "tweet": 12, "initial": 4, "final": 4}
    assert len(human_rows(kept[:1], max_utterances=2).query("kind == 'chat'")) == 12
