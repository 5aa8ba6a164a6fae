"""Probes with the shuffled-label null (issue 6): the null holds on random activations, a
planted direction beats it, folds respect groups, nnsight activations equal the model's own
hidden states."""
from __future__ import annotations

import numpy as np
import pytest

from chorus.interventions import probes as pb
from chorus.serving.engine import engine_from_model


def test_random_activations_sit_inside_their_null():
    r = np.random.default_rng(0)
    above = 0
    for k in range(8):
        X = r.normal(size=(40, 12))
        y = np.array([0, 1] * 20)
        a = pb.heldout_auroc(X, y, seed=k)
        null = pb.shuffled_null(X, y, n_perm=30, seed=k)
        assert len(null) == 30 and null.min() <= a <= null.max()
        above += a > np.quantile(null, 0.9)
    assert above <= 3  # ~10% expected above the 90th percentile


def test_planted_direction_beats_the_null_and_groups_stay_whole():
    r = np.random.default_rng(1)
    y = np.array([0, 1] * 30)
    X = r.normal(size=(60, 20))
    X[:, 3] += 4.0 * y
    groups = np.repeat(np.arange(15), 4)
    t = pb.probe_layers(X[:, None, :], y, layers=[7], groups=groups, n_perm=20, seed=0)
    row = t.iloc[0]
    assert row["layer"] == 7 and row["auroc"] > 0.9 and row["auroc"] > row["null_p90"] and row["above_null_p90"]
    assert row["p_value"] == pytest.approx(1 / 21)
    for tr, te in pb._folds(y, groups, 5, 0):
        assert not set(groups[tr]) & set(groups[te])


def test_bad_labels():
    X = np.zeros((6, 3))
    with pytest.raises(pb.ProbeError, match="exactly 2 label classes"):
        pb.heldout_auroc(X, [1] * 6)
    with pytest.raises(pb.ProbeError, match="exactly 2 label classes"):
        pb.heldout_auroc(X, [0, 1, 2, 0, 1, 2])
    with pytest.raises(pb.ProbeError, match="at least 2 groups"):
        pb.heldout_auroc(X, [0, 1] * 3, groups=[0] * 6)


def test_activations_equal_the_models_hidden_states():
    import torch
    from transformers import AutoTokenizer

    from chorus.interventions import families as fam
    from chorus.serving.profiles import get_profile
    tok = AutoTokenizer.from_pretrained(str(get_profile("smollm2-135m-instruct").require()))
    eng = engine_from_model(fam.tiny_model("llama", len(tok)), tok)
    convs = [[{"role": "user", "content": "Short?"}], [{"role": "user", "content": "A longer question, padded left?"}]]
    acts = pb.activations(eng, convs, [0, 2])
    assert acts.shape == (2, 2, 64)
    for i, c in enumerate(convs):
        ids = torch.tensor([eng.render(c).ids])
        with torch.no_grad():
            hs = eng.model(input_ids=ids, output_hidden_states=True).hidden_states
        for k, layer in enumerate([0, 2]):  # hidden_states[l + 1] is decoder layer l's output
            assert np.allclose(acts[i, k], hs[layer + 1][0, -1].numpy(), atol=1e-5)
    with pytest.raises(pb.ProbeError, match="out of range"):
        pb.activations(eng, convs, [4])


def test_row_space_fit_equals_the_full_pipeline():
    """The probe fitted in the training rows' span gives the decision values of the plain
    StandardScaler + LogisticRegression pipeline on all hidden units."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from chorus.interventions.probes import _fold_features, _folds

    g = np.random.default_rng(3)
    X = g.normal(size=(24, 200))
    y = (X[:, 5] + 0.8 * g.normal(size=24) > 0).astype(int)
    folds = _folds(y, None, 4, 0)
    for (tr, te), (ztr, zte) in zip(folds, _fold_features(X, folds)):
        full = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=5000, tol=1e-10)).fit(X[tr], y[tr])
        small = LogisticRegression(C=1.0, max_iter=5000, tol=1e-10).fit(ztr, y[tr])
        assert ztr.shape[1] <= len(tr)
        np.testing.assert_allclose(small.decision_function(zte), full.decision_function(X[te]), atol=1e-5)
