"""``chorus influence``: readout | ablate | cues (behaviour: forced-choice readouts, message
ablations, source cues), knockout | patch | probe | concepts | transfer (inside the model:
attention knockout, residual interchange, probes, concept directions, latent state transfer) and
counterfactual (a stored debate replayed with one agent's attention to one peer cut).
Heavy imports stay inside the commands so ``chorus --help`` stays fast."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from chorus.core.cliutil import add_verbs
from chorus.core.headline import declare as declare_headline
from chorus.interventions.headline import headline
from chorus.core.verbs import Impl, Option, Verb, register
from chorus.serving.standing import print_headline

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Peer influence: readout, ablate, cues, knockout, patch, probe, concepts, transfer, "
                       "counterfactual.")

_CFG_HELP = "Influence config (a path or a shipped name, e.g. influence_smoke, internals_smoke)."


def _show_behaviour(console, path: Path, summary: dict) -> None:
    import json
    keep = {k: v for k, v in summary.items() if k not in ("experiment", "verb", "model")}
    console.print_json(json.dumps(keep, default=float))
    print_headline(console, "influence", path, summary)   # the lead comparison, and where its numbers come from
    console.print(f"results: [bold]{path}[/bold] (summary.json, tables/*.parquet, plots/*.png)")


def _show_internals(console, path: Path, summary: dict) -> None:
    import json

    keep = {k: v for k, v in summary.items() if k not in ("experiment", "verb", "curves", "curve", "layers")}
    console.print_json(json.dumps(keep, default=float))
    # transfer: the sender's model produced the written states (run_standing reads it from the summary)
    print_headline(console, "influence", path, summary)
    console.print(f"results: [bold]{path}[/bold] (summary.json, tables/*.parquet, plots/*.png)")


def _impl_behaviour() -> Impl:
    from chorus.interventions.config import InfluenceConfig, load
    from chorus.interventions.experiment import run_influence
    from chorus.simulate.debate.experiment import plan_engines
    return Impl(load=lambda config, overrides: load(config, InfluenceConfig, overrides), run=run_influence,
                check=plan_engines)


def _impl_internals() -> Impl:
    from chorus.interventions.internals.config import load
    from chorus.interventions.internals.experiment import plan_internals, run_internals
    return Impl(load=load, run=run_internals, check=plan_internals)


# behaviour: the influence config; the debate run's engine reads its own turns (one phase per verb)
for _verb, _help in [
        ("readout", "Forced-choice readouts at fractions f of each receiver's rationale; committed-at-read."),
        ("ablate", "Message ablations: full, answer only, reasoning only, filler, unrelated reasoning."),
        ("cues", "Source cues (record x status) and self- vs other-attribution of the same text.")]:
    register(Verb("influence", _verb, impl=_impl_behaviour, help=_help, config_help=_CFG_HELP, run_args=(_verb,),
                  show=_show_behaviour, unit="turns", model="model.profile",
                  configs="chorus.interventions.config:CONFIGS_DIR/influence_*.yaml"))

# inside the model: the internals config, transformers
for _verb, _help in [
        ("knockout", "Knockout of the peer message: all layers, single layers, cumulative; share of the effect "
                     "removed (knockout.mixers: attention, and on hybrid models the recurrent route, or both)."),
        ("patch", "Residual interchange at the source-cue positions (cue X into cue Y), layer by layer."),
        ("probe", "Logistic probes per layer with held-out AUROC beside the shuffled-label null (90th percentile)."),
        ("transfer", "Latent state transfer: a sender's residual state written into the receiver (controls: "
                     "elsewhere, scrambled)."),
        ("concepts", "Concept directions (lexicon) read while reading peers and at the decision token, by domain, "
                     "debate vs reflection, beside the shuffled-label null.")]:
    register(Verb("influence", _verb, impl=_impl_internals, help=_help, config_help=_CFG_HELP, run_args=(_verb,),
                  show=_show_internals,
                  unit="readouts", model="model.profile",
                  configs="chorus.interventions.config:CONFIGS_DIR/internals*.yaml"))

add_verbs(app, "influence")


def _show_counterfactual(console, path: Path, s: dict) -> None:
    rep = s["replay_equals_factual"]
    console.print(f"{s['n_questions']} questions; agent {s['receiver']} cut from agent {s['peer']} at round {s['round']} "
                  f"in layers {s['masked_layers'] if s['layers'] != 'all' else 'all'} (queries {s['queries']}); the replay "
                  f"equals the stored debate on {rep['questions']} of {rep['of']}", highlight=False)
    for arm, m in s["arms"].items():
        console.print(f"  {arm:<8} final-majority acc {m['majority_correct_final']:.3f}  unanimous {m['unanimous_final']:.3f}  "
                      f"wrong unanimity {m['wrong_unanimous']:.3f}  receiver took the peer's answer: at the round "
                      f"{m['adopted_at_round']:.3f}, at the end {m['adopted_final']:.3f}", highlight=False)
    console.print(f"changed by the cut (vs replay): final majority {s['changed']['final_majority_cut_vs_replay']}, "
                  f"receiver's final answer {s['changed']['receiver_final_cut_vs_replay']}", highlight=False)
    print_headline(console, "influence", path, s)
    console.print(f"results: [bold]{path}[/bold] (summary.json, tables/turns.parquet, tables/questions.parquet, "
                  f"plots/counterfactual.png); chorus debate recompute {s.get('run_dir', s.get('source_run'))} shows it "
                  f"beside the debate")


# over a stored debate: RUN_DIR in place of CONFIG (into the config's run), the shipped default config
# with the options over it; --layers parsed (all, A-B, 3,4,7) into the config's list
declare_headline("influence", headline)   # the lead comparison its report, console and the demo show first


def _impl_counterfactual() -> Impl:
    from chorus.interventions.counterfactual import load_counterfactual_config, plan_counterfactual, run_counterfactual_verb
    return Impl(load=load_counterfactual_config, run=run_counterfactual_verb, check=plan_counterfactual)


register(Verb(
    "influence", "counterfactual",
    impl=_impl_counterfactual,
    help="What a stored debate would have become had one agent not attended to one peer at one round:\nthat reply "
         "regenerated with the peer's message cut in the chosen layers (same seed), the rest of the\ndebate "
         "continued normally; factual, replay (nothing cut) and cut compared per question.",
    config_help="", default_config="default", configs="chorus.interventions.counterfactual:CONFIGS_DIR/*.yaml",
    show=_show_counterfactual, unit="replies",
    argument=Option("run_dir", "RUN_DIR", Path, ..., "A debate run directory (chorus debate run).", "config:run"),
    out=Option("out", "--out", Optional[Path], None, "output run directory (default RUN/counterfactual-...)", "run:out"),
    set_help="Override a config field: --set n_boot=500 --set ci=0.9 (YAML values; repeatable).",
    options=(Option("receiver", "--receiver", int, 0, "the agent whose attention is cut (0-based)", "config:receiver"),
             Option("peer", "--peer", int, 1, "the peer it does not attend to (0-based)", "config:peer"),
             Option("round_", "--round", int, 1, "the round replayed with the cut (1..rounds)", "config:round"),
             Option("layers", "--layers", str, "all", "all, a band A-B, or a list 3,4,7", "config:layers",
                    parse="chorus.interventions.counterfactual:parse_layers"),
             Option("queries", "--queries", str, "after", "after | decision", "config:queries"),
             Option("route", "--route", str, "nnsight", "nnsight | interface (bitwise equal)", "config:route"),
             Option("max_questions", "--max-questions", Optional[int], None, "the first N questions only",
                    "config:max_questions"))))
add_verbs(app, "influence")


