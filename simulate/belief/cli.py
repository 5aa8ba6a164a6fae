"""``chorus belief``: run | sweep | multi | calibrate | labelset | cross (built from the verb registry,
``chorus.core.verbs``) | report | correct | models | topics (the paper: ``chorus paper belief``). Heavy imports (numpy-heavy modules,
serving, matplotlib) stay inside the commands so ``chorus --help`` stays fast."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import List, Optional

import typer

import chorus.simulate.belief.analyses  # noqa: F401  (registers models)
from chorus.core.cliutil import RECOMPUTE_HELP, add_analyses, add_verbs, deprecated, plots_option
from chorus.core.cliutil import fail as _fail
from chorus.core.headline import declare as declare_headline
from chorus.simulate.belief.headline import headline
from chorus.core.verbs import Impl, Option, Verb, register
from chorus.serving.profiles import DEFAULT_PROFILE
from chorus.serving.standing import standing_text
from chorus.core.config import ConfigError

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Bayesian belief layer (BCA): run, sweep, report, calibrate.")

_SET_HELP = "Override a config field: --set n_agents=4 --set population.kappa=2 (YAML values)."


def _print_summary(console, path: Path, summary: dict) -> None:
    from rich.table import Table

    from chorus.simulate.belief.experiment import headline_rows
    t = Table(title=f"{summary.get('experiment')} ({summary.get('mode')}): headline", show_header=False)
    for k, v in headline_rows(summary):
        t.add_row(k, v)
    console.print(t)
    stats = summary.get("stats") or {}
    if stats:
        console.print(f"{stats.get('runs')} runs, {stats.get('listener_events')} listener events, "
                      f"{stats.get('appraisal_failures')} failed appraisals, "
                      f"simulation {stats.get('wall_s', 0):.2f} s")
    from chorus.serving.standing import print_headline
    print_headline(console, "belief", path, summary)   # the lead comparison, and where its numbers come from
    console.print(f"results: [bold]{path}[/bold] (summary.json, tables/*.parquet, plots/*.png)")


def _impl_belief(sweep: bool):
    def factory() -> Impl:
        from chorus.simulate.belief.config import load_belief_config, resolve_config_path
        from chorus.simulate.belief.experiment import check_run, check_sweep, run_experiment
        return Impl(load=load_belief_config, run=functools.partial(run_experiment, sweep=sweep),
                    check=check_sweep if sweep else check_run, source=resolve_config_path)
    return factory


for _name, _help, _kw in [
        ("run", "Run one condition (the config without its sweep) for every seed, in lockstep.", {"sweep": False}),
        ("sweep", "Run every condition of the config's sweep grid x seeds, all in lockstep.", {"sweep": True})]:
    register(Verb("belief", _name, impl=_impl_belief(_kw["sweep"]), help=_help,
                  config_help="Experiment config (a path or a shipped name, e.g. fj" +
                              ("; one with a sweep: section)." if _kw["sweep"] else ")."),
                  show=_print_summary, unit="utterances",
                  model="llm.model.profile",
                  configs="chorus.simulate.belief.config:CONFIGS_DIR/*.yaml,!multi_*.yaml" + (",+sweep" if _kw["sweep"] else "")))
add_verbs(app, "belief")


@app.command("recompute", help=RECOMPUTE_HELP)
def recompute(run_dir: Path = typer.Argument(..., help="A belief run directory."),
              plots: bool = plots_option()) -> None:
    from rich.console import Console

    from chorus.simulate.belief.cross_config import is_cross_run
    from chorus.simulate.belief.experiment import report as _report  # a Beta or a multi-concept run
    if is_cross_run(run_dir):  # a cross-appraisal run (chorus belief cross)
        from chorus.simulate.belief.cross import report as _report
    try:
        summary = _report(run_dir, make_plots=plots)
    except (ConfigError, FileNotFoundError) as err:
        _fail(err)
    if summary.get("command") == "cross":
        return _print_cross(Console(), run_dir, summary)
    _print_summary(Console(), run_dir, summary)


@app.command("report", hidden=True, help=RECOMPUTE_HELP)
def report_renamed(run_dir: Path = typer.Argument(..., help="A belief run directory."),
                   plots: bool = plots_option()) -> None:
    deprecated("chorus belief report", "chorus belief recompute")
    recompute(run_dir, plots)


declare_headline("belief", headline)   # the lead comparison its report, console and the demo show first


def _impl_belief_multi() -> Impl:
    from chorus.simulate.belief.config import load_multi_config, resolve_multi_config_path
    from chorus.simulate.belief.experiment import check_run, run_experiment
    return Impl(load=load_multi_config, run=run_experiment, check=check_run, source=resolve_multi_config_path)


register(Verb(
    "belief", "multi", impl=_impl_belief_multi,
    help="Multi-concept identities: a Dirichlet belief per concept (K-way stances), every seed in lockstep.",
    config_help="Multi-concept config (a path or a shipped name, e.g. multi_fj).",
    show=_print_summary,
    unit="utterances", model="llm.model.profile", configs="chorus.simulate.belief.config:CONFIGS_DIR/multi_*.yaml"))
add_verbs(app, "belief")


def _announce_calibrate(console, cfg) -> None:
    _, labelled = cfg.inputs()
    if labelled is not None and labelled.attrs["n_unlabelled"]:
        console.print(f"skipped {labelled.attrs['n_unlabelled']} unlabelled rows of {cfg.labels}; "
                      f"fitting on the {len(labelled)} labelled ones")


def _show_calibrate(console, path: Path, fit: dict) -> None:
    console.print(f"tau = {fit['tau']:.3f}; held-out ECE {fit['ece_before']:.3f} -> {fit['ece_after']:.3f}, "
                  f"cross-entropy {fit['ce_before']:.3f} -> {fit['ce_after']:.3f} "
                  f"({fit['n_train']} train / {fit['n_val']} val, {fit['n_failed']} failed appraisals)")
    if fit.get("tau_at_bound"):
        console.print("[yellow]warning:[/yellow] tau sits at its search bound: the appraiser's "
                      f"p_plus barely tracks the labels (Pearson {fit.get('pearson_raw_vs_label')}); "
                      "the calibrated evidence is close to uninformative")
    if fit.get("stored_at"):
        console.print(f"fit stored: [bold]{fit['stored_at']}[/bold]")
    console.print(f"results: [bold]{path}[/bold]")


_BACKEND = "hf | vllm | openai | auto."
_DEFAULT_CONFIG = "a path or a shipped name: default, every field at its default"


def _impl_calibrate() -> Impl:
    from chorus.simulate.belief.calibrate_run import load_calibrate_config, plan_engines, run_calibrate
    return Impl(load=load_calibrate_config, run=run_calibrate, check=plan_engines)


register(Verb(
    "belief", "calibrate", impl=_impl_calibrate,
    help="Fit the appraiser temperature tau for a model on a topic's labelled utterances.",
    config_help=f"Calibrate config ({_DEFAULT_CONFIG}).", default_config="default", configs="chorus.simulate.belief.config:CONFIGS_DIR/calibrate/*.yaml",
    show=_show_calibrate, announce=_announce_calibrate,
    label=lambda cfg: f"{cfg.model.profile}: appraising the labelled set", unit="appraisals", plots=False,
    out=Option("out", "--out", Optional[Path], None, "Run directory for the scores and plot.", "run:out"),
    options=(Option("model", "--model -m", str, DEFAULT_PROFILE, "Model profile.", "config:model.profile"),
             Option("backend", "--backend", str, "auto", _BACKEND, "config:model.backend"),
             Option("topic", "--topic", Optional[str], None, "Topic with a labelled set (default: transit_priority, "
                    "or the --labels file's topic).", "config:topic"),
             Option("seed", "--seed", int, 0, "Split and request seed.", "config:seed"),
             Option("no_store", "--no-store", bool, False, "Do not store the fit for reuse.", "config:store",
                    negate=True),
             Option("labels", "--labels", Optional[Path], None, "A filled-in labelset CSV (chorus belief labelset) "
                    "instead of the topic's shipped set.", "config:labels"),
             Option("skip_unlabelled", "--skip-unlabelled", bool, False, "With --labels: leave rows without a label "
                    "out (counted) instead of refusing.", "config:skip_unlabelled"))))
add_verbs(app, "belief")


def _show_labelset(console, path: Path, s: dict) -> None:
    console.print(f"{s['rows']} utterances ({s['drawn']} drawn: {s['duplicates']} duplicates and {s['failed']} "
                  f"empty left out; {s['model_calls_computed']} model calls computed, the rest from the store)")
    if s["short_bins"]:
        console.print(f"[yellow]warning:[/yellow] bins {s['short_bins']} have fewer than {s['per_bin_wanted']} "
                      f"distinct utterances after {s['max_draws']} draws each (raise --max-draws or --temperature)")
    f = s["files"]
    console.print(f"to label: [bold]{f['csv']}[/bold] (column label, 0..1; read {f['instructions']}); "
                  f"the bins, kept from the labeller: {f['key']}")
    console.print(f"then: chorus belief calibrate --model {s['model']} --labels {f['csv']}")
    console.print(f"results: [bold]{path}[/bold]")


def _impl_labelset() -> Impl:
    from chorus.simulate.belief.labelset import load_labelset_config, plan_engines, run_labelset
    return Impl(load=load_labelset_config, run=run_labelset, check=plan_engines)


# labelset's --out is the CSV to label (as before the verb registry); the run directory keeps its
# own option, --run-dir, in place of the shared --out
register(Verb(
    "belief", "labelset", impl=_impl_labelset,
    help="Draw a calibration set from a model's own generations at each stance bin and write "
                               "it out for a\nperson to label (then: chorus belief calibrate --labels FILE.csv).",
    config_help=f"Labelset config ({_DEFAULT_CONFIG}).", default_config="default", configs="chorus.simulate.belief.config:CONFIGS_DIR/labelset/*.yaml",
    show=_show_labelset,
    label=lambda cfg: f"{cfg.model.profile}: drawing {cfg.per_bin} utterances per stance bin", unit="utterances",
    plots=False,
    out=Option("run_dir", "--run-dir", Optional[Path], None, "Run directory (default FILE.run/ beside the CSV: the "
               "same command again resumes).", "run:run_dir"),
    options=(Option("csv", "--out", Path, ..., "The CSV to label (FILE.key.csv, FILE.instructions.txt and the run "
                    "directory FILE.run/ are written beside it).", "run:out"),
             Option("model", "--model -m", str, DEFAULT_PROFILE, "Model profile whose generator writes.",
                    "config:model.profile"),
             Option("backend", "--backend", str, "auto", _BACKEND, "config:model.backend"),
             Option("topic", "--topic", str, "transit_priority", "Topic.", "config:topic"),
             Option("per_bin", "--per-bin", int, 10, "Distinct utterances per stance bin (nine bins).", "config:per_bin"),
             Option("seed", "--seed", int, 0, "Request seeds and the row shuffle.", "config:seed"),
             Option("max_draws", "--max-draws", Optional[int], None, "Cap on draws per bin when duplicates or empty "
                    "comments need top-ups (default: a multiple of --per-bin).", "config:max_draws"),
             Option("max_tokens", "--max-tokens", Optional[int], None, "Generator max tokens (default: the belief "
                    "runs' generator setting).", "config:generator.max_tokens"),
             Option("temperature", "--temperature", Optional[float], None, "Generator temperature (default: the "
                    "belief runs' generator setting).", "config:generator.temperature"))))
add_verbs(app, "belief")


def _print_cross(console, path: Path, summary: dict) -> None:
    from rich.table import Table

    from chorus.simulate.belief.cross import summary_rows
    t = Table(title=f"{summary.get('experiment')} ({summary.get('mode')}): channel bias = mu + rendering + "
                    f"reading ({'anchor ' + summary['anchor'] if summary.get('anchor') else 'sum-to-zero'})")
    for c in ("model", "rendering part", "reading part"):
        t.add_column(c)
    for row in summary_rows(summary):
        t.add_row(*row)
    console.print(t)
    h, cost = summary.get("headline", {}), summary.get("cost") or {}
    rms = h.get("bias_interaction_rms")
    console.print(f"{h.get('utterances')} utterances x {h.get('models')} appraisers: "
                  f"{cost.get('appraiser_calls_total')} appraiser calls ({cost.get('retries')} retries); "
                  f"{cost.get('computed_total')} model calls computed (generation included), the rest read "
                  f"from the store; failure rate "
                  f"{h.get('appraisal_failure_rate')}; interaction rms {'-' if rms is None else f'{rms:.3g}'}")
    console.print(f"results: [bold]{path}[/bold] (summary.json, tables/*.parquet, plots/cross_*.png)")


def _impl_cross() -> Impl:
    from chorus.simulate.belief.cross import plan_engines, run_cross
    from chorus.simulate.belief.cross_config import load_cross_config
    return Impl(load=load_cross_config, run=run_cross, check=plan_engines)


register(Verb(
    "belief", "cross", impl=_impl_cross,
    help="Cross-appraisal: every model's appraiser reads every model's utterances; each channel's "
                            "bias\nsplit into a rendering (generator) and a reading (appraiser) part.",
    config_help=f"Cross-appraisal config ({_DEFAULT_CONFIG}).", default_config="default", configs="chorus.simulate.belief.config:CONFIGS_DIR/cross/*.yaml",
    show=_print_cross,
    label=lambda cfg: f"cross-appraisal ({cfg.mode}, {len(cfg.panel())} models)", unit="calls",
    out=Option("out", "--out", Optional[Path], None, "Run directory (default runs/belief/cross-TIME).", "run:out"),
    set_help="Override a field of the cross config: --set max_utterances=200 --set analysis.anchor=MODEL.",
    options=(Option("model", "--model -m", Optional[List[str]], None, "A model of the panel (repeat; --synthetic "
                    "without --model: synth-a, synth-b, synth-c).", "config:models"),
             Option("run_", "--run", Optional[List[Path]], None, "An LLM-mode belief run whose utterances its model "
                    "contributes (repeat; no regeneration).", "config:runs"),
             Option("synthetic", "--synthetic", bool, False, "The model-free channel with known biases.",
                    "config:mode", const="synthetic"),
             Option("backend", "--backend", str, "auto", _BACKEND, "config:backend"))))
add_verbs(app, "belief")


@app.command()
def topics() -> None:
    """List the shipped topics (single-concept, then multi-concept)."""
    from chorus.simulate.belief.topics import list_multi_topics, list_topics, load_multi_topic, load_topic
    for t in list_topics():
        tp = load_topic(t)
        typer.echo(f"{tp.id}: {tp.title} (a+ {tp.a_plus_short!r}, a- {tp.a_minus_short!r})")
    for t in list_multi_topics():
        mt = load_multi_topic(t)
        parts = ", ".join(f"{c.id} (K={len(c.stances)})" for c in mt.concepts)
        typer.echo(f"{mt.id} [multi, `chorus belief multi`]: {mt.title}: {parts}; {len(mt.couplings)} couplings")


correct_app = typer.Typer(no_args_is_help=True, add_completion=False,
                          help="Directional channel correction: fit a monotone map e -> s from a run's (s, e) pairs.")
app.add_typer(correct_app, name="correct")


def _show_fit(console, path: Path, rec: dict) -> None:
    console.print(f"{rec['model']} on {rec['topic']}: chosen [bold]{rec['family']}[/bold] from n = {rec['n_events']} "
                  f"(s, e) pairs ({rec['n_dropped']} failed appraisals left out); {rec['folds']}-fold held-out:")
    for k, v in rec["candidates"].items():
        console.print(f"  {k:13s} diagonal MSE {v['heldout_diagonal_mse']:.3g}   "
                      f"MSE of g(e) vs s {v['heldout_mse']:.3g}")
    if not rec["informative"]:
        console.print("[yellow]warning:[/yellow] the fitted transfer curve barely rises over the calibration "
                      "range: the channel carries almost no stance signal and its inverse is arbitrary")
    for p in rec["written"]:
        console.print(f"written: [bold]{p}[/bold]")


def _impl_correction_fit() -> Impl:
    from chorus.simulate.belief.correction import check_fit, fit, load_fit_config
    return Impl(load=load_fit_config, run=fit, check=check_fit)


# correct fit reads and writes a stored run: RUN_DIR in place of CONFIG, no run directory of its own
# (no_out: the fit is written into RUN_DIR and, with --store, the store), no progress bar (no model)
register(Verb(
    "belief correct", "fit", impl=_impl_correction_fit,
    help="Fit a channel correction g: e -> s from a run's (s, e) pairs; apply it in a "
                                  "later run with\n--set channel_correction=stored (or =PATH).",
    config_help="", default_config="default", configs="chorus.simulate.belief.config:CONFIGS_DIR/correct/*.yaml",
    show=_show_fit, no_out=True, bar=False,
    argument=Option("run_dir", "RUN_DIR", Path, ..., "A belief run directory (its logged (s, e) pairs).", "config:run"),
    plots_help="Skip the figure of the fit.",
    set_help="Override a field of the fit's config: --set n_folds=10 (YAML values; repeatable).",
    options=(Option("model", "--model -m", Optional[str], None, "Store under this model/channel name (default: the "
                    "run's model, or its synthetic oracle channel).", "config:model"),
             Option("topic", "--topic", Optional[str], None, "Topic (default: the run's only topic).", "config:topic"),
             Option("min_events", "--min-events", int, 50, "Refuse fewer (s, e) pairs than this.", "config:min_events",
                    min=4),
             Option("seed", "--seed", int, 0, "Seed of the K-fold split.", "config:seed"),
             Option("store", "--store/--no-store", bool, True, "Store beside the temperature fit (channel_correction: "
                    "stored); RUN_DIR/correction.json is always written.", "config:store"))))
add_verbs(correct_app, "belief correct")


add_analyses(app, "belief", standing_text)   # models (simulate/belief/analyses/)


