"""One progress convention from the engine to the CLI.

A ``Progress`` callback is called ``progress(total, k)``: ``k == 0`` starts a (new) phase of
``total`` units, ``k > 0`` advances the current phase by ``k``. The engine's ``chat``, every
experiment and the CLI's bar (``progress``) speak it, so a callback passes through unchanged.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

Progress = Callable[[int, int], None]


@contextmanager
def progress(label: str, unit: str = "", *, enabled: bool = True) -> Iterator[Progress]:
    """A rich progress bar with counts and ETA on stderr. Yields a ``Progress``; with
    ``enabled=False`` a callback that draws nothing."""
    if not enabled:
        yield lambda total, k: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from rich.progress import Progress as Bar

    cols = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn()]
    if unit:
        cols.append(TextColumn(unit))
    with Bar(*cols, TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                  console=Console(stderr=True)) as prog:
        task = prog.add_task(label, total=None)

        def update(total: int, k: int) -> None:
            if k == 0:  # a stage with several phases restarts the bar for each
                prog.reset(task, total=total)
            else:
                prog.advance(task, k)

        yield update
