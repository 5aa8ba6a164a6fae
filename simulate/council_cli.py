"""``chorus council``: live LLM councils that emit typed-move traces (issue 7)."""
from __future__ import annotations

import typer

council_app = typer.Typer(no_args_is_help=True, add_completion=False)
