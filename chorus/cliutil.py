"""What every part's CLI shares: the error exit, ``--set KEY=VALUE`` overrides, the progress bar."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Optional

import typer


def fail(err: object, code: int = 2) -> None:
    """Print a clear error on stderr and exit non-zero (2: bad input)."""
    from rich.console import Console
    from rich.markup import escape

    # escape: messages quote user values such as [0, 1]; soft_wrap: never break a path or line number
    Console(stderr=True).print(f"[red]error:[/red] {escape(str(err))}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def parse_overrides(sets: Optional[list[str]]) -> dict:
    """``--set a.b=VALUE`` pairs into {"a.b": value}; values are read as YAML."""
    import yaml

    from chorus.config import ConfigError

    out = {}
    for s in sets or []:
        if "=" not in s:
            raise ConfigError(f"--set {s!r}: expected KEY=VALUE")
        k, v = s.split("=", 1)
        out[k.strip()] = yaml.safe_load(v)
    return out


@contextmanager
def progress(label: str, unit: str = "") -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar with counts and ETA on stderr. Yields ``update(total, k)``: k == 0 starts
    a (new) phase of ``total`` units, k > 0 advances by k."""
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    cols = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn()]
    if unit:
        cols.append(TextColumn(unit))
    with Progress(*cols, TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                  console=Console(stderr=True)) as prog:
        task = prog.add_task(label, total=None)

        def update(total: int, k: int) -> None:
            if k == 0:  # a stage with several phases restarts the bar for each
                prog.reset(task, total=total)
            else:
                prog.advance(task, k)

        yield update


def engine_callback(update: Callable[[int, int], None]) -> Callable[[int, int], None]:
    """Adapt ``update(total, k)`` to the engine's ``progress(done, total)`` callback."""
    seen: list[int | None] = [None]

    def cb(done: int, total: int) -> None:
        if seen[0] is None:
            update(total, 0)
            seen[0] = 0
        if done > seen[0]:
            update(total, done - seen[0])
            seen[0] = done

    return cb
