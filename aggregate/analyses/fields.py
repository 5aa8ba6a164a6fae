"""The options several trace analyses share, declared once (each module's config uses them as field
types: ``protocol: Protocol = "strict"``), and how they read their trace files."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Sequence

from pydantic import Field

Protocol = Annotated[str, Field(description="strict | general")]
Seed = Annotated[int, Field(description="Seed of the folds and draws.")]
OuterFolds = Annotated[int, Field(description="Outer folds of the nested CV.")]
InnerFolds = Annotated[int, Field(description="Inner folds (the prior chosen by inner CV).")]
CoalitionSeats = Annotated[int, Field(description="Coalition seats (the last k of the council).")]
PWrong = Annotated[float, Field(description="Share of the coalition's informative moves flipped.")]


def load_all(paths: Sequence[Path]) -> list:
    """Every trace of every file, in order."""
    from chorus.aggregate.trace import load_traces
    return [tr for p in paths for tr in load_traces(p)]


def checked_methods(names: Sequence[str]) -> list[str]:
    """The method names, each known (an unknown one is bad input naming it)."""
    from chorus.aggregate.methods import check_method
    return [check_method(m) for m in names]


def sources(paths: Sequence[Path]) -> list[str]:
    """The paths as the summary lists them (as given)."""
    return [str(p) for p in paths]
