"""What the paper renderers share (``chorus belief | influence | roleplay | council paper``): a
number in a markdown cell, a markdown table, the runs' figures copied beside ``paper.md``, the
"missing" line of a section without its runs, and writing ``numbers.json`` then ``paper.md`` from
that file alone. Each renderer keeps its own run reading, source records and section layout; a
file's sha256 is ``chorus.core.runs.file_sha256``."""
from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence
from chorus.core.runs import check_output, write_json


def fmt(x: Any, nd: int = 3, *, sig: int | None = 3, nan: str = "nan") -> str:
    """A markdown cell: None -> "-"; a float to ``nd`` decimals, or to ``sig`` significant digits when
    0 < |x| < 1e-3 (``sig=None``: always ``nd`` decimals), NaN -> ``nan``; anything else ``str(x)``."""
    if x is None:
        return "-"
    if isinstance(x, float):
        if x != x:
            return nan
        if sig is not None and x != 0 and abs(x) < 1e-3:   # a tiny value would print as 0.000
            return f"{x:.{sig}g}"
        return f"{x:.{nd}f}"
    return str(x)


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any] | Mapping[str, Any]],
             cell: Callable[[Any], str] = fmt) -> str:
    """A markdown table: each row a sequence of cells in header order, or a mapping read by the
    header's names (a name it lacks: None); every cell through ``cell``."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        vals = [r.get(c) for c in header] if isinstance(r, Mapping) else r
        lines.append("| " + " | ".join(cell(v) for v in vals) + " |")
    return "\n".join(lines)


def missing_line(what: str, rerun: str) -> str:
    """A section without its runs: what makes them, then the paper command to run again."""
    return f"*Missing:* {what}; then `{rerun}` again."


def run_plots(path: Path) -> list[str]:
    """A run directory's ``plots/*.png``, relative to it, sorted."""
    return sorted(str(p.relative_to(path)) for p in (path / "plots").glob("*.png"))


def copy_figures(figures: Iterable[Sequence[str]], out: Path) -> list[str]:
    """Each ``(run, relative path)`` that exists copied to ``out/figures/<run name>__<file name>``
    (the run's name keeps two runs' same-named plots apart); their markdown image lines, in order."""
    lines = []
    for run, rel in figures:
        src = Path(run) / rel
        if src.is_file():
            name = f"{Path(run).name}__{Path(rel).name}"
            (out / "figures").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, out / "figures" / name)
            lines.append(f"![{name}](figures/{name})")
    return lines


def write_paper(out: Path, numbers: dict[str, Any],
                render: Callable[[dict[str, Any], Path], str]) -> tuple[Path, dict[str, Any]]:
    """``out/numbers.json``, then ``out/paper.md`` rendered from that file as read back (so the report
    shows only what the file holds, JSON-normalised); (paper.md, the numbers read back). ``out`` is
    never a run directory nor inside one (``chorus.core.runs.check_output``): a paper is not a run's record."""
    check_output(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "numbers.json", numbers)
    numbers = json.loads((out / "numbers.json").read_text())
    p = out / "paper.md"
    p.write_text(render(numbers, out))
    return p, numbers
