"""The call store: every model call in SQLite (WAL), keyed by a hash of (model identity,
backend-independent request, seed). A rerun reads instead of calling; a killed run loses only
the calls that had not finished, because each finished batch is committed before the next.

Each row carries the sha256 of its output as written (``output_sha256``, schema 2). A row read back
whose output no longer matches its hash was edited after it was stored: it is named on one line
(store path, key) and not served; the call is made again and the row written anew.

A store of schema 1 (an older chorus, no hash column) is migrated in place when opened for
writing: the column is added and its old rows keep no hash. They are served as before, and
counted (``unhashed_served``; ``chorus store stats`` shows how many rows have none), but never
given a hash now: a hash computed today would vouch for whatever the row holds today, an edit
made before the migration included. A store whose every row is checked is a new one."""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from chorus.core.config import bad_input

SCHEMA_VERSION = 2
READS = (1, 2)   # schema 1: no output hashes (migrated to 2 when opened for writing)


@bad_input
class StoreError(RuntimeError):
    """The store file is locked, corrupt, or of another schema."""


def output_sha256(text: str) -> str:
    """The hash a row's output is checked against: sha256 of its JSON text as stored."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def request_key(model: dict[str, Any], kind: str, request: dict[str, Any]) -> str:
    blob = json.dumps({"model": model, "kind": kind, "request": request}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def _schema_version(db: sqlite3.Connection, path: Path) -> int:
    """The store's schema version; a meta table without it, or with a value that is not a number, is
    a StoreError naming the file (not a TypeError from a missing row)."""
    row = db.execute("SELECT v FROM meta WHERE k='schema_version'").fetchone()
    try:
        return int(row[0])
    except (TypeError, ValueError):
        got = "no schema_version row" if row is None else f"schema_version {row[0]!r}"
        raise StoreError(f"{path} is not a readable call store: its meta table has {got}") from None


class CallStore:
    def __init__(self, path: str | Path, timeout_s: float = 10.0, *, read_only: bool = False):
        """``read_only``: open an existing store without creating or changing anything (no tables
        made, no journal switch); a file that is not a chorus store is one ``StoreError``."""
        self.path = Path(path)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.unhashed_served = 0          # rows of an older chorus served without a hash to check
        self.edited: list[str] = []       # keys of rows whose output did not match their hash (not served)
        self._hashed = True               # whether the calls table has the hash column
        if read_only:
            self._open_read_only(timeout_s)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=timeout_s, check_same_thread=False,
                                       isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL is durable against a killed process (WAL); only a power cut may lose the last commit
            self._db.execute("PRAGMA synchronous=NORMAL")
            ok = self._db.execute("PRAGMA quick_check").fetchone()[0]
            if ok != "ok":
                raise StoreError(f"call store {self.path} is corrupt ({ok}); move it aside to start a new one")
            self._db.execute("BEGIN IMMEDIATE")   # one process makes (or migrates) the tables at a time
            self._db.execute("""CREATE TABLE IF NOT EXISTS calls (
                key TEXT PRIMARY KEY, kind TEXT NOT NULL, model TEXT NOT NULL, request TEXT NOT NULL,
                output TEXT NOT NULL, prompt_tokens INTEGER, completion_tokens INTEGER,
                latency_s REAL, backend TEXT, created REAL, output_sha256 TEXT)""")
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT)")
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            v = _schema_version(self._db, self.path)
            if v == 1:   # an older chorus's store: the hash column added, old rows left without one
                if "output_sha256" not in self._columns():
                    self._db.execute("ALTER TABLE calls ADD COLUMN output_sha256 TEXT")
                self._db.execute("UPDATE meta SET v=? WHERE k='schema_version'", (str(SCHEMA_VERSION),))
                v = SCHEMA_VERSION
            self._db.execute("COMMIT")
        except sqlite3.DatabaseError as err:
            if getattr(self, "_db", None) is not None and self._db.in_transaction:
                self._db.execute("ROLLBACK")
            msg = str(err)
            if "locked" in msg or "busy" in msg:
                raise StoreError(f"call store {self.path} is locked by another process ({msg}); "
                                 f"wait for it or point this run at another store") from None
            raise StoreError(f"call store {self.path} is unreadable or corrupt ({msg}); "
                             f"move it aside to start a new one") from None
        if v != SCHEMA_VERSION:
            raise StoreError(f"call store {self.path} has schema version {v}, this chorus writes {SCHEMA_VERSION}")

    def _columns(self) -> set[str]:
        return {r[1] for r in self._db.execute("PRAGMA table_info(calls)")}

    def _open_read_only(self, timeout_s: float) -> None:
        if not self.path.is_file():
            raise StoreError(f"no call store at {self.path}")
        # with no -wal beside it no writer is mid-transaction: immutable, so SQLite makes no -shm/-wal
        # files either; with one, plain read-only (a live run's writer keeps its own files)
        wal = self.path.with_name(self.path.name + "-wal").exists()
        mode = "mode=ro" if wal else "mode=ro&immutable=1"
        try:
            self._db = sqlite3.connect(f"{self.path.resolve().as_uri()}?{mode}", uri=True, timeout=timeout_s,
                                       check_same_thread=False, isolation_level=None)
            tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not {"calls", "meta"} <= tables:
                self._db.close()
                raise StoreError(f"{self.path} is an SQLite file but not a chorus call store (no calls/meta "
                                 f"tables; it has {', '.join(sorted(tables)) or 'no tables'})")
            v = _schema_version(self._db, self.path)
            self._hashed = "output_sha256" in self._columns()
        except sqlite3.DatabaseError as err:
            raise StoreError(f"{self.path} is not a readable call store ({err})") from None
        if v not in READS:
            raise StoreError(f"call store {self.path} has schema version {v}, this chorus reads "
                             f"{', '.join(map(str, READS))}")

    def get_many(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        """The stored outputs of ``keys`` that hold to their hash. A row whose output does not (edited
        after it was stored) is named on stderr, once, and left out: the caller makes the call again."""
        out: dict[str, dict[str, Any]] = {}
        uniq = list(dict.fromkeys(keys))
        col = "output_sha256" if self._hashed else "NULL"
        with self._lock:
            for i in range(0, len(uniq), 900):  # SQLite's bound-parameter limit
                chunk = uniq[i:i + 900]
                q = f"SELECT key, output, {col} FROM calls WHERE key IN ({','.join('?' * len(chunk))})"
                for k, o, h in self._exec(q, chunk):
                    if h is not None and h != output_sha256(o):
                        self._edited(k, "its output does not match the hash written with it")
                        continue
                    try:
                        out[k] = json.loads(o)
                    except ValueError:
                        self._edited(k, "its output is not the JSON it was written as")
                        continue
                    if h is None:
                        self.unhashed_served += 1
        self.hits += sum(1 for k in keys if k in out)
        self.misses += sum(1 for k in keys if k not in out)
        return out

    def _edited(self, key: str, why: str) -> None:
        if key in self.edited:
            return
        self.edited.append(key)
        import sys
        print(f"warning: call store {self.path}: row {key}: {why} (edited after it was stored?); not served, "
              f"the call is made again", file=sys.stderr, flush=True)

    def check(self) -> dict[str, Any]:
        """Every row against its hash (read-only): ``rows``, ``unhashed`` (an older chorus's rows, no
        hash to check) and ``edited`` (the keys of rows whose output does not match theirs)."""
        col = "output_sha256" if self._hashed else "NULL"
        edited, unhashed, n = [], 0, 0
        with self._lock:
            for k, o, h in self._exec(f"SELECT key, output, {col} FROM calls"):
                n += 1
                if h is None:
                    unhashed += 1
                elif h != output_sha256(o):
                    edited.append(k)
        return {"rows": n, "unhashed": unhashed, "edited": edited}

    def put_many(self, rows: Iterable[tuple[str, str, dict, dict, dict, str]]) -> None:
        """rows: (key, kind, model, request, output, backend); one transaction."""
        now = time.time()
        data = []
        for k, kind, model, req, out, backend in rows:
            text = json.dumps(out, ensure_ascii=False)
            data.append((k, kind, json.dumps(model, sort_keys=True), json.dumps(req, sort_keys=True, ensure_ascii=False),
                         text, out.get("prompt_tokens"), out.get("completion_tokens"), out.get("latency_s"), backend,
                         now, output_sha256(text)))
        if not data:
            return
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany("INSERT OR REPLACE INTO calls (key, kind, model, request, output, prompt_tokens, "
                                     "completion_tokens, latency_s, backend, created, output_sha256) "
                                     "VALUES (?,?,?,?,?,?,?,?,?,?,?)", data)
                self._db.execute("COMMIT")
            except sqlite3.OperationalError as err:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise StoreError(f"could not write to call store {self.path}: {err}") from None

    def _exec(self, q: str, params: Any = ()) -> list:
        try:
            return self._db.execute(q, params).fetchall()
        except sqlite3.OperationalError as err:
            raise StoreError(f"call store {self.path}: {err}") from None

    def stats(self) -> dict[str, Any]:
        with self._lock:
            rows = self._exec("""SELECT kind, model, backend, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens),
                                 SUM(latency_s) FROM calls GROUP BY kind, model, backend""")
            unhashed = self._exec("SELECT COUNT(*) FROM calls WHERE output_sha256 IS NULL")[0][0] if self._hashed \
                else None
        by = [{"kind": k, "model": json.loads(m).get("profile", m), "backend": b, "calls": n,
               "prompt_tokens": pt or 0, "completion_tokens": ct or 0, "model_seconds": round(s or 0.0, 2)}
              for k, m, b, n, pt, ct, s in rows]
        if unhashed is None:   # schema 1, read only: no row has a hash
            unhashed = sum(r["calls"] for r in by)
        return {"path": str(self.path), "calls": sum(r["calls"] for r in by), "unhashed": unhashed,
                "bytes": self.path.stat().st_size if self.path.exists() else 0, "by_model": by}

    def __len__(self) -> int:
        with self._lock:
            return self._exec("SELECT COUNT(*) FROM calls")[0][0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
