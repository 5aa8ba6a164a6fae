"""Figures of a multi-concept run, from its tables and derived tables (``core.plots``: Agg, no pyplot)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from core.plots import subplots


def _concepts(derived) -> list[str]:
    return derived["concept_metrics"].concept.tolist()


def _panels(n: int, w: float = 4.6, h: float = 3.6):
    cols = min(3, n)
    rows = int(np.ceil(n / cols))
    fig, axes = subplots(rows, cols, figsize=(w * cols, h * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, axes.flat


def trajectories(tables, derived, path: Path) -> Path:
    """One panel per concept: mean credence per stance by round, stacked (each band a stance);
    dotted: the stacked per-stance FJ fixed-point means (uncoupled concepts)."""
    tr, sm = derived["trajectories"], derived["stance_metrics"]
    concepts = _concepts(derived)
    fig, axes = _panels(len(concepts))
    for ax, c in zip(axes, concepts):
        d = tr[tr.concept == c].pivot_table(index="round", columns="k", values="b")
        names = sm[sm.concept == c].sort_values("k")
        ax.stackplot(d.index, d.T.values, labels=names.stance.tolist(), alpha=0.8)
        ref = names.b_star_mean.to_numpy()
        if np.isfinite(ref).all():
            for lv in np.cumsum(ref)[:-1]:
                ax.axhline(lv, ls=":", lw=1, color="black")
        ax.set_ylim(0, 1)
        ax.set_xlim(d.index.min(), d.index.max())
        ax.set_title(f"{c} (K={len(names)})", fontsize=10)
        ax.set_xlabel("round")
        ax.set_ylabel("mean credence (stacked)")
        ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def variance(tables, derived, path: Path) -> Path:
    """Cross-agent variance of each stance's credence by round (mean over seeds), per concept."""
    tr = derived["trajectories"]
    concepts = _concepts(derived)
    fig, axes = _panels(len(concepts))
    for ax, c in zip(axes, concepts):
        d = tr[tr.concept == c]
        for k, dk in d.groupby("k"):
            ax.plot(dk["round"], np.clip(dk.variance, 1e-12, None), label=str(dk.stance.iloc[0]))
        ax.set_yscale("log")
        ax.set_title(c, fontsize=10)
        ax.set_xlabel("round")
        ax.set_ylabel("cross-agent variance")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def fj(tables, derived, path: Path) -> Path | None:
    """Terminal credences (per agent and stance, mean over seeds) against the per-stance
    mean-field FJ fixed point, one panel per uncoupled concept."""
    bel, fp, cm = tables["beliefs"], derived["fixed_points"], derived["concept_metrics"]
    rounds = int(tables["runs"].rounds.iloc[0])
    concepts = [c for c in _concepts(derived) if fp[fp.concept == c].b_star.notna().any()]
    if not concepts:
        return None
    end = bel[bel["round"] == rounds].assign(concept=lambda x: x.concept.astype(str))
    fig, axes = _panels(len(concepts), 4.0, 3.8)
    for ax, c in zip(axes, concepts):
        d = end[end.concept == c].merge(fp[fp.concept == c].drop(columns="concept"), on=["run", "agent", "k"])
        per = d.groupby(["agent", "k"])[["b", "b_star"]].mean().reset_index()
        for k, dk in per.groupby("k"):
            ax.scatter(dk.b_star, dk.b, s=10, label=str(d[d.k == k].stance.iloc[0]))
        ax.plot([0, 1], [0, 1], ls="--", color="black", lw=0.8)
        r2 = cm[cm.concept == c].fj_r2.iloc[0]
        ax.set_title(f"{c}" + ("" if pd.isna(r2) else f" (R2={r2:.3f})"), fontsize=10)
        ax.set_xlabel("FJ fixed point b*")
        ax.set_ylabel("terminal credence (mean over seeds)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def kappa_recovery(tables, derived, path: Path) -> Path | None:
    """Per concept: median kappa_hat (pooled over stances, from s) against the prescribed kappa."""
    kr = derived["kappa_recovery"]
    if kr.empty or kr.kappa_hat_median.isna().all():
        return None
    kr = kr.dropna(subset=["kappa_hat_median"])
    fig, ax = subplots(figsize=(4.8, 4.4))
    for (c, d), mk in zip(kr.groupby("concept", sort=False), "osD^v<>ph*"):  # markers tell overlaps apart
        line, = ax.plot(d.kappa, np.clip(d.kappa_hat_median, 1e-2, None), marker=mk, ls="-" if len(d) > 1 else "",
                        mfc="none", ms=9, label=f"{c} (K={int(d.K.iloc[0])})")
        if d.kappa_hat_ci_low.notna().any():  # run-clustered bootstrap interval of the median
            ax.vlines(d.kappa, np.clip(d.kappa_hat_ci_low, 1e-2, None), np.clip(d.kappa_hat_ci_high, 1e-2, None),
                      color=line.get_color(), lw=2, alpha=0.5)
    lo, hi = kr.kappa.min() / 1.5, kr.kappa.max() * 1.5
    ax.plot([lo, hi], [lo, hi], ls="--", color="black", lw=0.8, label="prescribed")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("prescribed kappa")
    ax.set_ylabel("median kappa_hat (pooled, from s)")
    ax.set_title("kappa recovery per concept", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def transfer(tables, derived, path: Path) -> Path:
    """Appraised evidence against the speaker's credence, per stance of every concept."""
    ap = tables["appraisals"]
    ap = ap[~ap.failed].assign(concept=lambda x: x.concept.astype(str))
    concepts = _concepts(derived)
    fig, axes = _panels(len(concepts), 4.0, 3.8)
    for ax, c in zip(axes, concepts):
        d = ap[ap.concept == c]
        if len(d) > 3000:
            d = d.sample(3000, random_state=0)
        for k, dk in d.groupby("k"):
            ax.scatter(dk.s, dk.e_appraised, s=4, alpha=0.3, label=str(dk.stance.iloc[0]))
        ax.plot([0, 1], [0, 1], ls="--", color="black", lw=0.8)
        ax.set_title(f"{c}: channel", fontsize=10)
        ax.set_xlabel("speaker credence s_k")
        ax.set_ylabel("appraised evidence e_k")
        if len(d):
            ax.legend(fontsize=7, markerscale=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


PLOTS: dict[str, Callable] = {"multi_trajectories": trajectories, "multi_variance": variance, "multi_fj": fj,
                              "multi_kappa_recovery": kappa_recovery, "multi_transfer": transfer}
