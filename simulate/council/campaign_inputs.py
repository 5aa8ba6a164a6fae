"""The stores a campaign reads (BDA paper D.7): council run directories (``chorus council run``) or
bare trace stores (a folder with ``traces/<dataset>__<condition>.jsonl[.gz]``, e.g. a synthetic
council), grouped into cells keyed ``council/dataset/condition``.

A council is named by its run's config (``name``) or, for a bare store, by its folder. Runs of the
same council may split datasets, conditions or generation seeds between them (their traces are joined
into one cell); what they may not do is differ in the council itself: seats, rounds or protocol. Those,
a task generated twice, or one dataset with two answer-set sizes are refused in one line naming the
field and the values."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from chorus.aggregate.trace import iter_traces, load_traces
from chorus.core.config import ConfigError, load_config
from chorus.core.runs import file_sha256
from chorus.simulate.council.config import CouncilConfig

TRACE_NAME = re.compile(r"^(?P<dataset>[^_][^/]*?)__(?P<condition>[^/]+?)\.jsonl(\.gz)?$")


class CampaignError(ConfigError):
    """A campaign's inputs are inconsistent (mixed councils or protocols, repeated tasks, a missing store)."""


@dataclass
class Source:
    """One input folder: its council's identity and its trace files."""
    path: Path
    council: str
    kind: str                       # council_run | trace_store
    seats: tuple[str, ...]          # "A1=profile/persona" (council runs) or the agents (trace stores)
    rounds: int | None
    files: list[Path]


@dataclass
class CellInput:
    """One campaign cell: every trace of one (council, dataset, condition), from one or more files."""
    council: str
    dataset: str
    condition: str
    files: list[Path] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    _traces: list | None = None

    @property
    def key(self) -> str:
        return f"{self.council}/{self.dataset}/{self.condition}"

    @property
    def traces(self) -> list:
        if self._traces is None:
            self._traces = [tr for p in self.files for tr in load_traces(p)]
        return self._traces

    @property
    def K(self) -> int:
        return self.traces[0].K

    @property
    def adversaries(self) -> list[str]:
        return sorted({a for tr in self.traces for a in (tr.extra.get("adversaries") or [])})

    @property
    def attacked(self) -> bool:
        return bool(self.adversaries)

    def source_record(self) -> dict[str, Any]:
        return {"runs": self.runs, "files": [str(p) for p in self.files],
                "sha256": {str(p): file_sha256(p) for p in self.files}}


def _council_source(path: Path) -> Source:
    cfg = load_config(path / "config.yaml", CouncilConfig)
    seats = tuple(f"{a}={s.profile}/{s.persona}" for a, s in zip(cfg.agent_names(), cfg.seats))
    return Source(path, cfg.name, "council_run", seats, cfg.rounds, _trace_files(path))


def _trace_files(path: Path) -> list[Path]:
    d = path / "traces"
    files = sorted(p for p in d.glob("*.jsonl*") if TRACE_NAME.match(p.name)) if d.is_dir() else []
    if not files:
        raise CampaignError(f"campaign input {path}: no traces/<dataset>__<condition>.jsonl[.gz] files")
    return files


def _store_source(path: Path) -> Source:
    files = _trace_files(path)
    agents: set[str] = set()
    rounds = 0
    for p in files:
        for _, tr in iter_traces(p):
            agents.update(tr.agents)
            rounds = max(rounds, 1 + max(m.round for m in tr.moves))
    return Source(path, path.name, "trace_store", tuple(sorted(agents)), rounds, files)


def read_source(path: str | Path) -> Source:
    p = Path(path)
    if not p.is_dir():
        raise CampaignError(f"campaign input {p}: not a directory (a council run or a folder with traces/)")
    return _council_source(p) if (p / "config.yaml").is_file() and (p / "tables" / "turns.parquet").is_file() \
        else _store_source(p)


def collect(paths: Sequence[str | Path]) -> tuple[list[Source], dict[str, CellInput]]:
    """The sources and their cells, checked: one identity per council, no task in two files of a cell,
    one K per (council, dataset)."""
    if not paths:
        raise CampaignError("a campaign needs at least one council run or trace store")
    sources = [read_source(p) for p in paths]
    first: dict[str, Source] = {}
    for s in sources:
        f = first.setdefault(s.council, s)
        for name in ("kind", "seats", "rounds"):
            if getattr(f, name) != getattr(s, name):
                raise CampaignError(f"campaign: council {s.council!r} mixes {name} {getattr(f, name)!r} ({f.path}) "
                                    f"and {getattr(s, name)!r} ({s.path}); give different councils different names")
    cells: dict[str, CellInput] = {}
    for s in sources:
        for p in s.files:
            m = TRACE_NAME.match(p.name)
            c = cells.setdefault(f"{s.council}/{m['dataset']}/{m['condition']}",
                                 CellInput(s.council, m["dataset"], m["condition"]))
            c.files.append(p)
            if str(s.path) not in c.runs:
                c.runs.append(str(s.path))
    for c in cells.values():
        seen: dict[str, Path] = {}
        for p in c.files:
            for _, tr in iter_traces(p):
                if tr.task_id in seen and seen[tr.task_id] != p:
                    raise CampaignError(f"campaign cell {c.key}: task {tr.task_id!r} is in {seen[tr.task_id]} and in "
                                        f"{p} (the same task and generation seed generated twice)")
                seen[tr.task_id] = p
        Ks = sorted({tr.K for tr in c.traces})
        if len(Ks) > 1:
            raise CampaignError(f"campaign cell {c.key}: tasks with K = {Ks} in one cell")
    byds: dict[tuple[str, str], tuple[int, str]] = {}
    for c in cells.values():
        k0 = byds.setdefault((c.council, c.dataset), (c.K, c.key))
        if k0[0] != c.K:
            raise CampaignError(f"campaign: dataset {c.dataset!r} of council {c.council!r} has K = {k0[0]} in {k0[1]} "
                                f"and K = {c.K} in {c.key}")
    return sources, dict(sorted(cells.items()))
