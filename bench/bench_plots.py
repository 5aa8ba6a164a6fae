"""What the figure rules cost (``chorus.core.plots.save``): two figure shapes of a paper's size (a
by-round curve with intervals, a cost-accuracy scatter over 2,000 cells) written as PNG alone (a plain
``savefig``, the writer before the rules), as PNG + SVG (the default) and with a PDF too; seconds per
figure and bytes per file, the median of --reps.

    .venv/bin/python bench/bench_plots.py --out bench/results/plots.json
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from _recorder import machine, write_result  # noqa: E402  (bench/ is the script directory)


def _by_round(ax, rng):
    for cond in ("debate", "reflection"):
        y = rng.random(6)
        ax.errorbar(range(6), y, yerr=0.1, fmt="o-", capsize=3, label=cond)
    ax.set_xlabel("round")
    ax.set_ylabel("unanimous groups")
    ax.legend()


def _scatter(ax, rng):
    for k in range(8):
        ax.scatter(10 ** rng.uniform(2, 5, 250), rng.random(250), s=28, label=f"arm{k}")
    ax.set_xscale("log")
    ax.set_xlabel("tokens per task")
    ax.set_ylabel("accuracy")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "plots.json")
    a = ap.parse_args()
    import numpy as np

    from chorus.core.plots import DPI, FORMATS_ENV, save, subplots

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, draw in (("by_round_curve", _by_round), ("scatter_2000_points", _scatter)):
            for mode in ("png_only", "png_svg", "png_svg_pdf"):
                times = []
                for k in range(a.reps):
                    fig, ax = subplots()
                    draw(ax, np.random.default_rng(k))
                    p = Path(tmp) / f"{name}-{mode}.png"
                    os.environ[FORMATS_ENV] = "pdf" if mode == "png_svg_pdf" else ""
                    t0 = time.perf_counter()
                    if mode == "png_only":
                        fig.tight_layout()
                        fig.savefig(p, dpi=DPI)
                    else:
                        save(fig, p)
                    times.append(time.perf_counter() - t0)
                sizes = {ext: p.with_suffix(ext).stat().st_size for ext in (".png", ".svg", ".pdf")
                         if p.with_suffix(ext).is_file()}
                rows.append({"figure": name, "writer": mode, "seconds": round(statistics.median(times), 4),
                             "bytes": sizes})
                print(f"{name:20s} {mode:12s} {statistics.median(times):6.3f} s  {sizes}", flush=True)
    write_result(a.out, {"bench": "plots", "machine": machine(), "reps": a.reps, "rows": rows})


if __name__ == "__main__":
    main()
