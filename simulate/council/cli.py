"""``chorus council``: live LLM councils that emit typed-move traces.

run CONFIG      deliberate (clean and attacked), write traces, run the LLM baselines, aggregate
report RUN      recompute every table, summary and plot from a run directory's files alone
judge RUN       the frozen judge pass over the baselines' unparsed answers (BDA paper D.3)
compliance RUN  the stealth adversaries' compliance per trace file (an analysis: its own sealed run)
tasks DATASET   show the tasks a config would draw (no model calls; gold shown only with --gold)
Heavy imports stay inside the commands so ``chorus --help`` stays fast."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

import chorus.simulate.council.analyses  # noqa: F401  (registers compliance)
from chorus.core.cliutil import add_analyses, add_verbs, model_option, plots_option, renamed_option
from chorus.core.cliutil import fail as _fail
from chorus.core.cliutil import parse_overrides as _overrides
from chorus.core.headline import declare as declare_headline
from chorus.simulate.council.headline import headline
from chorus.core.verbs import Impl, Option, Verb, register
from chorus.serving.profiles import DEFAULT_PROFILE
from chorus.serving.standing import standing_text
from chorus.core.config import ConfigError, InputError
from chorus.core.runs import check_output

council_app = typer.Typer(no_args_is_help=True, add_completion=False,
                          help="Live LLM councils -> typed-move traces, stealth adversaries, LLM baselines.")

_SET_HELP = "Override a config field: --set rounds=2 --set data.0.n=20 (YAML values)."
_DATA_HELP = ("Data folder replacing the sets shipped with chorus (the optional ArgLLMs claim sets: "
              "DIR/argllms_claims/ or an ArgLLMs clone; also $CHORUS_DATA).")


def _with_data(set_: Optional[List[str]], data: Optional[Path]) -> dict:
    over = _overrides(set_)
    if data is not None:
        over["data_dir"] = str(data)
    return over


def _errors():
    from chorus.aggregate.errors import LabelError, TraceError
    return (ConfigError, TraceError, LabelError, FileNotFoundError, InputError)


def _print(path: Path, s: dict) -> None:
    import json

    from rich.console import Console
    con = Console()
    if not s and (Path(path) / "summary.json").is_file():  # after the judge pass: the re-rendered summary
        s = json.loads((Path(path) / "summary.json").read_text())
    md = Path(path) / "results.md"
    if md.is_file():
        con.print(md.read_text(), markup=False, highlight=False, soft_wrap=True)
    from chorus.serving.standing import print_headline
    print_headline(con, "council", path, s)   # the lead comparison, and where its numbers come from
    con.print(f"results: [bold]{path}[/bold] (traces/*.jsonl, aggregate/*/, tables/*.parquet, results.md, "
              f"summary.json, plots/*.png)")


def _show(console, path: Path, s: dict) -> None:
    _print(path, s)


declare_headline("council", headline)   # the lead comparison its report, console and the demo show first


def _impl_council_run() -> Impl:
    from chorus.simulate.council.config import load
    from chorus.simulate.council.experiment import check_run, report, run_council_experiment
    return Impl(load=load, run=run_council_experiment, check=check_run, report=report)


register(Verb(
    "council", "run", impl=_impl_council_run, recomputes=True,
    help="Deliberate in lockstep, write trace JSONL, run the LLM baselines, aggregate every trace file.",
    config_help="Council config (a path or a shipped name: tiny, small, full).",
    recompute_alias="report", show=_show, unit="seat-turns", model="seats.*.profile",
    configs="chorus.simulate.council.config:CONFIGS_DIR/*.yaml",
    options=(Option("data", "--data", Optional[Path], None, _DATA_HELP, "config:data_dir"),
             Option("no_aggregate", "--no-aggregate", bool, False, "Only generate (aggregate later with report).",
                    "run:aggregate", negate=True))))
add_verbs(council_app, "council")
add_analyses(council_app, "council", standing_text)   # compliance (simulate/council/analyses/)


@council_app.command()
def judge(run_dir: Path = typer.Argument(..., help="A council run directory."),
          model: Optional[str] = model_option("The judge: a profile, a model folder or a Hugging Face id from the "
                                              f"local cache (default {DEFAULT_PROFILE})."),
          backend: str = typer.Option("auto", "--backend", help="Engine backend: auto, hf, vllm, openai."),
          max_tokens: int = typer.Option(16, "--max-tokens", help="New-token cap of a judge reply."),
          plots: bool = plots_option(),
          judge_old: Optional[str] = typer.Option(None, "--judge", hidden=True)) -> None:
    """The frozen judge pass (BDA paper D.3): baseline answers no parser reads -> one judge at temperature 0
    -> tables/judge_ledger.parquet, judge.json, and the report again with parse rates before and after."""
    from chorus.simulate.council.experiment import report as _report
    from chorus.simulate.council.judged import JudgeError, council_judge
    judge_profile = renamed_option(judge_old, "--judge", "-m/--model", model) or DEFAULT_PROFILE
    try:
        info = council_judge(run_dir, profile=judge_profile, backend=backend, max_tokens=max_tokens)
        summary = _report(run_dir, make_plots=plots)  # the judge post-processes; the report is ours
    except (*_errors(), JudgeError) as err:
        _fail(err)
    _print(run_dir, summary)
    typer.echo(f"judge {info['judge_profile']} (prompt {info['prompt_name']} {info['prompt_sha256'][:12]}): "
               f"{info['counts']}; ledger {run_dir}/tables/judge_ledger.parquet")


@council_app.command()
def tasks(config: str = typer.Argument(..., help="Council config (path or shipped name)."),
          set_: Optional[List[str]] = typer.Option(None, "--set", help=_SET_HELP),
          data: Optional[Path] = typer.Option(None, "--data", help=_DATA_HELP),
          gold: bool = typer.Option(False, "--gold", help="Also print the gold labels."),
          limit: int = typer.Option(5, "--limit", help="Tasks to print per dataset.")) -> None:
    """The tasks a config draws, with exclusions (no model calls)."""
    import json

    from chorus.simulate.council.config import load
    from chorus.simulate.council.experiment import select_tasks
    try:
        cfg = load(config, _with_data(set_, data))
        for ds, ts, info in select_tasks(cfg):
            typer.echo(f"{ds}: {json.dumps(info)}")
            for t in ts[:limit]:
                typer.echo(f"  {t.task_id} {list(t.candidates)}{' gold=' + t.gold if gold else ''}: {t.question[:100]!r}")
    except _errors() as err:
        _fail(err)


# -- the campaign (BDA paper D.7): a synthetic store (its export and paper: chorus paper bda; its drift guard: the
# analysis campaign-verify, simulate/council/analyses/) ----------------------------------------------------------
def _campaign_errors():
    from chorus.simulate.council.campaign_inputs import CampaignError
    return (CampaignError,) + _errors()


@council_app.command()
def synthetic(out: Path = typer.Option(..., "--out", help="Trace store to write (OUT/traces/*.jsonl.gz)."),
              questions: int = typer.Option(200, "--questions", help="Questions per dataset."),
              seeds: int = typer.Option(3, "--seeds", help="Generation seeds per question."),
              seed: int = typer.Option(0, "--seed")) -> None:
    """A synthetic campaign store: three binary sets, a K = 3 and a K = 4 set; clean, attack-k1, attack-k2;
    generation seeds (count-level councils, no model)."""
    from chorus.simulate.council.campaign_synthetic import write_store
    try:
        check_output(out)   # a trace store of its own: never inside a run directory
        files = write_store(out, n_questions=questions, seeds=seeds, seed=seed)
    except _campaign_errors() as err:
        _fail(err)
    typer.echo(f"wrote {len(files)} trace files to {out / 'traces'}")
