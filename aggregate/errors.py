"""Errors raised by the aggregation part. Every message names the offending task, move,
line, field or value, so a bad input never fails anonymously."""
from __future__ import annotations

from chorus.core.config import InputError


class TraceError(InputError):
    """A trace record is malformed (structure, types, candidates, targets)."""


class ProtocolError(TraceError):
    """A move is illegal under the council protocol (see ``chorus.aggregate.moves``)."""


class LabelError(InputError):
    """Gold labels are missing, outside the candidates, or too few for the requested folds."""


class PriorError(InputError):
    """Priors are missing an agent, or hold invalid (alpha, beta) or candidate probabilities."""


class VerifyError(RuntimeError):
    """``chorus aggregate verify`` found a stored number that does not recompute."""
