"""The magnitude-matched source-cue set (chorus.interventions.ablations, peer-influence paper §4.3): the
contexts of both cue sets for a constructed pair, the per-set record / status contrasts and ratio
on a hand-made wide table whose values are known, and the config's cue-set check. No model: a
whitespace tokenizer stands in (the real-model run: tests/test_debate_e2e.py)."""
from __future__ import annotations

import pandas as pd
import pytest
from pydantic import ValidationError

from chorus.core.config import ConfigError
from chorus.interventions import ablations as ab
from chorus.interventions.config import InfluenceConfig, load
from chorus.simulate.debate.prompts import debate_messages, load_prompts, readout_prefill
from chorus.simulate.debate.questions import validate_item


class WordText:
    """Whitespace tokenizer (enough for ``phrase_tokens``: words are tokens)."""

    def __call__(self, text, add_special_tokens=False):
        return type("Enc", (), {"input_ids": list(range(len(text.split())))})()


ITEMS = {x["id"]: validate_item(x) for x in [
    {"id": "q1", "domain": "knowledge", "subdomain": "toy", "family": "fa", "question": "What is 2 + 2?",
     "options": ["3", "4", "5"], "reference": "B"}]}
R0 = ["Two and two make four.\nAnswer: B", "I think five is right.\nAnswer: C", "It is three.\nAnswer: A"]
MATCHED = [ab.cue_name(c, "matched") for c in ab.CROSSED]


def _pairs():
    turns = pd.DataFrame([{"condition": "debate", "qid": "q1", "round": 0, "agent": a, "response": t,
                           "answer": t.rsplit("Answer: ", 1)[1]} for a, t in enumerate(R0)])
    return ab.select_pairs(ITEMS, turns, seed=0)


def test_contexts_of_both_sets_differ_only_in_the_peer_description():
    P, pairs = load_prompts(), _pairs()
    p = pairs[0]
    meta, convs = ab.cue_contexts(ITEMS, pairs, P, sets=["original", "matched"])
    names = [m["intervention"] for m in meta]
    # shared controls once; the original crossed cues keep their names; the matched ones carry the set
    assert names == ["no_message", "plain", *ab.CROSSED, *MATCHED, "self_label", "moved"]
    # the default (one set, the paper's) is what it was: the same names, order and contexts
    m0, c0 = ab.cue_contexts(ITEMS, pairs, P)
    assert [m["intervention"] for m in m0] == list(ab.CUES)
    by = dict(zip(names, convs))
    assert [by[m["intervention"]] for m in m0] == c0
    k = p["peer"] + 1
    want = {"good_professor@matched": "who is a professor in this field, who has answered most past questions correctly",
            "poor_ordinary@matched": "who is a layperson in this field, who has answered most past questions wrongly"}
    for name, desc in want.items():
        assert by[name] == readout_prefill(debate_messages(ITEMS["q1"], p["own_text"],
                                                           [(f"Agent {k} ({desc})", p["peer_text"])], P), "", P)
    plain = by["plain"]
    descs = {**ab.cue_descriptions(P, "original"), **ab.cue_descriptions(P, "matched")}
    assert list(descs) == [*ab.CROSSED, *MATCHED]
    for name, desc in descs.items():
        c = by[name]
        assert c[:-2] == plain[:-2] and c[-1] == plain[-1]   # question, own turn and readout cue shared
        # only the peer's name changes: same header, same quoted text
        assert c[-2]["content"] == plain[-2]["content"].replace(f"Agent {k}'s", f"Agent {k} ({desc})'s")
    # one set alone: no bare crossed cues
    m1, _ = ab.cue_contexts(ITEMS, pairs, P, sets=["matched"])
    assert [m["intervention"] for m in m1] == ["no_message", "plain", *MATCHED, "self_label", "moved"]
    with pytest.raises(ValueError, match="unknown cue set 'bogus'"):
        ab.cue_contexts(ITEMS, pairs, P, sets=["bogus"])


def test_matched_wording_is_one_word_swaps_of_equal_length():
    P = load_prompts()
    status, record = ab.cue_phrases(P, "matched")
    for a, b in (status.values(), record.values()):   # each contrast: one word swapped, nothing else
        wa, wb = a.split(), b.split()
        assert len(wa) == len(wb) and sum(x != y for x, y in zip(wa, wb)) == 1
    assert set(ab.phrase_tokens(P, "matched", WordText()).values()) == {7}   # both dimensions 7 words
    orig = ab.phrase_tokens(P, "original", WordText())
    assert orig["good"] > orig["professor"]   # why a matched set: the paper's record wording is longer


# per pair: family, no_message margin, and per set (record R, status S, interaction I): the crossed
# margins are base + R [good] + S [professor] + I [good and professor], so per pair the record
# contrast is R + I / 2, the status contrast S + I / 2, status within a poor record S
PAIRS = [("q1", "fa", 0.0, (2.0, 0.5, 1.0), (1.0, 1.0, 0.0)),
         ("q2", "fb", 1.0, (3.0, 0.5, 0.0), (2.0, 1.0, 0.0)),
         ("q3", "fc", 0.0, (1.0, 1.0, 0.0), (1.0, 0.5, 0.0)),
         ("q4", "fd", -1.0, (2.0, 0.0, 1.0), (2.0, 1.5, 0.0))]


def _wide():
    rows = []
    for qid, fam, base, *per_set in PAIRS:
        ms = {"no_message": base, "plain": base + 1, "self_label": base + 3, "moved": base + 0.5}
        for cs, (R, S, inter) in zip(("original", "matched"), per_set):
            for rec in ("good", "poor"):
                for st in ("professor", "ordinary"):
                    g, p = rec == "good", st == "professor"
                    ms[ab.cue_name(f"{rec}_{st}", cs)] = base + R * g + S * p + inter * (g and p)
        rows += [{"qid": qid, "family": fam, "domain": "knowledge", "subdomain": "toy", "intervention": iv,
                  "margin": m} for iv, m in ms.items()]
    return ab.effects(pd.DataFrame(rows))


def test_summary_reports_each_sets_contrasts_and_ratio(tmp_path):
    w = _wide()
    assert ab.cue_sets_in(w.columns) == ["original", "matched"]
    s = ab.summarize_effects(w, n_boot=100)
    cs = s["cue_sets"]
    assert list(cs) == ["original", "matched"]
    o, m = cs["original"], cs["matched"]
    # original: record 2.5, 3, 1, 2.5 (mean 2.25); status 1, 0.5, 1, 0.5 (mean 0.75); ratio 3
    assert o["record_effect"]["mean"] == pytest.approx(2.25) and o["status_effect"]["mean"] == pytest.approx(0.75)
    assert o["record_status_ratio"]["estimate"] == pytest.approx(3.0)
    assert o["status_within_poor_record"]["mean"] == pytest.approx(0.5)
    # matched: record 1, 2, 1, 2 (mean 1.5); status 1, 1, 0.5, 1.5 (mean 1); ratio 1.5
    assert m["record_effect"]["mean"] == pytest.approx(1.5) and m["status_effect"]["mean"] == pytest.approx(1.0)
    assert m["record_status_ratio"]["estimate"] == pytest.approx(1.5)
    assert m["status_within_poor_record"]["mean"] == pytest.approx(1.0)
    for d in (o, m):
        r = d["record_status_ratio"]
        assert r["ci_low"] <= r["estimate"] <= r["ci_high"]
    # the original set also sits at the top level, as it always did; every cue's effect is listed
    assert {k: s[k] for k in o} == o
    assert "good_professor@matched" in s["effects"] and s["effects"]["plain"]["mean"] == pytest.approx(1.0)
    from chorus.interventions import plots
    assert plots.cue_sets(cs, tmp_path / "cue_sets.png").is_file()


def test_one_set_summaries_keep_their_old_shape():
    w = _wide()
    orig = w.drop(columns=[c for c in w.columns if "@" in c])
    s = ab.summarize_effects(orig, n_boot=100)
    assert "cue_sets" not in s and s["record_status_ratio"]["estimate"] == pytest.approx(3.0)
    only = w.drop(columns=[c for c in w.columns if c.removeprefix("effect_") in ab.CROSSED])
    s = ab.summarize_effects(only, n_boot=100)
    assert "record_status_ratio" not in s and list(s["cue_sets"]) == ["matched"]
    assert s["cue_sets"]["matched"]["record_status_ratio"]["estimate"] == pytest.approx(1.5)


def test_cue_sets_config_checked():
    assert InfluenceConfig().cues.sets == ["original"]
    assert InfluenceConfig(cues={"sets": ["original", "matched", "original"]}).cues.sets == ["original", "matched"]
    with pytest.raises(ValidationError, match=r"unknown cue set 'bogus' \(known: original, matched\)"):
        InfluenceConfig(cues={"sets": ["original", "bogus"]})
    with pytest.raises(ValidationError, match="at least one cue set"):
        InfluenceConfig(cues={"sets": []})
    with pytest.raises(ConfigError) as e:
        load("influence_smoke", InfluenceConfig, {"cues.sets": ["matched", "bogus"]})
    line = [x for x in str(e.value).splitlines() if "cues.sets" in x]
    assert len(line) == 1 and "unknown cue set 'bogus' (known: original, matched)" in line[0]
