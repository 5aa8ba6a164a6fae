"""Issue 51 item 5: every plot that draws an interval says, under it, what the interval resamples and how
many units (``chorus.core.plots.interval_caption``), read from the records the figure draws. Each test
draws a plot from the records its producing code makes and reads the caption from the saved SVG (text
is kept as text there: ``svg.fonttype = none``)."""
from __future__ import annotations

import html

import numpy as np
import pandas as pd


def svg_text(path) -> str:
    """The text of the SVG saved beside ``path``, unescaped, one space between words."""
    return " ".join(html.unescape(path.with_suffix(".svg").read_text()).split())


def _fams(n):
    return [f"f{i}" for i in range(n)]


# -- interventions ---------------------------------------------------------------------------------------
def _knockout_table(n=12, mixers=("attention",)):
    r = np.random.default_rng(0)
    base = {"qid": [f"q{i}" for i in range(n)], "family": _fams(n), "margin_full": r.normal(3, 0.5, n),
            "margin_no_message": np.zeros(n), "unmaskable": [""] * n, "n_recurrent": 0}
    parts = []
    for m in mixers:
        parts.append(pd.DataFrame({**base, "mixer": m, "kind": "all", "layer": -1, "queries": "after",
                                   "margin_knockout": r.normal(1, 0.5, n), "n_masked": 4}))
        for L in range(4):
            parts.append(pd.DataFrame({**base, "mixer": m, "kind": "single", "layer": L, "queries": "after",
                                       "margin_knockout": r.normal(2.5, 0.5, n), "n_masked": 1}))
            parts.append(pd.DataFrame({**base, "mixer": m, "kind": "cumulative", "layer": L, "queries": "after",
                                       "margin_knockout": r.normal(1.5, 0.5, n), "n_masked": 4 - L}))
    return pd.concat(parts)


def test_knockout_mixers_caption(tmp_path):
    from chorus.interventions.knockout_pairs import summarize_knockout
    from chorus.interventions.plots import knockout_mixers
    k = summarize_knockout(_knockout_table(mixers=("attention", "recurrent", "both")), n_boot=50, seed=0, ci=0.9)
    assert "mixer_shares" in k
    text = svg_text(knockout_mixers(k, tmp_path / "m.png"))
    assert "error bars (Fieller ratio intervals): 90%, Fieller, 12 question families" in text


def test_patch_curve_caption_and_level_recorded(tmp_path):
    from chorus.interventions.patching import summarize_patch
    from chorus.interventions.plots import patch_curve
    r = np.random.default_rng(1)
    n = 11
    t = pd.concat([pd.DataFrame({"qid": [f"q{i}" for i in range(n)], "family": _fams(n), "x_cue": "a", "layer": L,
                                 "margin_x": r.normal(2, 0.3, n), "margin_y": np.zeros(n),
                                 "margin_patched": r.normal(1, 0.3, n)}) for L in range(3)])
    s = summarize_patch(t, n_boot=50, seed=0, ci=0.8)
    assert s["ci_level"] == 0.8 and s["curve"][0]["resampled"] == "question family"
    text = svg_text(patch_curve(s, tmp_path / "p.png"))
    assert "band (Fieller ratio intervals): 80%, Fieller, 11 question families" in text


def test_transfer_curve_caption_and_level_recorded(tmp_path):
    from chorus.interventions.plots import transfer_curve
    from chorus.interventions.state_transfer import summarize
    r = np.random.default_rng(2)
    n = 10
    rows = []
    for arm in ("transfer", "scrambled"):
        for L in (2, 4):
            rows.append(pd.DataFrame({"pair": range(n), "family": _fams(n), "arm": arm, "layer_s": L, "layer_r": L,
                                      "margin": r.normal(1, 0.3, n), "margin_none": np.zeros(n),
                                      "margin_message": r.normal(2, 0.3, n), "sender_margin": r.normal(1, 1, n)}))
    s = summarize(pd.concat(rows), n_boot=50, seed=0, ci=0.95)
    assert s["ci_level"] == 0.95
    text = svg_text(transfer_curve(s, tmp_path / "t.png"))
    assert "bands (Fieller ratio intervals): 95%, Fieller, 10 question families" in text


def test_gap_effect_and_cue_bar_captions(tmp_path):
    from chorus.interventions import ablations as ab
    from chorus.interventions.plots import committed_gaps, cue_sets, effect_bars
    from chorus.interventions.readout import committed_at_read
    rows = []
    for i in range(12):
        for cond, hit in (("debate", i % 3 > 0), ("reflection", i % 2 > 0), ("debate@filler", i % 4 > 0)):
            rows.append({"qid": f"q{i}", "family": f"f{i}", "condition": cond, "f": 0.0, "changed": True,
                         "answer": "A", "argmax": "A" if hit else "B"})
    car = committed_at_read(pd.DataFrame(rows), n_boot=50)
    assert len(car["gaps_f0"]) > 1
    text = svg_text(committed_gaps(car["gaps_f0"], tmp_path / "g.png", ci=car["ci_level"]))
    assert "error bars: 95%, 12 question families resampled" in text

    r = np.random.default_rng(3)
    n = 6   # fewer than MIN_UNITS families: the caption says the tables refuse these intervals
    cols = {c: r.normal(size=n) for c in ab.CROSSED}
    w = pd.DataFrame({"qid": [f"q{i}" for i in range(n)], "family": _fams(n), "none": np.zeros(n),
                      "full": r.normal(1, 0.2, n), **cols})
    w["effect_full"] = w["full"] - w["none"]
    s = ab.summarize_effects(w, n_boot=50, seed=0, ci=0.9)
    text = svg_text(effect_bars(s["effects"], tmp_path / "e.png", title="t", ci=0.9))
    assert "error bars: 90%, 6 question families resampled; under 10 units the tables refuse" in text
    sets = {"original": {k: s[k] for k in ("record_effect", "status_effect", "record_status_ratio")}}
    text = svg_text(cue_sets(sets, tmp_path / "c.png", ci=0.9))
    assert "error bars: 90%, 6 question families resampled" in text


# -- belief and role-play ----------------------------------------------------------------------------------
def _kappa_rows(units):
    rows = []
    for k in (0.5, 1.0, 2.0):
        rows.append({"gamma": 1.0, "kappa": k, "concept": "c", "K": 3, "kappa_hat_median": k * 1.1,
                     "kappa_hat_ci_low": k * 0.9 if units >= 10 else np.nan,
                     "kappa_hat_ci_high": k * 1.3 if units >= 10 else np.nan, "kappa_hat_ci_resampled": "run",
                     "kappa_hat_ci_units": units, "kappa_hat_ci_level": 0.9})
    return pd.DataFrame(rows)


def test_belief_kappa_plots_caption_their_runs(tmp_path):
    from chorus.simulate.belief import plots
    text = svg_text(plots.kappa_recovery({}, {"kappa_recovery": _kappa_rows(12)}, tmp_path / "k.png"))
    assert "bands (median of the rows' bootstrap bounds): 90%, 12 runs resampled" in text
    text = svg_text(plots.concept_kappa_recovery({}, {"kappa_recovery": _kappa_rows(12)}, tmp_path / "c.png"))
    assert "bars: 90%, 12 runs resampled" in text
    # five runs: the interval is refused (NaN bounds), nothing is drawn, so nothing is captioned
    text = svg_text(plots.kappa_recovery({}, {"kappa_recovery": _kappa_rows(5)}, tmp_path / "k5.png"))
    assert "resampled" not in text


def test_roleplay_convergence_bars_caption_groups(tmp_path):
    from chorus.simulate.roleplay import plots
    cell = lambda n: {"delta_sd": {"mean": 0.1, "lo": 0.0, "hi": 0.2, "n": n, "resampled": "group", "n_units": n}}
    s = {"ci_level": 0.95, "human": {"public": cell(14), "private": cell(14)},
         "cells": {"m/full/public": cell(12), "m/full/private": cell(12)}}
    text = svg_text(plots.convergence_bars(s, tmp_path / "r.png") or tmp_path / "r.png")
    assert "error bars: 95%, 12-14 groups resampled" in text
