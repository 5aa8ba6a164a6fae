"""The house rules of every figure (``chorus.core.plots.save``, issue 50 item 4): an SVG beside each
PNG (the report embeds it), PDF on request, the same bytes on a rerun, integer ticks on round and layer
axes, a degenerate range said in words, dense scatters translucent; a figure of a part's own plot
function follows them without asking."""
from __future__ import annotations

import json

import numpy as np
import pytest

from chorus.core.config import InputError
from chorus.core.plots import FORMATS_ENV, save, subplots


def _line(tmp_path, ys, *, xlabel="round", name="f"):
    fig, ax = subplots()
    ax.plot(range(len(ys)), ys, "o-")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("unanimous groups")
    return fig, ax, save(fig, tmp_path / f"{name}.png")


def test_vector_beside_every_png_same_bytes_pdf_on_request(tmp_path, monkeypatch):
    monkeypatch.delenv(FORMATS_ENV, raising=False)
    _, _, p = _line(tmp_path, [0.2, 0.5, 0.4])
    assert p.is_file() and p.with_suffix(".svg").is_file() and not p.with_suffix(".pdf").exists()
    assert p.with_suffix(".svg").read_text().lstrip().startswith("<?xml")
    first = (p.read_bytes(), p.with_suffix(".svg").read_bytes())
    _line(tmp_path, [0.2, 0.5, 0.4])
    assert (p.read_bytes(), p.with_suffix(".svg").read_bytes()) == first   # no dates, fixed ids: a rerun is identical
    monkeypatch.setenv(FORMATS_ENV, "pdf")
    _, _, q = _line(tmp_path, [0.2, 0.5, 0.4], name="g")
    assert q.with_suffix(".pdf").read_bytes()[:5] == b"%PDF-"
    monkeypatch.setenv(FORMATS_ENV, "pdf,eps")
    with pytest.raises(InputError, match=r"CHORUS_PLOT_FORMATS='pdf,eps': unknown format 'eps'"):
        _line(tmp_path, [0.2, 0.5, 0.4], name="h")
    assert not (tmp_path / "h.png").exists()   # refused before anything is written


def test_rounds_and_layers_tick_at_integers_shares_do_not(tmp_path):
    for label in ("round", "patched layer (residual after it)", "number of agents"):
        fig, ax, _ = _line(tmp_path, [0.2, 0.5, 0.4, 0.1], xlabel=label)
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), (label, ticks)
    fig, ax = subplots()   # one round alone: whole steps, not 1.900 ... 2.100
    ax.plot([2], [0.4], "o")
    ax.set_xlabel("round")
    save(fig, tmp_path / "one.png")
    assert [float(t) for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]] == [2.0]
    fig, ax, _ = _line(tmp_path, [0.2, 0.5, 0.4], xlabel="share of rounds")
    assert not all(float(t).is_integer() for t in ax.get_xticks())


def test_a_degenerate_range_says_what_it_means(tmp_path):
    _, ax, _ = _line(tmp_path, [0.0, 0.0, 0.0])
    lo, hi = ax.get_ylim()
    assert lo < 0.0 < hi and hi - lo == pytest.approx(0.1)
    assert [t.get_text() for t in ax.texts] == ["every value is 0"]
    _, ax, _ = _line(tmp_path, [float("nan")] * 3, name="n")
    assert [t.get_text() for t in ax.texts] == ["no finite value to plot"]
    fig, ax = subplots()
    ax.plot([0, 1, 2], [0.5, 0.5, 0.5])
    ax.set_ylim(0, 1)   # a share's own range is kept, and still said
    save(fig, tmp_path / "s.png")
    assert ax.get_ylim() == (0.0, 1.0) and [t.get_text() for t in ax.texts] == ["every value is 0.5"]


def test_dense_scatters_are_translucent(tmp_path):
    rng = np.random.default_rng(0)
    fig, ax = subplots()
    dense = ax.scatter(rng.random(200), rng.random(200))
    sparse = ax.scatter([0.1, 0.2], [0.3, 0.4])
    save(fig, tmp_path / "d.png")
    assert dense.get_alpha() == pytest.approx(0.45) and sparse.get_alpha() is None


def test_a_parts_plot_and_the_report_use_the_vector_file(tmp_path):
    """The debate's by-round figure through the shared writer, and the report embedding its SVG."""
    from chorus.report import render_report
    from chorus.simulate.debate import plots

    run = tmp_path / "run"
    (run / "plots").mkdir(parents=True)
    summary = {"conditions": {"debate": {"unanimity_by_round": {"0": 0.25, "1": 0.5, "2": 0.75}},
                              "reflection": {"unanimity_by_round": {"0": 0.25, "1": 0.25, "2": 0.5}}}}
    (run / "summary.json").write_text(json.dumps({"experiment": "x"}))
    p = plots.by_round(summary, "unanimity_by_round", run / "plots" / "unanimity_by_round.png",
                       ylabel="unanimous groups", title="unanimity by round")
    assert p.with_suffix(".svg").is_file()
    html = render_report(run).read_text()
    assert html.count("data:image/svg+xml;base64,") == 1 and "data:image/png" not in html
