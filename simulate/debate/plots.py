"""Figures for debate / influence runs (matplotlib, Agg; imported inside functions)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

COLORS = {"debate": "#c0392b", "reflection": "#2e86c1"}


def _fig(w: float = 5.5, h: float = 4.0):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(w, h), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def by_round(summary: dict[str, Any], key: str, path: Path, *, ylabel: str, title: str, extra_key: str | None = None) -> Path:
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
    fig.savefig(path)
    return path


def committed(cr: dict[str, Any], path: Path) -> Path:
    fig = _fig()
    ax = fig.add_subplot(111)
    for cond, d in cr.get("by_condition", {}).items():
        fs = sorted(d, key=float)
        y = [d[f]["share"] for f in fs]
        lo = [d[f]["share"] - d[f]["ci_low"] if d[f]["ci_low"] == d[f]["ci_low"] else 0 for f in fs]
        hi = [d[f]["ci_high"] - d[f]["share"] if d[f]["ci_high"] == d[f]["ci_high"] else 0 for f in fs]
        ax.errorbar([float(f) for f in fs], y, yerr=[lo, hi], fmt="o-", capsize=3, color=COLORS.get(cond), label=cond)
    ax.set_xlabel("readout point f (fraction of the receiver's rationale)")
    ax.set_ylabel("readout argmax = eventual answer\n(answer-changing responses)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title("committed-at-read", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    return path


def effect_bars(eff: dict[str, Any], path: Path, *, title: str) -> Path:
    fig = _fig(6.0, 4.0)
    ax = fig.add_subplot(111)
    names = list(eff)
    y = [eff[n]["mean"] for n in names]
    err = [[max(0.0, eff[n]["mean"] - eff[n]["ci_low"]) if eff[n]["ci_low"] == eff[n]["ci_low"] else 0 for n in names],
           [max(0.0, eff[n]["ci_high"] - eff[n]["mean"]) if eff[n]["ci_high"] == eff[n]["ci_high"] else 0 for n in names]]
    ax.bar(range(len(names)), y, yerr=err, capsize=3, color="#7d3c98")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("adoption-margin shift vs no message (logits)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    return path
