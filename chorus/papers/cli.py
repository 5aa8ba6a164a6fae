"""``chorus paper bda | influence | roleplay | belief``: each paper's tables and figures in the paper's order,
from stored runs, with no model call. The old spellings (``chorus council campaign | paper``, ``chorus
influence paper``, ``chorus roleplay paper``, ``chorus belief paper``) are mounted on their groups as
hidden aliases that say the new spelling once and run the same command, for one release (``aliases``)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, List, Optional

import typer

from chorus.core.cliutil import deprecated, fail
from chorus.core.config import ConfigError, InputError, validate
from chorus.core.progress import progress

paper_app = typer.Typer(no_args_is_help=True, add_completion=False,
                        help="The papers' tables and figures in each paper's order, from stored runs (no model call).")

RUNS_OUT = "Folder for numbers.json, paper.md and figures/."


#: what a paper command refuses in one line (exit 2): bad input of any part, a file that is not there
BAD_INPUT = (InputError, FileNotFoundError)


@paper_app.command("bda")
def bda(inputs: List[Path] = typer.Argument(..., metavar="RUN...", help="Council run directories and/or trace stores "
                                            "(a folder with traces/<dataset>__<condition>.jsonl); or, without --out, "
                                            "one campaign directory to render again."),
        out: Optional[Path] = typer.Option(None, "--out", help="Campaign directory (numbers.json, paper.md, figures/)."),
        section: Optional[List[str]] = typer.Option(None, "--section", help="Export only these sections (repeat)."),
        method: Optional[List[str]] = typer.Option(None, "--method", help="Aggregation methods (repeat; default: "
                                                                          "the council default)."),
        n_resamples: int = typer.Option(2000, "--n-resamples", help="Bootstrap resamples."),
        budgets: str = typer.Option("10,25,50,100", "--budgets", help="Label-efficiency budgets."),
        sweep: Optional[List[Path]] = typer.Option(None, "--sweep", help="A chorus aggregate sweep run (dose-response "
                                                                        "or sleeper) to embed (repeat)."),
        seed: int = typer.Option(0, "--seed"),
        paper: bool = typer.Option(True, "--paper/--no-paper", help="Render paper.md after the export.")) -> None:
    """The BDA paper: export one campaign-wide numbers file from stored traces (every table, figure and
    diagnostic; no model call) into --out, then render paper.md from it alone. Given one campaign directory
    and no --out: render its paper.md again."""
    from rich.console import Console

    from chorus.papers.bda import render_paper
    if out is None:
        if len(inputs) != 1:
            fail(f"give --out DIR to export a campaign from {len(inputs)} inputs, or one campaign directory alone "
                 "to render its paper again")
        try:
            p = render_paper(inputs[0])
        except BAD_INPUT as err:
            fail(err)
        typer.echo(f"paper: {p}")
        return
    from chorus.simulate.council.campaign import CampaignConfig, build_campaign
    try:
        if not all(b.strip().isdigit() for b in budgets.split(",") if b.strip()):
            raise ConfigError(f"--budgets {budgets!r}: expected whole numbers, comma-separated")
        cfg = validate(CampaignConfig, dict(inputs=[str(p.resolve()) for p in inputs], sections=section or None,
                                            methods=method or None, n_resamples=n_resamples, seed=seed,
                                            budgets=[int(b) for b in budgets.split(",") if b.strip()],
                                            sweeps=[str(p.resolve()) for p in sweep or []]),
                       source="chorus paper bda")
        with progress("campaign", "sections") as prog:
            path = build_campaign(cfg, out, progress=prog)
        md = render_paper(out) if paper else None
    except BAD_INPUT as err:
        fail(err)
    Console().print(f"numbers: [bold]{path}[/bold]" + (f"\npaper: [bold]{md}[/bold]" if md else ""))


@paper_app.command("influence")
def influence(runs: List[Path] = typer.Argument(..., metavar="RUN...", help="Debate and influence run directories."),
              out: Path = typer.Option(..., "--out", help="Output directory (numbers.json, paper.md, figures/).")) -> None:
    """The peer-influence paper's tables and figures in the paper's order from stored runs (debate runs of each
    model, long debates, and influence runs): DIR/numbers.json, then DIR/paper.md rendered from it alone; each
    row names its run, each missing section the command that makes it. No model call."""
    from rich.console import Console

    from chorus.papers.influence import build_paper
    try:
        path, numbers = build_paper(runs, out)
    except BAD_INPUT as err:
        fail(err)
    con = Console()
    secs = numbers["sections"]
    have = [k for k, s in secs.items() if "missing" not in s]
    con.print(f"{len(have)} of {len(secs)} sections from {len(numbers['runs'])} runs "
              f"(models: {', '.join(numbers['models'])})", highlight=False)
    for k, s in secs.items():
        if "missing" in s:
            con.print(f"[yellow]missing[/yellow] {k}: {s['missing']}", soft_wrap=True, highlight=False)
    con.print(f"results: [bold]{path}[/bold] (numbers.json, figures/)")


@paper_app.command("roleplay")
def roleplay(runs: List[Path] = typer.Argument(..., metavar="RUN...", help="Run or output directories: roleplay "
                                               "runs (each split, model set, probe), sft runs, annotators, "
                                               "stats and probes outputs."),
             out: Path = typer.Option(..., "--out", help=RUNS_OUT)) -> None:
    """The DEBATE paper's tables and figures in the paper's order, from stored runs (roleplay, sft, annotators,
    stats, probes outputs): numbers.json, paper.md rendered from it, the runs' figures; no model call. A
    section without its runs names the command that makes them."""
    import json

    from rich.console import Console
    from rich.markup import escape

    from chorus.papers.roleplay import build_paper
    try:
        p = build_paper(runs, out)
    except BAD_INPUT as err:
        fail(err)
    con = Console()
    for key, s in json.loads((out / "numbers.json").read_text())["sections"].items():
        for m in ([s] if isinstance(s.get("missing"), str) else []) + s.get("also_missing", []):
            con.print(f"[yellow]missing[/yellow] {key}: {escape(m['missing'])}; run: {escape(m['command'])}",
                      soft_wrap=True)
    con.print(f"paper: [bold]{p}[/bold]\nnumbers: {out / 'numbers.json'}")


@paper_app.command("belief")
def belief(runs: List[Path] = typer.Argument(..., metavar="RUN...", help="Belief run directories: regimes, "
                                             "kappa_recovery, gamma_ablation, gamma_sweep_oracle, calibrate, "
                                             "channel_biased ... of each model."),
           out: Path = typer.Option(..., "--out", help=RUNS_OUT)) -> None:
    """The belief-layer paper's tables and figures in the paper's order, from one numbers file read out of the
    stored runs (no model call); a section without its run names the command that makes it."""
    from chorus.papers.belief import build_paper
    try:
        p = build_paper(runs, out)
    except BAD_INPUT as err:
        fail(err)
    typer.echo(f"paper: {p}\nnumbers: {out / 'numbers.json'}")


# -- the old spellings, one release -------------------------------------------------------------------------
def _alias(command: Callable, old: str, new: str) -> Callable:
    """``command`` under its old spelling: the same parameters, and one line on stderr naming the new one."""
    import functools

    @functools.wraps(command)
    def run(*args, **kwargs):
        deprecated(old, new)
        return command(*args, **kwargs)
    return run


def _bda_render(campaign_dir: Path = typer.Argument(..., help="A campaign directory (numbers.json).")) -> None:
    """Render the BDA paper's tables and figures, in the paper's order, from the campaign numbers file alone."""
    bda(inputs=[campaign_dir], out=None, section=None, method=None, n_resamples=2000, budgets="10,25,50,100",
        sweep=None, seed=0, paper=True)


#: (group, old command, the command it runs, the new spelling)
ALIASES = (("council", "campaign", bda, "chorus paper bda RUN... --out CAMPAIGN"),
           ("council", "paper", _bda_render, "chorus paper bda CAMPAIGN"),
           ("influence", "paper", influence, "chorus paper influence"),
           ("roleplay", "paper", roleplay, "chorus paper roleplay"),
           ("belief", "paper", belief, "chorus paper belief"))


def aliases(groups: dict[str, typer.Typer]) -> None:
    """Mount each old spelling, hidden, on its group (``groups``: group name -> its Typer app)."""
    for group, name, command, new in ALIASES:
        groups[group].command(name, hidden=True)(_alias(command, f"chorus {group} {name}", new))
