"""``chorus influence knockout|patch|probe``: attention knockout, residual interchange, probes (issue 6)."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

_SET_HELP = "Override a config field: --set knockout.layers=[0,5] --set bench.limit=10 (YAML values)."
_CFG_HELP = "Internals config (a path or a shipped name in simulate/configs/influence/, e.g. internals_smoke)."


def _run(verb: str, config: str, out: Optional[Path], set_: Optional[List[str]], no_plots: bool) -> None:
    import json

    from rich.console import Console

    from chorus.cliutil import fail, parse_overrides, progress
    from chorus.config import ConfigError
    from interventions.families import FamilyError, LayerError
    from interventions.internals_config import load
    from interventions.internals_experiment import run_internals
    from interventions.patching import PatchError
    from interventions.probes import ProbeError
    from interventions.spans import SpanError

    try:
        cfg = load(config, parse_overrides(set_))
        with progress(f"{cfg.name} {verb}", "readouts") as update:
            rundir, summary = run_internals(cfg, verb, out, progress=update, make_plots=not no_plots)
    except (ConfigError, FileNotFoundError, FamilyError, LayerError, SpanError, PatchError, ProbeError) as err:
        fail(err)
    console = Console()
    keep = {k: v for k, v in summary.items() if k not in ("experiment", "verb", "curves", "curve", "layers")}
    console.print_json(json.dumps(keep, default=float))
    if "135m" in str(summary.get("model")) or "270m" in str(summary.get("model")):
        console.print("[yellow]tiny models give plumbing checks, not findings[/yellow]")
    console.print(f"results: [bold]{rundir.path}[/bold] (summary.json, tables/*.parquet, plots/*.png)")


def register(app: typer.Typer) -> None:
    """Adds the knockout / patch / probe commands to the ``influence`` app."""
    out_opt = typer.Option(None, "--out", help="Run directory (default runs/influence/NAME-VERB-TIME).")

    @app.command()
    def knockout(config: str = typer.Argument(..., help=_CFG_HELP), out: Optional[Path] = out_opt,
                 set_: Optional[List[str]] = typer.Option(None, "--set", help=_SET_HELP),
                 no_plots: bool = typer.Option(False, "--no-plots")) -> None:
        """Attention knockout of the peer message: all layers, single layers, cumulative; share of the effect removed."""
        _run("knockout", config, out, set_, no_plots)

    @app.command()
    def patch(config: str = typer.Argument(..., help=_CFG_HELP), out: Optional[Path] = out_opt,
              set_: Optional[List[str]] = typer.Option(None, "--set", help=_SET_HELP),
              no_plots: bool = typer.Option(False, "--no-plots")) -> None:
        """Residual interchange at the source-cue positions (cue X into cue Y), layer by layer."""
        _run("patch", config, out, set_, no_plots)

    @app.command()
    def probe(config: str = typer.Argument(..., help=_CFG_HELP), out: Optional[Path] = out_opt,
              set_: Optional[List[str]] = typer.Option(None, "--set", help=_SET_HELP),
              no_plots: bool = typer.Option(False, "--no-plots")) -> None:
        """Logistic probes per layer with held-out AUROC beside the shuffled-label null (90th percentile)."""
        _run("probe", config, out, set_, no_plots)
