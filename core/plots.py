"""One way to make a figure: a matplotlib ``Figure`` on the Agg canvas, without pyplot's global
state (safe in threads and long runs); matplotlib is imported only when a figure is made."""
from __future__ import annotations


def figure(w: float = 5.5, h: float = 4.0, dpi: int = 110):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(w, h), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig
