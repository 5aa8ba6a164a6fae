"""``chorus aggregate``: run | sweep | generate, and the analyses of stored traces and runs (verify, flips, switch, truncation,
lodo, labels, contagion, keys, shift, drift, transfer, check, c8: ``chorus.aggregate.analyses``, one module each,
mounted from the analysis registry).

Heavy imports (numpy, pandas, scikit-learn, crowd-kit, matplotlib) happen inside the verbs:
this module is imported on every ``chorus`` call.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

import chorus.aggregate.analyses  # noqa: F401  (registers the trace analyses)
from chorus.serving.standing import standing_text
from chorus.core.cliutil import add_analyses, add_verbs, renamed_option
from chorus.core.cliutil import fail as _fail
from chorus.core.verbs import Impl, Option, Verb, register
from chorus.core.config import ConfigError, InputError
from chorus.core.runs import check_output

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="BDA aggregation over council traces: run, sweep, verify.")

def _user_errors() -> tuple[type[BaseException], ...]:
    from chorus.aggregate.errors import LabelError, PriorError, TraceError

    return (ConfigError, TraceError, LabelError, PriorError, InputError)


def _show(console, path: Path, summary: dict) -> None:
    console.print((Path(path) / "results.md").read_text(), markup=False, highlight=False, soft_wrap=True)
    console.print(f"[green]results:[/] {Path(path) / 'results.json'}\n[green]run directory:[/] {path} "
                  f"(tables/, plots/, results.md, summary.json)")


_QUIET = Option("quiet", "--quiet", bool, False, "No progress bar.", "progress:enabled", negate=True)


def _impl_aggregate_run() -> Impl:
    from chorus.aggregate.config import config_path, load_run_config
    from chorus.aggregate.experiments import run_to_dir
    return Impl(load=load_run_config, run=run_to_dir, source=config_path)


register(Verb(
    "aggregate", "run", impl=_impl_aggregate_run,
    help="Traces + methods -> nested-CV posteriors, metrics, bootstrap, tables, plots, one results file.",
    config_help="Run config (a path or a shipped name in aggregate/configs/, e.g. run_synthetic).",
    show=_show, unit="fold x method", plots=False, options=(_QUIET,), configs="chorus.aggregate.config:CONFIGS_DIR/run_*.yaml"))


def _impl_aggregate_sweep() -> Impl:
    from chorus.aggregate.config import load_sweep_config
    from chorus.aggregate.experiments import sweep_to_dir
    return Impl(load=load_sweep_config, run=sweep_to_dir)


register(Verb(
    "aggregate", "sweep", impl=_impl_aggregate_sweep,
    help="Adversary sweeps over a synthetic council or a real trace file (--traces): "
                               "dose-response (regime x k x p_wrong) or the sleeper axis (f).",
    config_help="Sweep config (kind: dose_response | sleeper; a path or a shipped name, e.g. sweep_dose).",
    show=_show,
    unit="fold x method", plots=False, configs="chorus.aggregate.config:CONFIGS_DIR/sweep_*.yaml",
    options=(Option("traces", "--traces", Optional[Path], None, "A council trace file (.jsonl / .jsonl.gz) to "
                    "corrupt instead of the config's synthetic council.", "config:traces"), _QUIET)))
add_verbs(app, "aggregate")


@app.command()
def generate(out: Path = typer.Option(..., "--out", help="Trace file to write (.jsonl or .jsonl.gz)."),
             n_tasks: int = typer.Option(1500, "--n", help="Number of tasks."),
             candidates: Optional[int] = typer.Option(None, "--candidates", help="Candidates per task (K; default 2)."),
             reliabilities: str = typer.Option("0.74,0.68,0.68", "--reliabilities", help="Seat reliabilities, comma-separated."),
             rounds: int = typer.Option(3, "--rounds"),
             adversary: Optional[str] = typer.Option(None, "--adversary", help="persistent | rotating"),
             k: int = typer.Option(1, "--k", help="Adversarial seats."),
             p_wrong: float = typer.Option(1.0, "--p-wrong"),
             seed: int = typer.Option(0, "--seed"),
             prefix: str = typer.Option("syn", "--prefix", help="Task-id prefix (disjoint sets for lodo / transfer)."),
             K_old: Optional[int] = typer.Option(None, "--K", hidden=True)) -> None:
    """Write a synthetic council trace file (the trace JSONL of ``chorus.aggregate.trace``)."""
    from chorus.aggregate.synthetic_councils import Adversary, CouncilSpec, generate_council
    from chorus.aggregate.trace import dump_traces

    K = renamed_option(K_old, "--K", "--candidates", candidates)   # beside --k (adversarial seats), one letter apart
    K = 2 if K is None else K
    try:
        check_output(out)   # never into (or over) a run directory
        try:
            rel = tuple(float(x) for x in reliabilities.split(","))
        except ValueError:
            raise InputError(f"--reliabilities {reliabilities!r}: expected numbers, comma-separated") from None
        spec = CouncilSpec(n_tasks=n_tasks, K=K, rounds=rounds, reliabilities=rel)
        adv = Adversary(kind=adversary, k=k, p_wrong=p_wrong) if adversary else None
        dump_traces(generate_council(spec, adversary=adv, seed=seed, prefix=prefix), out)
    except _user_errors() as err:
        _fail(str(err))
    typer.echo(f"wrote {n_tasks} traces to {out}")


add_analyses(app, "aggregate", standing_text)   # flips, switch, truncation, lodo, labels, contagion, keys, shift, drift, transfer, check, c8
