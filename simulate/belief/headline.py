"""The belief layer's headline (``chorus.core.headline``): kappa recovery, the paper's lead result, i.e.
whether the stubbornness each agent was given (kappa) is read back from what the agents said: the rank
correlation of recovered against prescribed kappa over the levels, the median relative error, the share
of listener events retained; in the language round-trip (LLM mode) the channel alignment (Pearson r of
the stance an utterance was written at and the evidence the appraiser read from it) beside it, since
recovery means nothing through a channel that carries no signal. An undefined value carries the reason
the analysis recorded (``summary["undefined"]``). Regime numbers (DeGroot, FJ, committed minorities)
stay in the summary below."""
from __future__ import annotations

from typing import Any

from chorus.core.headline import Row, row


def headline(summary: dict[str, Any]) -> list[Row]:
    h = summary.get("headline")
    if not isinstance(h, dict) or "kappa_spearman" not in h:
        return []
    why = summary.get("undefined") or {}
    levels = h.get("kappa_levels")
    out = [row("kappa recovery, Spearman (recovered vs prescribed)", h.get("kappa_spearman"), n=levels,
               why=why.get("kappa_spearman")),
           row("kappa recovery, median relative error", h.get("kappa_median_rel_error"), n=levels,
               why="no kappa level has a recovered estimate"),
           row("kappa recovery, share of events retained", h.get("kappa_retained"), n=summary.get("events"),
               why="no listener event to retain")]
    if summary.get("mode") == "llm":
        out.append(row("channel alignment, Pearson r (stance vs appraised evidence)", h.get("channel_pearson"),
                       n=summary.get("utterances"), why=why.get("channel_pearson")))
    if h.get("kappa_spearman_seeds") and h["kappa_spearman_seeds"] > 1:
        out.append(row("kappa recovery, Spearman, worst seed", h.get("kappa_spearman_by_seed_min"),
                       n=h["kappa_spearman_seeds"]))
    return out
