"""``chorus belief``: run | sweep | multi (built from the verb registry, ``core.verbs``) | report | calibrate | labelset | cross | correct | models. Heavy imports (numpy-heavy modules,
serving, matplotlib) stay inside the commands so ``chorus --help`` stays fast."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from core.cliutil import add_verbs
from core.cliutil import fail as _fail
from core.cliutil import parse_overrides as _overrides
from core.progress import progress
from core.verbs import Verb, register
from serving.profiles import DEFAULT_PROFILE

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Bayesian belief layer (BCA): run, sweep, report, calibrate.")

_SET_HELP = "Override a config field: --set n_agents=4 --set population.kappa=2 (YAML values)."


def _print_summary(console, path: Path, summary: dict) -> None:
    from rich.table import Table

    from simulate.belief.experiment import headline_rows
    t = Table(title=f"{summary.get('experiment')} ({summary.get('mode')}): headline", show_header=False)
    for k, v in headline_rows(summary):
        t.add_row(k, v)
    console.print(t)
    stats = summary.get("stats") or {}
    if stats:
        console.print(f"{stats.get('runs')} runs, {stats.get('listener_events')} listener events, "
                      f"{stats.get('appraisal_failures')} failed appraisals, "
                      f"simulation {stats.get('wall_s', 0):.2f} s")
    console.print(f"results: [bold]{path}[/bold] (summary.json, tables/*.parquet, plots/*.png)")


for _name, _help, _kw in [
        ("run", "Run one condition (the config without its sweep) for every seed, in lockstep.", {"sweep": False}),
        ("sweep", "Run every condition of the config's sweep grid x seeds, all in lockstep.", {"sweep": True})]:
    register(Verb("belief", _name, help=_help,
                  config_help="Experiment config (a path or a shipped name, e.g. fj" +
                              ("; one with a sweep: section)." if _kw["sweep"] else ")."),
                  load="simulate.belief.config:load_belief_config", source="simulate.belief.config:resolve_config_path",
                  run="simulate.belief.experiment:run_experiment", run_kw=_kw, check="simulate.belief.experiment:plan_engines",
                  show=_print_summary, unit="utterances", errors=("serving.profiles:ModelError",)))
add_verbs(app, "belief")


@app.command()
def report(run_dir: Path = typer.Argument(..., help="A belief run directory."),
           no_plots: bool = typer.Option(False, "--no-plots", help="Skip the figures.")) -> None:
    """Recompute summary.json and plots from a run directory's files alone."""
    from rich.console import Console

    from core.config import ConfigError
    from simulate.belief.cross_config import is_cross_run
    from simulate.belief.experiment import report as _report  # a Beta or a multi-concept run
    if is_cross_run(run_dir):  # a cross-appraisal run (chorus belief cross)
        from simulate.belief.cross import report as _report
    try:
        summary = _report(run_dir, make_plots=not no_plots)
    except (ConfigError, FileNotFoundError) as err:
        _fail(err)
    if summary.get("command") == "cross":
        return _print_cross(Console(), run_dir, summary)
    _print_summary(Console(), run_dir, summary)


register(Verb(
    "belief", "multi", help="Multi-concept identities: a Dirichlet belief per concept (K-way stances), every seed in lockstep.",
    config_help="Multi-concept config (a path or a shipped name, e.g. multi_fj).",
    load="simulate.belief.config:load_multi_config", source="simulate.belief.config:resolve_multi_config_path",
    run="simulate.belief.experiment:run_experiment", check="simulate.belief.experiment:plan_engines", show=_print_summary, unit="utterances",
    errors=("serving.profiles:ModelError",)))
add_verbs(app, "belief")


@app.command()
def calibrate(model: str = typer.Option(DEFAULT_PROFILE, "--model", help="Model profile."),
              backend: str = typer.Option("auto", "--backend", help="hf | vllm | openai | auto."),
              topic: Optional[str] = typer.Option(None, "--topic", help="Topic with a labelled set (default: "
                                                  "transit_priority, or the --labels file's topic)."),
              seed: int = typer.Option(0, "--seed", help="Split and request seed."),
              out: Optional[Path] = typer.Option(None, "--out", help="Run directory for the scores and plot."),
              no_store: bool = typer.Option(False, "--no-store", help="Do not store the fit for reuse."),
              labels: Optional[Path] = typer.Option(None, "--labels", help="A filled-in labelset CSV (chorus "
                                                    "belief labelset) instead of the topic's shipped set."),
              skip_unlabelled: bool = typer.Option(False, "--skip-unlabelled", help="With --labels: leave rows "
                                                   "without a label out (counted) instead of refusing.")) -> None:
    """Fit the appraiser temperature tau for a model on a topic's labelled utterances."""
    from rich.console import Console

    from core.config import ConfigError
    from core.runs import RunDir, run_dir_path
    from simulate.belief import plots
    from simulate.belief.calibration import calibrate as _calibrate
    from simulate.belief.calibration import load_labels
    from simulate.belief.labelset import read_labels_csv
    console = Console()
    labelled = None
    try:
        if labels is None:
            topic = topic or "transit_priority"
            load_labels(topic)
        else:   # a person's labels of a model's own generations (belief-layer paper App. B)
            labelled = read_labels_csv(labels, topic, skip_unlabelled)
            topic = labelled.attrs["topic"]
    except ConfigError as err:
        _fail(err)
    if labelled is not None and labelled.attrs["n_unlabelled"]:
        console.print(f"skipped {labelled.attrs['n_unlabelled']} unlabelled rows of {labels}; "
                      f"fitting on the {len(labelled)} labelled ones")
    out = run_dir_path(out, "belief", f"calibrate-{topic}")
    run = RunDir.create(out, part="belief", seeds={"root": seed}, command="calibrate",
                        model=model, topic=topic, labels_file=str(labels) if labels else None)
    from serving import build_engine
    with console.status(f"loading {model} ({backend})"):
        engine = build_engine({"profile": model, "backend": backend}, store=run.store_path)
    try:
        with console.status("appraising the labelled set"):
            fit, scores = _calibrate(engine, model, topic, seed=seed, store=not no_store, labels=labelled)
    finally:
        engine.close()
    run.write_table("calibration_scores", scores)
    plots.calibration(scores, fit["tau"], run.plot_path("calibration"))
    run.write_summary(fit)
    run.update_provenance(engine=getattr(engine, "identity", None))
    run.finish()
    console.print(f"tau = {fit['tau']:.3f}; held-out ECE {fit['ece_before']:.3f} -> {fit['ece_after']:.3f}, "
                  f"cross-entropy {fit['ce_before']:.3f} -> {fit['ce_after']:.3f} "
                  f"({fit['n_train']} train / {fit['n_val']} val, {fit['n_failed']} failed appraisals)")
    if fit.get("tau_at_bound"):
        console.print("[yellow]warning:[/yellow] tau sits at its search bound: the appraiser's "
                      f"p_plus barely tracks the labels (Pearson {fit.get('pearson_raw_vs_label')}); "
                      "the calibrated evidence is close to uninformative")
    if fit.get("stored_at"):
        console.print(f"fit stored: [bold]{fit['stored_at']}[/bold]")
    console.print(f"results: [bold]{run.path}[/bold]")


@app.command()
def labelset(out: Path = typer.Option(..., "--out", help="The CSV to label (FILE.key.csv, FILE.instructions.txt "
                                      "and the run directory FILE.run/ are written beside it)."),
             model: str = typer.Option(DEFAULT_PROFILE, "--model", help="Model profile whose generator writes."),
             backend: str = typer.Option("auto", "--backend", help="hf | vllm | openai | auto."),
             topic: str = typer.Option("transit_priority", "--topic", help="Topic."),
             per_bin: int = typer.Option(10, "--per-bin", help="Distinct utterances per stance bin (nine bins)."),
             seed: int = typer.Option(0, "--seed", help="Request seeds and the row shuffle."),
             max_draws: Optional[int] = typer.Option(None, "--max-draws", help="Cap on draws per bin when "
                                                     "duplicates or empty comments need top-ups (default: "
                                                     "a multiple of --per-bin)."),
             max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="Generator max tokens "
                                                      "(default: the belief runs' generator setting)."),
             temperature: Optional[float] = typer.Option(None, "--temperature", help="Generator temperature "
                                                         "(default: the belief runs' generator setting)."),
             run_dir: Optional[Path] = typer.Option(None, "--run-dir", help="Run directory (default FILE.run/ "
                                                    "beside the CSV: the same command again resumes).")) -> None:
    """Draw a calibration set from a model's own generations at each stance bin and write it out for a
    person to label (then: chorus belief calibrate --labels FILE.csv)."""
    from rich.console import Console

    from core.config import ConfigError, validate
    from serving import ModelError, StoreError
    from simulate.belief.labelset import LabelsetConfig, run_labelset
    gen = {k: v for k, v in {"max_tokens": max_tokens, "temperature": temperature}.items() if v is not None}
    console = Console()
    try:
        cfg = validate(LabelsetConfig, {"model": {"profile": model, "backend": backend}, "topic": topic,
                                        "per_bin": per_bin, "max_draws": max_draws, "seed": seed,
                                        "generator": gen}, source="chorus belief labelset")
        with console.status(f"{model}: drawing {per_bin} utterances per stance bin"):
            run, s = run_labelset(cfg, out, run_dir)
    except (ConfigError, ModelError, StoreError) as err:
        _fail(err)
    console.print(f"{s['rows']} utterances ({s['drawn']} drawn: {s['duplicates']} duplicates and {s['failed']} "
                  f"empty left out; {s['model_calls_computed']} model calls computed, the rest from the store)")
    if s["short_bins"]:
        console.print(f"[yellow]warning:[/yellow] bins {s['short_bins']} have fewer than {cfg.per_bin} distinct "
                      f"utterances after {cfg.max_draws} draws each (raise --max-draws or --temperature)")
    f = s["files"]
    console.print(f"to label: [bold]{f['csv']}[/bold] (column label, 0..1; read {f['instructions']}); "
                  f"the bins, kept from the labeller: {f['key']}")
    console.print(f"then: chorus belief calibrate --model {model} --labels {f['csv']}")
    console.print(f"results: [bold]{run.path}[/bold]")


def _print_cross(console, path: Path, summary: dict) -> None:
    from rich.table import Table

    from simulate.belief.cross import summary_rows
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


@app.command()
def cross(model: Optional[List[str]] = typer.Option(None, "--model", help="A model of the panel (repeat; "
                                                   "--synthetic without --model: synth-a, synth-b, synth-c)."),
          run_: Optional[List[Path]] = typer.Option(None, "--run", help="An LLM-mode belief run whose utterances "
                                                    "its model contributes (repeat; no regeneration)."),
          out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default runs/belief/cross-TIME)."),
          synthetic: bool = typer.Option(False, "--synthetic", help="The model-free channel with known biases."),
          backend: str = typer.Option("auto", "--backend", help="hf | vllm | openai | auto."),
          set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a field of the cross config: "
                                                   "--set max_utterances=200 --set analysis.anchor=MODEL."),
          no_plots: bool = typer.Option(False, "--no-plots", help="Skip the figures.")) -> None:
    """Cross-appraisal: every model's appraiser reads every model's utterances; each channel's bias
    split into a rendering (generator) and a reading (appraiser) part."""
    from rich.console import Console

    from core.config import ConfigError, set_dotted, validate
    from serving import ModelError, StoreError
    try:
        data = {"mode": "synthetic" if synthetic else "llm", "models": list(model or []),
                "runs": [str(r) for r in run_ or []], "backend": backend}
        for k, v in _overrides(set_).items():
            set_dotted(data, k, v)
        from simulate.belief.cross import CrossConfig, run_cross
        cfg = validate(CrossConfig, data, source="chorus belief cross")
        with progress(f"cross-appraisal ({cfg.mode}, {len(cfg.panel())} models)", "calls") as update:
            run, summary = run_cross(cfg, out, progress=update, make_plots=not no_plots)
    except (ConfigError, ModelError, StoreError) as err:
        _fail(err)
    _print_cross(Console(), run.path, summary)


@app.command()
def topics() -> None:
    """List the shipped topics (single-concept, then multi-concept)."""
    from simulate.belief.topics import list_multi_topics, list_topics, load_multi_topic, load_topic
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


@correct_app.command("fit")
def correct_fit(run_dir: Path = typer.Argument(..., help="A belief run directory (its logged (s, e) pairs)."),
                model: Optional[str] = typer.Option(None, "--model", help="Store under this model/channel name "
                                                    "(default: the run's model, or its synthetic oracle channel)."),
                topic: Optional[str] = typer.Option(None, "--topic", help="Topic (default: the run's only topic)."),
                min_events: int = typer.Option(50, "--min-events", min=4,
                                               help="Refuse fewer (s, e) pairs than this."),
                seed: int = typer.Option(0, "--seed", help="Seed of the K-fold split."),
                store: bool = typer.Option(True, "--store/--no-store", help="Store beside the temperature fit "
                                           "(channel_correction: stored); RUN_DIR/correction.json is always "
                                           "written."),
                no_plots: bool = typer.Option(False, "--no-plots", help="Skip the figure of the fit.")) -> None:
    """Fit a channel correction g: e -> s from a run's (s, e) pairs; apply it in a later run with
    --set channel_correction=stored (or =PATH)."""
    from rich.console import Console

    from core.config import ConfigError
    from simulate.belief.correction import fit_run
    console = Console()
    try:
        rec = fit_run(run_dir, model=model, topic=topic, min_events=min_events, store=store, seed=seed,
                      plot=not no_plots)
    except ConfigError as err:
        _fail(err)
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


@app.command()
def models(runs: List[Path] = typer.Argument(..., help="Belief run directories of one or more models (e.g. each "
                                                        "model's regimes, committed and kappa_recovery sweeps)."),
           out: Optional[Path] = typer.Option(None, "--out", help="Folder for models.json, table2.csv and table3.csv "
                                                                   "(default: print only).")) -> None:
    """The belief-layer paper's Tables 2 and 3 across models: the headline metrics (channel alignment, regimes,
    kappa recovery, probe audit) with one column per model, and each model's recovered kappa per prescribed kappa."""
    from rich.console import Console
    from rich.table import Table

    from core.config import ConfigError
    from core.runs import write_json
    from simulate.belief.models_table import TableError, fmt, models_tables, wide_table3
    try:
        t2, t3, sources = models_tables([str(p) for p in runs])
    except (TableError, ConfigError, FileNotFoundError) as err:
        _fail(err)
    con = Console()
    t = Table(title=f"Table 2 across models ({len(runs)} runs)")
    t.add_column("metric")
    for m in t2.columns:
        t.add_column(str(m))
    for k, row in t2.iterrows():
        t.add_row(str(k), *(fmt(v) for v in row))
    con.print(t)
    w = wide_table3(t3)
    if len(w):
        t = Table(title="Table 3: median recovered kappa per prescribed kappa")
        t.add_column("model")
        for c in w.columns:
            t.add_column(c)
        for m, row in w.iterrows():
            t.add_row(str(m), *(fmt(v) for v in row))
        con.print(t)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        t2.to_csv(out / "table2.csv")
        t3.to_csv(out / "table3.csv", index=False)
        write_json(out / "models.json", {"runs": [str(p) for p in runs], "table2": t2.to_dict(),
                                         "table3": t3.to_dict("records"), "sources": sources})
        con.print(f"results: [bold]{out}[/bold] (models.json, table2.csv, table3.csv)")


@app.command()
def paper(runs: List[Path] = typer.Argument(..., help="Belief run directories: regimes, kappa_recovery, gamma_ablation, "
                                                       "gamma_sweep_oracle, calibrate, channel_biased ... of each model."),
          out: Path = typer.Option(..., "--out", help="Folder for numbers.json, paper.md and figures/.")) -> None:
    """The belief-layer paper's tables and figures in the paper's order, from one numbers file read out of the
    stored runs (no model call); a section without its run names the command that makes it."""
    from core.config import ConfigError
    from simulate.belief.models_table import TableError
    from simulate.belief.paper import PaperError, build_paper
    try:
        p = build_paper(runs, out)
    except (PaperError, TableError, ConfigError, FileNotFoundError) as err:
        _fail(err)
    typer.echo(f"paper: {p}\nnumbers: {out / 'numbers.json'}")
