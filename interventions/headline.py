"""The influence runs' headline (``chorus.core.headline``), by what the run measured:

* forced-choice readouts (``influence readout``): committed-at-read, the share of answer-changing turns
  whose readout before the reasoning (and at each later fraction f) already named the eventual answer,
  by condition, then debate minus reflection at f = 0 (family-clustered bootstrap intervals);
* attention knockout (``influence knockout``, the demo's internals stage): the share of the peer
  message's effect removed when every layer is cut, then by layer band (the cumulative cuts: layers
  L to the last), ratio-of-means intervals clustered by question family.

Other influence verbs (patch, probe, ablate, cues, transfer, concepts, counterfactual) declare no lead
comparison here: their report shows their numbers as before."""
from __future__ import annotations

from typing import Any

from chorus.core.headline import Row, row


def _readout(s: dict[str, Any]) -> list[Row]:
    car = s.get("committed_at_read") or {}
    level = car.get("ci_level")
    out = []
    for cond, by_f in (car.get("by_condition") or {}).items():
        for f, m in sorted(by_f.items(), key=lambda kv: float(kv[0])):
            out.append(row(f"committed at read, {cond}, f={float(f):g}", m.get("share"), m.get("ci_low"),
                           m.get("ci_high"), level=level, n=m.get("n"), clusters=m.get("n_units"),
                           resampled=m.get("resampled"),
                           why="no answer-changing turn was read at this fraction"))
    d = car.get("debate_minus_reflection_f0")
    gap = (car.get("gaps_f0") or {}).get("debate") or {}
    if d is not None:
        out.append(row("committed at read, debate - reflection, f=0", d.get("delta"), d.get("ci_low"), d.get("ci_high"),
                       level=level, n=gap.get("n"), clusters=d.get("n_units"), resampled=d.get("resampled"),
                       why="needs answer-changing turns of both conditions read at f = 0"))
    return out


def _fieller(m: dict[str, Any]) -> dict[str, Any]:
    """What a share's interval rests on: a Fieller interval (no bootstrap, so never refused for few units)
    over the question families its cluster-robust variances count; unbounded, the reason it has none."""
    out: dict[str, Any] = {"clusters": m.get("n_units"), "resampled": m.get("resampled"),
                           "method": "Fieller" if m.get("interval") == "fieller" else None}
    if m.get("unbounded"):
        out["interval_why"] = m["unbounded"]
    return out


def _knockout(k: dict[str, Any]) -> list[Row]:
    level = k.get("ci_level")
    out = []
    for q, m in sorted((k.get("all_layers") or {}).items()):
        out.append(row(f"share removed, all layers (queries: {q})", m.get("share_removed"), m.get("ci_low"),
                       m.get("ci_high"), level=level, n=m.get("n"), **_fieller(m),
                       why="the message moves the margin by nothing on average: no effect to remove"))
    band = [c for c in k.get("curves") or [] if c.get("kind") == "cumulative" and c.get("mixer", "attention") == "attention"]
    for c in sorted(band, key=lambda c: (c.get("queries"), c.get("layer"))):
        first, n_masked = c.get("layer"), c.get("n_masked")
        last = first + n_masked - 1 if isinstance(first, int) and isinstance(n_masked, int) else "last"
        out.append(row(f"share removed, layers {first}-{last} (queries: {c.get('queries')})", c.get("share_removed"),
                       c.get("ci_low"), c.get("ci_high"), level=level, n=c.get("n"), **_fieller(c),
                       why="the message moves the margin by nothing on average: no effect to remove"))
    return out


def headline(summary: dict[str, Any]) -> list[Row]:
    if "committed_at_read" in summary:
        return _readout(summary)
    if isinstance(summary.get("knockout"), dict):     # the demo's internals stage: knockout beside patch and probe
        return _knockout(summary["knockout"])
    if summary.get("verb") == "knockout":
        return _knockout(summary)
    return []
