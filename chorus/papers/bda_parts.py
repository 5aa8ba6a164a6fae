"""What every section of the BDA paper report (``bda.py``, ``bda_more.py``) writes with: the campaign's
cell format, a table, the line of a section whose inputs are missing, the cells a table read."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from chorus.core.paper import fmt, md_table

RUN_ATTACK = "chorus council run full --out RUN  (its attack-k1 / attack-k2 conditions)"
RUN_CLEAN = "chorus council run full --out RUN"


def cell(x: Any) -> str:
    """The campaign's cells: NaN shows as "-" and every float in three decimals (no significant digits)."""
    return fmt(x, sig=None, nan="-")


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    return md_table(header, rows, cell)


def missing(what: str, command: str) -> str:
    return f"*Missing:* {what}. Make it with `{command}`, then re-export the campaign " \
           f"(`chorus paper bda RUN... --out CAMPAIGN`)."


def sources(keys: Iterable[str]) -> str:
    return "Cells: " + ", ".join(f"`{k}`" for k in keys) + "."


def ci(d: dict | None) -> str:
    """A paired difference with its interval in one cell, naming what the interval resampled and how
    many units ("+0.030 [-0.010, +0.070] (95%, 40 questions resampled)"; refused below
    ``MIN_UNITS``), "-" when there is none."""
    if not d:
        return "-"
    from chorus.core.stats import record_interval_text
    return f"{d['delta']:+.3f} " + record_interval_text(d, fmt="+.3f")


def each(entries: dict, block: Callable[[str, dict], str], name: Callable[[str], str] = lambda k: f"`{k}`") -> list[str]:
    """Each entry's markdown block (``block(key, entry)``), or the line saying it was not computed (its
    error), in the file's order: the loop every per-council and per-cell table shares."""
    return [f"{name(k)}: not computed ({v['error']})." if "error" in v else block(k, v) for k, v in entries.items()]


def reads(section: str, command: str) -> Callable[[Callable], Callable]:
    """A section's body made from one section of the numbers file (``render(p, that section)``); the page
    frame says it is missing (``missing``: why, and ``command``, what makes its inputs) when the campaign
    lacks it, so no section repeats that preamble."""
    def mark(fn: Callable) -> Callable:
        fn.reads = (section, command)
        return fn
    return mark
