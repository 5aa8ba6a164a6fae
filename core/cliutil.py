"""What every part's CLI shares: the error exit and ``--set KEY=VALUE`` overrides (the progress bar
is ``core.progress``)."""
from __future__ import annotations

from typing import Optional

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

    from core.config import ConfigError

    out = {}
    for s in sets or []:
        if "=" not in s:
            raise ConfigError(f"--set {s!r}: expected KEY=VALUE")
        k, v = s.split("=", 1)
        try:
            out[k.strip()] = yaml.safe_load(v)
        except yaml.YAMLError as err:
            why = " ".join(str(getattr(err, "problem", None) or err).split())
            raise ConfigError(f"--set {s!r}: the value is not valid YAML ({why})") from None
    return out
