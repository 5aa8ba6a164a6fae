"""``chorus roleplay`` (run | eval) and ``chorus sft`` (train): DEBATE-style role-play groups,
their human-alignment metrics and the SFT comparison. Heavy imports stay inside the
commands so ``chorus --help`` stays fast."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from core.cliutil import fail as _fail
from core.cliutil import parse_overrides as _overrides
from core.progress import progress

roleplay_app = typer.Typer(no_args_is_help=True, add_completion=False,
                           help="DEBATE-style role-play groups: run both setups, evaluate against the humans.")
sft_app = typer.Typer(no_args_is_help=True, add_completion=False,
                      help="Next-message SFT with TRL; the trained model becomes a serving profile.")

_SET_HELP = "Override a config field: --set data.path=groups.jsonl --set generation.max_tokens=32 (YAML values)."


def _fmt(v) -> str:
    if isinstance(v, dict) and "mean" in v:
        m, lo, hi = v["mean"], v.get("lo"), v.get("hi")
        if m != m:
            return "nan"
        return f"{m:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if lo == lo and hi == hi and lo is not None else "")
    if isinstance(v, dict) and "rho" in v:
        return "nan" if v["rho"] != v["rho"] else f"{v['rho']:.2f} (n={v['n']})"
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.3f}"
    return "-" if v is None else str(v)


def print_summary(console, path: Path, s: dict) -> None:
    from rich.table import Table
    t = Table(title=f"{s.get('experiment')}: {s.get('n_groups')} groups ({s['split']['kind']} split, "
                    f"{s['split']['part']}), models {s.get('models')}")
    cols = ["single_error", "update_error", "convergence_error", "delta_sd", "delta_pairwise", "delta_range",
            "partner_gap_spearman", "rouge_l", "semantic_similarity", "length_deviation", "on_topic_rate"]
    t.add_column("cell")
    for c in cols:
        t.add_column(c.replace("_", " "))
    for ch in ("public", "private"):
        h = s["human"][ch]
        t.add_row(f"human/{ch}", *[_fmt(h.get(c)) for c in cols])
    for k, v in s["cells"].items():
        t.add_row(k, *[_fmt(v.get(c)) for c in cols])
    console.print(t)
    c = s.get("classifier", {})
    console.print(f"classifier: {c.get('n_texts')} texts, stance parse rate {_fmt(c.get('stance_parse_rate'))}, "
                  f"on-topic parse rate {_fmt(c.get('on_topic_parse_rate'))}; vs human sliders MAE "
                  f"{_fmt(c.get('vs_slider', {}).get('mae'))}")
    console.print(f"golden-group mask: {s['mask']['n_excluded']} excluded {s['mask']['excluded']}")
    if "alpha" in s.get("degroot", {}):
        console.print(f"DeGroot (fitted on {s['degroot']['n_groups']} training groups): alpha = {s['degroot']['alpha']:.3f}")
    for k, v in s.get("tests", {}).items():
        console.print(f"sign tests {k}: " + ", ".join(f"{m} {x['k']}/{x['n']} p={_fmt(x['p'])}" for m, x in v.items()))
    for note in (s.get("note"), s.get("data_note")):
        if note:
            console.print(f"[yellow]{note}[/yellow]")
    console.print(f"results: [bold]{path}[/bold] (summary.json, tables/*.parquet, plots/*.png)")


@roleplay_app.command()
def run(config: str = typer.Argument(..., help="Roleplay config (a path or a shipped name: default, smoke, topic)."),
        out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default runs/roleplay/NAME-TIME)."),
        set_: Optional[List[str]] = typer.Option(None, "--set", help=_SET_HELP),
        no_plots: bool = typer.Option(False, "--no-plots", help="Skip the figures.")) -> None:
    """Run full dynamics and next-message prediction for every model; classify; evaluate."""
    from rich.console import Console

    from core.config import ConfigError
    from serving.profiles import ModelError
    from serving.types import RequestError
    from simulate.roleplay.config import RoleplayConfig, load
    from simulate.roleplay.data import GroupFormatError
    from simulate.roleplay.experiment import run_roleplay
    try:
        cfg = load(config, RoleplayConfig, _overrides(set_))
        with progress(cfg.name, "messages") as update:
            rundir, summary = run_roleplay(cfg, out, progress=update, make_plots=not no_plots)
    except (ConfigError, GroupFormatError, FileNotFoundError, ModelError, RequestError) as err:
        _fail(err)
    print_summary(Console(), rundir.path, summary)


@roleplay_app.command("eval")
def eval_(run_dir: Path = typer.Argument(..., help="A roleplay run directory."),
          no_plots: bool = typer.Option(False, "--no-plots", help="Skip the figures.")) -> None:
    """Recompute every metric, summary.json and the plots from a run directory's files."""
    from rich.console import Console

    from core.config import ConfigError
    from simulate.roleplay.experiment import report
    try:
        summary = report(run_dir, make_plots=not no_plots)
    except (ConfigError, FileNotFoundError) as err:
        _fail(err)
    print_summary(Console(), run_dir, summary)


@sft_app.command()
def train(config: str = typer.Argument(..., help="SFT config (a path or a shipped name: default, lora, smoke)."),
          out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default runs/sft/NAME-TIME)."),
          set_: Optional[List[str]] = typer.Option(None, "--set", help=_SET_HELP)) -> None:
    """Build the next-message SFT set, train with TRL (LoRA optional), save a loadable model folder;
    with ``compare:`` also run base vs SFT vs human."""
    from rich.console import Console

    from core.config import ConfigError
    from serving.profiles import ModelError
    from serving.types import RequestError
    from simulate.roleplay.config import SftConfig, load
    from simulate.roleplay.data import GroupFormatError
    from simulate.roleplay.sft import train_sft
    try:
        cfg = load(config, SftConfig, _overrides(set_), part="sft")
        with progress(cfg.name, "steps") as update:
            rundir, s = train_sft(cfg, out, progress=update)
    except (ConfigError, GroupFormatError, FileNotFoundError, ModelError, RequestError) as err:
        _fail(err)
    con = Console()
    con.print(f"{s['n_examples']} examples ({s['filtered']}), {s['global_steps']} steps, loss "
              f"{_fmt(s['first_loss'])} -> {_fmt(s['last_loss'])}, {_fmt(s['steps_per_second'])} steps/s")
    con.print(f"model folder (use it as a profile: -m PATH or models[].profile): [bold]{s['model_path']}[/bold]")
    if s.get("registered_as"):
        con.print(f"registered in {s['registered_as']} as {cfg.register_as}")
    if s.get("compare_run"):
        from simulate.roleplay.experiment import RunDir
        print_summary(con, Path(s["compare_run"]), RunDir(s["compare_run"]).summary())
    con.print(f"results: [bold]{rundir.path}[/bold] (summary.json, tables/train_log.parquet, model/)")
