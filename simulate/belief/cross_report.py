"""The report of a cross-appraisal run (``chorus belief cross``), from its files alone: the additive
decomposition of each pair's channel bias with its bootstrap intervals, the transfer curves, the
self pair against the run it came from, and the three figures."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from chorus.core.config import ConfigError, load_config
from chorus.core.runs import RunDir, amends_run

from . import analysis
from .cross_analysis import decompose, transfer_curves
from .cross_config import COMMAND, TABLES, CrossConfig, is_cross_run
from .cross_plots import PLOTS

CONSTRAINTS = {
    None: "sum-to-zero: sum_g r_g = sum_a q_a = 0; mu = the panel's shared bias (mean over pairs), "
          "not attributable to rendering or reading",
    "anchor": "anchored: q_{anchor} = 0 (the anchor model assumed to read faithfully), mu = 0; r_g is "
              "g's bias as the anchor reads it",
}


@amends_run
def report(path: str | Path, make_plots: bool = True, tables: dict[str, pd.DataFrame] | None = None) -> dict:
    """Summary, derived tables and plots of a cross-appraisal run, from its files alone."""
    run = RunDir(path)
    if not is_cross_run(run.path):
        raise ConfigError(f"{run.path}: not a cross-appraisal run (provenance command != {COMMAND!r})")
    cfg = load_config(run.path / "config.yaml", CrossConfig)
    tabs = tables or {name: run.read_table(name) for name in TABLES}
    ut, app = tabs["utterances"], tabs["appraisals"]
    prov = run.provenance()
    an = cfg.analysis
    dec = decompose(app, cfg.panel(), an.n_boot, cfg.seed, an.ci, an.anchor)
    tc = transfer_curves(app, cfg.panel(), an.bins)
    pairs, parts = dec["pairs"], dec["parts"]
    run.write_table("pairs", pairs)
    run.write_table("parts", parts)
    run.write_table("transfer", tc)
    stats = prov.get("stats") or {}
    # the self pair against the run it came from (same utterances, same request seeds)
    selfcheck = {}
    for m in cfg.panel():
        u = ut[(ut.generator == m) & (ut.run >= 0) & ut.text.notna()]
        if len(u):
            a = app[(app.generator == m) & (app.appraiser == m)].set_index("uid").e.reindex(u.uid).to_numpy()
            o = u.orig_e.to_numpy(float)
            both = np.isfinite(a) & np.isfinite(o)
            selfcheck[m] = {"utterances": len(u), "failed_mismatch": int((np.isfinite(a) != np.isfinite(o)).sum()),
                            "max_abs_diff_e": float(np.abs(a - o)[both].max()) if both.any() else None}
    bias_parts = parts[parts.quantity == "bias"]
    shared = bias_parts[bias_parts.part == "shared"].iloc[0]
    headline = {
        "models": len(cfg.panel()), "utterances": len(ut), "appraisals": len(app),
        "appraisal_failure_rate": float(app.failed.mean()) if len(app) else None,
        "appraiser_calls": stats.get("appraiser_calls_total"),
        "computed_by_engines": stats.get("computed_total"),
        "shared_bias": float(shared.estimate),
        "bias_interaction_rms": dec["fit"]["bias"]["residual_rms"],
        "pair_bias_sd": dec["fit"]["bias"]["pair_sd"],
    }
    for _, p in bias_parts[bias_parts.part != "shared"].iterrows():
        headline[f"{p.part}_bias[{p.model}]"] = float(p.estimate)
    summary = {
        "experiment": cfg.name, "command": COMMAND, "mode": cfg.mode, "models": cfg.panel(),
        "constraint": CONSTRAINTS["anchor" if an.anchor else None], "anchor": an.anchor,
        "identified": "pair biases, mu, and differences r_g - r_h and q_a - q_b; not the split of the "
                      "shared bias between rendering and reading (unless an anchor is assumed)",
        "interval": f"{an.ci:.0%} percentile bootstrap over utterances ({an.n_boot} replicates, seed "
                    f"{cfg.seed}), each generator's utterances resampled with all their appraisals",
        "headline": {k: analysis.nan_to_none(v) for k, v in headline.items()},
        "parts": analysis.records(parts), "pairs": analysis.records(pairs),
        "fit": dec["fit"], "self_vs_run": selfcheck,
        "cost": {k: stats.get(k) for k in ("utterances", "appraisers", "first_pass_calls", "retries",
                                            "appraiser_calls_total", "appraiser_calls", "generator_calls",
                                            "computed_total", "loads", "wall_s")},
        "appraiser_taus": stats.get("appraiser_taus"),
        "plots": [],
    }
    if make_plots:
        for name, fn in PLOTS.items():
            p = fn(app, tc, pairs, parts, cfg, run.plot_path(name))
            if p is not None:
                summary["plots"].append(str(Path(p).relative_to(run.path)))
    run.write_summary(summary)
    return summary


def summary_rows(summary: dict) -> list[tuple[str, str, str]]:
    """(model, rendering part, reading part) of the bias, formatted with intervals."""
    def fmt(p):
        if p is None or p.get("estimate") is None:
            return "-"
        lo, hi = p.get("lo"), p.get("hi")
        ci = f" [{lo:+.3f}, {hi:+.3f}]" if lo is not None and hi is not None else ""
        return f"{p['estimate']:+.3f}{ci}"
    parts = [p for p in summary.get("parts", []) if p["quantity"] == "bias"]
    out = []
    for m in summary.get("models", []):
        r = next((p for p in parts if p["model"] == m and p["part"] == "render"), None)
        q = next((p for p in parts if p["model"] == m and p["part"] == "read"), None)
        out.append((m, fmt(r), fmt(q)))
    sh = next((p for p in parts if p["part"] == "shared"), None)
    out.append(("shared (mu)", fmt(sh), ""))
    return out
