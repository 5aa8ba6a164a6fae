"""One way to make a figure: a matplotlib ``Figure`` on the Agg canvas, without pyplot's global
state (safe in threads and long runs); matplotlib is imported only when a figure is made."""
from __future__ import annotations


def figure(w: float = 5.5, h: float = 4.0, dpi: int = 110):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(w, h), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def subplots(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] = (5.5, 4.0), dpi: int = 110,
             **kw):
    """``(fig, axes)`` like ``pyplot.subplots`` (``sharex``, ``sharey``, ``squeeze``, ... pass
    through to ``Figure.subplots``), on a ``figure(...)``: no pyplot, nothing to close."""
    fig = figure(*figsize, dpi=dpi)
    return fig, fig.subplots(nrows, ncols, **kw)


def save(fig, path, dpi: int = 110):
    """Lay the figure out tightly and write it to ``path`` (returned, for the caller's list of plots)."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    return path
