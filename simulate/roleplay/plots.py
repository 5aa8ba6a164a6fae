"""Figures from summary.json alone: SD trajectories, endpoint distributions, convergence bars."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from chorus.core.plots import interval_caption, save, subplots


def _style(label: str) -> dict:
    if label.startswith("human"):
        return {"color": "black", "lw": 2.5}
    if label.startswith("degroot"):
        return {"color": "grey", "ls": ":"}
    return {"ls": "--" if "next_message" in label else "-"}


def sd_trajectories(summary: dict, path: Path) -> None:
    pts = summary["points"]
    fig, ax = subplots(figsize=(6.5, 4))
    for label, ys in summary["sd_trajectory"].items():
        ax.plot(range(len(pts)), ys, marker="o", label=label, **_style(label))
    ax.set_xticks(range(len(pts)), pts)
    ax.set_ylabel("mean within-group SD of stance")
    ax.set_title("stance SD trajectories: human vs simulated")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save(fig, path)


def endpoint_distributions(summary: dict, path: Path) -> None:
    d = summary["endpoint_distribution"]
    fig, axes = subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, ch in zip(axes, ("public", "private")):
        labels = [k[: -len(ch) - 1] for k in d if k.endswith("/" + ch)]
        w = 0.8 / max(len(labels), 1)
        for i, lab in enumerate(labels):
            ax.bar(np.arange(1, 7) + (i - (len(labels) - 1) / 2) * w, d[f"{lab}/{ch}"], width=w, label=lab)
        ax.set_xlabel("end stance (coded 1-6)")
        ax.set_title(f"endpoint distribution ({ch})")
    axes[0].set_ylabel("share of participants")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    save(fig, path)


def convergence_bars(summary: dict, path: Path) -> None:
    fig, axes = subplots(1, 2, figsize=(10, 3.8), sharey=True)
    drawn = []
    for ax, ch in zip(axes, ("public", "private")):
        rows = [("human", summary["human"][ch]["delta_sd"])]
        rows += [(k[: -len(ch) - 1], v["delta_sd"]) for k, v in summary["cells"].items() if k.endswith("/" + ch)]
        xs = np.arange(len(rows))
        means = [r[1]["mean"] for r in rows]
        err = np.array([[m - r[1]["lo"], r[1]["hi"] - m] for m, r in zip(means, rows)]).T
        ax.bar(xs, means, yerr=np.nan_to_num(err), color=["black"] + ["C%d" % i for i in range(len(rows) - 1)])
        drawn += [r[1] for r in rows]
        ax.set_xticks(xs, [r[0] for r in rows], rotation=30, ha="right", fontsize=7)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(f"delta SD ({ch}); bootstrap CI over groups")
    axes[0].set_ylabel("end SD - start SD")
    fig.tight_layout()
    interval_caption(fig, drawn, ci=summary.get("ci_level") or 0.95, unit="group", what="error bars")
    save(fig, path)


def error_scatter(bars, path: Path) -> None:
    """Fig. 12's view: per channel, single-opinion error against opinion-update and convergence
    error, one point per (split, model, setup) bar of ``roleplay stats``."""
    errs = bars[bars["metric"].isin(["single_error", "update_error", "convergence_error"])]
    fig, axes = subplots(2, 2, figsize=(9, 7), squeeze=False)
    for i, ch in enumerate(("public", "private")):
        w = errs[errs["channel"] == ch].pivot_table(index=["split", "source", "setup"], columns="metric",
                                                     values="mean", aggfunc="first")
        for j, y in enumerate(("update_error", "convergence_error")):
            ax = axes[i][j]
            if "single_error" in w and y in w:
                ax.scatter(w["single_error"], w[y])
                for key, r in w.iterrows():
                    ax.annotate("/".join(key), (r["single_error"], r[y]), fontsize=6)
            ax.set_xlabel(f"single-opinion error ({ch})")
            ax.set_ylabel(f"{y.replace('_', ' ')} ({ch})")
    fig.suptitle("stance errors across models (one point per split/model/setup)")
    fig.tight_layout()
    save(fig, path)


def annotator_agreement(kappa, headline, own: str, path: Path) -> None:
    """``roleplay annotators``: left, Cohen's kappa against the run's classifier per label (stance
    one-vs-rest 1-6, overall, quadratic-weighted; on-topic); right, each headline metric under the
    run's classifier (x) and under each other classifier (y), on the diagonal when they agree."""
    fig, (a1, a2) = subplots(1, 2, figsize=(11, 4.2))
    keys = [("stance", str(k)) for k in range(1, 7)] + [("stance", "overall"), ("stance", "overall_quadratic"),
                                                        ("on_topic", "overall")]
    others = list(dict.fromkeys(kappa["classifier"]))
    w = 0.8 / max(len(others), 1)
    for i, p in enumerate(others):
        k = kappa[kappa["classifier"] == p].set_index(["task", "label"])["kappa"]
        ys = [float(k.get(key, np.nan)) for key in keys]
        a1.bar(np.arange(len(keys)) + (i - (len(others) - 1) / 2) * w, np.nan_to_num(ys), width=w, label=p)
    a1.set_xticks(range(len(keys)), [f"{t.replace('_', '-')} {lab.replace('overall_', '')}" for t, lab in keys],
                  rotation=40, ha="right", fontsize=7)
    a1.axhline(0, color="grey", lw=0.8)
    a1.set_ylabel("Cohen's kappa vs the run's classifier (NaN shown as 0)")
    a1.set_title(f"agreement with {own}", fontsize=9)
    a1.legend(fontsize=7)
    for p in others:
        if p in headline:
            a2.scatter(headline[own], headline[p], s=14, label=p)
    lo = np.nanmin(headline.drop(columns="metric").to_numpy(dtype=float)) if len(headline) else 0.0
    hi = np.nanmax(headline.drop(columns="metric").to_numpy(dtype=float)) if len(headline) else 1.0
    a2.plot([lo, hi], [lo, hi], color="grey", lw=0.8, ls=":")
    a2.set_xlabel(f"headline metric under {own}")
    a2.set_ylabel("under the other classifier")
    a2.set_title("headline metrics recomputed per classifier", fontsize=9)
    a2.legend(fontsize=7)
    fig.tight_layout()
    save(fig, path)


def probe_bars(temperature, memory, path: Path) -> None:
    """``roleplay probes``: tweet and private delta SD of the full-dynamics cells per probe condition
    (left: temperature; right: full vs ablated memory), the humans' as dotted lines."""
    fig, axes = subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, (title, df) in zip(axes, (("decoding temperature", temperature), ("memory ablation", memory))):
        d = df[df["setup"] == "full_dynamics"] if len(df) else df
        labels = [f"{c}\n{s}" for c, s in zip(d["condition"], d["source"])]
        xs = np.arange(len(d))
        for i, (name, color) in enumerate((("tweet", "C0"), ("private", "C1"))):
            if len(d):
                ax.bar(xs + (i - 0.5) * 0.4, d[f"{name}_delta_sd"].to_numpy(float), width=0.4, color=color,
                       label=f"{name} delta SD")
                ax.axhline(float(d[f"human_{name}_delta_sd"].iloc[0]), color=color, ls=":", lw=1,
                           label=f"human {name}")
        ax.set_xticks(xs, labels, fontsize=7)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(f"{title} (full dynamics)" if len(d) else f"{title}: no run", fontsize=9)
    axes[0].set_ylabel("end SD - start SD")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    save(fig, path)
