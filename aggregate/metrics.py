"""Accuracy, ECE (10 equal-width / 15 equal-mass bins, top-1 confidence), multi-class Brier,
reliability diagrams; ECE, reliability tables and the paired (optionally question-clustered)
bootstrap are ``chorus.core.stats``, re-exported here.

Conventions:

* confidence = the probability the arm puts on the answer it decided (top-1 for argmax arms);
* ECE = sum_b (n_b / n) |acc_b - conf_b|; equal-width bins are [0, .1), ..., [.9, 1.0];
  equal-mass bins split the confidence-sorted tasks into 15 near-equal groups;
* Brier = mean over tasks of sum_g (p_g - 1[g = gold])^2 (multi-class; at K = 2 it is twice
  the binary Brier of the top-1 probability).
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd

from chorus.core.plots import figure, save
from chorus.core.stats import LOWER_IS_BETTER, ece, paired_bootstrap, reliability_table

__all__ = ["accuracy", "brier", "brier_per_task", "brier_sum_logits", "ece", "summarize", "paired_bootstrap",
           "reliability_table", "reliability_diagram", "reliability_overlay", "line_plot", "LOWER_IS_BETTER"]



# -- scores ---------------------------------------------------------------------------------
def brier_sum_logits(logits: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Sum over tasks of the multi-class Brier of softmax(logits); logits (..., n, K)."""
    z = logits - logits.max(axis=-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=-1, keepdims=True)
    n = p.shape[-2]
    p_gold = p[..., np.arange(n), gold]
    return ((p * p).sum(-1) - 2.0 * p_gold + 1.0).sum(-1)


def brier_per_task(proba: np.ndarray, gold: np.ndarray) -> np.ndarray:
    proba = np.asarray(proba, float)
    n = len(proba)
    return (proba * proba).sum(1) - 2.0 * proba[np.arange(n), gold] + 1.0


def brier(proba: np.ndarray, gold: np.ndarray) -> float:
    return float(brier_per_task(proba, gold).mean())


def accuracy(answer: np.ndarray, gold: np.ndarray) -> float:
    return float((np.asarray(answer) == np.asarray(gold)).mean())


def summarize(answer: np.ndarray, proba: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    """accuracy, ece_ew (10 equal-width), ece_em (15 equal-mass), brier, mean confidence, n."""
    answer = np.asarray(answer)
    gold = np.asarray(gold)
    n = len(answer)
    conf = np.asarray(proba)[np.arange(n), answer]
    correct = (answer == gold).astype(float)
    return {"n": int(n), "accuracy": float(correct.mean()),
            "ece_ew": ece(conf, correct, 10, "width"), "ece_em": ece(conf, correct, 15, "mass"),
            "brier": brier(proba, gold), "mean_confidence": float(conf.mean())}


# -- plots --------------------------------------------------------------------------------------
def reliability_diagram(conf: np.ndarray, correct: np.ndarray, path: str | Path, *, title: str = "",
                        n_bins: int = 10) -> Path:
    """One arm's reliability diagram (equal-width bins): accuracy bars against the diagonal,
    the gap shaded, with a count histogram underneath."""
    tab = reliability_table(conf, correct, n_bins, "width")
    fig = figure(5.0, 6.0)
    ax = fig.add_axes((0.14, 0.34, 0.8, 0.58))
    ax2 = fig.add_axes((0.14, 0.08, 0.8, 0.18), sharex=ax)
    width = 1.0 / n_bins
    centers = (tab["bin"] + 0.5) * width
    ax.bar(centers, tab["accuracy"], width=width * 0.95, color="#4C72B0", edgecolor="k", lw=0.5,
           label="accuracy")
    ax.bar(centers, tab["confidence"] - tab["accuracy"], bottom=tab["accuracy"], width=width * 0.95,
           color="#DD8452", alpha=0.45, label="gap to confidence")
    ax.plot([0, 1], [0, 1], "k--", lw=1)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy")
    e = ece(conf, correct, n_bins, "width")
    ax.set_title(f"{title}  (ECE$_{{ew}}$ = {e:.3f}, n = {len(conf)})", fontsize=10)
    ax.legend(loc="upper left", fontsize=8)
    ax2.bar(centers, tab["count"], width=width * 0.95, color="0.6")
    ax2.set_xlabel("confidence")
    ax2.set_ylabel("tasks")
    path = Path(path)
    save(fig, path)
    return path


def reliability_overlay(curves: Mapping[str, tuple[np.ndarray, np.ndarray]], path: str | Path, *,
                        n_bins: int = 10, title: str = "reliability") -> Path:
    """All arms on one diagram (equal-width bins), marker area ~ bin count."""
    fig = figure(6.0, 5.5)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfect")
    for name, (conf, correct) in curves.items():
        tab = reliability_table(conf, correct, n_bins, "width")
        ax.plot(tab["confidence"], tab["accuracy"], "-o", lw=1.2, ms=3,
                label=f"{name} ({ece(conf, correct, n_bins, 'width'):.3f})")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("confidence")
    ax.set_ylabel("accuracy")
    ax.set_title(title + " (ECE$_{ew}$ in legend)", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    path = Path(path)
    save(fig, path)
    return path


def line_plot(frame: pd.DataFrame, x: str, y: str, hue: str, path: str | Path, *,
              panels: str | None = None, title: str = "", ylabel: str | None = None) -> Path:
    """Small-multiples line plot (used by the sweeps)."""
    keys = [None] if panels is None else list(dict.fromkeys(frame[panels]))
    fig = figure(4.2 * len(keys), 3.8)
    for j, key in enumerate(keys):
        ax = fig.add_subplot(1, len(keys), j + 1)
        sub = frame if key is None else frame[frame[panels] == key]
        for name, g in sub.groupby(hue, sort=False):
            g = g.sort_values(x)
            ax.plot(g[x], g[y], "-o", ms=3, lw=1.2, label=str(name))
        ax.set_xlabel(x)
        ax.set_ylabel(ylabel or y)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        if key is not None:
            ax.set_title(str(key), fontsize=10)
        if j == 0:
            ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path = Path(path)
    save(fig, path)
    return path
