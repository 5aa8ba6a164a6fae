"""The ``chorus`` command. Each part owns its sub-commands in its own module; this file only
mounts them. Part modules keep heavy imports (torch, vllm) inside functions so that
``chorus --help`` stays fast."""
from __future__ import annotations

import typer

from aggregate.cli import app as aggregate_app
from serving.cli import demo, generate, models_app, serve, store_app
from simulate.belief_cli import app as belief_app
from simulate.council_cli import council_app
from simulate.debate_cli import debate_app, influence_app
from simulate.roleplay_cli import roleplay_app, sft_app

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="chorus: self-hosted models that debate, simulate opinions and deliberate.")
app.add_typer(models_app, name="models", help="Model profiles: list, prepare.")
app.add_typer(store_app, name="store", help="The SQLite call store.")
app.add_typer(belief_app, name="belief", help="Bayesian belief layer (BCA): run, sweep, report.")
app.add_typer(aggregate_app, name="aggregate", help="BDA aggregation over council traces: run, sweep, verify.")
app.add_typer(debate_app, name="debate", help="Multi-agent debate vs matched reflection: bench, run, report.")
app.add_typer(influence_app, name="influence", help="Peer influence: readout, ablate, cues, knockout, patch, probe.")
app.add_typer(council_app, name="council", help="Live LLM councils: typed-move traces, adversaries, LLM baselines.")
app.add_typer(roleplay_app, name="roleplay", help="DEBATE-style role-play groups: run, eval.")
app.add_typer(sft_app, name="sft", help="Next-message SFT with TRL (base vs SFT vs human).")
app.command()(generate)
app.command()(serve)
app.command()(demo)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
