"""Figures for debate runs (matplotlib, Agg; imported inside functions)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from core.plots import figure as _fig

COLORS = {"debate": "#c0392b", "reflection": "#2e86c1"}




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
