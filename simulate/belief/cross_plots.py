"""Figures of a cross-appraisal run (``cross_report.py`` draws them; ``chorus.core.plots``: Agg, no
pyplot): the transfer-curve grid (rows generator, columns appraiser), the rendering and reading
parts per model, and the pair-bias matrix with the additive fit's residuals. Each takes
(appraisals, transfer curves, pairs, parts, config, path) and returns the path written."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from chorus.core.plots import interval_caption, save, subplots


def plot_transfer_grid(app, tc, pairs, parts, cfg, path: Path) -> Path:
    """Rows generator, columns appraiser: each pair's utterances, binned means with intervals,
    the diagonal; the title gives the pair's bias and Pearson."""
    M = len(cfg.panel())
    fig, axes = subplots(M, M, figsize=(2.9 * M + 0.6, 2.7 * M + 0.4), squeeze=False, sharex=True, sharey=True)
    pi = pairs.set_index(["generator", "appraiser"])
    for gi, g in enumerate(cfg.panel()):
        for ai, a in enumerate(cfg.panel()):
            ax = axes[gi, ai]
            d = app[(app.generator == g) & (app.appraiser == a) & np.isfinite(app.e)]
            if len(d) > 1500:
                d = d.sample(1500, random_state=0)
            ax.scatter(d.s, d.e, s=4, alpha=0.25, color="grey")
            c = tc[(tc.generator == g) & (tc.appraiser == a) & (tc.n.fillna(0) > 0)]
            yerr = np.vstack([c.e_mean - c.e_lo, c.e_hi - c.e_mean])
            ax.errorbar(c.s_mean, c.e_mean, yerr=np.nan_to_num(yerr), marker="o", ms=3,
                        color="tab:red" if g == a else "tab:blue", lw=1)
            ax.plot([0, 1], [0, 1], ls="--", color="black", lw=0.7)
            p = pi.loc[(g, a)]
            ax.set_title(f"bias {p.bias:+.3f}, r={p.pearson:.2f}" if np.isfinite(p.bias) else "no valid appraisal",
                         fontsize=8)
            ax.set_xlim(0, 1)
            ax.set_ylim(-0.02, 1.02)
            if gi == M - 1:
                ax.set_xlabel(f"s  (appraiser {a})", fontsize=8)
            if ai == 0:
                ax.set_ylabel(f"generator {g}\ne", fontsize=8)
    fig.suptitle("cross-appraisal transfer curves (rows: generator, columns: appraiser; red: self)", fontsize=9)
    drawn = tc[tc.n.fillna(0) > 1]   # transfer_curves: mean e +- 1.96 SE over the bin's utterances
    interval_caption(fig, [{"resampled": "utterance", "n_units": int(n)} for n in drawn.n], ci=0.95,
                     what="error bars (each bin's mean e)", method="normal theory (mean +- 1.96 SE)")
    return save(fig, path)


def plot_parts(app, tc, pairs, parts, cfg, path: Path) -> Path:
    """Per model, two bars: the rendering and the reading part (intervals), for the bias (top)
    and the slope (bottom); the shared part mu in each row's title."""
    M = len(cfg.panel())
    fig, axes = subplots(2, M, figsize=(2.4 * M + 0.8, 5.4), squeeze=False, sharey="row")
    for row, qn in enumerate(("bias", "slope")):
        d = parts[parts.quantity == qn]
        sh = d[d.part == "shared"].iloc[0]
        for mi, m in enumerate(cfg.panel()):
            ax = axes[row, mi]
            dm = d[d.model == m].set_index("part").reindex(["render", "read"])
            est = dm.estimate.to_numpy()
            yerr = np.vstack([est - dm.lo.to_numpy(), dm.hi.to_numpy() - est])
            ax.bar([0, 1], est, color=["tab:orange", "tab:purple"], width=0.6,
                   yerr=None if np.isnan(yerr).all() else np.nan_to_num(yerr), capsize=4)
            ax.axhline(0, color="black", lw=0.7)
            ax.set_xticks([0, 1], ["rendering", "reading"], fontsize=8)
            ax.set_title(m if row == 0 else "", fontsize=9)
        ci = f" [{sh.lo:+.3f}, {sh.hi:+.3f}]" if np.isfinite(sh.lo) else ""
        axes[row, 0].set_ylabel(f"{qn} part" + (" (e - s)" if qn == "bias" else " (de/ds)") +
                                f"\nshared mu = {sh.estimate:+.3f}{ci}", fontsize=8)
    what = f"anchor {cfg.analysis.anchor} reads faithfully" if cfg.analysis.anchor else "sum-to-zero over the panel"
    fig.suptitle(f"channel bias = mu + rendering(generator) + reading(appraiser); {what}", fontsize=9)
    drawn = parts[np.isfinite(parts.lo.to_numpy(float))]
    interval_caption(fig, drawn.to_dict("records"), ci=cfg.analysis.ci, unit="utterance",
                     what="intervals (each generator's utterances resampled with all their appraisals)")
    return save(fig, path)


def plot_pair_bias(app, tc, pairs, parts, cfg, path: Path) -> Path:
    """The pair-bias matrix, each cell annotated with its value and the additive fit's residual."""
    M = len(cfg.panel())
    B = pairs.pivot(index="generator", columns="appraiser", values="bias").reindex(index=cfg.panel(),
                                                                                 columns=cfg.panel())
    R = pairs.pivot(index="generator", columns="appraiser", values="bias_interaction").reindex(
        index=cfg.panel(), columns=cfg.panel())
    fig, ax = subplots(figsize=(1.3 * M + 2.4, 1.1 * M + 1.6))
    lim = max(float(np.nanmax(np.abs(B.to_numpy()))) if np.isfinite(B.to_numpy()).any() else 0.0, 1e-3)
    im = ax.imshow(B.to_numpy(), cmap="RdBu", vmin=-lim, vmax=lim)
    for i in range(M):
        for j in range(M):
            v, r = B.iat[i, j], R.iat[i, j]
            if np.isfinite(v):
                ax.text(j, i, f"{v:+.3f}\n(res {r:+.3f})", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(M), cfg.panel(), fontsize=8, rotation=30)
    ax.set_yticks(range(M), cfg.panel(), fontsize=8)
    ax.set_xlabel("appraiser (reading)")
    ax.set_ylabel("generator (rendering)")
    fig.colorbar(im, ax=ax, label="bias mean(e - s)")
    return save(fig, path)


PLOTS: dict[str, Callable] = {"cross_transfer_grid": plot_transfer_grid, "cross_parts": plot_parts,
                              "cross_pair_bias": plot_pair_bias}
