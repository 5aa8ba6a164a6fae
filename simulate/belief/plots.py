"""Figures from a run's tables and derived tables (``core.plots``: Agg, no pyplot)."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from core.plots import subplots

MAX_PANELS = 12
GROUP_COLOURS = {"stubborn": "tab:red", "pliable": "tab:blue", "committed": "black",
                 "free": "tab:blue", "all": "tab:blue"}


def trajectories(tables, derived, path: Path) -> Path:
    """One panel per condition: one line per agent (belief averaged over seeds), the
    mean-field FJ levels dotted (the initial mean dotted where no fixed point exists)."""
    bel, agents, cm = tables["beliefs"], tables["agents"], derived["condition_metrics"]
    fp = derived["fixed_points"].merge(tables["runs"][["run", "condition"]], on="run")
    conds = cm.condition.tolist()[:MAX_PANELS]
    # two columns of large panels: a report page shows the figure at its full width, legibly
    cols = min(2, len(conds))
    rows = int(np.ceil(len(conds) / cols))
    fig, axes = subplots(rows, cols, figsize=(5.6 * cols, 3.4 * rows), squeeze=False,
                             sharey=True)
    first_run = tables["runs"].groupby("condition").run.min()
    for ax, c in zip(axes.flat, conds):
        b = bel[bel.condition == c].groupby(["agent", "round"]).b.mean().unstack(0)
        grp = agents[agents.run == first_run[c]].set_index("agent").group
        for a in b.columns:
            ax.plot(b.index, b[a], lw=0.9, alpha=0.8, color=GROUP_COLOURS.get(grp.get(a), "tab:blue"))
        levels = fp[fp.condition == c].groupby("agent").b_star.mean()
        row = cm[cm.condition == c].iloc[0]
        if levels.notna().all():
            for a, lv in levels.items():
                ax.axhline(lv, ls=":", lw=0.8, color=GROUP_COLOURS.get(grp.get(a), "grey"), alpha=0.7)
        else:
            ax.axhline(row.initial_mean, ls=":", lw=1, color="grey")
        # R^2 against the fixed point means nothing for a consensus (no spread to explain)
        r2 = "" if pd.isna(row.fj_r2) or row.population == "degroot" else f", R2={row.fj_r2:.2f}"
        ax.set_title(textwrap.fill(f"{row.label} (gamma={row.gamma:g}{r2})", 60), fontsize=10)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("round")
    for ax in axes.flat[len(conds):]:
        ax.axis("off")
    axes[0, 0].set_ylabel("belief b (mean over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def transfer(tables, derived, path: Path) -> Path:
    tc, ut = derived["transfer"], tables["utterances"]
    fig, ax = subplots(figsize=(4.5, 4.2))
    u = ut[np.isfinite(ut.e)]
    if len(u) > 3000:
        u = u.sample(3000, random_state=0)
    ax.scatter(u.s, u.e, s=4, alpha=0.25, color="grey", label="utterances")
    ok = tc.n.fillna(0) > 0
    ax.errorbar(tc.s_mean[ok], tc.e_mean[ok], yerr=tc.e_std[ok].fillna(0), marker="o",
                color="tab:blue", label="mean e per s bin")
    ax.plot([0, 1], [0, 1], ls="--", color="black", lw=0.8, label="faithful")
    ax.set_xlabel("speaker belief s")
    ax.set_ylabel("appraised evidence e")
    ax.set_title("channel transfer curve", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def kappa_recovery(tables, derived, path: Path) -> Path | None:
    kr = derived["kappa_recovery"].dropna(subset=["kappa_hat_median"])
    if kr.kappa.nunique() < 2:
        return None
    fig, ax = subplots(figsize=(4.5, 4.2))
    for g, d in kr.groupby("gamma"):
        by = d.groupby("kappa")
        m = by.kappa_hat_median.median()
        line, = ax.plot(m.index, np.clip(m.values, 1e-2, None), marker="o", label=f"recovered (s), gamma={g:g}")
        if "kappa_hat_ci_low" in d and d.kappa_hat_ci_low.notna().any():  # run-clustered bootstrap interval
            ax.fill_between(m.index, np.clip(by.kappa_hat_ci_low.median().values, 1e-2, None),
                            np.clip(by.kappa_hat_ci_high.median().values, 1e-2, None), color=line.get_color(), alpha=0.2)
    lo, hi = kr.kappa.min() / 1.5, kr.kappa.max() * 1.5
    ax.plot([lo, hi], [lo, hi], ls="--", color="black", lw=0.8, label="prescribed")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("prescribed kappa")
    ax.set_ylabel("median kappa_hat (well-conditioned events)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def dose_response(tables, derived, path: Path) -> Path | None:
    dr = derived.get("dose_response")
    if dr is None or dr.f.nunique() < 2:
        return None
    fig, ax = subplots(figsize=(4.5, 4.2))
    for (g, k), d in dr.groupby(["gamma", "kappa"]):
        d = d.sort_values("f")
        line, = ax.plot(d.f, d.late_mean, marker="o", label=f"free agents, gamma={g:g}, kappa={k:g}")
        ax.plot(d.f, d.reference, ls="--", color=line.get_color(), lw=0.8, label="full-following ref.")
        ax.plot(d.f, d.free_b_star_mean, ls=":", color=line.get_color(), lw=0.8, label="mean-field FJ")
    ax.set_xlabel("committed fraction f")
    ax.set_ylabel("free agents' mean belief (last quarter of rounds)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def variance_vs_gamma(tables, derived, path: Path) -> Path | None:
    cm = derived["condition_metrics"]
    if cm.gamma.nunique() < 2:
        return None
    fig, ax = subplots(figsize=(4.5, 4.2))
    for pop, d in cm.groupby("population"):
        d = d.groupby("gamma").final_variance.mean()
        ax.plot(d.index, d.values, marker="o", label=pop)
    ax.set_yscale("log")
    ax.set_xlabel("gamma")
    ax.set_ylabel("final cross-agent variance")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def probe(tables, derived, path: Path) -> Path | None:
    bel = tables["beliefs"]
    b = bel[np.isfinite(bel.probe)]
    if b.empty:
        return None
    if len(b) > 3000:
        b = b.sample(3000, random_state=0)
    fig, ax = subplots(figsize=(4.5, 4.2))
    ax.scatter(b.b, b.probe, s=4, alpha=0.3)
    ax.plot([0, 1], [0, 1], ls="--", color="black", lw=0.8)
    ax.set_xlabel("hidden belief b")
    ax.set_ylabel("self-report / 100")
    ax.set_title("probe audit", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


PLOTS: dict[str, Callable] = {"trajectories": trajectories, "transfer": transfer,
                              "kappa_recovery": kappa_recovery, "dose_response": dose_response,
                              "variance_vs_gamma": variance_vs_gamma, "probe": probe}


def calibration(scores: pd.DataFrame, tau: float, path: Path) -> Path:
    """Reliability of raw and calibrated p_plus against the soft labels."""
    fig, ax = subplots(figsize=(4.5, 4.2))
    ok = np.isfinite(scores.p_raw)
    ax.scatter(scores.y[ok], scores.p_raw[ok], s=10, alpha=0.6, label="raw p_plus")
    ax.scatter(scores.y[ok], scores.p_cal[ok], s=10, alpha=0.6, label=f"calibrated (tau={tau:.2f})")
    ax.plot([0, 1], [0, 1], ls="--", color="black", lw=0.8)
    ax.set_xlabel("label y")
    ax.set_ylabel("appraiser p_plus")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
