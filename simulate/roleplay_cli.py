"""``chorus roleplay`` and ``chorus sft``: role-play groups and the SFT comparison (issue 8)."""
from __future__ import annotations

import typer

roleplay_app = typer.Typer(no_args_is_help=True, add_completion=False)
sft_app = typer.Typer(no_args_is_help=True, add_completion=False)
