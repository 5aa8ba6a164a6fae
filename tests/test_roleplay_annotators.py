"""``roleplay annotators``: Cohen's kappa per label by hand, the headline recomputation under a
scripted classifier, one real re-classification of the session's tiny run with gemma3-270m (its
rerun makes no model calls), and the bad-input errors."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from chorus.cli import app
from chorus.serving.types import Completion
from chorus.simulate.roleplay.annotators import agreement, headline, kappa_table

runner = CliRunner()


def _labels(rows):
    return pd.DataFrame([{"topic": "T", "text": t, "stance_raw": np.nan if s is None else float(s),
                          "stance_choice": np.nan if s is None else float(s), "on_topic": o} for t, s, o in rows])


def test_kappa_per_label_by_hand():
    # pairs (1,1) (1,2) (2,2) (2,2) (3,3); the last item is dropped (a left it unparsed)
    t = kappa_table([1, 1, 2, 2, 3, None], [1, 2, 2, 2, 3, 3], range(1, 7))
    assert t["n"] == 5 and t["n_dropped"] == 1 and t["agreement"] == pytest.approx(0.8)
    # po = 0.8, pe = (2*1 + 2*3 + 1*1) / 25 = 0.36
    assert t["kappa"] == pytest.approx((0.8 - 0.36) / 0.64)
    per = t["per_label"]
    assert per["1"]["kappa"] == pytest.approx((0.8 - 0.56) / 0.44)     # pe = .4*.2 + .6*.8
    assert per["2"]["kappa"] == pytest.approx((0.8 - 0.48) / 0.52)     # pe = .4*.6 + .6*.4
    assert per["3"]["kappa"] == pytest.approx(1.0)
    assert math.isnan(per["4"]["kappa"]) and per["4"]["n_a"] == per["4"]["n_b"] == 0   # neither used 4
    assert t["confusion"][0][:3] == [1, 1, 0] and t["confusion"][1][:3] == [0, 2, 0] and t["confusion"][2][:3] == [0, 0, 1]


def test_agreement_pairs_texts_and_weights_stance():
    own = _labels([("a", 1, True), ("b", 1, True), ("c", 2, False), ("d", 2, None), ("e", 3, True), ("x", 5, True)])
    other = _labels([("a", 1, True), ("b", 2, False), ("c", 2, False), ("d", 2, False), ("e", 3, False)])
    ag = agreement(own, other)
    assert ag["n_paired_texts"] == 5 and ag["n_unpaired_texts"] == 1
    assert ag["stance"]["kappa"] == pytest.approx((0.8 - 0.36) / 0.64)
    # quadratic: 1 - sum(w O) / sum(w E), w = (i - j)^2; O has one (1,2) disagreement, sum(w E) = 5.0
    assert ag["stance"]["kappa_quadratic"] == pytest.approx(1 - 1 / 5.0)
    # on-topic pairs (T,T) (T,F) (F,F) (T,F), d dropped: po = 2/4, pe = (3/4)(1/4) + (1/4)(3/4) = 3/8
    ot = ag["on_topic"]
    assert ot["n"] == 4 and ot["n_dropped"] == 1
    assert ot["kappa"] == pytest.approx((0.5 - 0.375) / 0.625)
    assert ot["per_label"]["True"]["kappa"] == pytest.approx(ot["kappa"])   # binary: one-vs-rest is the kappa


def test_headline_flattens_the_summary():
    s = {"cells": {"m/fd/public": {"single_error": {"mean": 1.5}, "partner_gap_spearman": {"rho": 0.2, "n": 4},
                                   "rouge_l": {"mean": 0.1}}},
         "human": {"public": {"delta_sd": {"mean": -0.3}}},
         "classifier": {"stance_parse_rate": 1.0, "on_topic_parse_rate": 0.5, "vs_slider": {"mae": 0.7}},
         "degroot": {"alpha": 0.25}}
    h = headline(s)
    assert h["m/fd/public/single_error"] == 1.5 and h["m/fd/public/partner_gap_spearman"] == 0.2
    assert "m/fd/public/rouge_l" not in h and h["human/public/delta_sd"] == -0.3
    assert h["degroot/alpha"] == 0.25 and h["classifier/vs_slider_mae"] == 0.7


class ScriptedClassifier:
    """Answers each text from a table (stance label, on-topic); counts what reached it."""

    def __init__(self, stance: dict, on_topic: dict):
        self.stance, self.on_topic, self.model_calls = stance, on_topic, 0

    def _text(self, conv):
        return conv[-1]["content"].split('Text: "', 1)[1].split('"\n', 1)[0]

    def chat(self, convs, **kw):
        self.model_calls += len(convs)
        table = self.stance if kw["choices"][0] == "1" else self.on_topic
        out = []
        for c in convs:
            v = table.get(self._text(c), "??")
            ok = v in kw["choices"]
            out.append(Completion(text=v, prompt_tokens=1, completion_tokens=1, finish_reason="stop", conformed=ok,
                                  parsed=v if ok else None))
        return out

    def option_logprobs(self, convs, options):   # all mass on the scripted label
        return [{o: (0.0 if o == self.stance.get(self._text(c)) else -50.0) for o in options} for c in convs]


def _scripted(labels: pd.DataFrame, flip: bool) -> ScriptedClassifier:
    st = {t.strip(): str(int(7 - s if flip else s)) for t, s in zip(labels["text"], labels["stance_choice"]) if s == s}
    ot = {t.strip(): "yes" if o else "no" for t, o in zip(labels["text"], labels["on_topic"]) if o is not None and o == o}
    return ScriptedClassifier(st, ot)


@pytest.mark.slow
def test_headline_recomputed_under_a_scripted_classifier(roleplay_run, tmp_path):
    from chorus.simulate.roleplay.annotators import annotate
    from chorus.simulate.roleplay.experiment import recompute
    path, run, s = roleplay_run
    own = run.read_table("labels")
    same = _scripted(own, flip=False)
    out, r = annotate(path, ["gemma3-270m"], tmp_path / "same", engines={"gemma3-270m": same}, make_plots=False)
    assert same.model_calls > 0 and r["run_classifier"] == "smollm2-135m-instruct"
    hl = r["headline"]
    # the run's own labels recompute the run's own summary (stance metrics; no embedding needed)
    for cell, res in s["cells"].items():
        assert hl["smollm2-135m-instruct"][f"{cell}/single_error"] == pytest.approx(res["single_error"]["mean"], nan_ok=True)
        assert hl["smollm2-135m-instruct"][f"{cell}/convergence_error"] == pytest.approx(res["convergence_error"]["mean"], nan_ok=True)
    assert hl["smollm2-135m-instruct"]["degroot/alpha"] == pytest.approx(s["degroot"]["alpha"])
    # a classifier that answers the run's guided-choice labels agrees perfectly; its headline is the
    # run's recomputed with those labels as the stance (the run's readout is "expected", and the
    # scripted log-probs put all the mass on the label)
    st = r["agreement"]["gemma3-270m"]["stance"]
    assert st["agreement"] == 1.0 and st["n_dropped"] == 0 and (st["kappa"] == 1.0 or math.isnan(st["kappa"]))
    assert r["agreement"]["gemma3-270m"]["on_topic"]["agreement"] == 1.0
    want = headline(recompute(run, own.assign(stance_raw=own["stance_choice"]), embed=False)[0])
    assert r["headline"]["gemma3-270m"].keys() == want.keys()
    for k, v in want.items():
        assert r["headline"]["gemma3-270m"][k] == pytest.approx(v, abs=1e-9, nan_ok=True), k
    flipped = _scripted(own, flip=True)
    out2, r2 = annotate(path, ["gemma3-270m"], tmp_path / "flip", engines={"gemma3-270m": flipped}, make_plots=True)
    st2 = r2["agreement"]["gemma3-270m"]["stance"]
    assert st2["n"] == st["n"] and st2["agreement"] < 1.0
    assert r2["headline"]["gemma3-270m"] != r2["headline"]["smollm2-135m-instruct"]
    for name in ("kappa", "confusion", "headline", "labels"):
        assert (out2 / "tables" / f"{name}.parquet").is_file()
    j = json.loads((out2 / "summary.json").read_text())
    assert j["run"] == str(path) and j["classifiers"] == ["gemma3-270m"] and "Cohen" in (out2 / "annotators.md").read_text()
    assert (out2 / "plots" / "annotators.png").stat().st_size > 0
    # an analysis: its record holds the source run's fingerprint and the engines it called
    prov = json.loads((out2 / "provenance.json").read_text())
    assert prov["analysis"] == "roleplay annotators" and prov["sources"][0]["path"] == str(path)
    assert "gemma3-270m" in json.dumps(prov["engines"]) or prov["engines"]["gemma3-270m"]


@pytest.mark.slow
def test_reclassify_the_tiny_run_with_gemma(roleplay_run, tmp_path):
    """The real second model on the session's run, through the CLI; the rerun makes no model calls."""
    path, run, _ = roleplay_run
    res = runner.invoke(app, ["roleplay", "annotators", str(path), "-m", "gemma3-270m",
                              "--out", str(tmp_path / "a1"), "--no-plots"])
    assert res.exit_code == 0, res.output
    r = json.loads((tmp_path / "a1" / "summary.json").read_text())
    n = len(run.read_table("labels"))
    assert r["engines"]["gemma3-270m"]["model_calls"] > 0
    assert r["agreement"]["gemma3-270m"]["n_paired_texts"] == n
    k = pd.read_parquet(tmp_path / "a1" / "tables" / "kappa.parquet")
    assert set(k["label"]) >= {"overall", "overall_quadratic", "1", "6", "True"}
    assert r["note"] and "gemma3-270m" in r["note"]
    res2 = runner.invoke(app, ["roleplay", "annotators", str(path), "-m", "gemma3-270m", "--out", str(tmp_path / "a2"),
                               "--no-plots"])
    assert res2.exit_code == 0, res2.output
    r2 = json.loads((tmp_path / "a2" / "summary.json").read_text())
    assert r2["engines"]["gemma3-270m"]["model_calls"] == 0
    assert r2["agreement"] == r["agreement"]


@pytest.mark.slow
def test_bad_input_is_one_line_exit_2(roleplay_run, tmp_path):
    path, _, _ = roleplay_run
    cases = [([str(tmp_path), "-m", "gemma3-270m"], "not a chorus run directory"),
             ([str(path), "-m", "no-such-model"], "unknown model profile"),
             ([str(path), "-m", "smollm2-135m-instruct"], "the run's own classifier")]
    for args, msg in cases:
        res = runner.invoke(app, ["roleplay", "annotators", *args, "--out", str(tmp_path / "x")])
        assert res.exit_code == 2, res.output
        assert msg in res.output and len(res.output.strip().splitlines()) == 1, res.output
