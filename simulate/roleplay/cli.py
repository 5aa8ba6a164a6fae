"""``chorus roleplay`` (run | recompute | ...) and ``chorus sft`` (train): DEBATE-style role-play groups,
their human-alignment metrics and the SFT comparison. Heavy imports stay inside the
commands so ``chorus --help`` stays fast."""
from __future__ import annotations

from pathlib import Path
from typing import Optional
import typer

import chorus.simulate.roleplay.analyses  # noqa: F401  (registers stats and probes)
from chorus.core.analyses import get_analysis
from chorus.core.cliutil import (add_analyses, add_verbs, fail, model_option, plots_option, renamed_option,
                                 show_analysis)
from chorus.core.config import bad_input_types
from chorus.core.headline import declare as declare_headline
from chorus.simulate.roleplay.headline import headline
from chorus.core.verbs import Impl, Verb, register
from chorus.serving.standing import standing_text

roleplay_app = typer.Typer(no_args_is_help=True, add_completion=False,
                           help="DEBATE-style role-play groups: run both setups, evaluate against the humans.")
sft_app = typer.Typer(no_args_is_help=True, add_completion=False,
                      help="Next-message SFT with TRL; the trained model becomes a serving profile.")


def _fmt(v) -> str:
    if isinstance(v, dict) and "mean" in v:
        m, lo, hi = v["mean"], v.get("lo"), v.get("hi")
        if m != m:
            return "nan"
        if not (lo == lo and hi == hi and lo is not None):
            return f"{m:.2f}"
        from chorus.core.stats import record_level   # the interval names its level (issue 51)
        level, refused = record_level({**v, "resampled": None} if v.get("resampled") in (None, "unit") else v,
                                      lo="lo", hi="hi")
        return f"{m:.2f} " + (f"no interval ({level})" if refused else f"[{lo:.2f}, {hi:.2f}] ({level})")
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
    from chorus.serving.standing import print_headline
    print_headline(console, "roleplay", path, s)   # the lead comparison, and where its numbers come from
    console.print(f"results: [bold]{path}[/bold] (summary.json, tables/*.parquet, plots/*.png)")


declare_headline("roleplay", headline)   # the lead comparison its report, console and the demo show first


def _impl_roleplay_run() -> Impl:
    from chorus.simulate.roleplay.config import RoleplayConfig, load
    from chorus.simulate.roleplay.experiment import plan_engines, report, run_roleplay
    return Impl(load=lambda config, overrides: load(config, RoleplayConfig, overrides),
                run=run_roleplay, check=plan_engines, report=report)


register(Verb(
    "roleplay", "run", impl=_impl_roleplay_run, recomputes=True,
    help="Run full dynamics and next-message prediction for every model; classify; evaluate.",
    config_help="Roleplay config (a path or a shipped name: default, smoke, topic).",
    recompute_alias="eval", show=print_summary, unit="messages", model="models.*.profile",
    configs="chorus.simulate.roleplay.config:CONFIGS_DIR/roleplay/*.yaml"))
add_verbs(roleplay_app, "roleplay")


def _show_sft(con, path: Path, s: dict) -> None:
    con.print(f"{s['n_examples']} examples ({s['filtered']}), {s['global_steps']} steps, loss "
              f"{_fmt(s['first_loss'])} -> {_fmt(s['last_loss'])}, {_fmt(s['steps_per_second'])} steps/s")
    con.print(f"model folder (use it as a profile: -m PATH or models[].profile): [bold]{s['model_path']}[/bold]")
    if s.get("registered_as"):
        import yaml
        name = yaml.safe_load((Path(path) / "config.yaml").read_text()).get("register_as")
        con.print(f"registered in {s['registered_as']} as {name}")
    elif s.get("register"):   # models.yaml was not edited (chorus.simulate.roleplay.sft.register_profile)
        from rich.markup import escape
        r = s["register"]
        con.print(f"[yellow]not registered: {escape(r['why'])}; to use the model by name, add these lines to "
                  f"{escape(r['file'])}:[/yellow]\n{escape(r['lines'])}", highlight=False, soft_wrap=True)
    if s.get("compare_run"):
        from chorus.core.runs import RunDir
        print_summary(con, Path(s["compare_run"]), RunDir(s["compare_run"]).summary())
    con.print(f"results: [bold]{path}[/bold] (summary.json, tables/train_log.parquet, model/)")


def _impl_sft_train() -> Impl:
    from chorus.simulate.roleplay.config import SftConfig, load
    from chorus.simulate.roleplay.sft import check_sft, train_sft
    return Impl(load=lambda config, overrides: load(config, SftConfig, overrides, part='sft'),
                run=train_sft, check=check_sft)


register(Verb(
    "sft", "train", impl=_impl_sft_train,
    help="Build the next-message SFT set, train with TRL (LoRA optional), save a loadable model "
                         "folder; with ``compare:`` also run base vs SFT vs human.",
    config_help="SFT config (a path or a shipped name: default, lora, smoke).",
    show=_show_sft,
    unit="steps", plots=False, model="base.profile",
    configs="chorus.simulate.roleplay.config:CONFIGS_DIR/sft/*.yaml"))
add_verbs(sft_app, "sft")


def annotators_command(run: Path = typer.Argument(..., metavar="RUN", help="A finished roleplay run directory."),
                       model: Optional[list[str]] = model_option(
                           "Another classifier model (a profile, a model folder or a Hugging Face id from the local "
                           "cache); repeat for several."),
                       out: Path = typer.Option(None, "--out", help="Run directory (default runs/roleplay/annotators-TIME): "
                                                                    "config, provenance with the source run's "
                                                                    "fingerprint, tables/, summary.json, annotators.md, "
                                                                    "plots/; sealed (chorus verify)."),
                       plots: bool = plots_option("Write plots/annotators.png (--no-plots: skip it)."),
                       classifier_old: Optional[list[str]] = typer.Option(None, "--classifier", "-c",
                                                                          hidden=True)) -> None:
    # the analysis "roleplay annotators" with its own options: -m/--model, and --classifier renamed
    a = get_analysis("roleplay annotators")
    try:
        classifier = renamed_option(classifier_old or None, "--classifier", "-m/--model", model or None) or []
        result = a.run(a.load({"run": str(run), "model": classifier}), out, plots=plots)
    except (*bad_input_types(), typer.BadParameter) as err:
        fail(err)
    show_analysis(a, result, standing_text)


annotators_command.analysis = get_analysis("roleplay annotators")   # add_analyses: mounted already
roleplay_app.command("annotators", help=annotators_command.analysis.help)(annotators_command)
add_analyses(roleplay_app, "roleplay", standing_text)   # stats, probes (simulate/roleplay/analyses/)


