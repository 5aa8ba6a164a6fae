"""Accuracy, ECE (10 equal-width / 15 equal-mass bins, top-1 confidence), multi-class Brier,
reliability diagrams, and the paired (optionally question-clustered) bootstrap.

Conventions:

* confidence = the probability the arm puts on the answer it decided (top-1 for argmax arms);
* ECE = sum_b (n_b / n) |acc_b - conf_b|; equal-width bins are [0, .1), ..., [.9, 1.0];
  equal-mass bins split the confidence-sorted tasks into 15 near-equal groups;
* Brier = mean over tasks of sum_g (p_g - 1[g = gold])^2 (multi-class; at K = 2 it is twice
  the binary Brier of the top-1 probability).
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

LOWER_IS_BETTER = {"brier": True, "ece_ew": True, "accuracy": False}


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


def _bins(conf: np.ndarray, n_bins: int, strategy: str) -> np.ndarray:
    """Bin id of every task."""
    conf = np.asarray(conf, float)
    if strategy in ("width", "uniform", "ew"):
        return np.minimum((conf * n_bins).astype(int), n_bins - 1)
    if strategy in ("mass", "quantile", "em"):
        order = np.argsort(conf, kind="mergesort")
        b = np.empty(len(conf), dtype=int)
        for k, part in enumerate(np.array_split(order, n_bins)):
            b[part] = k
        return b
    raise ValueError(f"binning strategy must be 'width' or 'mass', got {strategy!r}")


def reliability_table(conf: np.ndarray, correct: np.ndarray, n_bins: int = 10,
                      strategy: str = "width") -> pd.DataFrame:
    """Per-bin count, mean confidence and accuracy (empty bins dropped)."""
    conf = np.asarray(conf, float)
    correct = np.asarray(correct, float)
    b = _bins(conf, n_bins, strategy)
    cnt = np.bincount(b, minlength=n_bins)
    sc = np.bincount(b, weights=conf, minlength=n_bins)
    sa = np.bincount(b, weights=correct, minlength=n_bins)
    keep = cnt > 0
    with np.errstate(invalid="ignore"):
        return pd.DataFrame({"bin": np.arange(n_bins)[keep], "count": cnt[keep],
                             "confidence": (sc / cnt)[keep], "accuracy": (sa / cnt)[keep]})


def ece(conf: np.ndarray, correct: np.ndarray, n_bins: int = 10, strategy: str = "width") -> float:
    conf = np.asarray(conf, float)
    correct = np.asarray(correct, float)
    if len(conf) == 0:
        return float("nan")
    b = _bins(conf, n_bins, strategy)
    sc = np.bincount(b, weights=conf, minlength=n_bins)
    sa = np.bincount(b, weights=correct, minlength=n_bins)
    return float(np.abs(sa - sc).sum() / len(conf))


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


# -- bootstrap --------------------------------------------------------------------------------
def paired_bootstrap(per_method: Mapping[str, Mapping[str, np.ndarray]],
                     pairs: Sequence[tuple[str, str]], *, metrics: Sequence[str] = ("accuracy", "brier", "ece_ew"),
                     clusters: np.ndarray | None = None, n_resamples: int = 10_000, seed: int = 0,
                     ci: float = 0.95, chunk: int = 500) -> pd.DataFrame:
    """Paired bootstrap of metric deltas (A - B) for each (A, B) in ``pairs``.

    ``per_method[m]`` holds per-task arrays ``correct``, ``confidence`` and ``brier``. Every
    pair is evaluated on the *same* resamples. With ``clusters`` (e.g. question ids) whole
    clusters are resampled (the question-clustered variant). Returns one row per pair and
    metric: observed delta, CI bounds, p_win (fraction of resamples in which A is strictly
    better than B: higher accuracy, lower Brier / ECE) and p_tie.
    """
    from chorus.seeding import rng as make_rng

    methods = sorted({m for p in pairs for m in p})
    for m in methods:
        if m not in per_method:
            raise KeyError(f"bootstrap: no per-task results for method {m!r}")
    for m in metrics:
        if m not in LOWER_IS_BETTER:
            raise ValueError(f"bootstrap metric must be one of {sorted(LOWER_IS_BETTER)}, got {m!r}")
    n = len(next(iter(per_method.values()))["correct"])
    if clusters is None:
        cid = np.arange(n)
    else:
        _, cid = np.unique(np.asarray(clusters), return_inverse=True)
    C = int(cid.max()) + 1
    nb = 10
    # per-cluster sufficient statistics, one column block per method
    cols: list[np.ndarray] = [np.bincount(cid, minlength=C).astype(float)]
    layout: dict[tuple[str, str], slice] = {}
    pos = 1
    for m in methods:
        d = per_method[m]
        cor = np.asarray(d["correct"], float)
        conf = np.asarray(d["confidence"], float)
        bri = np.asarray(d["brier"], float)
        cols.append(np.bincount(cid, weights=cor, minlength=C)); layout[(m, "accuracy")] = slice(pos, pos + 1); pos += 1
        cols.append(np.bincount(cid, weights=bri, minlength=C)); layout[(m, "brier")] = slice(pos, pos + 1); pos += 1
        b = _bins(conf, nb, "width")
        key = cid * nb + b
        sa = np.bincount(key, weights=cor, minlength=C * nb).reshape(C, nb)
        sc = np.bincount(key, weights=conf, minlength=C * nb).reshape(C, nb)
        cols.extend((sa - sc).T)  # signed gap per bin: ECE = sum_b |sum gap| / n
        layout[(m, "ece_ew")] = slice(pos, pos + nb); pos += nb
    S = np.column_stack(cols)  # (C, F)

    def stat(X: np.ndarray, m: str, metric: str) -> np.ndarray:
        block = X[..., layout[(m, metric)]]
        cnt = X[..., 0]
        if metric == "ece_ew":
            return np.abs(block).sum(-1) / cnt
        return block[..., 0] / cnt

    observed = S.sum(0)
    rng = make_rng(seed)
    deltas = {(a, b, mt): [] for a, b in pairs for mt in metrics}
    done = 0
    while done < n_resamples:
        r = min(chunk, n_resamples - done)
        draw = rng.integers(0, C, size=(r, C))
        W = np.bincount((np.arange(r)[:, None] * C + draw).ravel(), minlength=r * C).reshape(r, C)
        X = W.astype(float) @ S  # (r, F)
        for a, b in pairs:
            for mt in metrics:
                deltas[(a, b, mt)].append(stat(X, a, mt) - stat(X, b, mt))
        done += r
    lo_q, hi_q = (1 - ci) / 2, 1 - (1 - ci) / 2
    rows = []
    for a, b in pairs:
        for mt in metrics:
            dd = np.concatenate(deltas[(a, b, mt)])
            obs = float(stat(observed, a, mt) - stat(observed, b, mt))
            better = dd < 0 if LOWER_IS_BETTER[mt] else dd > 0
            rows.append({"a": a, "b": b, "metric": mt, "delta": obs,
                         "ci_low": float(np.quantile(dd, lo_q)), "ci_high": float(np.quantile(dd, hi_q)),
                         "p_win": float(better.mean()), "p_tie": float((dd == 0).mean()),
                         "n_resamples": int(n_resamples), "clustered": clusters is not None,
                         "n_clusters": C})
    return pd.DataFrame(rows)


# -- plots --------------------------------------------------------------------------------------
def _figure(w: float = 5.0, h: float = 5.0):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def reliability_diagram(conf: np.ndarray, correct: np.ndarray, path: str | Path, *, title: str = "",
                        n_bins: int = 10) -> Path:
    """One arm's reliability diagram (equal-width bins): accuracy bars against the diagonal,
    the gap shaded, with a count histogram underneath."""
    tab = reliability_table(conf, correct, n_bins, "width")
    fig = _figure(5.0, 6.0)
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
    fig.savefig(path)
    return path


def reliability_overlay(curves: Mapping[str, tuple[np.ndarray, np.ndarray]], path: str | Path, *,
                        n_bins: int = 10, title: str = "reliability") -> Path:
    """All arms on one diagram (equal-width bins), marker area ~ bin count."""
    fig = _figure(6.0, 5.5)
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
    fig.savefig(path)
    return path


def line_plot(frame: pd.DataFrame, x: str, y: str, hue: str, path: str | Path, *,
              panels: str | None = None, title: str = "", ylabel: str | None = None) -> Path:
    """Small-multiples line plot (used by the sweeps)."""
    keys = [None] if panels is None else list(dict.fromkeys(frame[panels]))
    fig = _figure(4.2 * len(keys), 3.8)
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
    fig.savefig(path)
    return path
