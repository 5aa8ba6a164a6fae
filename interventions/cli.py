"""``chorus influence``: readout | ablate | cues (behaviour: forced-choice readouts, message
ablations, source cues) and knockout | patch | probe | concepts | transfer (inside the model:
attention knockout, residual interchange, probes, concept directions, latent state transfer).
Heavy imports stay inside the commands so ``chorus --help`` stays fast."""
from __future__ import annotations

from pathlib import Path
import typer

from core.cliutil import add_verbs
from core.verbs import Verb, register

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Peer influence: readout, ablate, cues, knockout, patch, probe, concepts, transfer.")

_CFG_HELP = "Influence config (a path or a shipped name, e.g. influence_smoke, internals_smoke)."


def _show_behaviour(console, path: Path, summary: dict) -> None:
    import json
    keep = {k: v for k, v in summary.items() if k not in ("experiment", "verb", "model")}
    console.print_json(json.dumps(keep, default=float))
    console.print(f"results: [bold]{path}[/bold] (summary.json, tables/*.parquet, plots/*.png)")


def _show_internals(console, path: Path, summary: dict) -> None:
    import json

    from serving.profiles import embedded_note
    keep = {k: v for k, v in summary.items() if k not in ("experiment", "verb", "curves", "curve", "layers")}
    console.print_json(json.dumps(keep, default=float))
    sender = summary.get("sender")  # transfer: the sender's model produced the written states
    note = embedded_note([summary.get("model"), sender.get("name") if isinstance(sender, dict) else None])
    if note:
        console.print(f"[yellow]{note}[/yellow]", highlight=False)
    console.print(f"results: [bold]{path}[/bold] (summary.json, tables/*.parquet, plots/*.png)")


# behaviour: the influence config; the debate run's engine reads its own turns (one phase per verb)
for _verb, _help in [
        ("readout", "Forced-choice readouts at fractions f of each receiver's rationale; committed-at-read."),
        ("ablate", "Message ablations: full, answer only, reasoning only, filler, unrelated reasoning."),
        ("cues", "Source cues (record x status) and self- vs other-attribution of the same text.")]:
    register(Verb("influence", _verb, help=_help, config_help=_CFG_HELP,
                  load="interventions.config:load", schema="interventions.config:InfluenceConfig",
                  run="interventions.experiment:run_influence", run_args=(_verb,),
                  check="simulate.debate.experiment:plan_engines", show=_show_behaviour, unit="turns",
                  errors=("serving.profiles:ModelError",)))

# inside the model: the internals config, transformers
_INTERNALS_ERRORS = ("serving.profiles:ModelError", "interventions.families:FamilyError", "interventions.families:LayerError",
                     "interventions.spans:SpanError", "interventions.patching:PatchError",
                     "interventions.probes:ProbeError", "interventions.transfer:TransferError")
for _verb, _help in [
        ("knockout", "Attention knockout of the peer message: all layers, single layers, cumulative; share of the "
                     "effect removed."),
        ("patch", "Residual interchange at the source-cue positions (cue X into cue Y), layer by layer."),
        ("probe", "Logistic probes per layer with held-out AUROC beside the shuffled-label null (90th percentile)."),
        ("transfer", "Latent state transfer: a sender's residual state written into the receiver (controls: "
                     "elsewhere, scrambled)."),
        ("concepts", "Concept directions (lexicon) read while reading peers and at the decision token, by domain, "
                     "debate vs reflection, beside the shuffled-label null.")]:
    register(Verb("influence", _verb, help=_help, config_help=_CFG_HELP, load="interventions.internals.config:load",
                  run="interventions.internals.experiment:run_internals", run_args=(_verb,),
                  check="interventions.internals.experiment:plan_internals", show=_show_internals,
                  unit="readouts", errors=_INTERNALS_ERRORS))

add_verbs(app, "influence")
