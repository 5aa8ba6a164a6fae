"""Concept directions by domain, debate vs reflection (issue 19, item 3): the direction math on
hand-computed arrays, the shuffled-label null, lexicon validation, the span-mean reader against
the model's own hidden states, and one plumbing run on the embedded model (SmolLM2-135M numbers
are noise, never findings)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from chorus.core.config import ConfigError
from chorus.interventions import concepts as cc


def test_mean_diff_direction_standardised_unit_norm_and_projection():
    # columns: mean (2, 2), SD (sqrt 2, 1); standardised class means (±1/sqrt 2, ∓1), difference (sqrt 2, -2)
    X = np.array([[2.0, 1.0], [4.0, 1.0], [0.0, 3.0], [2.0, 3.0]])
    y = np.array([1, 1, 0, 0])
    mu, sd, w = cc.fit_direction(X, y)
    np.testing.assert_allclose(mu, [2.0, 2.0])
    np.testing.assert_allclose(sd, [np.sqrt(2.0), 1.0])
    np.testing.assert_allclose(w, np.array([np.sqrt(2.0), -2.0]) / np.sqrt(6.0))
    assert np.linalg.norm(w) == pytest.approx(1.0)
    # x = (4, 0): z = (sqrt 2, -2), score = z . w = 6 / sqrt 6
    np.testing.assert_allclose(cc.project(np.array([[4.0, 0.0], [2.0, 2.0]]), mu, sd, w), [np.sqrt(6.0), 0.0])
    # several directions at once: (N, P); on the first unit axis the score is z_0 = (4 - 2) / sqrt 2
    W = np.stack([w, -w, [1.0, 0.0]])
    np.testing.assert_allclose(cc.project(np.array([[4.0, 0.0]]), mu, sd, W),
                               [[np.sqrt(6.0), -np.sqrt(6.0), np.sqrt(2.0)]])
    # flipping the labels flips the direction exactly; a constant unit gets SD 1, not a division by 0
    np.testing.assert_allclose(cc.fit_direction(X, 1 - y)[2], -w)
    assert cc.standardizer(np.array([[1.0, 5.0], [3.0, 5.0]]))[1].tolist() == [1.0, 1.0]
    with pytest.raises(cc.ProbeError, match="identical mean"):
        cc.fit_direction(np.array([[1.0], [1.0], [1.0], [1.0]]), y)
    with pytest.raises(cc.ProbeError, match="0/1"):
        cc.fit_direction(X, [1, 1, 1, 1])


def test_shuffled_label_null_is_symmetric_and_a_planted_concept_beats_it():
    r = np.random.default_rng(0)
    y = np.tile([1, 0], 16)
    groups = np.repeat(np.arange(16), 2)  # (positive, negative) pairs
    X = r.normal(size=(32, 20))
    X[:, 5] += 5.0 * y
    W0 = cc.null_directions(X, y, n_perm=400, seed=0)
    assert W0.shape == (400, 20)
    np.testing.assert_allclose(np.linalg.norm(W0, axis=1), 1.0)
    s = cc.project(r.normal(size=(6, 20)), *cc.standardizer(X), W0)  # (6 contexts, 400 null directions)
    # label permutations come in complementary pairs (w, -w): the null scores centre on 0
    assert np.all(np.abs(s.mean(axis=1)) < 3 * s.std(axis=1) / np.sqrt(400))
    assert 0.4 < (s > 0).mean() < 0.6
    row = cc.probe_table(X, y, groups, n_perm=30, n_splits=4, seed=0, method="mean_diff", C=1.0)
    assert row["auroc"] > 0.85 and row["auroc"] > row["null_p90"] and row["above_null_p90"]
    assert row["n_null"] == 30 and row["p_value"] == pytest.approx(1 / 31) and 0.3 < row["null_mean"] < 0.7
    noise = cc.probe_table(r.normal(size=(32, 20)), y, groups, n_perm=30, n_splits=4, seed=1, method="mean_diff",
                           C=1.0)
    assert noise["auroc"] < 0.8
    lg = cc.probe_table(X, y, groups, n_perm=2, n_splits=4, seed=0, method="logistic", C=1.0)
    assert lg["auroc"] > 0.9


def test_cluster_se_by_hand():
    # mean 3, deviations (-2, -1, 0, 3); cluster sums -3, 3; sqrt(2/1 * 18) / 4 = 1.5
    assert cc.cluster_se(np.array([1.0, 2.0, 3.0, 6.0]), ["a", "a", "b", "b"]) == pytest.approx(1.5)
    x = np.array([1.0, 2.0, 4.0, 7.0])
    assert cc.cluster_se(x, [0, 1, 2, 3]) == pytest.approx(x.std(ddof=1) / 2)
    assert np.isnan(cc.cluster_se(x, [0, 0, 0, 0]))


def test_contrast_rows_by_hand():
    # 3 matched pairs, alternating debate / reflection: knowledge (pairs 0, 1), values (pair 2)
    scores = np.array([3.0, 1.0, 5.0, 1.0, 0.0, 2.0])
    meta = pd.DataFrame({"domain": ["knowledge", "knowledge", "values"], "family": ["f1", "f2", "f3"]})
    # two null directions: the first gives the observed scores / 2, the second all zeros
    null = np.stack([scores / 2, np.zeros(6)], axis=1)
    rows = {(r["domain"], r["condition"]): r for r in cc.contrast_rows(scores, null, meta)}
    k = rows[("knowledge", "debate")]
    assert k["mean"] == 4.0 and k["n"] == 2 and k["se"] == pytest.approx(1.0)  # SD sqrt 2 / sqrt 2
    assert rows[("knowledge", "reflection")]["mean"] == 1.0
    assert k["shift"] == 3.0 and rows[("values", "debate")]["shift"] == -2.0
    assert rows[("all", "debate")]["shift"] == pytest.approx(4.0 / 3)
    # null |shift| in knowledge: {1.5, 0}; 90th percentile (linear) 1.35; p = (1 + #null >= 3) / (1 + 2)
    assert k["shift_null_q90"] == pytest.approx(1.35) and k["shift_p"] == pytest.approx(1 / 3)
    assert k["shift_above_null_q90"]
    # spread: debate means (4, 0) -> 4; reflection (1, 2) -> 1; null spreads (2, 0) and (0.5, 0)
    assert k["spread"] == 4.0 and k["spread_null_q90"] == pytest.approx(1.8) and k["spread_p"] == pytest.approx(1 / 3)
    r = rows[("values", "reflection")]
    assert r["spread"] == 1.0 and r["spread_null_q90"] == pytest.approx(0.45) and r["n_perm"] == 2
    one = cc.contrast_rows(scores[:4], null[:4], meta.iloc[:2])  # one domain: no spread
    assert all(np.isnan(x["spread"]) for x in one)


def _lex(**concepts):
    return {"name": "t", "frame": "Said: {text}", "concepts": concepts}


PAIRS = [[f"I am sure about thing {k}.", f"I doubt thing {k}."] for k in range(4)]


@pytest.mark.parametrize("data, match", [
    (_lex(calm={"pairs": PAIRS[:3]}), r"concept 'calm': needs at least 4 pairs, got 3"),
    (_lex(calm={"pairs": PAIRS[:3] + [["same", "same"]]}), r"concept 'calm': pair 3 has the same statement"),
    (_lex(calm={"pairs": PAIRS[:3] + [["only one"]]}), r"concept 'calm': pair 3 must be two non-empty strings"),
    (_lex(calm={"pairs": PAIRS[:3] + [["x", "  "]]}), r"concept 'calm': pair 3 must be two non-empty"),
    (_lex(calm={"pairs": PAIRS + [PAIRS[0]]}), r"concept 'calm': statement repeated"),
    (_lex(calm={"words": ["a"]}), r"concept 'calm': needs a 'pairs' list"),
    (_lex(calm={"pairs": PAIRS, "colour": 1}), r"concept 'calm': unknown field"),
    ({"frame": "no placeholder", "concepts": {"calm": {"pairs": PAIRS}}}, r"frame must be a string with exactly one"),
    ({"concepts": {}}, r"'concepts' must be a non-empty mapping"),
])
def test_lexicon_errors_name_the_concept(data, match):
    with pytest.raises(ConfigError, match=match):
        cc.validate_lexicon(data, "lex.yaml")


def test_shipped_lexicon_and_selection(tmp_path):
    lex = cc.load_lexicon("concepts_v1")
    assert list(lex.concepts) == ["confident", "despondent", "agreeable"]
    assert all(8 <= len(p) <= 16 for p in lex.concepts.values())
    assert cc.select_concepts(lex, ["agreeable", "agreeable"]) == ["agreeable"]
    with pytest.raises(ConfigError, match=r"concepts.concepts: \['calm'\] not in lexicon"):
        cc.select_concepts(lex, ["calm"])
    with pytest.raises(ConfigError, match="concepts.lexicon = 'nope': not found"):
        cc.load_lexicon("nope")
    p = tmp_path / "mine.yaml"
    p.write_text(json.dumps(_lex(calm={"pairs": PAIRS})))
    assert cc.load_lexicon(p).concepts["calm"][0] == tuple(PAIRS[0])


def test_config_errors_before_any_model_call(tmp_path):
    from chorus.interventions.internals.config import load
    from chorus.interventions.internals.experiment import run_internals
    with pytest.raises(ConfigError, match="concepts.sites"):
        load("internals_smoke", {"concepts.sites": ["reading", "reading"]})
    with pytest.raises(ConfigError, match="concepts.n_perm"):
        load("internals_smoke", {"concepts.n_perm": 0})
    cfg = load("internals_smoke", {"concepts.concepts": ["calm"]})
    with pytest.raises(ConfigError, match="not in lexicon"):
        run_internals(cfg, "concepts", tmp_path / "x", engine=object())  # fails before the engine is touched
    assert not (tmp_path / "x").exists()


def test_span_means_equal_the_models_hidden_states():
    import torch
    from transformers import AutoTokenizer

    from chorus.interventions import families as fam
    from chorus.interventions import probes as pb
    from chorus.serving.engine import engine_from_model
    from chorus.serving.profiles import get_profile
    tok = AutoTokenizer.from_pretrained(str(get_profile("smollm2-135m-instruct").require()))
    eng = engine_from_model(fam.tiny_model("llama", len(tok)), tok)
    convs = [[{"role": "user", "content": "Short?"}], [{"role": "user", "content": "A longer question, padded left?"}]]
    spans = [[[1, 2, 3], [-1]], [[4, 6], [0, -2]]]
    m = pb.span_means(eng, convs, spans, [2, 0])
    assert m.shape == (2, 2, 2, 64)
    for i, c in enumerate(convs):
        ids = torch.tensor([eng.render(c).ids])
        with torch.no_grad():
            hs = eng.model(input_ids=ids, output_hidden_states=True).hidden_states
        for s, pos in enumerate(spans[i]):
            for k, layer in enumerate([2, 0]):  # hidden_states[l + 1] is decoder layer l's output
                assert np.allclose(m[i, s, k], hs[layer + 1][0, pos].mean(0).numpy(), atol=1e-5)
    np.testing.assert_array_equal(pb.activations(eng, convs, [0]), pb.span_means(eng, convs, [[[-1]]] * 2, [0])[:, 0])
    with pytest.raises(pb.ProbeError, match=r"spans\[0\]\[0\]: empty"):
        pb.span_means(eng, convs, [[[]], [[1]]], [0])
    with pytest.raises(pb.ProbeError, match="outside the prompt"):
        pb.span_means(eng, convs, [[[999]], [[1]]], [0])


@pytest.fixture()
def source_run(tmp_path):
    """A finished debate run with hand-written round-0 turns in two domains (no generation); the third
    agent's answer is unparsed (empty on q-num: a reading span that is empty is skipped and counted)."""
    from conftest import ROUND0, hand_debate_run

    from chorus.simulate.debate.questions import Item
    qs = [("q-cap", "knowledge", "fa", "Which city is the capital of France?", ["Paris", "Rome"]),
          ("q-num", "knowledge", "fb", "Which number is even?", ["7", "12"]),
          ("q-lie", "values", "fc", "Is it acceptable to lie to spare a friend's feelings?", ["Yes", "No"])]
    items = [Item(id=i, domain=d, subdomain="test", family=f, question=q, options=o, labels=["A", "B"],
                  reference=None) for i, d, f, q, o in qs]
    return hand_debate_run(tmp_path, items, lambda it: [*ROUND0[:2], (None, "" if it.id == "q-num" else ROUND0[2][1])])


@pytest.mark.slow
def test_concepts_run_on_the_embedded_model(hf_engine, source_run, tmp_path):
    from chorus.interventions.internals.config import load
    from chorus.interventions.internals.experiment import report, run_internals
    full = cc.load_lexicon("concepts_v1").concepts  # 4 pairs of two shipped concepts keep the model calls few
    lex = tmp_path / "small.yaml"
    lex.write_text(json.dumps({"name": "small", "frame": "Here is a message:\n\n{text}",
                               "concepts": {c: {"pairs": [list(p) for p in full[c][:4]]}
                                            for c in ("confident", "agreeable")}}))
    cfg = load("internals_smoke", {"source_run": str(source_run), "concepts.lexicon": str(lex),
                                   "concepts.layers": [3, 27], "concepts.n_perm": 5, "concepts.n_splits": 3})
    run, s = run_internals(cfg, "concepts", tmp_path / "concepts", engine=hf_engine)
    t = pd.read_parquet(run.path / "tables" / "concepts.parquet")
    probe = pd.read_parquet(run.path / "tables" / "concept_probe.parquet")
    ctx = pd.read_parquet(run.path / "tables" / "concept_contexts.parquet")
    # 3 questions x 3 receivers, minus q-num's agent 2 (empty own response): 8 matched pairs
    assert s["n_pairs"] == 8 and s["n_skipped"] == 1 and s["skipped"][0]["reason"] == "empty own response"
    assert s["n_by_domain"] == {"knowledge": 5, "values": 3} and (ctx["reading_tokens_debate"] > 5).all()
    assert len(probe) == 2 * 2 * 2 and probe["auroc"].between(0, 1).all() and (probe["n_null"] > 0).all()
    # concept x layer x site x (knowledge, values, all) x condition
    assert len(t) == 2 * 2 * 2 * 3 * 2 and np.isfinite(t[["mean", "shift", "shift_null_q90", "spread"]]).all().all()
    assert (t.loc[t["domain"] == "all", "n"] == 8).all() and (t["n_perm"] == 5).all()
    d, r = (t[(t["concept"] == "confident") & (t["layer"] == 3) & (t["site"] == "reading") & (t["domain"] == "values")
              & (t["condition"] == c)].iloc[0] for c in ("debate", "reflection"))
    assert d["shift"] == pytest.approx(d["mean"] - r["mean"])
    assert set(s["probe_best_layer"]) == {"confident/reading", "confident/decision", "agreeable/reading",
                                          "agreeable/decision"}
    assert {p.name for p in (run.path / "plots").glob("*.png")} == {"concepts_reading.png", "concepts_decision.png"}
    assert "(not a confidence interval)" in (run.path / "plots" / "concepts_reading.svg").read_text()   # issue 51
    assert report(run.path)["shift_at_best_layer"] == json.loads((run.path / "summary.json").read_text())[
        "shift_at_best_layer"]  # rebuilt from the run files alone
