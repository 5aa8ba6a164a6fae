"""The second kind of verb: an analysis over stored runs or trace files.

An experiment verb (``chorus.core.verbs``) runs models from a config; an analysis reads what is
already stored (trace files, or run directories of one part), computes, and writes its OWN sealed
run directory, with its sources and their fingerprints in provenance, so ``chorus verify`` covers
it and catches a source changed after the fact. One is a decorated lazy factory (inspect_ai's
``@modelapi`` pattern: the function imports the heavy implementation inside and returns it, so
``chorus --help`` imports nothing heavy) with a typed config whose fields ARE the command's options::

    class FlipsConfig(AnalysisConfig):
        traces: TraceFiles = Field(description="Trace files (.jsonl / .jsonl.gz).")   # the positional argument
        b: float = Field(0.58, description="The neutral prior's mean reliability.")   # --b
        seed: int = Field(0, description="Tie-break seed.")                            # --seed

    @analysis("aggregate", config=FlipsConfig, show=show, brief=brief, plots=True)
    def flips():
        "The decision-flip diagnostic ... (the command's help)."
        from chorus.aggregate.flips import decision_flips, flip_summary, plot_ratios
        def compute(cfg: FlipsConfig) -> Result:
            ...
            return Result(summary={...}, tables={"flips": per_task}, plots={"flip_ratios": draw})
        return compute

``chorus.core.cliutil.add_analyses(app, "aggregate")`` mounts it as ``chorus aggregate flips TRACES...
[--b] [--seed] [--out RUN] [--plots/--no-plots]``: the first source field (annotated with what it reads:
``TraceFiles``, ``NamedTraceFiles``, ``run_dirs("debate")``) is the positional argument, every other
field ``--field-name`` with its default and description as help (a boolean ``--x/--no-x``, a ``Csv``
list one comma-separated value). The run directory (``--out``, default ``runs/GROUP/NAME-TIME``) holds
config.yaml, provenance.json (versions, seed, ``analysis``, ``sources``: each path with its fingerprint,
the sha256 of a file or of a run's manifest.json, "unsealed" for a run without one), tables/*.parquet,
summary.json, plots/*.png and the manifest. ``show(console, result)`` is what the terminal prints;
``brief(summary) -> dict`` the headline numbers a report shows; ``fails(summary) -> reason | None``
makes a check exit 1 (after its record is written).
"""
from __future__ import annotations

import importlib
import inspect
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable, Optional, TypeVar

from pydantic import BeforeValidator, ValidationError

from chorus.core.config import ConfigError, Strict
from chorus.core.runs import MANIFEST, RunDir, check_record, check_run_dir, file_sha256, run_dir_path


# -- what an analysis reads ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Reads:
    """The mark of a source field: it names trace files (``traces``) or run directories of one part
    (``runs``, ``part``); ``named``: each value is ``NAME=PATH`` (a named trace set); ``analyses``: runs
    of the part's analyses are read too (else one is refused, naming the analysis that wrote it)."""
    kind: str
    part: str | None = None
    named: bool = False
    analyses: bool = False

    def __str__(self) -> str:
        what = "trace files" if self.kind == "traces" else f"{self.part} run directories"
        return f"named {what} (NAME=PATH)" if self.named else what


TRACES = Reads("traces")
NAMED_TRACES = Reads("traces", named=True)


def run_dir(part: str) -> Any:
    """The type of a field naming one run directory of ``part``."""
    return Annotated[Path, Reads("runs", part)]


def run_dirs(part: str, *, analyses: bool = False) -> Any:
    """The type of a field naming run directories of ``part`` (``debate``, ``council``, ...); with
    ``analyses``, the runs of that group's analyses too (an analysis of analyses)."""
    return Annotated[list[Path], Reads("runs", part, analyses=analyses)]


TRACE_GLOB = ("*.jsonl", "*.jsonl.gz")


def _trace_files_of(value: Any) -> Any:
    """Trace files as given, a directory standing for the trace files in it or in its ``traces/`` (a
    council run, a trace store), sorted; a directory with none is bad input naming it."""
    vals = _split_commas(value) if isinstance(value, str) else value
    if not isinstance(vals, (list, tuple)):
        return value
    out: list[Any] = []
    for v in vals:
        p = Path(v) if isinstance(v, (str, Path)) else None
        if p is None or not p.is_dir():
            out.append(v)
            continue
        d = p / "traces" if (p / "traces").is_dir() else p
        found = sorted({f for g in TRACE_GLOB for f in d.glob(g)})
        if not found:
            raise ValueError(f"{p}: a directory with no trace files ({d}/*.jsonl[.gz])")
        out += found
    return out


# a list of trace files; a directory given for one stands for its trace files (RUN/traces/*.jsonl[.gz])
TraceFiles = Annotated[list[Path], BeforeValidator(_trace_files_of), TRACES]
TraceFile = Annotated[Path, TRACES]
NamedTraceFiles = Annotated[list[str], NAMED_TRACES]
NamedTraceFile = Annotated[str, NAMED_TRACES]


class _Commas:
    """The mark of a ``Csv`` field: one comma-separated value on the command line."""


COMMAS = _Commas()
T = TypeVar("T")


def _split_commas(value: Any) -> Any:
    return [x.strip() for x in value.split(",") if x.strip()] if isinstance(value, str) else value


# a list given as "a,b,c" (the command line, a config) or as a list; typed items (Csv[int])
Csv = Annotated[list[T], BeforeValidator(_split_commas), COMMAS]


class AnalysisConfig(Strict):
    """The base of an analysis's config: its fields are the command's options (unknown keys refused)."""


def _marks(annotation: Any, metadata: list) -> list:
    """Every mark on a field: its own metadata and that of an ``Optional[Annotated[...]]`` inside."""
    out = list(metadata)
    for arg in typing.get_args(annotation):
        if typing.get_origin(arg) is Annotated:
            out += list(arg.__metadata__)
    return out


def source_fields(config: type[AnalysisConfig]) -> list[tuple[str, Reads]]:
    """The config's source fields in order, with what each reads (the first is the positional argument)."""
    out = []
    for name, f in config.model_fields.items():
        marks = [m for m in _marks(f.annotation, f.metadata) if isinstance(m, Reads)]
        if marks:
            out.append((name, marks[0]))
    return out


def is_csv(config: type[AnalysisConfig], name: str) -> bool:
    f = config.model_fields[name]
    return any(m is COMMAS for m in _marks(f.annotation, f.metadata))


# -- the registry ----------------------------------------------------------------------------------------
@dataclass
class Result:
    """What an analysis computed: ``summary`` (summary.json), ``tables`` (name -> DataFrame:
    tables/NAME.parquet), ``plots`` (name -> draw(path): plots/NAME.png), ``texts`` (file name -> text:
    a rendering a person reads, e.g. ``stats.md``, sealed with the rest); ``path``: its run directory
    once written."""
    summary: dict[str, Any]
    tables: dict[str, Any] = field(default_factory=dict)
    plots: dict[str, Callable[[Path], Any]] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)   # what else the run records (engines it called)
    path: Path | None = None

    @classmethod
    def load(cls, run_dir: str | Path) -> "Result":
        """A stored analysis run's summary and tables (to print or brief it again)."""
        run = RunDir(run_dir)
        names = sorted(p.stem for p in (run.path / "tables").glob("*.parquet"))
        return cls(summary=run.summary(), tables={n: run.read_table(n) for n in names}, path=run.path)

    def files(self) -> list[str]:
        """The files it wrote, relative to its run directory."""
        if self.path is None:
            return []
        return [f"tables/{n}.parquet" for n in self.tables] + ["summary.json"] + list(self.texts) + \
            [f"plots/{n}.png" for n in self.plots if (self.path / "plots" / f"{n}.png").is_file()]


@dataclass(frozen=True, eq=False)
class Analysis:
    """A registered analysis (``@analysis``); ``factory()`` imports the implementation and returns
    ``compute(cfg) -> Result``."""
    group: str
    name: str
    help: str
    config: type[AnalysisConfig]
    factory: Callable[[], Callable[[Any], Result]]
    show: Callable[[Any, Result], None]
    brief: Callable[[dict], dict]
    plots: bool = False
    fails: Callable[[dict], Optional[str]] | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.name)

    @property
    def reads(self) -> list[tuple[str, Reads]]:
        """(field, what it reads) of each source field."""
        return source_fields(self.config)

    def load(self, values: dict[str, Any]) -> AnalysisConfig:
        """The typed config from option values; a bad value is one ``ConfigError`` naming its option."""
        try:
            return self.config.model_validate(values)
        except ValidationError as err:
            raise ConfigError("; ".join(_describe(self.config, e) for e in err.errors())) from None

    def run(self, cfg: AnalysisConfig | dict[str, Any], out: str | Path | None = None, *,
            plots: bool = True, **compute_kw: Any) -> Result:
        """Compute and write the sealed run directory (``out``, default ``runs/GROUP/NAME-TIME``).
        The directory is checked (``check_run_dir``: new, empty, or this analysis's own run of the same
        config) and the sources fingerprinted before any work. ``compute_kw`` go to the implementation
        (what only Python can hand it: loaded engines, a progress callback)."""
        if isinstance(cfg, dict):
            cfg = self.load(cfg)
        command = " ".join(self.key)
        path = run_dir_path(out, self.group, self.name)
        check_run_dir(path, part=self.group, config=cfg, command=command)
        sources = source_records(cfg)
        # the work first, in memory, then the directory: bad input found while computing leaves none behind
        result = self.factory()(cfg, **compute_kw)
        run = RunDir.create(path, part=self.group, config=cfg, seeds=getattr(cfg, "seed", getattr(cfg, "seeds", None)),
                            command=command, analysis=command, analysis_module=self.factory.__module__,
                            sources=sources, **result.provenance)
        for name, df in result.tables.items():
            run.write_table(name, df)
        if plots:
            for name, draw in result.plots.items():
                draw(run.plot_path(name))
        for name, text in result.texts.items():
            (run.path / name).write_text(text)
        run.write_summary(result.summary)
        run.finish()
        result.path = run.path
        return result


ANALYSES: dict[tuple[str, str], Analysis] = {}


def analysis(group: str, *, config: type[AnalysisConfig], show: Callable[[Any, Result], None],
             brief: Callable[[dict], dict], name: str | None = None, plots: bool = False,
             fails: Callable[[dict], Optional[str]] | None = None) -> Callable[[Callable], Analysis]:
    """Register the decorated factory as the analysis ``chorus GROUP NAME`` (NAME: the function's name,
    ``_`` as ``-``; help: its docstring). ``plots``: it draws figures (``--plots/--no-plots``)."""
    def register(factory: Callable[[], Callable[[Any], Result]]) -> Analysis:
        a = Analysis(group=group, name=name or factory.__name__.replace("_", "-"),
                     help=inspect.getdoc(factory) or "", config=config, factory=factory, show=show, brief=brief,
                     plots=plots, fails=fails)
        if not a.reads:
            raise ValueError(f"analysis {' '.join(a.key)!r}: its config declares no source field "
                             f"(TraceFiles, NamedTraceFiles, run_dirs(part))")
        reserved = {"out", "plots"} & set(config.model_fields)
        if reserved:
            raise ValueError(f"analysis {' '.join(a.key)!r}: config field {sorted(reserved)[0]!r} is the command's own option")
        if a.key in ANALYSES and ANALYSES[a.key].factory is not factory:
            raise ValueError(f"analysis {' '.join(a.key)!r} is registered twice")
        ANALYSES[a.key] = a
        return a
    return register


def analyses(group: str | None = None) -> list[Analysis]:
    """The registered analyses (of ``group``), in registration order; ``a.reads`` says what each reads.
    A part's analyses register when its CLI module is imported (``chorus.registry`` imports them all)."""
    return [a for a in ANALYSES.values() if group is None or a.group == group]


def get_analysis(name: str) -> Analysis:
    """``"aggregate flips"`` -> its analysis; an unknown name is a ``ConfigError`` listing them."""
    key = tuple(name.rsplit(" ", 1))
    if key not in ANALYSES:
        raise ConfigError(f"no analysis {name!r}; the analyses: {', '.join(' '.join(k) for k in ANALYSES)}")
    return ANALYSES[key]


def _load_module(prov: dict[str, Any]) -> None:
    """Import the module a run's provenance names as its analysis's (lazy registries: a report in a
    new process finds the analysis without importing every part). chorus's own modules only."""
    mod = prov.get("analysis_module")
    if isinstance(mod, str) and mod.startswith("chorus."):
        try:
            importlib.import_module(mod)
        except ImportError:   # a module renamed since the run: the run is shown without its brief
            pass


def analysis_of(run_dir: str | Path) -> Analysis | None:
    """The analysis that wrote ``run_dir`` (its provenance names it), None for another kind of run."""
    prov = RunDir(run_dir).provenance()
    name = prov.get("analysis")
    if not name:
        return None
    key = tuple(name.rsplit(" ", 1))
    if key not in ANALYSES:
        _load_module(prov)
    return ANALYSES.get(key)


def _flag(config: type[AnalysisConfig], name: str) -> str:
    """How the command line names a field: the positional argument's metavar, else ``--field-name``."""
    positional = source_fields(config)[0][0]
    return name.upper() if name == positional else "--" + name.replace("_", "-")


def _describe(config: type[AnalysisConfig], e: dict) -> str:
    loc = e.get("loc") or ()
    msg = e["msg"].removeprefix("Value error, ")
    if not loc or loc[0] not in config.model_fields:
        return msg
    return f"{_flag(config, str(loc[0]))}: {msg} (got {e.get('input')!r})"


# -- sources and their fingerprints ------------------------------------------------------------------------
def _values(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [] if value is None else [value]


def split_named(value: str, label: str) -> tuple[str, str]:
    """``NAME=PATH`` -> (name, path); anything else is bad input naming ``label``."""
    name, sep, path = str(value).partition("=")
    if not sep or not name or not path:
        raise ConfigError(f"{label} is NAME=FILE, got {value!r}")
    return name, path


def fingerprint(path: Path, reads: Reads) -> str:
    """A trace file's sha256; a run directory's manifest.json's sha256, or "unsealed" without one."""
    if reads.kind == "runs":
        m = path / MANIFEST
        return file_sha256(m) if m.is_file() else "unsealed"
    return file_sha256(path)


def _check_source(path: Path, reads: Reads) -> None:
    if reads.kind == "traces":
        if not path.is_file():
            raise ConfigError(f"trace file not found: {path}")
        return
    if not path.is_dir():
        raise ConfigError(f"run directory not found: {path}")
    prov = RunDir(path).provenance()
    part = prov.get("part")
    if part is None:
        raise ConfigError(f"{path}: not a chorus run directory (no provenance.json naming its part)")
    if isinstance(prov.get("analysis"), str) and not reads.analyses:   # it carries its group's part, not its data
        raise ConfigError(f"{path} is a run of the analysis `{prov['analysis']}`; this analysis reads {reads.part} runs")
    if part != reads.part:
        raise ConfigError(f"{path} is a {part} run; this analysis reads {reads.part} runs")


def source_records(cfg: AnalysisConfig) -> list[dict[str, Any]]:
    """Each source of a config: its field, name (a named set), path as given, resolved path and
    fingerprint; a malformed, missing or wrong-part source is a ``ConfigError`` naming it."""
    config = type(cfg)
    out = []
    for fname, reads in source_fields(config):
        flag = _flag(config, fname)
        label = f"each of {flag}" if flag.isupper() and isinstance(getattr(cfg, fname), list) else flag
        for value in _values(getattr(cfg, fname)):
            name, given = split_named(value, label) if reads.named else (None, str(value))
            path = Path(given)
            _check_source(path, reads)
            rec = {"field": fname, "reads": str(reads), "kind": reads.kind, "path": given,
                   "resolved": str(path.resolve()), "fingerprint": fingerprint(path, reads)}
            out.append({"name": name, **rec} if name is not None else rec)
    return out


def check_sources(run_dir: str | Path) -> list[str] | None:
    """What differs from an analysis run's (or a paper report's) recorded sources: one line per source
    changed, missing or (a run directory) whose own files no longer match its record; None for a run
    that is neither."""
    try:
        prov = RunDir(run_dir).provenance()
    except (OSError, ValueError):   # unreadable: the record check names provenance.json as changed
        return None
    if "analysis" not in prov and "paper" not in prov:   # a paper report records its runs as an analysis does
        return None
    bad = []
    for s in prov.get("sources") or []:
        path = Path(s["resolved"])
        runs = s.get("kind") == "runs"
        if not (path.is_dir() if runs else path.is_file()):
            bad.append(f"source missing: {s['path']} ({s['field']})")
            continue
        now = fingerprint(path, Reads("runs" if runs else "traces"))
        if now != s["fingerprint"]:
            bad.append(f"source changed: {s['path']} ({s['field']}; fingerprint {s['fingerprint'][:12]} "
                       f"when analysed, {now[:12]} now)")
        elif runs:
            inner = check_record(path, unsealed=True) or []
            if inner:
                bad.append(f"source changed: {s['path']} ({s['field']}; its files are not the ones it wrote: "
                           f"{'; '.join(inner)})")
    return bad


def brief_of(run_dir: str | Path) -> dict[str, Any]:
    """An analysis run's headline numbers (its analysis's ``brief`` of its summary.json)."""
    a = analysis_of(run_dir)
    if a is None:
        raise ConfigError(f"{run_dir}: not a run of a registered analysis")
    return a.brief(RunDir(run_dir).summary())


# -- analyses made inside the run they read ----------------------------------------------------------------
@dataclass(frozen=True)
class Reader:
    """An analysis whose run lies inside the one run it reads (``debate bda``, ``debate belief``,
    ``influence counterfactual``): it needs a model or its own verb, so it is not an ``@analysis``
    yet, but it declares the same things: the part whose runs it reads (a data edge the layering
    test checks), the folder its runs take inside the source (``folder``: a name or a prefix), and
    ``brief(summary) -> dict`` with ``line(name, brief) -> str``, what the source run's report and
    console show of it. The source run never opens the reader's files itself: it asks ``readers_in``."""
    command: str
    part: str
    folder: str
    brief: Callable[[dict], dict]
    line: Callable[[str, dict], str]
    module: str


READERS: dict[str, Reader] = {}


def reader(command: str, *, part: str, folder: str, line: Callable[[str, dict], str]) -> Callable:
    """Register the decorated ``brief(summary) -> dict`` as that of the analysis ``command``, whose
    runs lie in folders ``folder*`` inside the ``part`` run they read."""
    def register(brief: Callable[[dict], dict]) -> Callable[[dict], dict]:
        old = READERS.get(command)
        if old is not None and old.brief is not brief and old.module != brief.__module__:
            raise ValueError(f"analysis {command!r} is registered twice")
        READERS[command] = Reader(command=command, part=part, folder=folder, brief=brief, line=line,
                                  module=brief.__module__)
        return brief
    return register


def reader_provenance(command: str, source: str | Path, part: str, module: str) -> dict[str, Any]:
    """The provenance fields of a reader's run (``RunDir.create(..., **these)``): the analysis, its
    module, and its one source with the fingerprint ``chorus verify`` checks it against later."""
    path = Path(source)
    reads = Reads("runs", part)
    return {"analysis": command, "analysis_module": module,
            "sources": [{"field": "run", "reads": str(reads), "kind": "runs", "path": str(source),
                         "resolved": str(path.resolve()), "fingerprint": fingerprint(path, reads)}]}


def readers_in(run_dir: str | Path) -> list[tuple[Path, Reader, dict[str, Any]]]:
    """The finished analysis runs inside ``run_dir`` that read it, each with its registered reader and
    brief, in folder order: what a report of ``run_dir`` shows of the analyses made of it. A folder
    whose provenance names an analysis no longer registered, or another source, is not shown."""
    base = Path(run_dir)
    here = base.resolve()
    out = []
    for d in sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []:
        if not (d / "provenance.json").is_file() or not (d / MANIFEST).is_file():
            continue
        try:
            prov = RunDir(d).provenance()
        except (OSError, ValueError):
            continue
        cmd = prov.get("analysis")
        if not cmd or not any(Path(s.get("resolved", "")) == here for s in prov.get("sources") or []):
            continue
        if cmd not in READERS:
            _load_module(prov)
        r = READERS.get(cmd)
        if r is not None:
            out.append((d, r, r.brief(RunDir(d).summary())))
    return out


def briefs_in(run_dir: str | Path) -> dict[str, dict[str, Any]]:
    """``readers_in`` as plain data: folder name -> {"analysis": command, **brief}."""
    return {d.name: {"analysis": r.command, **b} for d, r, b in readers_in(run_dir)}


def brief_for(run_dir: str | Path, summary: dict[str, Any]) -> dict[str, Any] | None:
    """The registered brief of the analysis that wrote ``run_dir`` (over stored runs or trace files, or a
    reader inside the run it read) applied to ``summary``; None when the run is not an analysis's or its
    analysis is no longer registered. What a report shows as an analysis run's headline numbers."""
    try:
        prov = RunDir(run_dir).provenance()
    except (OSError, ValueError):
        return None
    cmd = prov.get("analysis")
    if not isinstance(cmd, str):
        return None
    a = analysis_of(run_dir)
    if a is not None:
        return a.brief(summary)
    if cmd not in READERS:
        _load_module(prov)
    r = READERS.get(cmd)
    return r.brief(summary) if r is not None else None
