"""``chorus debate`` (bench | run | report | judge | bda | belief); run and report are built from the verb registry (``chorus.core.verbs``). ``chorus influence`` is ``chorus.interventions.cli``. Heavy
imports stay inside the commands so ``chorus --help`` stays fast."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from chorus.core.analyses import readers_in
from chorus.core.cliutil import add_verbs, model_option, parse_overrides, plots_option, renamed_option
from chorus.core.cliutil import fail as _fail
from chorus.core.headline import declare as declare_headline
from chorus.simulate.debate.headline import headline
from chorus.core.verbs import Impl, Option, Verb, register
from chorus.serving.profiles import DEFAULT_PROFILE
from chorus.serving.standing import print_headline, standing
from chorus.core.config import ConfigError, InputError
from chorus.core.runs import check_output

debate_app = typer.Typer(no_args_is_help=True, add_completion=False,
                         help="Multi-agent debate vs matched reflection: bench, run, report.")



def _fmt(v) -> str:
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.3f}"
    return str(v)


def _print_debate(console, path: Path, s: dict) -> None:
    from rich.table import Table
    t = Table(title=f"{s.get('experiment')}: {s.get('n_questions')} questions, {s.get('agents')} agents, "
                    f"{s.get('rounds')} rounds ({s.get('model')})")
    keys = ["parse_rate", "n_truncated", "n_scored", "acc_initial_majority", "acc_final_majority",
            "wrong_unanimity", "n_eff_initial", "n_eff_final", "lockin_initial_plurality", "n_lockin_groups"]
    conds = list(s.get("conditions", {}))
    t.add_column("metric")
    for c in conds:
        t.add_column(c)
    for k in keys:
        t.add_row(k, *[_fmt(s["conditions"][c].get(k)) for c in conds])
    console.print(t)
    for c, j in (s.get("judge") or {}).get("conditions", {}).items():  # after the frozen judge pass (judged.py)
        m = j.get("metrics_after", {})
        console.print(f"judge pass, {c}: parse rate {_fmt(j['parse_rate_before'])} -> {_fmt(j['parse_rate_after'])} "
                      f"({j['n_judged']} turns mapped); acc_final_majority {_fmt(m.get('acc_final_majority'))}, "
                      f"wrong_unanimity {_fmt(m.get('wrong_unanimity'))} after it")
    for c, dims in ((s.get("by_frame") or {}).get("stakes") or {}).items():  # constructed scenarios by stakes level
        console.print(f"stance change rate by stakes, {c}: " + "; ".join(
            f"{d} low {_fmt(v['low']['change_rate'])} (n={v['low']['n_steps']}) -> high "
            f"{_fmt(v['high']['change_rate'])} (n={v['high']['n_steps']})" for d, v in dims.items()))
    nm = s.get("numeric")  # numeric items: their own rows (simulate/debate/numeric.py), apart from the above
    if nm:
        console.print(f"numeric ({nm['n_questions']} questions, {nm['n_unreadable']} of {nm['n_replies']} replies "
                      f"unreadable): " + "; ".join(
                          f"{c}: accuracy {_fmt(m['accuracy_by_round'].get(max(m['accuracy_by_round'])))}, agreement "
                          f"{_fmt(m['agreement_by_round'].get(max(m['agreement_by_round'])))} at the final round"
                          for c, m in nm["conditions"].items()))
    v = s.get("vote")  # the compute-matched vote arm (simulate/debate/voting.py)
    if v:
        tok = v["tokens_per_question"]
        console.print(f"vote arm: {_fmt(v['samples_per_question']['mean'])} samples and {_fmt(tok['vote']['mean'])} "
                      f"tokens per question (debate {_fmt(tok['debate']['mean'])}), "
                      f"parse rate {_fmt(v['parse_rate'])}, "
                      f"cap hits {v['n_cap_hits']}; on {v.get('n_paired', 0)} common questions: " + "; ".join(
                          f"{a} acc {_fmt(m['accuracy']['estimate'])}, wrong unanimity "
                          f"{_fmt(m['wrong_unanimity']['estimate'])}" for a, m in (v.get("arms") or {}).items()))
    for d, r, b in readers_in(path):  # analyses made inside the run (debate bda|belief, influence counterfactual)
        console.print(r.line(d.name, b))
    ex = s.get("exclusions", {})
    console.print(f"exclusions: {ex.get('n', 0)} {ex.get('by_reason', {})}; parse rate {_fmt(s.get('parse_rate'))}, "
                  f"truncated {s.get('n_truncated')}")
    # the lead comparison last, where the terminal leaves it, and where its numbers come from (a judge
    # pass's judge.json names the model behind the 'after' numbers)
    print_headline(console, "debate", path, s)
    console.print(f"results: [bold]{path}[/bold] (summary.json, tables/*.parquet, plots/*.png)")


@debate_app.command("bench")
def bench_cmd(out: Path = typer.Option(Path("runs/bench/mad_bench.jsonl"), "--out", help="Output JSONL."),
              data: Optional[Path] = typer.Option(None, "--data", help="Data folder replacing the evaluation sets shipped with chorus (default: the shipped sets)."),
              seed: int = typer.Option(0, "--seed", help="Selection and order seed."),
              count: Optional[List[str]] = typer.Option(None, "--count", help="SUBDOMAIN=N (N or 'all')."),
              scenario_frames: str = typer.Option("default", "--scenario-frames",
                                                  help="Frames of the constructed value scenarios: default "
                                                       "(base / personal / public) or stakes (low / high quantity, "
                                                       "personal, scrutiny, reversibility)."),
              ) -> None:
    """Build a MAD-Bench-style JSONL (+ manifest) from the evaluation sets shipped with chorus (or --data)."""
    import json

    from chorus.simulate.debate.questions import bench_warnings, build_bench, write_bench
    try:
        check_output(out)   # never over (or into) a run's record
        check_output(Path(str(out) + ".manifest.json"))
        counts = {}
        for c in count or []:
            k, _, v = c.partition("=")
            if not (v == "all" or v.isdigit()):
                raise InputError(f"--count {c!r}: expected SUBDOMAIN=N (a whole number) or SUBDOMAIN=all")
            counts[k] = None if v == "all" else int(v)
        items, manifest = build_bench(data, seed=seed, counts=counts, scenario_frames=scenario_frames)
    except InputError as err:
        _fail(err)
    for w in bench_warnings(manifest):   # a partial source is legitimate, but said and counted
        typer.echo(f"warning: {w}", err=True)
    manifest["output_sha256"] = write_bench(items, out)
    Path(str(out) + ".manifest.json").write_text(json.dumps(manifest, indent=2))
    typer.echo(f"{len(items)} questions ({manifest['n_labelled']} labelled) -> {out}")
    for k, v in sorted(manifest["counts"].items()):
        typer.echo(f"  {k}: {v}")


declare_headline("debate", headline)   # the lead comparison its report, console and the demo show first


def _impl_debate_run() -> Impl:
    from chorus.simulate.debate.config import DebateConfig, load
    from chorus.simulate.debate.experiment import check_run, report, run_debate
    return Impl(load=lambda config, overrides: load(config, DebateConfig, overrides),
                run=run_debate, check=check_run, report=report)


register(Verb(
    "debate", "run", impl=_impl_debate_run, recomputes=True,
    help="Run debate and the matched reflection control in lockstep; write tables, summary, plots.",
    config_help="Debate config (a path or a shipped name, e.g. smoke).",
    recompute_alias="report", show=_print_debate, unit="turns", model="model.profile",
    configs="chorus.simulate.debate.config:CONFIGS_DIR/*.yaml"))
add_verbs(debate_app, "debate")


@debate_app.command()
def judge(run_dir: Path = typer.Argument(..., help="A debate run directory."),
          model: Optional[str] = model_option("The judge: a profile, a model folder or a Hugging Face id from the "
                                              f"local cache (default {DEFAULT_PROFILE})."),
          backend: str = typer.Option("auto", "--backend", help="Engine backend: auto, hf, vllm, openai."),
          max_tokens: int = typer.Option(16, "--max-tokens", help="New-token cap of a judge reply."),
          plots: bool = plots_option(),
          judge_old: Optional[str] = typer.Option(None, "--judge", hidden=True)) -> None:
    """The frozen judge pass (BDA paper D.3): turns no parser reads -> one judge at temperature 0 ->
    tables/judge_ledger.parquet, judge.json, and summary.json with parse rates before and after."""
    from rich.console import Console

    from chorus.simulate.debate.experiment import report as _report
    from chorus.simulate.debate.judged import debate_judge
    judge_profile = renamed_option(judge_old, "--judge", "-m/--model", model) or DEFAULT_PROFILE
    try:
        info = debate_judge(run_dir, profile=judge_profile, backend=backend, max_tokens=max_tokens,
                            rerender=False)  # the judge post-processes; the whole report is re-rendered here
        summary = _report(run_dir, make_plots=plots)
    except (InputError, FileNotFoundError) as err:
        _fail(err)
    _print_debate(Console(), run_dir, summary)
    typer.echo(f"judge {info['judge_profile']} (prompt {info['prompt_name']} {info['prompt_sha256'][:12]}): "
               f"{info['counts']}; ledger {run_dir}/tables/judge_ledger.parquet")


@debate_app.command()
def bda(run_dir: Path = typer.Argument(..., help="A debate run directory."),
        condition: str = typer.Option("debate", "--condition", help="Which condition's turns become traces: debate or reflection."),
        config: str = typer.Option("run_debate", "--config",
                                   help="An aggregate run config (a path or a shipped name; traces are set from the run)."),
        sets: Optional[List[str]] = typer.Option(None, "--set", help="Override a config field: key=value (repeatable)."),
        out: Optional[Path] = typer.Option(None, "--out", help="Output folder (default RUN/bda-CONDITION)."),
        plots: bool = plots_option()) -> None:
    """BDA over a debate's agents: turns -> typed moves (simulate/debate/bda.py) -> one aggregate run per
    candidate set (nested CV of every method, bootstrap against the debate's own final majority)."""
    from rich.console import Console
    from rich.table import Table

    from chorus.simulate.debate.bda import run_bda
    try:
        path, s = run_bda(run_dir, condition=condition, config=config, overrides=parse_overrides(sets),
                          out=out, make_plots=plots)
    except (InputError, FileNotFoundError) as err:
        _fail(err)
    console = Console()
    console.print(f"{s['n_traces']} traces from {s['n_questions']} questions ({s['condition']}); left out "
                  f"{s['left_out']}; unparsed turns {s['n_unparsed_turns']}, turns without a round-0 proposal "
                  f"{s['n_turns_without_round_0']}; moves {s['moves']}")
    for name, g in s["groups"].items():
        if "metrics" not in g:
            console.print(f"[yellow]{name}: {g['n_traces']} questions, skipped: {g['skipped']}[/yellow]")
            continue
        t = Table(title=f"{name}: {g['n_traces']} questions, {g['n_agents']} agents")
        for col in ("method", "accuracy", "brier", "ece_ew"):
            t.add_column(col)
        for m, v in g["metrics"].items():
            t.add_row(m, *(_fmt(v[k]) for k in ("accuracy", "brier", "ece_ew")))
        console.print(t)
    d = s.get("debate") or {}
    if d:
        console.print(f"the debate's own summary (all its labelled questions): initial majority "
                      f"{_fmt(d.get('acc_initial_majority'))}, final majority {_fmt(d.get('acc_final_majority'))}, "
                      f"wrong unanimity {_fmt(d.get('wrong_unanimity'))}")
    console.print(f"numbers from: {standing([_run_model(run_dir)]).text}", highlight=False)
    console.print(f"results: [bold]{path}[/bold] (summary.json, mapping.json, traces/, one aggregate run per group)")


def _show_belief(console, path: Path, s: dict) -> None:
    from rich.table import Table

    from chorus.core.stats import interval_text
    c = s["counts"]
    console.print(f"{c['stance_questions']} of {c['questions']} questions have a stance axis (left out {c['left_out']}); "
                  f"{c['heard_turns']} heard turns ({c['unparsed_turns']} turns unparsed, {c['no_evidence']} without "
                  f"evidence {c['appraisal_errors'] or ''}); {c['observations']} readings, {c['retained']} well conditioned")
    t = Table(title=f"stubbornness of {s.get('model') or 'the agents'} in debate (reading {s['reading']}, "
                    f"appraiser {s['appraiser']}, gamma {s['gamma']})")
    for col in ("agent", "kappa sequential [CI]", "kappa averaged [CI]", "fit kappa, gamma (seq / avg)", "prefers",
                "round 1", "placebo", "drift deb / refl"):
        t.add_column(col)

    def ci(r, k):
        return f"{_fmt(r.get(k))} " + interval_text(r.get(k + "_lo"), r.get(k + "_hi"), ci=s.get("ci", 0.95),
                                                    n_units=r.get(k + "_n_units"), resampled=r.get(k + "_resampled"),
                                                    refused=r.get(k + "_ci_refused"))
    for r in s["agents"]:
        t.add_row(r["agent"], ci(r, "kappa"), ci(r, "kappa_avg"),
                  f"{_fmt(r.get('kappa_fit'))}, {_fmt(r.get('gamma_fit'))} / {_fmt(r.get('kappa_fit_avg'))}, "
                  f"{_fmt(r.get('gamma_fit_avg'))}", f"{r.get('prefer')} ({_fmt(r.get('prefer_share'))})",
                  _fmt(r.get("kappa_round1")), _fmt(r.get("kappa_placebo")),
                  f"{_fmt(r.get('drift_debate'))} / {_fmt(r.get('drift_reflection'))}")
    console.print(t)
    c = s.get("readings_compared") or {}
    if c:
        console.print(f"the data prefer the {c['prefer']} reading: log-likelihood ratio (sequential over averaged) "
                      f"{_fmt(c.get('loglik_seq_vs_avg'))} summed over agents, agents {c.get('agents_preferring')} "
                      f"({c['criterion']})")
    a = s["audit"]
    const = " (the appraiser returned one value for every turn: undefined)" if a.get("e_distinct") == 1 else ""
    console.print(f"channel audit: Pearson(s, e) {_fmt(a['pearson_s_e'])} over {a['n']} turns{const}; reading vs stated answer "
                  f"r {_fmt(a['reading_stated']['pearson'])} (n {a['reading_stated']['n']})")
    console.print(f"numbers from: {standing([s.get('model'), s.get('appraiser')]).text}", highlight=False)
    console.print(f"results: [bold]{path}[/bold] (summary.json, tables/agents.parquet, tables/observations.parquet, plots/belief.png)")


def _impl_debate_belief() -> Impl:
    from chorus.simulate.debate.config import load_belief_read_config
    from chorus.simulate.debate.stubbornness import plan_belief, run_belief_verb
    return Impl(load=load_belief_read_config, run=run_belief_verb, check=plan_belief)


# over a stored debate: RUN_DIR in place of CONFIG (into the config's run); the config is --config where
# given, else the shipped default (the loader's, default_config None), with --set over it; no progress bar
register(Verb(
    "debate", "belief",
    impl=_impl_debate_belief,
    help="The belief layer over a debate (simulate/debate/stubbornness.py): forced-choice readings of every agent,"
         "\nthe appraiser's e of every heard turn -> each agent's kappa (closed form and a joint kappa-gamma fit, with"
         "\nfamily-bootstrap intervals) beside the reflection placebo and drift, and the channel audit.",
    config_help="", show=_show_belief, bar=False, configs="chorus.simulate.debate.config:CONFIGS_DIR/belief/*.yaml",
    argument=Option("run_dir", "RUN_DIR", Path, ..., "A debate run directory.", "config:run"),
    out=Option("out", "--out", Optional[Path], None, "Output run directory (default RUN/belief).", "run:out"),
    set_help="Override a config field: key=value (repeatable).",
    options=(Option("config", "--config", Optional[Path], None, "A belief-reading config (YAML; default: the defaults).",
                    "config"),)))
add_verbs(debate_app, "debate")


def _run_model(run_dir: Path):
    import json
    p = Path(run_dir) / "summary.json"
    return json.loads(p.read_text()).get("model") if p.is_file() else None
