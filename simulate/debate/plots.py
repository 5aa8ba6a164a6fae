"""Figures for debate runs (matplotlib, Agg; imported inside functions)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from chorus.core.plots import figure as _fig, interval_caption, save, subplots

COLORS = {"debate": "#c0392b", "reflection": "#2e86c1"}


def by_round(summary: dict[str, Any], key: str, path: Path, *, ylabel: str, title: str,
             extra_key: str | None = None) -> Path:
    fig = _fig()
    ax = fig.add_subplot(111)
    for cond, m in summary["conditions"].items():
        d = m.get(key) or {}
        xs = sorted(int(k) for k in d)
        ax.plot(xs, [d[k] if k in d else d[str(k)] for k in xs], "o-", color=COLORS.get(cond), label=cond)
        if extra_key:
            e = m.get(extra_key) or {}
            xe = sorted(int(k) for k in e)
            ax.plot(xe, [e[k] if k in e else e[str(k)] for k in xe], "s--", color=COLORS.get(cond), alpha=0.6,
                    label=f"{cond} (initially split)")
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, path)
    return path


def _family_records(table) -> list[dict]:
    """What an outcomes table's intervals resample: each row's families (``n_clusters``); none for a table
    made before rows counted them (``n_groups`` counts questions, not families: the caption then says the
    count is not recorded rather than pass questions off as families)."""
    if "n_clusters" not in table:
        return []
    return [{"resampled": r.get("resampled"), "n_clusters": r["n_clusters"]}
            for r in table.to_dict("records") if r.get("n_clusters") == r.get("n_clusters") and r.get("n_clusters")]


def curves_with_bands(table, path: Path, *, title: str = "collective outcomes by round") -> Path:
    """outcomes.by_round's tidy table: one panel per metric, a line per condition, its interval as a band."""
    fig = _fig(12.0, 3.8)
    metrics = list(dict.fromkeys(table["metric"]))
    labels = {"unanimity": "unanimous groups", "wrong_agreement": "unanimous on a wrong answer (labelled)",
              "n_eff": "effective independent voters n_eff"}
    for k, metric in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), k + 1)
        for cond, g in table[table["metric"] == metric].groupby("condition", sort=True):
            g = g.sort_values("round")
            ax.plot(g["round"], g["estimate"], "o-", ms=3, color=COLORS.get(cond),
                    label=f"{cond} (n={g['n_groups'].max()})")
            ax.fill_between(g["round"], g["ci_low"], g["ci_high"], color=COLORS.get(cond), alpha=0.2, lw=0)
        ax.set_xlabel("round")
        ax.set_ylabel(labels.get(metric, metric), fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    interval_caption(fig, _family_records(table), unit="question family", what="bands")
    save(fig, path)
    return path


def estimates(table, path: Path, *, title: str) -> Path:
    """One of the C.2 tables: every (metric, condition) estimate as a point with its interval and
    its group count beside it; shares, n_eff and the paired rows (ratios, deltas) in panels of their
    own (different scales). A cell without an estimate says so at the panel's foot."""
    fig = _fig(8.0, 3.8)
    paired = ~table["condition"].isin(list(COLORS))
    neff = table["metric"] == "n_eff"
    parts = [p for p in (table[~paired & ~neff], table[~paired & neff], table[paired]) if len(p)]
    for k, part in enumerate(parts):
        ax = fig.add_subplot(1, len(parts), k + 1)
        metrics = list(dict.fromkeys(part["metric"]))
        conds = list(dict.fromkeys(part["condition"]))
        w = 0.8 / max(len(conds), 1)
        for j, cond in enumerate(conds):
            g = part[part["condition"] == cond].set_index("metric")
            xs = [metrics.index(m) + (j - (len(conds) - 1) / 2) * w for m in g.index]
            y = g["estimate"].to_numpy(float)
            # a percentile interval can miss its own estimate by a hair; matplotlib refuses negative bars
            err = np.maximum([y - g["ci_low"].to_numpy(float), g["ci_high"].to_numpy(float) - y], 0.0)
            ax.errorbar(xs, y, yerr=err, fmt="o", capsize=3, color=COLORS.get(cond, "#555"), label=cond)
            for x, yy, n in zip(xs, y, g["n_groups"]):
                if np.isfinite(yy):
                    ax.annotate(f"n={n}", (x, yy), textcoords="offset points", xytext=(4, 4), fontsize=7)
                else:  # no groups, or a ratio over a zero rate
                    ax.annotate(f"n={n}\nundefined", (x, 0.02), xycoords=("data", "axes fraction"), fontsize=7,
                                ha="center", color=COLORS.get(cond, "#555"))
        ax.set_xticks(range(len(metrics)))
        ax.set_xlim(-0.6, len(metrics) - 0.4)
        ax.set_xticklabels([m.replace("_", " ") for m in metrics], fontsize=7, rotation=15)
        ax.set_ylabel("debate vs reflection (ratio or difference)" if part is parts[-1] and paired.any()
                      else "effective independent voters" if (part["metric"] == "n_eff").all() else "share of groups")
        if part is parts[-1] and paired.any():
            ax.axhline(1.0 if part["metric"].str.endswith("ratio").all() else 0.0, color="#999", lw=0.8, ls=":")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    ratio = "(the ratio's: Fieller) " if table["metric"].astype(str).str.endswith("ratio").any() else ""
    interval_caption(fig, _family_records(table), unit="question family", what=f"error bars {ratio}".strip())
    save(fig, path)
    return path
