"""``chorus influence knockout|patch|probe``: attention knockout, residual interchange, probes (issue 6)."""
from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Adds the knockout / patch / probe commands to the ``influence`` app."""
