"""One way to make and write a figure, in one style, for every part.

A figure is a matplotlib ``Figure`` on the Agg canvas, without pyplot's global state (safe in threads
and long runs); matplotlib is imported only when a figure is made. ``save`` is the one writer and
applies the house rules to every figure, so a plot function draws and never has to remember them:

* vector output: ``NAME.svg`` beside ``NAME.png`` always (the HTML report embeds the SVG), and the
  formats in ``$CHORUS_PLOT_FORMATS`` too (``pdf``, comma-separated) for a paper; files carry no
  creation date, so a rerun writes the same bytes;
* nothing clipped: the saved area is the drawing's tight bounding box (labels, legends, notes);
* whole numbers on an axis of whole numbers: an axis whose label names rounds, layers, agents or seats
  (``round``, ``patched layer (...)``; not a ``share``, ``rate``, ``mean`` or ``fraction`` of them) or
  starts ``number of`` / ``count``, ticks at integers only;
* no hidden overplotting: a scatter of more than ``DENSE`` points drawn opaque is made translucent;
* a degenerate range says what it means: an axes whose plotted values are all equal is widened
  around the value and says "every value is X"; one with no finite value says so.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

DPI = 150
FORMATS_ENV = "CHORUS_PLOT_FORMATS"
VECTOR = ("svg", "pdf")
DENSE = 50   # scatter points beyond which opaque markers hide each other
_INTEGER_WORDS = re.compile(r"\b(round|rounds|layer|layers|agent|agents|seat|seats)\b")
_INTEGER_PREFIXES = ("number of", "count")
_NOT_INTEGER = ("share", "rate", "mean", "fraction", "proportion", "accuracy")
# one look everywhere: small type for dense panels, light grid, fonts kept as text in vector files
STYLE = {"font.size": 9, "axes.titlesize": 9, "axes.labelsize": 9, "legend.fontsize": 7,
         "xtick.labelsize": 8, "ytick.labelsize": 8, "axes.grid": True, "grid.alpha": 0.3,
         "grid.linewidth": 0.6, "axes.spines.top": False, "axes.spines.right": False,
         "svg.fonttype": "none", "svg.hashsalt": "chorus", "pdf.fonttype": 42}
_styled = False


def _style() -> None:
    """The house style, set once in the process (rcParams are read when artists are made)."""
    global _styled
    if not _styled:
        import matplotlib
        matplotlib.rcParams.update(STYLE)
        _styled = True


def figure(w: float = 5.5, h: float = 4.0, dpi: int = DPI):
    _style()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(w, h), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def subplots(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] = (5.5, 4.0), dpi: int = DPI,
             **kw):
    """``(fig, axes)`` like ``pyplot.subplots`` (``sharex``, ``sharey``, ``squeeze``, ... pass
    through to ``Figure.subplots``), on a ``figure(...)``: no pyplot, nothing to close."""
    fig = figure(*figsize, dpi=dpi)
    return fig, fig.subplots(nrows, ncols, **kw)


def extra_formats() -> tuple[str, ...]:
    """The vector formats asked for beyond SVG (``$CHORUS_PLOT_FORMATS``, e.g. ``pdf``); an unknown one
    is a one-line error naming it."""
    from chorus.core.config import InputError
    asked = [f.strip().lower().lstrip(".") for f in os.environ.get(FORMATS_ENV, "").split(",") if f.strip()]
    bad = [f for f in asked if f not in VECTOR and f != "png"]
    if bad:
        raise InputError(f"{FORMATS_ENV}={os.environ[FORMATS_ENV]!r}: unknown format {bad[0]!r} (png, svg and pdf)")
    return tuple(f for f in dict.fromkeys(asked) if f in VECTOR and f != "svg")


def _is_integer_axis(label: str) -> bool:
    text = label.strip().lower()
    if text.startswith(_NOT_INTEGER):
        return False
    return text.startswith(_INTEGER_PREFIXES) or bool(_INTEGER_WORDS.search(text))


def _finite_y(ax) -> list[float]:
    import numpy as np
    ys: list[float] = []
    for line in ax.get_lines():
        ys += [float(v) for v in np.asarray(line.get_ydata(), dtype=float).ravel()]
    for coll in ax.collections:
        off = np.asarray(coll.get_offsets(), dtype=float)
        if off.ndim == 2 and off.shape[1] == 2:
            ys += [float(v) for v in off[:, 1]]
    for patch in ax.patches:   # bars: their heights
        h = getattr(patch, "get_height", None)
        if h is not None:
            ys.append(float(patch.get_y() + h()))
    return [y for y in ys if np.isfinite(y)]


def _house_rules(fig) -> None:
    from matplotlib.collections import PathCollection
    from matplotlib.ticker import MaxNLocator
    for ax in fig.axes:
        for axis, label, lim, setlim in ((ax.xaxis, ax.get_xlabel(), ax.get_xlim(), ax.set_xlim),
                                         (ax.yaxis, ax.get_ylabel(), ax.get_ylim(), ax.set_ylim)):
            if label and _is_integer_axis(label):
                # one round alone (a single point) autoscales to +-0.1: widen to whole steps, one tick at least
                scale = axis.get_scale()
                if abs(lim[1] - lim[0]) < 1 and scale == "linear":
                    mid = round(sum(lim) / 2)
                    setlim(mid - 0.5, mid + 0.5)
                axis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        for coll in ax.collections:
            if isinstance(coll, PathCollection) and len(coll.get_offsets()) > DENSE and coll.get_alpha() is None:
                coll.set_alpha(0.45)
        if not ax.has_data() or not ax.get_visible() or ax.get_label() == "<colorbar>":
            continue
        ys = _finite_y(ax)
        if not ys:
            ax.text(0.5, 0.5, "no finite value to plot", transform=ax.transAxes, ha="center", va="center",
                    fontsize=8, color="#a33")
        elif max(ys) - min(ys) <= 1e-12 * max(1.0, abs(ys[0])):
            v = ys[0]
            if ax.get_autoscaley_on():   # a range the plot fixed itself (a share's 0..1) is kept
                pad = max(abs(v) * 0.1, 0.05)
                ax.set_ylim(v - pad, v + pad)
            ax.text(0.02, 0.97, f"every value is {v:.4g}", transform=ax.transAxes, ha="left", va="top",
                    fontsize=7, color="#555")


def save(fig, path, dpi: int | None = None):
    """Lay the figure out, apply the house rules (module docstring) and write ``path`` (PNG) with its
    SVG beside it and any formats of ``$CHORUS_PLOT_FORMATS``; returns ``path``."""
    path = Path(path)
    formats = extra_formats()   # a bad value fails before any file is written
    _house_rules(fig)
    if not fig.get_constrained_layout():
        import warnings
        with warnings.catch_warnings():   # an inset or colorbar axes tight_layout cannot place: the tight box below still holds all
            warnings.simplefilter("ignore", UserWarning)
            fig.tight_layout()
    fig.savefig(path, dpi=dpi or DPI, bbox_inches="tight", metadata={"Software": None})
    for fmt in ("svg", *formats):
        meta = {"Date": None} if fmt == "svg" else {"CreationDate": None}
        fig.savefig(path.with_suffix(f".{fmt}"), bbox_inches="tight", metadata=meta)
    return path


def interval_caption(fig, records, *, ci: float = 0.95, unit: str | None = None, what: str = "intervals",
                     method: str | None = None) -> str:
    """A line under ``fig`` naming what its drawn intervals resample and how many units (issue 51 item 5:
    "intervals: 95%, 12-40 question families resampled"), read from the records the figure draws
    (``resampled``, ``n_units`` / ``n_clusters`` / ``n_groups``; ``unit`` where they do not name it);
    ``method`` for intervals that are no bootstrap ("Fieller"). Where some rest on fewer than
    ``MIN_UNITS`` units the line says the tables refuse them. Returns the line."""
    from chorus.core.stats import MIN_UNITS, plural
    ns, units = [], set()
    for r in records:
        n = next((r.get(k) for k in ("n_units", "n_clusters", "n_groups") if r.get(k) is not None), None)
        try:
            if n is not None and float(n) == float(n):
                ns.append(int(n))
        except (TypeError, ValueError):
            pass
        if r.get("resampled") and r.get("resampled") != "unit":
            units.add(str(r["resampled"]))
    u = " / ".join(sorted(units)) or unit or "unit"
    head = f"{what}: {ci:.0%}" + (f", {method}" if method else "")
    if not ns:
        text = f"{head}, {u} level (count not recorded)"
    else:
        lo, hi = min(ns), max(ns)
        count = plural(u, hi) if lo == hi else f"{lo}-{plural(u, hi)}"
        text = f"{head}, {count}" + ("" if method else " resampled")
        if lo < MIN_UNITS and not method:
            text += f"; under {MIN_UNITS} units the tables refuse the interval (its bounds are mostly the draw)"
    fig.text(0.5, 0.0, text, ha="center", va="top", fontsize=7)
    return text
