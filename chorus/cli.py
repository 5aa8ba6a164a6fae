"""The ``chorus`` command. Each part owns its sub-commands in its own module; this file only
mounts them. Part modules keep heavy imports (torch, vllm) inside functions so that
``chorus --help`` stays fast."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from chorus.aggregate.cli import app as aggregate_app
from chorus.core.cliutil import fail, model_option, renamed_option
from chorus.core.config import InputError
from chorus.interventions.cli import app as influence_app
from chorus.papers.cli import aliases as paper_aliases, paper_app
from chorus.serving.cli import generate, models_app, serve, store_app
from chorus.serving.profiles import DEFAULT_PROFILE, ModelError, cache_dir, get_profile
from chorus.simulate.belief.cli import app as belief_app
from chorus.simulate.council.cli import council_app
from chorus.simulate.debate.cli import debate_app
from chorus.simulate.roleplay.cli import roleplay_app, sft_app
from chorus.core.progress import progress
from chorus.core.config import ConfigError
from chorus.core.runs import (MANIFEST, RecordError, check_output, holding, in_use, run_dir_path,
                              seal_state)
from chorus.errors import run_command

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="chorus: self-hosted models that debate, simulate opinions and deliberate.")


def verb_names(sub: typer.Typer) -> list[str]:
    """The commands a group shows (its sub-groups too), in the order ``--help`` lists them."""
    names = [c.name or c.callback.__name__.replace("_", "-") for c in sub.registered_commands if not c.hidden]
    return names + [g.name for g in sub.registered_groups if not g.hidden]


def mount(sub: typer.Typer, name: str, purpose: str) -> None:
    """Mount a part's group with its purpose and every verb it has, listed from the group itself so
    the line never leaves one out."""
    app.add_typer(sub, name=name, help=f"{purpose}: {', '.join(verb_names(sub))}.")


# the old spellings of the paper commands, hidden on their groups for one release (chorus.papers.cli)
paper_aliases({"council": council_app, "influence": influence_app, "roleplay": roleplay_app, "belief": belief_app})
mount(models_app, "models", "Model profiles")
mount(store_app, "store", "The SQLite call store")
mount(belief_app, "belief", "Bayesian belief layer (BCA)")
mount(aggregate_app, "aggregate", "BDA aggregation over council traces")
mount(debate_app, "debate", "Multi-agent debate vs matched reflection")
mount(influence_app, "influence", "Peer influence: readouts, interventions and the model's internals")
mount(council_app, "council", "Live LLM councils (typed-move traces, adversaries, LLM baselines)")
mount(roleplay_app, "roleplay", "DEBATE-style role-play groups vs human groups")
mount(sft_app, "sft", "Next-message SFT with TRL (base vs SFT vs human)")
mount(paper_app, "paper", "Each paper's tables and figures in its order, from stored runs")
app.command()(generate)
app.command()(serve)


@app.command("configs")
def configs(part: Optional[str] = typer.Argument(None, metavar="[PART]", help="Only this part's (e.g. debate, "
                                                                             "influence, belief)."),
            paths: bool = typer.Option(False, "--paths", help="Print each config's file path too.")) -> None:
    """List every shipped config, one line each: its part, its name (what CONFIG takes), the verbs that
    take it (chorus PART VERB NAME) and what it runs."""
    from chorus.core.config import config_description
    from chorus.registry import REGISTRY

    parts = sorted({g.split()[0] for g, _ in REGISTRY})
    if part is not None and part not in parts:
        fail(f"no part {part!r} has shipped configs; parts: {', '.join(parts)}")
    rows: dict = {}   # (part, file) -> the verbs that take it, in registry order
    for (group, name), v in REGISTRY.items():
        if part is None or group.split()[0] == part:
            for f in v.shipped_configs():
                default = f.stem == v.default_config or (v.argument is not None and f.stem == "default")
                what = ("every field at its default (what the verb loads when no config is named)" if default
                        else config_description(f))
                rows.setdefault((group.split()[0], f), [[], what])[0].append(" ".join([*group.split()[1:], name]))
    import shutil

    keys = sorted(rows, key=lambda k: (k[0], k[1].stem))
    cells = [(p, f.stem, ",".join(rows[(p, f)][0])) for p, f in keys]
    widths = [max(len(c[i]) for c in [("part", "name", "verbs"), *cells]) for i in range(3)]
    room = max(20, shutil.get_terminal_size((120, 24)).columns - sum(widths) - 4)
    def line(first: tuple, what: str) -> str:   # one line each: the description is cut to the terminal
        what = what if len(what) <= room or paths else what[:room - 3] + "..."
        return "  ".join(c.ljust(w) for c, w in zip(first, widths)) + "  " + what
    typer.echo(line(("part", "name", "verbs"), "what it runs"))
    for k, c in zip(keys, cells):
        typer.echo(line(c, rows[k][1]) + (f"  {k[1]}" if paths else ""))


def _version(value: bool) -> None:
    if value:
        from chorus import __version__
        typer.echo(f"chorus {__version__}")
        raise typer.Exit()


@app.callback()
def _global(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                         help="Print chorus's version and exit."),
            verbose: bool = typer.Option(False, "--verbose", "-v",
                                         help="Keep the engines' own logs on the terminal (before the command)."),
            debug: bool = typer.Option(False, "--debug", help="Show the traceback of a failure (or CHORUS_DEBUG=1).")
            ) -> None:
    """chorus: self-hosted models that debate, simulate opinions and deliberate."""
    # -v and --debug are taken from the command line by the error boundary (chorus.errors.run_command)
    # before typer parses it, so they act wherever they stand; declared here so --help shows them


@app.command()
def demo(size: str = typer.Option("tiny", "--size", help="tiny (a few minutes) | full (the main job, < 15 min on 2 CPU cores)"),
         out: Path = typer.Option(Path("runs/demo"), "--out", help="Run directory; OUT/report.html is written there."),
         model: Optional[str] = model_option("The model of every stage that uses the demo's model: a profile, a "
                                             f"model folder or a hub id (default {DEFAULT_PROFILE})."),
         backend: str = typer.Option("auto", "--backend", "-b", help="auto | hf | vllm | openai"),
         stage: list[str] = typer.Option(None, "--stage", help="Run only these stages (repeatable); default all."),
         seed: int = typer.Option(0, "--seed"),
         profile_old: Optional[str] = typer.Option(None, "--profile", hidden=True)) -> None:
    """The main job: one small study across every part on the embedded model, with a self-contained HTML report.
    Rerunning resumes: completed model calls are read back from each stage's store."""
    from rich.console import Console
    from rich.table import Table

    from chorus.demo import run_demo

    console = Console()
    profile = renamed_option(profile_old, "--profile", "-m/--model", model) or DEFAULT_PROFILE
    if size not in ("tiny", "full"):
        fail(f"--size must be tiny or full, got {size!r}")
    try:
        report_path = run_demo(size=size, out=out, profile=profile, backend=backend, stages=stage or None,
                               seed=seed, console=console)
    except (InputError, ModelError) as err:   # a failure of a stage, or a bug, goes to the boundary
        fail(str(err))
    import json
    summ = json.loads((out / "summary.json").read_text())
    timing = json.loads((out / "timing.json").read_text())["stages"]
    t = Table(title=f"chorus demo ({size})")
    for c in ("stage", "status", "wall s", "note"):
        t.add_column(c)
    for name, rec in summ["stages"].items():
        colour = {"done": "green", "failed": "red"}.get(rec["status"], "yellow")
        t.add_row(name, f"[{colour}]{rec['status']}[/{colour}]", str(timing.get(name, {}).get("wall_s", "")),
                  rec.get("error", "")[:80])
    console.print(t)
    console.print(f"report: {report_path}")
    if any(r["status"] == "failed" for r in summ["stages"].values()):
        raise typer.Exit(1)


@app.command()
def rehearse(model_arg: Optional[str] = typer.Argument(None, metavar="MODEL", help="a profile, a model folder, a "
                                                      "hub id, or a paper architecture (llama-3.1-8b-instruct, "
                                                      "qwen3.5-9b, gemma-4-e4b-it) without a local path, which is "
                                                      "built with dummy weights (or -m)"),
             model: Optional[str] = model_option("the same as MODEL"),
             backend: list[str] = typer.Option(None, "--backend", "-b", help="hf | vllm | openai (repeatable; "
                                               "default hf and vllm)"),
             path: list[str] = typer.Option(None, "--path", help="only these paths, e.g. hf.knockout or chat "
                                            "(repeatable)"),
             layers: Optional[int] = typer.Option(None, help="a dummy build: decoder layers (widths and the layer "
                                                  "pattern stay the published ones; default all)"),
             dtype: Optional[str] = typer.Option(None, help="float32 | bfloat16 (default: float32 on CPU, "
                                                 "bfloat16 on GPU)"),
             out: Optional[Path] = typer.Option(None, help="folder for rehearsal.json (default runs/rehearse/NAME-TIME)")
             ) -> None:
    """Take one model through every path chorus offers (engine start, chat, JSON, choice, option
    log-probs, knockout, patch, probe, debate, council, belief roles, SFT, serve + openai) and
    report pass / fail, time and peak memory per path."""
    from rich.console import Console
    from rich.table import Table

    from chorus.rehearse import rehearse as run_rehearsal
    from chorus.serving.dummy import architectures, build_dummy

    console = Console()
    if model_arg is not None and model is not None and model_arg != model:
        fail(f"MODEL {model_arg!r} and -m {model!r} name two models: give one")
    model = model_arg or model
    if model is None:
        fail("give the model to rehearse: chorus rehearse MODEL (a profile, a folder, a hub id or a paper architecture)")
    target = model
    try:
        if model in architectures() and not get_profile(model).status()[0]:
            folder = cache_dir() / "dummy" / f"{model}-L{layers or 'all'}"
            with console.status(f"building a dummy-weight {model} ({layers or 'all'} layers), once"):
                target = str(build_dummy(model, folder, layers=layers))
            console.print(f"dummy weights: {target} (random: plumbing, memory and speed only)")
        elif layers is not None:
            fail("--layers applies to a paper architecture built with dummy weights, not to a profile with weights")
        dest = check_output(run_dir_path(out, "rehearse", Path(model).name))   # never into a run directory
        with progress("rehearse", "paths") as update:
            res = run_rehearsal(target, backends=backend or ["hf", "vllm"], paths=path or None, dtype=dtype,
                                out=dest, progress=update)
    except (ModelError, InputError) as err:
        fail(str(err))
    t = Table(title=f"rehearsal of {model}")
    for c in ("path", "status", "s", "peak GiB", "detail / error"):
        t.add_column(c)
    for r in res["results"]:
        colour = {"pass": "green", "fail": "red"}.get(r["status"], "yellow")
        note = r.get("error") or ", ".join(f"{k}={v}" for k, v in (r.get("detail") or {}).items())
        t.add_row(r["path"], f"[{colour}]{r['status']}[/{colour}]", f"{r['seconds']:.1f}",
                  f"{r.get('peak_gpu_gib', r['peak_rss_gib']):.2f}", note[:90])
    console.print(t)
    console.print(f"{res['counts']}; results: {dest / 'rehearsal.json'}")
    if res["counts"]["fail"]:
        raise typer.Exit(1)


@app.command()
def report(run_dir: Path = typer.Argument(..., help="Any chorus run directory (a demo, or one part's run)."),
           out: Path = typer.Option(None, "--out", help="HTML file to write (default RUN/report.html); never a file "
                                                        "of a run directory.")) -> None:
    """Render a single self-contained HTML report (no network, no external assets) for a run directory.
    A run without its record (manifest.json), or with files its record does not list, is rendered
    under a visible UNVERIFIED / NOT SEALED banner (and said here); an edited or missing file is refused."""
    from chorus.report import ReportError, check_readable, render_report, seal_warnings
    try:
        if not run_dir.is_dir():
            render_report(run_dir, out=out)   # names what is wrong with it
        if out is not None:
            check_output(out, "--out", allow=run_dir / "report.html")
        with holding(run_dir):   # one writer at a time: a run, a part's report, this one
            st = seal_state(run_dir)
            if st.problems:   # a report never shows numbers the run did not write
                raise RecordError(f"{run_dir}: the run's files are not the ones it wrote ({'; '.join(st.problems)}); "
                                  f"rerun it into a new directory, or restore the files")
            check_readable(run_dir)
            path = render_report(run_dir, out=out, seal=st)
    except (ReportError, ConfigError) as err:
        fail(str(err))
    for line in seal_warnings(run_dir, st):
        typer.echo(f"warning: {line}", err=True)
    typer.echo(str(path))


@app.command()
def view(run_dir: Path = typer.Argument(..., help="A debate, council or role-play run directory, or a demo."),
         out: Path = typer.Option(None, "--out", help="HTML file to write (default RUN/transcripts.html); never "
                                                      "another file of a run directory."),
         with_: list[Path] = typer.Option(None, "--with", help="An influence run made from this run that is not "
                                          "beside it, in ../influence/ or inside it (repeatable).")) -> None:
    """Write the transcript viewer alone: one self-contained HTML page with every message of the run,
    by question, condition, round and agent (chorus report writes it too, beside report.html). A run
    with an edited or missing file is refused; one without its record, or with files it does not list,
    is shown with a warning (on the page, and here)."""
    from chorus.report import seal_warnings
    from chorus.transcripts import write_viewer
    try:
        if out is not None:
            check_output(out, "--out", allow=run_dir / "transcripts.html")
        if not run_dir.is_dir():
            write_viewer(run_dir, out=out)   # names what is wrong with it
        with holding(run_dir):   # one writer at a time: a run, its report, this page
            st = seal_state(run_dir)
            if st.problems:   # a page never shows messages the run did not write
                raise RecordError(f"{run_dir}: the run's files are not the ones it wrote ({'; '.join(st.problems)}); "
                                  f"rerun it into a new directory, or restore the files")
            path, info = write_viewer(run_dir, out=out, with_runs=with_ or ())
    except InputError as err:
        fail(str(err))
    for line in seal_warnings(run_dir, st):
        typer.echo(f"warning: {line}", err=True)
    typer.echo(f"{path} ({info['what']}; {info['html_bytes'] / 1e6:.1f} MB)")


@app.command()
def verify(run_dir: Path = typer.Argument(..., help="Any finished chorus run directory.")) -> None:
    """Check every file a finished run wrote (summary, tables, traces, plots, configs) against the
    record it sealed when it finished (manifest.json); exit 1 naming each changed, missing or
    unsealed file (present, but not in the record), and exit 1 for a run with no record (UNVERIFIED).
    An analysis's run: also each source it read (a trace file's sha256, a run's manifest) against the
    fingerprint it recorded, exit 1 naming a changed or missing one.
    Council aggregation runs: `chorus aggregate verify` also recomputes results.json from the traces."""
    from chorus.core.analyses import check_sources

    if not run_dir.is_dir():
        fail(f"{run_dir}: no such run directory")
    who = in_use(run_dir)
    if who:
        fail(f"{run_dir}: in use by {who}: a run or a report is writing it now; verify it once that has finished",
             code=1)
    st = seal_state(run_dir)
    if not st.sealed:
        if not any((run_dir / f).is_file() for f in ("provenance.json", "config.yaml", "summary.json")):
            fail(f"{run_dir}: not a chorus run directory (no {MANIFEST}, provenance.json or config.yaml): "
                 f"nothing to verify")
        fail(f"{run_dir}: UNVERIFIED: no {MANIFEST} (the run did not finish, its record was removed, or an older "
             f"chorus made it): its files cannot be checked against a record", code=1)
    sources = check_sources(run_dir)   # None: not an analysis's run
    if st.lines() or sources:
        resumed = st.lines() and not _finished(run_dir)
        fail(f"{run_dir}: FAILED: " + "; ".join(st.lines() + (sources or []))
             + (" (a resume started after the seal and did not finish: rerun the run to finish it)" if resumed else ""),
             code=1)
    nested = (f"; runs inside it with their own record, verified on their own: {', '.join(st.nested)}"
              if st.nested else "")
    read = "" if sources is None else "; every source is the one it read"
    typer.echo(f"OK: {st.n_files} files of {run_dir} are the ones the run wrote{nested}{read}")


def _finished(run_dir: Path) -> bool:
    import json
    try:
        return bool(json.loads((run_dir / "provenance.json").read_text()).get("finished"))
    except (OSError, ValueError, AttributeError):
        return True


def main() -> None:
    """The ``chorus`` command: the app behind the one error boundary (``chorus.errors``)."""
    import sys

    sys.exit(run_command(app))


if __name__ == "__main__":  # pragma: no cover
    main()
