"""What the paper reports share (``chorus paper bda | influence | roleplay | belief``, the papers in
``chorus.papers``): the one shape of a section (``Section``, kept in the paper's order by ``Sections``),
laying sections out under their headings, a number in a markdown cell, a markdown table, the runs'
figures copied beside ``paper.md``, the "missing" line of a section without its runs, and writing
``numbers.json`` then ``paper.md`` from that file alone. Each paper keeps its own run reading and page
frame; a file's sha256 is ``chorus.core.runs.file_sha256``.

``Section`` lives here, below every part, because the BDA paper's numbers are computed by the council
part (the campaign, ``chorus.simulate.council.campaign``: its sections are this type too) while the papers live at the
application level."""
from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Sequence
from chorus.core.config import InputError, Strict
from chorus.core.runs import RunDir, check_output, write_json


class PaperError(InputError):
    """An input that cannot be read into a paper report (one line naming it; exit 2)."""


@dataclass(frozen=True)
class Section:
    """One section of a paper report, the shape every paper's sections take.

    ``key``: its entry in ``numbers.json``'s ``sections``; ``title``: its heading in ``paper.md`` (for a
    section the BDA campaign computes: where the paper reports it); ``export``: its numbers made from the
    paper's inputs (None where it is laid out from other sections' numbers); ``render``: its markdown body
    made from the numbers (None where the paper lays it out its common way); ``missing``: the command that
    makes what it reads, named when the inputs lack it; ``spec``: the paper's own details (the run kinds it
    reads, the columns it shows, its figures, whether a verifier re-derives it)."""
    key: str
    title: str
    export: Callable[..., Any] | None = None
    render: Callable[..., str] | None = None
    missing: str = ""
    spec: Mapping[str, Any] = field(default_factory=dict)


class Sections(list):
    """A paper's sections in the paper's order (the order they are added in); ``exports`` and ``renders``
    register a function as a section's export or render (the decorator registry of inspect_ai)."""

    def add(self, key: str, title: str, *, export: Callable[..., Any] | None = None,
            render: Callable[..., str] | None = None, missing: str = "", **spec: Any) -> Section:
        if any(s.key == key for s in self):
            raise ValueError(f"section {key!r} added twice")
        s = Section(key, title, export, render, missing, MappingProxyType(dict(spec)))
        self.append(s)
        return s

    def exports(self, key: str, title: str, *, missing: str = "", **spec: Any):
        def wrap(fn):
            self.add(key, title, export=fn, missing=missing, **spec)
            return fn
        return wrap

    def renders(self, key: str, title: str, *, missing: str = "", **spec: Any):
        def wrap(fn):
            self.add(key, title, render=fn, missing=missing, **spec)
            return fn
        return wrap

    def get(self, key: str) -> Section:
        for s in self:
            if s.key == key:
                return s
        raise KeyError(key)

    def keys(self) -> list[str]:
        return [s.key for s in self]


def is_missing(entry: Mapping[str, Any]) -> bool:
    """A section entry whose inputs were not given: it says what is missing instead of numbers."""
    return isinstance(entry.get("missing"), str)


def render_sections(sections: Iterable[Section], numbers: Mapping[str, Any], out: Path, *,
                    body: Callable[[Section, dict], str], missing: Callable[[Section, dict], str]) -> list[str]:
    """The page under its preamble, one section after another in the paper's order: its heading, then
    why it is missing or its body (the section's own ``render``, else the paper's ``body``) and the runs'
    figures it names, copied into ``out/figures``. Lines, to be joined with newlines."""
    parts: list[str] = []
    for s in sections:
        entry = numbers["sections"].get(s.key, {"missing": "not exported"})
        parts.append(f"\n## {s.title}\n")
        if is_missing(entry):
            parts.append(missing(s, entry))
            continue
        text = s.render(entry) if s.render is not None else body(s, entry)
        if text:   # a section with nothing to show but its figures adds no empty line
            parts.append(text)
        parts += [f"\n{line}" for line in copy_figures(entry.get("figures", []), out)]
    return parts


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


class PaperConfig(Strict):
    """What a paper report was made from: which paper, and the run directories given, as given."""
    paper: str
    runs: list[str]


def paper_sources(runs: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Each run a paper read, with the fingerprint ``chorus verify`` checks it against later (its
    manifest's sha256, "unsealed" for a run without one), in the record an analysis keeps."""
    from chorus.core.analyses import Reads, fingerprint
    return [{"field": "runs", "reads": "runs", "kind": "runs", "path": str(r), "resolved": str(Path(r).resolve()),
             "fingerprint": fingerprint(Path(r), Reads("runs"))} for r in runs]


def write_paper(out: Path, numbers: dict[str, Any], render: Callable[[dict[str, Any], Path], str], *,
                paper: str, runs: Sequence[str | Path]) -> tuple[Path, dict[str, Any]]:
    """The paper's own sealed run directory ``out`` (part ``paper``): ``numbers.json``, then ``paper.md``
    rendered from that file as read back (so the report shows only what the file holds, JSON-normalised)
    and the figures it copies; provenance names the paper and each run it read with its fingerprint, so
    ``chorus verify OUT`` catches an edited page or a run changed since. (paper.md, the numbers read back).
    ``out`` is new, empty, or this paper's earlier report of the same runs (``RunDir.create``); it never
    lies inside another run (``chorus.core.runs.check_output``): a paper is not that run's record."""
    earlier = RunDir(out).provenance().get("part") if (out / "provenance.json").is_file() else None
    if earlier != "paper":   # an earlier paper report in ``out`` is RunDir.create's to accept or refuse
        check_output(out)
    cfg = PaperConfig(paper=paper, runs=[str(r) for r in runs])
    run = RunDir.create(out, part="paper", config=cfg, command=f"paper {paper}", paper=paper,
                        sources=paper_sources(runs))
    write_json(run.path / "numbers.json", numbers)
    numbers = json.loads((run.path / "numbers.json").read_text())
    p = run.path / "paper.md"
    p.write_text(render(numbers, run.path))
    run.finish()
    return p, numbers
