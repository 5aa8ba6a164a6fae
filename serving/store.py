"""The call store: every model call in SQLite (WAL), keyed by a hash of (model identity,
backend-independent request, seed). A rerun reads instead of calling; a killed run loses only
the calls that had not finished, because each finished batch is committed before the next."""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterable

SCHEMA_VERSION = 1


class StoreError(RuntimeError):
    """The store file is locked, corrupt, or of another schema."""


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
            self._db.execute("""CREATE TABLE IF NOT EXISTS calls (
                key TEXT PRIMARY KEY, kind TEXT NOT NULL, model TEXT NOT NULL, request TEXT NOT NULL,
                output TEXT NOT NULL, prompt_tokens INTEGER, completion_tokens INTEGER,
                latency_s REAL, backend TEXT, created REAL)""")
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT)")
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            v = _schema_version(self._db, self.path)
        except sqlite3.DatabaseError as err:
            msg = str(err)
            if "locked" in msg or "busy" in msg:
                raise StoreError(f"call store {self.path} is locked by another process ({msg}); "
                                 f"wait for it or point this run at another store") from None
            raise StoreError(f"call store {self.path} is unreadable or corrupt ({msg}); "
                             f"move it aside to start a new one") from None
        if v != SCHEMA_VERSION:
            raise StoreError(f"call store {self.path} has schema version {v}, this chorus writes {SCHEMA_VERSION}")

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
        except sqlite3.DatabaseError as err:
            raise StoreError(f"{self.path} is not a readable call store ({err})") from None
        if v != SCHEMA_VERSION:
            raise StoreError(f"call store {self.path} has schema version {v}, this chorus reads {SCHEMA_VERSION}")

    def get_many(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        uniq = list(dict.fromkeys(keys))
        with self._lock:
            for i in range(0, len(uniq), 900):  # SQLite's bound-parameter limit
                chunk = uniq[i:i + 900]
                q = f"SELECT key, output FROM calls WHERE key IN ({','.join('?' * len(chunk))})"
                for k, o in self._exec(q, chunk):
                    out[k] = json.loads(o)
        self.hits += sum(1 for k in keys if k in out)
        self.misses += sum(1 for k in keys if k not in out)
        return out

    def put_many(self, rows: Iterable[tuple[str, str, dict, dict, dict, str]]) -> None:
        """rows: (key, kind, model, request, output, backend); one transaction."""
        now = time.time()
        data = [(k, kind, json.dumps(model, sort_keys=True), json.dumps(req, sort_keys=True, ensure_ascii=False),
                 json.dumps(out, ensure_ascii=False), out.get("prompt_tokens"), out.get("completion_tokens"),
                 out.get("latency_s"), backend, now) for k, kind, model, req, out, backend in rows]
        if not data:
            return
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany("INSERT OR REPLACE INTO calls VALUES (?,?,?,?,?,?,?,?,?,?)", data)
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
        by = [{"kind": k, "model": json.loads(m).get("profile", m), "backend": b, "calls": n,
               "prompt_tokens": pt or 0, "completion_tokens": ct or 0, "model_seconds": round(s or 0.0, 2)}
              for k, m, b, n, pt, ct, s in rows]
        return {"path": str(self.path), "calls": sum(r["calls"] for r in by),
                "bytes": self.path.stat().st_size if self.path.exists() else 0, "by_model": by}

    def __len__(self) -> int:
        with self._lock:
            return self._exec("SELECT COUNT(*) FROM calls")[0][0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
