"""One JSONL reader for every file chorus reads line by line (question sets, traces, role-play
groups, datasets): line numbers in every error, ``.gz`` read transparently."""
from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any, Iterator

from chorus.core.config import InputError


def open_text(path: str | Path, mode: str = "r"):
    """A text handle; ``.gz`` files are (de)compressed, written with mtime 0 so that the same
    records always give the same bytes."""
    path = Path(path)
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.GzipFile(path, mode + "b", mtime=0), encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def iter_jsonl(path: str | Path, *, error: type[Exception] = InputError, where: str = "{path} line {n}",
               comments: bool = False) -> Iterator[tuple[int, Any]]:
    """Yield ``(line number, object)`` for each non-empty line (and, with ``comments``, each line
    not starting with ``//``). A line that is not JSON raises ``error`` naming the place
    (``where``, formatted with ``path`` and ``n``), the parser's message and the column."""
    path = Path(path)
    with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as fh:
        n = 0
        while True:
            try:
                raw = fh.readline()
            except (OSError, EOFError) as err:   # not gzip, or cut short
                raise error(f"{where.format(path=path, n=n + 1)}: cannot be read as {path.suffix or 'text'} "
                            f"({err or 'the compressed stream ends early'})") from None
            if not raw:
                return
            n += 1
            try:
                s = raw.decode("utf-8").strip()
            except UnicodeDecodeError as err:
                raise error(f"{where.format(path=path, n=n)}: not UTF-8 text (byte {err.start + 1} of the line)") from None
            if not s or (comments and s.startswith("//")):
                continue
            try:
                yield n, json.loads(s)
            except json.JSONDecodeError as err:
                raise error(f"{where.format(path=path, n=n)}: not valid JSON ({err.msg} at column {err.colno})") from None
