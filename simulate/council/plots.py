"""Figures of a council run, drawn from tables/results.parquet only (``chorus.core.plots``: Agg, no pyplot)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from chorus.core.plots import save, subplots


def accuracy_bars(table: pd.DataFrame, path: Path, note: str | None = None) -> Path:
    """Accuracy of every arm, one panel per dataset, one bar per condition; ``note`` (the
    embedded-model caveat, ``chorus.serving.standing.standing(...).caveat``) under each panel's title."""
    dsets = list(dict.fromkeys(table["dataset"]))
    conds = list(dict.fromkeys(table["condition"]))
    fig, axes = subplots(len(dsets), 1, figsize=(9, 3.2 * len(dsets)), squeeze=False)
    for ax, ds in zip(axes[:, 0], dsets):
        sub = table[table["dataset"] == ds]
        arms = list(dict.fromkeys(sub["arm"]))
        x = np.arange(len(arms))
        w = 0.8 / max(1, len(conds))
        for k, c in enumerate(conds):
            vals = [sub[(sub["arm"] == a) & (sub["condition"] == c)]["accuracy"].astype(float).mean() for a in arms]
            ax.bar(x + k * w, vals, w, label=c)
        ax.set_xticks(x + w * (len(conds) - 1) / 2)
        ax.set_xticklabels(arms, rotation=30, ha="right", fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_ylabel("accuracy")
        ax.set_title(f"{ds}\n" + textwrap.fill(f"({note})", 110) if note else ds, fontsize=9)
        ax.legend(fontsize=8)
    return save(fig, path)


def cost_accuracy(table: pd.DataFrame, path: Path) -> Path:
    """Accuracy against token cost per task (log x), every arm and cell."""
    fig, ax = subplots(figsize=(7, 4.5))
    markers = "os^Dv<>pP*X"
    for k, (arm, g) in enumerate(table.groupby("arm", sort=False)):
        tok = g["tokens_per_task"].astype(float)
        # arms at the same cost and accuracy (cells of one council) would hide each other: own marker, see-through
        ax.scatter(tok.clip(lower=1), g["accuracy"].astype(float), label=arm, s=28, alpha=0.6,
                   marker=markers[k % len(markers)], edgecolors="none")
    ax.set_xscale("log")
    ax.set_xlabel("tokens per task (council arms: the council's own calls)")
    ax.set_ylabel("accuracy")
    ax.legend(fontsize=7, ncol=2)
    return save(fig, path)
