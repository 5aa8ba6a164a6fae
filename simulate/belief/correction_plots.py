"""Figures of the channel correction: the fit (in the run it was fitted from) and, in a
corrected run, the transfer curve before and after with its intervals, the applied map and the
pliable consensus per arm. Figures are made by ``chorus.core.plots`` (Agg, no pyplot)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from chorus.core.plots import interval_caption, save, subplots

from .correction_map import CorrectionMap

ARM_COLOURS = ("tab:red", "tab:green", "tab:purple", "tab:orange")


def fit(pairs: pd.DataFrame, rec: dict[str, Any], path: Path) -> Path:
    """(a) the logged (s, e) pairs with each candidate's transfer curve f; (b) each candidate's
    correction g with its held-out distance from the diagonal, the chosen one bold."""
    ok = np.isfinite(pairs.s) & np.isfinite(pairs.e)
    p = pairs[ok]
    if len(p) > 3000:
        p = p.sample(3000, random_state=0)
    fig, (a1, a2) = subplots(1, 2, figsize=(9.5, 4.3))
    a1.scatter(p.s, p.e, s=4, alpha=0.25, color="grey", label="utterances")
    grid = np.linspace(0, 1, 401)
    for fam, c in rec["candidates"].items():
        m = CorrectionMap.from_dict(c["map"])
        lw = 2.2 if fam == rec["family"] else 1.0
        if m.has_forward:
            a1.plot(grid, m.forward(grid), lw=lw, label=f"f, {fam}")
        a2.plot(grid, m(grid), lw=lw, label=f"g, {fam} (held-out diag. MSE {c['heldout_diagonal_mse']:.2g})")
    for ax in (a1, a2):
        ax.plot([0, 1], [0, 1], ls="--", color="black", lw=0.8, label="faithful")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7)
    a1.set_xlabel("speaker belief s")
    a1.set_ylabel("appraised evidence e")
    a1.set_title(f"transfer curve ({rec['model']}, n={rec['n_events']})", fontsize=9)
    a2.set_xlabel("appraised evidence e")
    a2.set_ylabel("corrected evidence g(e)")
    a2.set_title(f"correction g (chosen: {rec['family']})", fontsize=9)
    return save(fig, path)


def correction(tables, derived, path: Path) -> Path | None:
    """A corrected run: (a) binned transfer curve, raw and consumed evidence, with 95%
    intervals, against the diagonal; (b) the applied map (e_raw -> e); (c) the pliable
    (DeGroot) population's mean belief per arm against its initial mean."""
    tc = derived.get("transfer_correction")
    if tc is None or tc.empty:
        return None
    arms = derived["correction_arms"]
    cm = derived["condition_metrics"].merge(arms, on="condition")
    degroot = cm[cm.population == "degroot"]
    fig, axes = subplots(1, 3 if len(degroot) else 2, figsize=(14 if len(degroot) else 9.5, 4.3))
    a1, a2 = axes[0], axes[1]
    colours = {a: ARM_COLOURS[i % len(ARM_COLOURS)] for i, a in enumerate(tc.arm.unique())}
    drawn = []
    for (arm, ev), d in tc.groupby(["arm", "evidence"], sort=False):
        if arm == "none" and ev == "consumed":
            continue  # the uncorrected arm consumes its raw evidence
        d = d[d.n > 0]
        yerr = np.nan_to_num(d.half_width.to_numpy())
        drawn += [{"resampled": "utterance", "n_units": int(n)} for n in d.n[np.isfinite(d.half_width)]]
        a1.errorbar(d.s_mean, d.e_mean, yerr=yerr, marker="o" if ev == "consumed" else "s", ms=4,
                    capsize=2, ls="-" if ev == "consumed" else ":", color=colours[arm],
                    label=f"{ev} e, arm {arm}")
    a1.plot([0, 1], [0, 1], ls="--", color="black", lw=0.8, label="diagonal")
    a1.set_xlabel("speaker belief s")
    a1.set_ylabel("mean evidence per s bin (95% interval)")
    a1.set_title("transfer curve before / after correction", fontsize=9)
    a1.legend(fontsize=7)
    ut = tables["utterances"]
    if "e_raw" in ut.columns:
        u = ut[np.isfinite(ut.e_raw)].merge(arms, on="condition")
        u = u[u.arm != "none"]
        for arm, d in u.groupby("arm"):
            d = d.sort_values("e_raw")
            a2.plot(d.e_raw, d.e, lw=1.5, color=colours.get(arm, "tab:green"), label=f"g applied, arm {arm}")
    a2.plot([0, 1], [0, 1], ls="--", color="black", lw=0.8, label="identity")
    a2.set_xlabel("appraised evidence e_raw")
    a2.set_ylabel("consumed evidence e")
    a2.set_title("applied correction map", fontsize=9)
    a2.legend(fontsize=7)
    if len(degroot):
        a3 = axes[2]
        bel = tables["beliefs"].merge(arms, on="condition")
        bel = bel[bel.condition.isin(degroot.condition) & ~bel.committed]
        for arm, d in bel.groupby("arm", sort=False):
            m = d.groupby("round").b.mean()
            a3.plot(m.index, m.values, marker=".", color=colours.get(arm, "grey"), label=f"arm {arm}")
        a3.axhline(float(degroot.initial_mean.mean()), ls=":", color="black", label="initial mean")
        a3.axhspan(float(degroot.initial_mean.mean()) - 0.05, float(degroot.initial_mean.mean()) + 0.05,
                   color="grey", alpha=0.15, label="+/- 0.05")
        a3.set_ylim(0, 1)
        a3.set_xlabel("round")
        a3.set_ylabel("pliable population mean belief")
        a3.set_title("DeGroot consensus per arm", fontsize=9)
        a3.legend(fontsize=7)
    # correction_measure.diagonal_bins: each bin's 95% t-interval of mean(e - s) over its utterances
    interval_caption(fig, drawn, ci=0.95, what="error bars (panel a)", method="t-interval")
    return save(fig, path)


PLOTS: dict[str, Callable] = {"correction": correction}
