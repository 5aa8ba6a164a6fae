"""The classifiers' parsing: unparseable outputs are counted and left missing, never defaulted;
the expected-value readout; reverse coding on attach."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from chorus.serving.types import Completion
from chorus.simulate.roleplay.classify import attach, classify_texts, expected_stance, parse_rates
from chorus.simulate.roleplay.prompts import load_prompts


class FakeEngine:
    """Answers from a table keyed by the text inside the prompt."""

    def __init__(self, stance, on_topic, logprobs=None):
        self.stance, self.on_topic, self.logprobs, self.calls = stance, on_topic, logprobs or {}, []

    def _text(self, conv):
        return conv[-1]["content"].split('Text: "')[1].split('"')[0]

    def chat(self, convs, **kw):
        self.calls.append(kw)
        table = self.stance if kw["choices"][0] == "1" else self.on_topic
        out = []
        for c in convs:
            v = table[self._text(c)]
            ok = v in kw["choices"]
            out.append(Completion(text=v, prompt_tokens=10, completion_tokens=1, finish_reason="stop", conformed=ok,
                                  parsed=v if ok else None))
        return out

    def option_logprobs(self, convs, options):
        return [self.logprobs[self._text(c)] for c in convs]


def test_parsing_counts_unparsed_and_never_defaults():
    eng = FakeEngine({"a": "2", "b": "oops", "c": "6"}, {"a": "yes", "b": "no", "c": "maybe"})
    lab = classify_texts(eng, [("T", "a"), ("T", "b"), ("T", "c"), ("T", "a"), ("T", "  ")], load_prompts())
    assert lab["text"].tolist() == ["a", "b", "c"]                    # unique, blank skipped
    assert lab["stance_raw"].tolist()[0] == 2 and math.isnan(lab["stance_raw"].tolist()[1])
    assert lab["on_topic"].tolist() == [True, False, None]
    r = parse_rates(lab)
    assert r["stance_parse_rate"] == pytest.approx(2 / 3) and r["n_stance_unparsed"] == 1 and r["n_on_topic_unparsed"] == 1
    assert all(c["temperature"] == 0.0 for c in eng.calls)            # greedy: cached in the store


def test_expected_readout():
    lp = {str(k): math.log(p) for k, p in zip(range(1, 7), [0.5, 0.25, 0.25, 1e-12, 1e-12, 1e-12])}
    assert expected_stance(lp) == pytest.approx(0.5 * 1 + 0.25 * 2 + 0.25 * 3, rel=1e-6)
    # unnormalised log-probs are renormalised over the six labels
    assert expected_stance({str(k): math.log(0.1) for k in range(1, 7)}) == pytest.approx(3.5)
    eng = FakeEngine({"a": "oops"}, {"a": "yes"}, {"a": {str(k): -1.0 * (k != 6) * 30 for k in range(1, 7)}})
    lab = classify_texts(eng, [("T", "a")], load_prompts(), readout="expected")
    assert lab["stance_raw"].iloc[0] == pytest.approx(6.0) and not lab["stance_ok"].iloc[0]
    with pytest.raises(ValueError):
        classify_texts(eng, [("T", "a")], load_prompts(), readout="mode")


def test_attach_reverse_codes_truth_framed():
    msgs = pd.DataFrame({"topic": ["T", "S"], "text": ["x", "y"], "truth_framed": [False, True]})
    lab = pd.DataFrame({"topic": ["T", "S"], "text": ["x", "y"], "stance_raw": [2.0, 2.0], "on_topic": [True, None]})
    out = attach(msgs, lab)
    assert out["stance"].tolist() == [2.0, 5.0]
    assert np.isnan(attach(msgs.assign(text=["z", "y"]), lab)["stance"].iloc[0])   # unlabelled stays missing
