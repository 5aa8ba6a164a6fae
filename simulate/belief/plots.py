"""Figures from a run's tables and derived tables (``chorus.core.plots``: Agg, no pyplot): ``PLOTS`` for a
Beta run (panels per condition), ``CONCEPT_PLOTS`` for a multi-concept run (panels per concept)."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from chorus.core.plots import interval_caption, save, subplots

MAX_PANELS = 12
GROUP_COLOURS = {"stubborn": "tab:red", "pliable": "tab:blue", "committed": "black",
                 "free": "tab:blue", "all": "tab:blue"}


def kappa_caption(fig, kr: pd.DataFrame, what: str) -> str | None:
    """The caption of a kappa plot's drawn intervals (issue 51 item 5): what the rows' bootstrap resampled
    and how many units (``kappa_hat_ci_resampled`` / ``_units`` / ``_level``, recorded by
    ``analysis.interval_columns``); None where no interval is drawn."""
    if "kappa_hat_ci_low" not in kr:
        return None
    d = kr[kr.kappa_hat_ci_low.notna()]
    if not len(d):
        return None
    recs = [{"resampled": r.get("kappa_hat_ci_resampled"), "n_units": r.get("kappa_hat_ci_units")}
            for r in d.to_dict("records")]
    level = d["kappa_hat_ci_level"].dropna() if "kappa_hat_ci_level" in d else pd.Series(dtype=float)
    return interval_caption(fig, recs, ci=float(level.iloc[0]) if len(level) else 0.95, unit="run", what=what)


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
    return save(fig, path)


def transfer(tables, derived, path: Path) -> Path:
    tc, ut = derived["transfer"], tables["utterances"]
    fig, ax = subplots(figsize=(4.5, 4.2))
    u = ut[np.isfinite(ut.e)]
    if len(u) > 3000:
        u = u.sample(3000, random_state=0)
    ax.scatter(u.s, u.e, s=4, alpha=0.25, color="grey", label="utterances")
    ok = tc.n.fillna(0) > 0
    ax.errorbar(tc.s_mean[ok], tc.e_mean[ok], yerr=tc.e_std[ok].fillna(0), marker="o",
                color="tab:blue", label="mean e per s bin (+-1 SD: spread, not an interval)")
    ax.plot([0, 1], [0, 1], ls="--", color="black", lw=0.8, label="faithful")
    ax.set_xlabel("speaker belief s")
    ax.set_ylabel("appraised evidence e")
    ax.set_title("channel transfer curve", fontsize=9)
    ax.legend(fontsize=7)
    return save(fig, path)


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
    kappa_caption(fig, kr, "bands (median of the rows' bootstrap bounds)")
    return save(fig, path)


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
    return save(fig, path)


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
    return save(fig, path)


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
    return save(fig, path)


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
    return save(fig, path)


# -- multi-concept runs: one panel per concept ------------------------------------------------------
def _concepts(derived) -> list[str]:
    return derived["concept_metrics"].concept.tolist()


def _panels(n: int, w: float = 4.6, h: float = 3.6):
    cols = min(3, n)
    rows = int(np.ceil(n / cols))
    fig, axes = subplots(rows, cols, figsize=(w * cols, h * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, axes.flat


def concept_trajectories(tables, derived, path: Path) -> Path:
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
    return save(fig, path)


def concept_variance(tables, derived, path: Path) -> Path:
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
    return save(fig, path)


def concept_fj(tables, derived, path: Path) -> Path | None:
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
    return save(fig, path)


def concept_kappa_recovery(tables, derived, path: Path) -> Path | None:
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
    kappa_caption(fig, kr, "bars")
    return save(fig, path)


def concept_transfer(tables, derived, path: Path) -> Path:
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
    return save(fig, path)


CONCEPT_PLOTS: dict[str, Callable] = {"multi_trajectories": concept_trajectories, "multi_variance": concept_variance, "multi_fj": concept_fj,
                                      "multi_kappa_recovery": concept_kappa_recovery, "multi_transfer": concept_transfer}
