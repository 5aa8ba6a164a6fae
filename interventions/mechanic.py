"""What one internals verb is to the shared runner (``chorus.interventions.internals.experiment``):
``Mechanic``, and ``bootstrapped``, the summary step the bootstrapped verbs share. Each verb's
module defines its own ``MECHANIC`` beside its mechanics; this module imports none of them."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chorus.core.runs import RunDir


@dataclass(frozen=True)
class Mechanic:
    """One internals verb. ``measure(cfg, run, eng, items, pairs, P, progress, info)`` writes its
    tables and fills ``info`` (RUN/<verb>_info.json); ``summarize(cfg, run, info, table, summary,
    make_plots)`` adds its numbers and figures to the summary from the run directory alone;
    ``precheck(cfg, eng)`` refuses what this model cannot do before any generation; ``own_run``: a
    verb with a pipeline of its own (concepts reads debate and reflection contexts, not pairs)."""
    measure: Callable[..., None] | None
    summarize: Callable[..., None]
    precheck: Callable[[Any, Any], Any] = lambda cfg, eng: None  # cfg: an InternalsConfig (Any: no upward import)
    own_run: Callable[..., tuple[RunDir, dict[str, Any]]] | None = None


def bootstrapped(summarize: Callable[..., dict], *figures: tuple[str, Callable, str]) -> Callable[..., None]:
    """A verb's summary from its table with the run's bootstrap settings, and a figure per
    ``(summary key, plot, name)`` where the summary has that key."""
    def summarize_verb(cfg, run, info, t, summary, make_plots) -> None:
        a = cfg.analysis
        summary.update(summarize(t, n_boot=a.n_boot, seed=cfg.seed, ci=a.ci))
        for key, plot, name in figures:
            if make_plots and summary.get(key):
                plot(summary, run.plot_path(name))
    return summarize_verb
