"""Residual-stream interchange through nnsight (issue 6): identity, full-state transplant,
bad input and the restored-share arithmetic, on tiny models of every family and the embedded one."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from chorus.interventions import families as fam
from chorus.interventions import patching as pt
from chorus.serving.engine import engine_from_model


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from chorus.serving.profiles import get_profile
    return AutoTokenizer.from_pretrained(str(get_profile("smollm2-135m-instruct").require()))


def _pair(eng, x_word="excellent", y_word="terrible"):
    """Two contexts that differ in one same-length cue word (checked)."""
    conv = lambda w: [{"role": "user", "content": f"Agent 2 (a source with an {w} record) says the answer is B. "
                       "Which answer do you pick? A. Paris B. Rome"}, {"role": "assistant", "content": "Answer:"}]
    px, py = eng.render(conv(x_word)), eng.render(conv(y_word))
    assert len(px.ids) == len(py.ids)
    diff = [i for i, (a, b) in enumerate(zip(px.ids, py.ids)) if a != b]
    assert diff
    return px.ids, py.ids, diff


@pytest.mark.parametrize("family", fam.TINY_FAMILIES)
def test_identity_and_full_transplant(tokenizer, family):
    eng = engine_from_model(fam.tiny_model(family, len(tokenizer)), tokenizer)
    x, y, diff = _pair(eng)
    n = eng.model.config.num_hidden_layers
    same = pt.interchange(eng, y, y, diff, "all")       # a layer's residual patched with itself
    assert np.array_equal(same["patched"], np.repeat(same["y"][None], n, axis=0))
    assert np.array_equal(same["x"], same["y"]) or np.abs(same["x"] - same["y"]).max() < 1e-5  # batch 1 vs n+1
    every = pt.interchange(eng, x, y, list(range(len(y))), "all")   # every position, X into Y
    assert np.abs(every["y"] - every["x"]).max() > 1e-4               # the runs do differ
    assert np.allclose(every["patched"][-1], every["x"], atol=1e-5)  # the last layer: X's logits
    # after any layer the whole residual stream carries all of X (hybrids too), except in Gemma 4,
    # whose layers also read per-layer embeddings of the input tokens (Y's, here)
    for k in range(n - 1) if family != "gemma4" else [0]:
        assert np.allclose(every["patched"][k], every["x"], atol=1e-5) != (family == "gemma4"), k
    cue = pt.interchange(eng, x, y, diff, [0, n - 1])  # only the cue positions: in between
    assert np.abs(cue["patched"][0] - cue["y"]).max() > 1e-6


def test_bad_input(tokenizer):
    eng = engine_from_model(fam.tiny_model("llama", len(tokenizer)), tokenizer)
    x, y, diff = _pair(eng)
    with pytest.raises(pt.PatchError, match="differ in length"):
        pt.interchange(eng, x + [5], y, diff)
    with pytest.raises(pt.PatchError, match=r"positions \[\d+\] are outside the context"):
        pt.interchange(eng, x, y, [len(y)])
    with pytest.raises(pt.PatchError, match=r"layer\(s\) \[4\] out of range.*valid 0..3"):
        pt.interchange(eng, x, y, diff, [4])
    p = eng.render([{"role": "user", "content": "hi"}])
    with pytest.raises(pt.PatchError, match="option ' Paris Rome' is 2 tokens"):
        pt.option_ids(eng, p, [" A", " Paris Rome"])


def test_restored_share_and_summary_hand_computed():
    assert pt.restored_share(np.array([1.0, 2.0, 3.0]), 3.0, 1.0).tolist() == [0.0, 0.5, 1.0]
    assert np.isnan(pt.restored_share(np.array([1.0]), 2.0, 2.0)).all()
    from chorus.interventions.patching import summarize_patch
    t = pd.DataFrame({"qid": ["a", "b", "a", "b"], "family": ["a", "b", "a", "b"], "x_cue": ["g"] * 4,
                      "layer": [0, 0, 5, 5], "margin_x": [3.0, 5.0, 3.0, 5.0], "margin_y": [1.0, 1.0, 1.0, 1.0],
                      "margin_patched": [3.0, 1.0, 1.0, 1.0]})
    s = summarize_patch(t, n_boot=0, seed=0, ci=0.95)
    assert s["cue_effect_x_minus_y"]["mean"] == pytest.approx(3.0)
    assert [c["restored"] for c in s["curve"]] == pytest.approx([2.0 / 6.0, 0.0])


@pytest.mark.slow
def test_embedded_identity_and_transplant(hf_engine):
    x, y, diff = _pair(hf_engine)
    r = pt.interchange(hf_engine, y, y, diff, [0, 15])
    assert np.array_equal(r["patched"], np.repeat(r["y"][None], 2, axis=0))
    r = pt.interchange(hf_engine, x, y, list(range(len(y))), [29])
    assert np.allclose(r["patched"][0], r["x"], atol=1e-4) and np.abs(r["y"] - r["x"]).max() > 1e-3
