"""The measure of success of a channel correction (``chorus.simulate.belief.correction``), from a run's
tables alone: per arm (corrected or not, twin conditions paired), the pliable consensus against
the initial mean, the transfer curve's diagonal check with intervals, and kappa recovery."""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from .config import BeliefConfig
from .analysis import spearman


# -- the measure of success -------------------------------------------------------------------------
def diagonal_bins(s, e, bins: int, tolerance: float, level: float = 0.95) -> pd.DataFrame:
    """Transfer curve with intervals: per equal-width bin of s, the mean of e, the ``level``
    t-interval of mean(e - s), and whether that interval (widened by ``tolerance``) covers 0,
    i.e. the curve is on the diagonal there. Bins with fewer than 2 utterances are not assessed."""
    from scipy.stats import t as student_t
    s = np.asarray(s, dtype=float)
    e = np.asarray(e, dtype=float)
    ok = np.isfinite(s) & np.isfinite(e)
    s, e = s[ok], e[ok]
    edges = np.linspace(0, 1, bins + 1)
    idx = np.clip(np.digitize(s, edges) - 1, 0, bins - 1)
    df = pd.DataFrame({"bin": idx, "s": s, "e": e, "d": e - s})
    g = df.groupby("bin").agg(n=("d", "size"), s_mean=("s", "mean"), e_mean=("e", "mean"),
                              d_mean=("d", "mean"), d_sd=("d", "std")).reindex(range(bins)).reset_index()
    n = g.n.fillna(0).to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        half = np.where(n >= 2, student_t.ppf(0.5 + level / 2, np.maximum(n - 1, 1)) * g.d_sd / np.sqrt(n), np.nan)
    g["n"] = n.astype(np.int64)
    g["half_width"] = half
    g["e_lo"], g["e_hi"] = g.e_mean - half, g.e_mean + half
    g["assessed"] = n >= 2
    g["on_diagonal"] = g.assessed & (g.d_mean.abs() <= g.half_width + tolerance)
    g["s_lo"], g["s_hi"] = edges[:-1], edges[1:]
    return g


def condition_arms(tables: dict[str, pd.DataFrame], cfg: BeliefConfig) -> pd.DataFrame:
    """Per condition: its channel_correction ('arm') and a key shared by conditions that differ
    only in it (their twins)."""
    rows = []
    for c, ov in zip(tables["conditions"].condition, tables["conditions"].overrides):
        o = json.loads(ov)
        arm = o.pop("channel_correction", cfg.channel_correction)
        rows.append({"condition": int(c), "arm": str(arm), "twin": json.dumps(o, sort_keys=True, default=str)})
    return pd.DataFrame(rows)


def applies(tables: dict[str, pd.DataFrame], cfg: BeliefConfig) -> bool:
    return "e_raw" in tables["utterances"].columns or (condition_arms(tables, cfg).arm != "none").any()


def _landings(beliefs: pd.DataFrame, conditions) -> pd.Series:
    """Final mean belief of the free agents, per run of the given conditions."""
    b = beliefs[beliefs.condition.isin(list(conditions)) & ~beliefs.committed]
    return b[b["round"] == b.groupby("run")["round"].transform("max")].groupby("run").b.mean()


def _rel(a, b) -> float | None:
    return None if a is None or b is None else float(a - b)


def measure(tables: dict[str, pd.DataFrame], cfg: BeliefConfig, derived: dict[str, pd.DataFrame],
            provenance: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    """The seed's measure of success, per arm (channel_correction value): where the pliable
    (DeGroot) consensus lands against the initial mean, the share of transfer-curve bins on the
    diagonal (raw evidence and consumed evidence), kappa recovery from s (median relative error,
    Spearman over kappa levels). ``success`` compares the uncorrected arm with the corrected ones
    where both ran (as twins of one sweep, with common random numbers)."""
    arms = condition_arms(tables, cfg)
    ut = tables["utterances"].merge(arms[["condition", "arm"]], on="condition")
    raw_col = "e_raw" if "e_raw" in ut.columns else "e"
    cm = derived["condition_metrics"].merge(arms, on="condition")
    kr = derived["kappa_recovery"].merge(arms, on="condition")
    bins, tol = cfg.analysis.transfer_bins, cfg.analysis.diagonal_tolerance
    per_arm, curves = [], []
    for arm, u in ut.groupby("arm", sort=False):
        row: dict[str, Any] = {"arm": arm, "conditions": sorted(int(c) for c in arms.condition[arms.arm == arm]),
                               "utterances": int(len(u))}
        for name, col in (("raw", raw_col), ("consumed", "e")):
            d = diagonal_bins(u.s, u[col], bins, tol)
            curves.append(d.assign(arm=arm, evidence=name))
            a = d[d.assessed]
            row[f"{name}_bins_assessed"] = int(len(a))
            row[f"{name}_on_diagonal_share"] = float(a.on_diagonal.mean()) if len(a) else None
            row[f"{name}_max_abs_bin_gap"] = float(a.d_mean.abs().max()) if len(a) else None
        dg = cm[(cm.arm == arm) & (cm.population == "degroot")]
        row["degroot_initial_mean"] = float(dg.initial_mean.mean()) if len(dg) else None
        row["degroot_landing"] = float(dg.final_mean.mean()) if len(dg) else None
        row["degroot_gap"] = float((dg.final_mean - dg.initial_mean).abs().max()) if len(dg) else None
        # a noisy channel makes a pliable consensus wander (every listener hears the same e):
        # the spread of the landing over seeds tells that wander from a bias
        land = _landings(tables["beliefs"], dg.condition)
        row["degroot_landing_seed_sd"] = float(land.std(ddof=1)) if len(land) > 1 else None
        row["degroot_landing_se"] = float(land.std(ddof=1) / np.sqrt(len(land))) if len(land) > 1 else None
        k = kr[(kr.arm == arm)].dropna(subset=["kappa_hat_median"])
        lv = k.groupby("kappa").kappa_hat_median.median()
        row["kappa_levels"] = int(len(lv))
        row["kappa_spearman"] = spearman(lv.index, lv.values) if len(lv) >= 3 else None
        row["kappa_median_rel_error"] = float(k.groupby("kappa").rel_error.median().median()) if len(k) else None
        per_arm.append({kk: (None if isinstance(v, float) and math.isnan(v) else v) for kk, v in row.items()})
    consensus = []
    for _, r in cm[cm.population == "degroot"].iterrows():
        consensus.append({"condition": int(r.condition), "arm": r.arm, "label": r.label,
                          "initial_mean": float(r.initial_mean), "final_mean": float(r.final_mean),
                          "gap": float(abs(r.final_mean - r.initial_mean))})
    by_arm = {a["arm"]: a for a in per_arm}
    unc = by_arm.get("none")
    cor = [a for a in per_arm if a["arm"] != "none"]
    success = None
    if cor:
        c = cor[0]
        gap_c, gap_u = c["degroot_gap"], unc["degroot_gap"] if unc else None
        ke_c, ke_u = c["kappa_median_rel_error"], unc["kappa_median_rel_error"] if unc else None
        success = {
            "corrected_arm": c["arm"],
            "consensus_gap_uncorrected": gap_u, "consensus_gap_corrected": gap_c,
            "consensus_landing_se_corrected": c["degroot_landing_se"],
            "consensus_within_0.05": None if gap_c is None else bool(gap_c <= 0.05),
            "raw_on_diagonal_share": c["raw_on_diagonal_share"],
            "corrected_on_diagonal_share": c["consumed_on_diagonal_share"],
            "kappa_median_rel_error_uncorrected": ke_u, "kappa_median_rel_error_corrected": ke_c,
            "kappa_spearman_uncorrected": unc["kappa_spearman"] if unc else None,
            "kappa_spearman_corrected": c["kappa_spearman"],
            "kappa_not_worse": None if ke_c is None or ke_u is None else bool(ke_c <= ke_u + 1e-12),
            "kappa_error_change": _rel(ke_c, ke_u),
        }
    block = {"applied": (provenance or {}).get("channel_correction"), "evidence_column_raw": raw_col,
             "diagonal_tolerance": tol, "arms": per_arm, "consensus": consensus, "success": success}
    return block, {"transfer_correction": pd.concat(curves, ignore_index=True), "correction_arms": arms}


def headline(block: dict[str, Any]) -> dict[str, Any]:
    """A few headline numbers of a corrected run."""
    s = block.get("success") or {}
    return {"correction_consensus_gap_uncorrected": s.get("consensus_gap_uncorrected"),
            "correction_consensus_gap_corrected": s.get("consensus_gap_corrected"),
            "correction_raw_on_diagonal": s.get("raw_on_diagonal_share"),
            "correction_on_diagonal": s.get("corrected_on_diagonal_share"),
            "correction_kappa_not_worse": s.get("kappa_not_worse")}
