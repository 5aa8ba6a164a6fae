"""Committed-at-read under the unrelated-reasoning and neutral-filler controls (chorus.interventions.readout,
peer-influence paper §4.1): the contexts of a constructed debate turn, and the gaps vs reflection on
hand-made readout rows whose shares are known. No model: a whitespace tokenizer stands in."""
from __future__ import annotations

import pandas as pd
import pytest

from chorus.interventions import readout as ro
from chorus.interventions.ablations import strip_answer
from chorus.simulate.debate.prompts import debate_messages, load_prompts, readout_prefill, turn_messages
from chorus.simulate.debate.questions import validate_item


class WordText:
    """Whitespace tokenizer whose ids index the words of the last text encoded (enough for
    ``filler_text`` and ``partial_rationale``, which decode a prefix of what they encoded)."""

    def __call__(self, text, add_special_tokens=False):
        self.words = text.split()
        return type("Enc", (), {"input_ids": list(range(len(self.words)))})()

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(self.words[i] for i in ids)


ITEMS = {x["id"]: validate_item(x) for x in [
    {"id": "q1", "domain": "knowledge", "subdomain": "toy", "family": "fa", "question": "What is 2 + 2?",
     "options": ["3", "4", "5"], "reference": "B"},
    {"id": "q2", "domain": "knowledge", "subdomain": "toy", "family": "fb", "question": "Capital of France?",
     "options": ["Rome", "Paris"], "reference": "B"}]}

R0 = {"q1": ["Two and two make four.\nAnswer: B", "I think five is right.\nAnswer: C", "It is three.\nAnswer: A"],
      "q2": ["Paris is in France, so B.\nAnswer: B", "Rome, I believe.\nAnswer: A", "The capital is Paris.\nAnswer: B"]}
R1 = {"q1": ["Still four.\nAnswer: B", "Now I agree it is four.\nAnswer: B", "Four then.\nAnswer: B"],
      "q2": ["Paris.\nAnswer: B", "Paris after all.\nAnswer: B", "Paris.\nAnswer: B"]}


def _turns():
    rows = []
    for cond in ("debate", "reflection"):
        for qid in ITEMS:
            for r, resp in ((0, R0[qid]), (1, R1[qid])):
                for a, t in enumerate(resp):
                    rows.append({"condition": cond, "qid": qid, "round": r, "agent": a, "response": t,
                                 "answer": t.rsplit("Answer: ", 1)[1]})
    return pd.DataFrame(rows)


def test_control_contexts_replace_the_peers_and_keep_the_own_turn_and_prefix():
    P, tok = load_prompts(), WordText()
    meta, convs = ro.readout_jobs(ITEMS, _turns(), P, fractions=[0.0, 0.5], tokenizer=tok, seed=3,
                                  controls=["unrelated", "filler"])
    conds = pd.Series([m["condition"] for m in meta])
    # every debate turn x fraction read once more per control; reflection untouched
    assert conds.value_counts().to_dict() == {c: 2 * 3 * 2 for c in
                                              ("debate", "debate@unrelated", "debate@filler", "reflection")}
    at = {(m["condition"], m["qid"], m["agent"], m["f"]): (m, c) for m, c in zip(meta, convs)}
    it, a = ITEMS["q1"], 1
    m_d, c_d = at[("debate", "q1", a, 0.5)]
    plain = turn_messages(it, a, 1, "debate", R0["q1"], P)
    assert c_d == readout_prefill(plain, "Now I agree it", P)   # round(0.5 * 7) words; as before
    own_prefix = c_d[-1]
    for ctl in ("unrelated", "filler"):
        m, c = at[(f"debate@{ctl}", "q1", a, 0.5)]
        # same turn, same answers; only the condition differs
        assert {k: v for k, v in m.items() if k != "condition"} == {k: v for k, v in m_d.items() if k != "condition"}
        assert c[:-2] == c_d[:-2]                          # system / question / own previous response
        assert c[-1] == own_prefix                         # the own rationale prefix and the cue
        body = c[-2]["content"]
        for j in (0, 2):                                   # the peers' names stay, their texts go
            assert f"Agent {j + 1}'s response" in body and R0["q1"][j] not in body
        assert R0["q1"][a] not in body
    # unrelated: answer-stripped responses of the other family's question at the same round
    unrel = at[("debate@unrelated", "q1", a, 0.0)][1][-2]["content"]
    stripped = {strip_answer(t, ITEMS["q2"].labels) for t in R0["q2"]}
    assert "___" not in stripped and sum(t in unrel for t in stripped) >= 1   # reasoning kept, answers gone
    assert "Answer:" not in unrel.split("response:")[1]
    # filler: each peer's text replaced by neutral sentences of exactly its token length
    fill = at[("debate@filler", "q1", a, 0.0)][1]
    peers = [(P["peer_name"].format(k=j + 1), R0["q1"][j]) for j in (0, 2)]
    texts = [blk.split('"""\n', 1)[1].rsplit('\n"""', 1)[0] for blk in fill[-2]["content"].split("'s response:\n")[1:]]
    assert [len(t.split()) for t in texts] == [len(x.split()) for _, x in peers]
    assert all(any(w in s for s in P["filler_sentences"]) for t in texts for w in t.split()[:3])
    assert fill[:-1] == debate_messages(it, R0["q1"][a], list(zip([n for n, _ in peers], texts)), P)


def test_controls_are_seeded_and_independent_and_need_another_family():
    P = load_prompts()
    one = ro.readout_jobs(ITEMS, _turns(), P, fractions=[0.0], tokenizer=WordText(), seed=3, controls=["filler"])
    both = ro.readout_jobs(ITEMS, _turns(), P, fractions=[0.0], tokenizer=WordText(), seed=3,
                           controls=["unrelated", "filler"])
    pick = [(m, c) for m, c in zip(*both) if m["condition"] != "debate@unrelated"]
    assert [c for _, c in pick] == one[1]                  # adding a control leaves the other's texts as they were
    solo = _turns()[lambda t: t["qid"] == "q1"]            # one family: no unrelated reasoning to draw
    meta, _ = ro.readout_jobs({"q1": ITEMS["q1"]}, solo, P, fractions=[0.0], tokenizer=WordText(),
                              controls=["unrelated"])
    assert "debate@unrelated" not in {m["condition"] for m in meta}
    with pytest.raises(ValueError, match="unknown readout control"):
        ro.readout_jobs(ITEMS, _turns(), P, tokenizer=WordText(), controls=["shuffle"])


def _rows(qid, family, cond, hits, f=0.0, changed=True):
    return [{"qid": qid, "family": family, "condition": cond, "f": f, "changed": changed, "answer": "A",
             "argmax": "A" if h else "B"} for h in hits]


def test_gaps_per_condition_against_hand_computed_shares():
    rows = (_rows("q1", "fa", "debate", [True, True, True]) + _rows("q2", "fb", "debate", [True])          # 4/4
            + _rows("q1", "fa", "debate@unrelated", [True, False, False]) + _rows("q2", "fb", "debate@unrelated", [True])
            + _rows("q1", "fa", "debate@filler", [False, False, False]) + _rows("q2", "fb", "debate@filler", [True])
            + _rows("q1", "fa", "reflection", [True, False]) + _rows("q2", "fb", "reflection", [False, False])  # 1/4
            + _rows("q1", "fa", "debate@filler", [True] * 5, changed=False)    # unchanged: not counted
            + _rows("q1", "fa", "debate@filler", [True] * 5, f=1.0))           # another readout point
    s = ro.committed_at_read(pd.DataFrame(rows), n_boot=200)
    by = s["by_condition"]
    assert by["debate@unrelated"]["0.0"]["share"] == pytest.approx(2 / 4)
    assert by["debate@filler"]["0.0"]["share"] == pytest.approx(1 / 4)
    assert by["debate@filler"]["1.0"]["n"] == 5
    g = s["gaps_f0"]
    assert list(g) == ["debate", "debate@unrelated", "debate@filler"]
    assert g["debate"]["delta"] == pytest.approx(1 - 1 / 4)
    assert g["debate@unrelated"]["delta"] == pytest.approx(2 / 4 - 1 / 4)
    assert g["debate@filler"]["delta"] == pytest.approx(0.0)
    assert (g["debate@filler"]["n"], g["debate@filler"]["n_baseline"]) == (4, 4)
    for v in g.values():
        assert v["ci_low"] <= v["delta"] + 1e-12 and v["delta"] <= v["ci_high"] + 1e-12
    # the old key is the debate gap, computed on debate and reflection rows only
    assert s["debate_minus_reflection_f0"] == {k: g["debate"][k] for k in ("delta", "ci_low", "ci_high", "resampled", "n_units", "ci_refused")}
    # paired by question under a control: q1 1/3 - 1/2, q2 1 - 0
    p = ro.paired_committed_at_read(pd.DataFrame(rows), n_boot=200, condition="debate@unrelated")
    assert p["condition"] == "debate@unrelated"
    assert [r["difference"] for r in p["questions"]] == pytest.approx([1 / 3 - 1 / 2, 1.0])
    assert (p["favours_debate"], p["favours_reflection"]) == (0.5, 0.5)
    assert "gaps_f0" not in ro.committed_at_read(pd.DataFrame(_rows("q1", "fa", "debate", [True])), n_boot=0)
