"""``chorus influence``: readout | ablate | cues (behaviour: forced-choice readouts, message
ablations, source cues) and knockout | patch | probe | concepts | transfer (inside the model:
attention knockout, residual interchange, probes, concept directions, latent state transfer).
Heavy imports stay inside the commands so ``chorus --help`` stays fast."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from core.cliutil import fail, parse_overrides
from core.progress import progress

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Peer influence: readout, ablate, cues, knockout, patch, probe, concepts, transfer.")

_SET_HELP = "Override a config field: --set rounds=1 --set bench.limit=20 (YAML values)."
_CFG_HELP = "Influence config (a path or a shipped name, e.g. influence_smoke, internals_smoke)."
_OUT = typer.Option(None, "--out", help="Run directory (default runs/influence/NAME-VERB-TIME).")


def _influence(verb: str, config: str, out, set_, no_plots) -> None:
    import json

    from core.config import ConfigError
    from interventions.config import InfluenceConfig, load
    from interventions.experiment import run_influence
    try:
        cfg = load(config, InfluenceConfig, parse_overrides(set_))
        with progress(f"{cfg.name} {verb}", "turns") as update:
            rundir, summary = run_influence(cfg, verb, out, progress=update, make_plots=not no_plots)
    except (ConfigError, FileNotFoundError) as err:
        fail(err)
    from rich.console import Console
    console = Console()
    keep = {k: v for k, v in summary.items() if k not in ("experiment", "verb", "model")}
    console.print_json(json.dumps(keep, default=float))
    console.print(f"results: [bold]{rundir.path}[/bold] (summary.json, tables/*.parquet, plots/*.png)")


@app.command()
def readout(config: str = typer.Argument(..., help=_CFG_HELP),
            out: Optional[Path] = _OUT, set_: Optional[List[str]] = typer.Option(None, "--set", help=_SET_HELP),
            no_plots: bool = typer.Option(False, "--no-plots")) -> None:
    """Forced-choice readouts at fractions f of each receiver's rationale; committed-at-read."""
    _influence("readout", config, out, set_, no_plots)


@app.command()
def ablate(config: str = typer.Argument(..., help=_CFG_HELP),
           out: Optional[Path] = _OUT, set_: Optional[List[str]] = typer.Option(None, "--set", help=_SET_HELP),
           no_plots: bool = typer.Option(False, "--no-plots")) -> None:
    """Message ablations: full, answer only, reasoning only, filler, unrelated reasoning."""
    _influence("ablate", config, out, set_, no_plots)


@app.command()
def cues(config: str = typer.Argument(..., help=_CFG_HELP),
         out: Optional[Path] = _OUT, set_: Optional[List[str]] = typer.Option(None, "--set", help=_SET_HELP),
         no_plots: bool = typer.Option(False, "--no-plots")) -> None:
    """Source cues (record x status) and self- vs other-attribution of the same text."""
    _influence("cues", config, out, set_, no_plots)


def _internals(verb: str, config: str, out: Optional[Path], set_: Optional[List[str]], no_plots: bool) -> None:
    import json

    from core.config import ConfigError
    from interventions.families import FamilyError, LayerError
    from interventions.internals.config import load
    from interventions.internals.experiment import run_internals
    from interventions.patching import PatchError
    from interventions.probes import ProbeError
    from interventions.spans import SpanError
    from interventions.transfer import TransferError

    try:
        cfg = load(config, parse_overrides(set_))
        with progress(f"{cfg.name} {verb}", "readouts") as update:
            rundir, summary = run_internals(cfg, verb, out, progress=update, make_plots=not no_plots)
    except (ConfigError, FileNotFoundError, FamilyError, LayerError, SpanError, PatchError, ProbeError,
            TransferError) as err:
        fail(err)
    from rich.console import Console
    console = Console()
    keep = {k: v for k, v in summary.items() if k not in ("experiment", "verb", "curves", "curve", "layers")}
    console.print_json(json.dumps(keep, default=float))
    from serving.profiles import embedded_note
    sender = summary.get("sender")  # transfer: the sender's model produced the written states
    note = embedded_note([summary.get("model"), sender.get("name") if isinstance(sender, dict) else None])
    if note:
        console.print(f"[yellow]{note}[/yellow]", highlight=False)
    console.print(f"results: [bold]{rundir.path}[/bold] (summary.json, tables/*.parquet, plots/*.png)")


@app.command()
def knockout(config: str = typer.Argument(..., help=_CFG_HELP), out: Optional[Path] = _OUT,
             set_: Optional[List[str]] = typer.Option(None, "--set", help=_SET_HELP),
             no_plots: bool = typer.Option(False, "--no-plots")) -> None:
    """Attention knockout of the peer message: all layers, single layers, cumulative; share of the effect removed."""
    _internals("knockout", config, out, set_, no_plots)


@app.command()
def patch(config: str = typer.Argument(..., help=_CFG_HELP), out: Optional[Path] = _OUT,
          set_: Optional[List[str]] = typer.Option(None, "--set", help=_SET_HELP),
          no_plots: bool = typer.Option(False, "--no-plots")) -> None:
    """Residual interchange at the source-cue positions (cue X into cue Y), layer by layer."""
    _internals("patch", config, out, set_, no_plots)


@app.command()
def probe(config: str = typer.Argument(..., help=_CFG_HELP), out: Optional[Path] = _OUT,
          set_: Optional[List[str]] = typer.Option(None, "--set", help=_SET_HELP),
          no_plots: bool = typer.Option(False, "--no-plots")) -> None:
    """Logistic probes per layer with held-out AUROC beside the shuffled-label null (90th percentile)."""
    _internals("probe", config, out, set_, no_plots)


@app.command()
def transfer(config: str = typer.Argument(..., help=_CFG_HELP), out: Optional[Path] = _OUT,
             set_: Optional[List[str]] = typer.Option(None, "--set", help=_SET_HELP),
             no_plots: bool = typer.Option(False, "--no-plots")) -> None:
    """Latent state transfer: a sender's residual state written into the receiver (controls: elsewhere, scrambled)."""
    _internals("transfer", config, out, set_, no_plots)


@app.command()
def concepts(config: str = typer.Argument(..., help=_CFG_HELP), out: Optional[Path] = _OUT,
             set_: Optional[List[str]] = typer.Option(None, "--set", help=_SET_HELP),
             no_plots: bool = typer.Option(False, "--no-plots")) -> None:
    """Concept directions (lexicon) read while reading peers and at the decision token, by domain, debate vs
    reflection, beside the shuffled-label null."""
    _internals("concepts", config, out, set_, no_plots)
