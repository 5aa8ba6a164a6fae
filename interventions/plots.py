"""Figures for influence runs: committed-at-read, ablation / cue effects, knockout curves, the
residual-interchange curve, probe AUROC by layer and a counterfactual debate's arms."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from chorus.core.plots import figure as _fig, interval_caption, save, subplots
from chorus.simulate.debate.plots import COLORS


def committed(cr: dict[str, Any], path: Path) -> Path:
    fig = _fig()
    ax = fig.add_subplot(111)
    for cond, d in cr.get("by_condition", {}).items():
        fs = sorted(d, key=float)
        y = [d[f]["share"] for f in fs]
        lo = [d[f]["share"] - d[f]["ci_low"] if d[f]["ci_low"] == d[f]["ci_low"] else 0 for f in fs]
        hi = [d[f]["ci_high"] - d[f]["share"] if d[f]["ci_high"] == d[f]["ci_high"] else 0 for f in fs]
        ax.errorbar([float(f) for f in fs], y, yerr=[lo, hi], fmt="o-", capsize=3, color=COLORS.get(cond), label=cond)
    ax.set_xlabel("readout point f (fraction of the receiver's rationale)")
    ax.set_ylabel("readout argmax = eventual answer\n(answer-changing responses)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title("committed-at-read", fontsize=10)
    fig.tight_layout()
    interval_caption(fig, [v for d in cr.get("by_condition", {}).values() for v in d.values()],
                     ci=cr.get("ci_level") or 0.95, unit="question family", what="error bars")
    save(fig, path)
    return path


def committed_gaps(gaps: dict[str, Any], path: Path, *, ci: float = 0.95) -> Path:
    """The f = 0 committed-at-read gap vs reflection side by side: debate and its controls."""
    fig = _fig(5.0, 4.0)
    ax = fig.add_subplot(111)
    names = list(gaps)
    y = [gaps[n]["delta"] for n in names]
    err = [[max(0.0, gaps[n]["delta"] - gaps[n]["ci_low"]) if gaps[n]["ci_low"] == gaps[n]["ci_low"] else 0
            for n in names],
           [max(0.0, gaps[n]["ci_high"] - gaps[n]["delta"]) if gaps[n]["ci_high"] == gaps[n]["ci_high"] else 0
            for n in names]]
    ax.bar(range(len(names)), [v if v == v else 0 for v in y], yerr=err, capsize=3,
           color=[COLORS.get(n, "#7f8c8d") for n in names])
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([f"{n}\n(n={gaps[n]['n']})" for n in names], fontsize=8)
    ax.set_ylabel("committed-at-read at f = 0,\nminus reflection")
    ax.set_title("committed-at-read gap: peers' content vs controls", fontsize=10)
    fig.tight_layout()
    interval_caption(fig, list(gaps.values()), ci=ci, unit="question family", what="error bars")
    save(fig, path)
    return path


def effect_bars(eff: dict[str, Any], path: Path, *, title: str, ci: float = 0.95) -> Path:
    fig = _fig(6.0, 4.0)
    ax = fig.add_subplot(111)
    names = list(eff)
    y = [eff[n]["mean"] for n in names]
    err = [[max(0.0, eff[n]["mean"] - eff[n]["ci_low"]) if eff[n]["ci_low"] == eff[n]["ci_low"] else 0 for n in names],
           [max(0.0, eff[n]["ci_high"] - eff[n]["mean"]) if eff[n]["ci_high"] == eff[n]["ci_high"] else 0 for n in names]]
    ax.bar(range(len(names)), y, yerr=err, capsize=3, color="#7d3c98")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("adoption-margin shift vs no message (logits)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    interval_caption(fig, list(eff.values()), ci=ci, unit="question family", what="error bars")
    save(fig, path)
    return path


def cue_sets(sets: dict[str, Any], path: Path, *, ci: float = 0.95) -> Path:
    """Record and status effects side by side per cue set (original vs magnitude-matched), each
    set's record/status ratio under its name."""
    fig = _fig(5.5, 4.0)
    ax = fig.add_subplot(111)
    names, width = list(sets), 0.38

    def err(d):   # NaN-safe interval half-widths
        return (max(0.0, d["mean"] - d["ci_low"]) if d["ci_low"] == d["ci_low"] else 0,
                max(0.0, d["ci_high"] - d["mean"]) if d["ci_high"] == d["ci_high"] else 0)

    for k, (dim, color) in enumerate((("record_effect", "#1f618d"), ("status_effect", "#ca6f1e"))):
        ds = [sets[n][dim] for n in names]
        ax.bar([i + (k - 0.5) * width for i in range(len(names))],
               [d["mean"] if d["mean"] == d["mean"] else 0 for d in ds],
               width, yerr=list(zip(*map(err, ds))), capsize=3, color=color, label=dim.replace("_", " "))
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([f"{n}\nrecord/status = {sets[n]['record_status_ratio']['estimate']:.2f}" for n in names],
                       fontsize=8)
    ax.set_ylabel("adoption-margin contrast (logits)")
    ax.set_title("source cues: track record vs status, per cue set", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    interval_caption(fig, [sets[n][dim] for n in names for dim in ("record_effect", "status_effect")],
                     ci=ci, unit="question family", what="error bars")
    save(fig, path)
    return path


def _bound(x, missing: float = float("nan")) -> float:
    """An interval bound for a plot: None (an unbounded or absent interval) as ``missing``."""
    return missing if x is None else float(x)


def knockout_curves(summary: dict, path: Path) -> Path:
    """Share of the message effect removed: single layers and cumulative (L..last), per token mixer cut."""
    fig = _fig(10, 4)
    unm = set(summary.get("unmaskable_layers") or [])
    mixers = sorted({r.get("mixer", "attention") for r in summary["curves"]},
                    key=lambda m: ("attention", "recurrent", "both").index(m))
    colors = {"attention": ("C0", "C2"), "recurrent": ("C1", "C4"), "both": ("C3", "C5")}
    alls = summary.get("all_layers_by_mixer") or {"attention": summary.get("all_layers") or {}}
    for k, kind in enumerate(("single", "cumulative")):
        ax = fig.add_subplot(1, 2, k + 1)
        for mixer in mixers:
            tag = "" if mixers == ["attention"] else f"{mixer}, "
            for (q, style), color in zip((("after", "o-"), ("decision", "s--")), colors[mixer]):
                c = sorted((r for r in summary["curves"] if r["kind"] == kind and r["queries"] == q
                            and r.get("mixer", "attention") == mixer), key=lambda r: r["layer"])
                if c:
                    x = [r["layer"] for r in c]
                    ax.plot(x, [r["share_removed"] for r in c], style, ms=3, color=color, label=f"{tag}queries: {q}")
                    # an unbounded (Fieller) interval has no band: a gap, marked by an open circle at the estimate
                    ax.fill_between(x, [_bound(r["ci_low"]) for r in c], [_bound(r["ci_high"]) for r in c],
                                    alpha=0.15, color=color)
                    ub = [r for r in c if r.get("unbounded")]
                    if ub:
                        ax.plot([r["layer"] for r in ub], [r["share_removed"] for r in ub], "o", mfc="none", ms=7,
                                color=color, label=f"{tag}{q}: unbounded (denominator interval contains 0)")
                    if kind == "single":
                        for b in summary.get("best_single_layer") or []:
                            if b["queries"] == q and b["mixer"] == mixer and b.get("ci_low") is not None:
                                ax.errorbar([b["layer"]], [b["share_removed"]], capsize=4, color=color, lw=2,
                                            yerr=[[b["share_removed"] - b["ci_low"]], [b["ci_high"] - b["share_removed"]]],
                                            label=f"{tag}{q}: best layer, family-wise over {b['n_layers_searched']}")
                a = (alls.get(mixer) or {}).get(q)
                if a:
                    ax.axhline(a["share_removed"], ls=":", lw=1.2, color=color, label=f"{tag}all layers, queries: {q}")
        for L in sorted(unm):
            ax.axvline(L, color="0.85", lw=2, zorder=0)
        ax.axhline(1.0, color="0.5", lw=0.8)
        ax.axhline(0.0, color="0.5", lw=0.8)
        pts = [r["share_removed"] for r in summary["curves"] if r["share_removed"] == r["share_removed"]]
        if pts:  # ratio CIs explode when the effect is near 0: keep the axis on the estimates
            ax.set_ylim(max(-2.0, min(-0.25, min(pts) - 0.1)), min(3.0, max(1.25, max(pts) + 0.1)))
        ax.set_xlabel("layer" if kind == "single" else "first blocked layer (L..last)")
        ax.set_ylabel("share of the peer effect removed")
        ax.set_title(f"{kind} knockout" + (" (grey: recurrent layers)" if unm else ""), fontsize=9)
        ax.legend(fontsize=6)
    what = "attention knockout" if mixers == ["attention"] else f"knockout by mixer ({', '.join(mixers)})"
    fig.suptitle(f"{summary.get('model')}: {what} ({summary.get('n_pairs')} pairs); >100% = all", fontsize=10)
    fig.tight_layout()
    interval_caption(fig, [r for r in summary["curves"] if not r.get("unbounded")], ci=summary.get("ci_level") or 0.95,
                     unit="question family", what="bands (Fieller ratio intervals; best layer: family-wise)",
                     method="Fieller")
    save(fig, path)
    return path


def knockout_mixers(summary: dict, path: Path) -> Path:
    """All layers cut: the share of the peer effect removed by attention only, the recurrent route
    only, and both (bars with intervals), per query variant; the dotted line is 1 - attention, the
    recurrent share the paper infers from the remainder."""
    ms = summary["mixer_shares"]
    fig = _fig(4.0 * len(ms), 3.6)
    for k, (q, rec) in enumerate(sorted(ms.items())):
        ax = fig.add_subplot(1, len(ms), k + 1)
        names = [m for m in ("attention", "recurrent", "both", "interaction") if m in rec]
        y = [rec[m]["share_removed"] for m in names]
        # an unbounded interval draws no bar (0) and says so in its tick label
        err = [[max(0.0, v - _bound(rec[m]["ci_low"], v)) for m, v in zip(names, y)],
               [max(0.0, _bound(rec[m]["ci_high"], v) - v) for m, v in zip(names, y)]]
        names = [m + ("\n(unbounded)" if rec[m].get("unbounded") else "") for m in names]
        ax.bar(range(len(names)), y, yerr=err, capsize=3, color=["C0", "C1", "C3", "0.6"][:len(names)])
        if "recurrent_inferred" in rec:
            ax.axhline(rec["recurrent_inferred"], ls=":", color="C1", lw=1.2, label="1 - attention (inferred)")
            ax.legend(fontsize=7)
        ax.axhline(1.0, color="0.5", lw=0.8)
        ax.axhline(0.0, color="k", lw=0.8)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, fontsize=8)
        ax.set_ylabel("share of the peer effect removed")
        ax.set_title(f"all layers, queries: {q} (n = {rec['n']})", fontsize=9)
    fig.suptitle(f"{summary.get('model')}: which route carries the peer message", fontsize=10)
    fig.tight_layout()
    interval_caption(fig, [rec[m] for rec in ms.values() for m in ("attention", "recurrent", "both", "interaction")
                           if isinstance(rec.get(m), dict) and not rec[m].get("unbounded")],
                     ci=summary.get("ci_level") or 0.95, unit="question family",
                     what="error bars (Fieller ratio intervals)", method="Fieller")
    save(fig, path)
    return path


def patch_curve(summary: dict, path: Path) -> Path:
    fig = _fig(6.0, 4.0)
    ax = fig.add_subplot(111)
    c = summary["curve"]
    x = [r["layer"] for r in c]
    ax.plot(x, [r["restored"] for r in c], "o-", ms=3)
    ax.fill_between(x, [_bound(r["ci_low"]) for r in c], [_bound(r["ci_high"]) for r in c], alpha=0.2)
    ub = [r for r in c if r.get("unbounded")]   # no band there: an open circle says why
    if ub:
        ax.plot([r["layer"] for r in ub], [r["restored"] for r in ub], "o", mfc="none", ms=7, color="C0",
                label="unbounded (denominator interval contains 0)")
        ax.legend(fontsize=7)
    ax.axhline(1.0, color="0.5", lw=0.8)
    ax.axhline(0.0, color="0.5", lw=0.8)
    pts = [r["restored"] for r in c if r["restored"] == r["restored"]]
    if pts:
        lo, hi = max(-2.0, min(-0.25, min(pts) - 0.1)), min(3.0, max(1.25, max(pts) + 0.1))
        ax.set_ylim(lo, hi)
        out = [(r["layer"], r["restored"]) for r in c if r["restored"] == r["restored"] and not lo <= r["restored"] <= hi]
        if out:   # a share beyond the axis (a near-zero difference): marked at the edge and named, never cut silently
            ax.scatter([x for x, _ in out], [min(max(y, lo), hi) for _, y in out], marker="x", color="#a33", zorder=3)
            ax.text(0.02, 0.03, "beyond the axis: " + ", ".join(f"layer {x}: {y:.3g}" for x, y in out[:6])
                    + (" ..." if len(out) > 6 else ""), transform=ax.transAxes, fontsize=7, color="#a33")
    ax.set_xlabel("patched layer (residual after it, at the cue positions)")
    ax.set_ylabel("share of the X-Y margin difference carried")
    ax.set_title(f"{summary.get('model')}: residual interchange X -> Y ({summary.get('n_pairs')} pairs)", fontsize=9)
    fig.tight_layout()
    interval_caption(fig, [r for r in c if not r.get("unbounded")], ci=summary.get("ci_level") or 0.95,
                     unit="question family", what="band (Fieller ratio intervals)", method="Fieller")
    save(fig, path)
    return path

def probe_curve(t: pd.DataFrame, path: Path, *, concept: str) -> Path:
    fig = _fig(6.0, 4.0)
    ax = fig.add_subplot(111)
    ax.plot(t["layer"], t["auroc"], "o-", ms=3, label="probe (held-out AUROC)")
    ax.plot(t["layer"], t["null_p90"], "--", color="0.4", label="shuffled-label null, 90th percentile")
    ax.axhline(0.5, color="0.6", lw=0.8, ls=":")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("layer")
    ax.set_ylabel("AUROC")
    ax.set_title(f"probe for '{concept}' by layer (n = {int(t['n'].iloc[0])})", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, path)
    return path


def transfer_curve(summary: dict, path: Path) -> Path:
    """Share of the written-message effect by receiver layer: transfer beside its controls."""
    fig = _fig(6.0, 4.0)
    ax = fig.add_subplot(111)
    colors = {"transfer": "C0", "elsewhere": "C2", "scrambled": "C3"}
    for arm, col in colors.items():
        c = sorted((r for r in summary["curve"] if r["arm"] == arm), key=lambda r: r["layer_r"])
        if not c:
            continue
        x = [r["layer_r"] for r in c]
        ax.plot(x, [r["share"] for r in c], "o-", ms=3, color=col, label=arm)
        ax.fill_between(x, [_bound(r["ci_low"]) for r in c], [_bound(r["ci_high"]) for r in c], color=col, alpha=0.15)
        ub = [r for r in c if r.get("unbounded")]   # no band there: an open circle says why
        if ub:
            ax.plot([r["layer_r"] for r in ub], [r["share"] for r in ub], "o", mfc="none", ms=7, color=col,
                    label=f"{arm}: unbounded (denominator interval contains 0)")
    ax.axhline(1.0, color="0.5", lw=0.8, ls="--", label="written message (1)")
    ax.axhline(0.0, color="0.5", lw=0.8, label="no message (0)")
    pts = [r["share"] for r in summary["curve"] if r["arm"] in colors and r["share"] == r["share"]]
    if pts:
        ax.set_ylim(max(-3.0, min(-0.25, min(pts) - 0.1)), min(3.0, max(1.25, max(pts) + 0.1)))
    ax.set_xlabel("receiver layer (residual after it, written at the site)")
    ax.set_ylabel("share of the written-message effect")
    snd = (summary.get("sender") or {}).get("name", "?")
    ax.set_title(f"state transfer {snd} -> {summary.get('model')} ({summary.get('n_pairs')} pairs, "
                 f"site {summary.get('site')})", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    interval_caption(fig, [r for r in summary["curve"] if r["arm"] in colors and not r.get("unbounded")],
                     ci=summary.get("ci_level") or 0.95, unit="question family",
                     what="bands (Fieller ratio intervals)", method="Fieller")
    save(fig, path)
    return path


def concept_site(t: pd.DataFrame, probe: pd.DataFrame, path: Path, *, site: str, model: Any = None) -> Path:
    """Concept scores at one site: top, mean score by domain x condition at the concept's best
    probe layer (held-out AUROC); bottom, the debate - reflection shift by layer per domain, the
    grey band the shuffled-direction null's 90th percentile of |shift| (all domains pooled)."""
    import numpy as np

    concepts = list(dict.fromkeys(probe["concept"]))
    fig = _fig(4.2 * len(concepts), 7.0)
    for j, c in enumerate(concepts):
        pr = probe[(probe["concept"] == c) & (probe["site"] == site)]
        b = pr.loc[pr["auroc"].idxmax()]
        L = int(b["layer"])
        cell = t[(t["concept"] == c) & (t["site"] == site)]
        ax = fig.add_subplot(2, len(concepts), j + 1)
        at = cell[cell["layer"] == L]
        doms = [d for d in dict.fromkeys(sorted(at["domain"])) if d != "all"] + (["all"] if len(at) else [])
        for k, cond in enumerate(("debate", "reflection")):
            g = at[at["condition"] == cond].set_index("domain").reindex(doms)
            ax.bar(np.arange(len(doms)) + (k - 0.5) * 0.38, g["mean"], 0.38, yerr=g["se"].fillna(0), capsize=2,
                   color=COLORS.get(cond), label=cond)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xticks(range(len(doms)))
        ax.set_xticklabels(doms, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel("projection on the concept direction")
        ax.set_title(f"{c} @ layer {L}: AUROC {b['auroc']:.2f} (null q90 {b['null_p90']:.2f})", fontsize=9)
        if not len(at):
            ax.text(0.5, 0.5, "no debate contexts", ha="center", transform=ax.transAxes)
        ax.legend(fontsize=7)
        ax = fig.add_subplot(2, len(concepts), len(concepts) + j + 1)
        one = cell[cell["condition"] == "debate"]
        for d in doms:
            g = one[one["domain"] == d].sort_values("layer")
            ax.plot(g["layer"], g["shift"], "o-" if d != "all" else "k-", ms=3, lw=1.8 if d == "all" else 1, label=d)
        g = one[one["domain"] == "all"].sort_values("layer")
        if len(g):
            ax.fill_between(g["layer"], -g["shift_null_q90"], g["shift_null_q90"], color="0.8", zorder=0,
                            label="null q90 of |shift| (all)")
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xlabel("layer")
        ax.set_ylabel("debate - reflection")
        ax.legend(fontsize=7)
    fig.suptitle(f"{model or ''}: concept directions at the {site} site "
                 f"({'peer messages / own previous response' if site == 'reading' else 'decision token'})",
                 fontsize=10)
    fig.tight_layout()
    # what the drawn bars and band are (issue 51 item 5): no bootstrap here, so no resampled units to name
    fig.text(0.5, 0.0, "error bars: +-1 standard error of the mean over contexts (not a confidence interval); "
             "grey band: the shuffled-direction null's 90th percentile of |shift|", ha="center", va="top", fontsize=7)
    save(fig, path)
    return path


def counterfactual(summary: dict[str, Any], path: Path) -> Path:
    """A counterfactual debate (``chorus.interventions.counterfactual``): each arm's question-level means
    (factual, replay, cut) and its unanimity by round, the cut round marked."""
    arms = list(summary["arms"])
    names = [k for k, v in summary["arms"][arms[0]].items() if isinstance(v, float)]
    fig, (a1, a2) = subplots(1, 2, figsize=(11.0, 3.8))
    x = np.arange(len(names))
    w = 0.8 / len(arms)
    for k, arm in enumerate(arms):
        a1.bar(x + (k - (len(arms) - 1) / 2) * w, [summary["arms"][arm][m] for m in names], width=w, label=arm)
    a1.set_xticks(x, [n.replace("_", " ") for n in names], rotation=20, ha="right", fontsize=8)
    a1.set_ylabel("share of questions")
    a1.set_title(f"agent {summary['receiver']} not attending to agent {summary['peer']} at round {summary['round']}",
                 fontsize=9)
    a1.legend(fontsize=7)
    for arm in arms:
        u = summary["arms"][arm]["unanimity_by_round"]
        xs = sorted(int(r) for r in u)
        a2.plot(xs, [u[r] if r in u else u[str(r)] for r in xs], "o-", ms=3, label=arm)
    a2.axvline(summary["round"], color="0.7", ls=":", lw=1)
    a2.set_xlabel("round")
    a2.set_ylabel("unanimous groups")
    a2.set_title(f"{summary['model']}: unanimity by round ({summary['n_questions']} questions)", fontsize=9)
    a2.legend(fontsize=7)
    fig.tight_layout()
    save(fig, path)
    return path
