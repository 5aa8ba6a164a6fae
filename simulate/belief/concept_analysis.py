"""The analysis of a multi-concept run (``chorus belief multi``), from its tables alone.

Per concept: where each stance's mean credence starts and lands, cross-agent variance (the
trace over stances), whether disagreement persists, R^2 of seed-averaged terminal credences
against the per-stance FJ fixed point (uncoupled concepts only: the closed form ignores
couplings), appraisal failures; per (concept, kappa): kappa recovered from the speaker's
credence s (per stance coordinate and pooled least squares over the well-conditioned
coordinates) and the exactness check with the consumed evidence e. The Beta layer's analysis
(conditions, regimes, dose-response) is ``analysis``; its helpers are shared from there."""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from . import dirichlet
from .analysis import interval_columns, kappa_interval, nan_to_none, pearson, r2_no_intercept, records, recovery_by_seed, seed_headline
from .config import BeliefConfig

KIND = "multi"
KAPPA_COLUMNS = ["concept", "K", "kappa", "gamma", "events", "retained", "kappa_hat_median", "kappa_hat_iqr",
                 "kappa_hat_ci_low", "kappa_hat_ci_high", "kappa_hat_ci_resampled", "kappa_hat_ci_units",
                 "kappa_hat_ci_refused", "kappa_hat_ci_level", "kappa_hat_coord_median", "rel_error", "exact_max_rel_error"]
TABLES = ("events", "appraisals", "utterances", "beliefs", "agents", "edges", "runs", "concepts")


def _per_event(ev: pd.DataFrame, cols, Kmax: int):
    """Rows of one event are contiguous (k = 0..K-1): (scalars of each event's first row,
    {col: (events, Kmax) array, NaN-padded})."""
    k = ev.k.to_numpy().astype(int)
    eid = np.cumsum(k == 0) - 1
    n = int(eid[-1]) + 1 if len(eid) else 0
    out = {}
    for c in cols:
        a = np.full((n, Kmax), np.nan)
        a[eid, k] = ev[c].to_numpy()
        out[c] = a
    return ev[k == 0].reset_index(drop=True), out


def fixed_points(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per-stance mean-field FJ fixed point per (run, agent, concept, stance); NaN where none
    exists (gamma = 1 without committed agents) or the concept has incoming couplings."""
    runs, agents, edges, concepts = tables["runs"], tables["agents"], tables["edges"], tables["concepts"]
    out = []
    for _, rr in runs.iterrows():
        adj = None
        a_run = agents[agents.run == rr.run]
        n = int(rr.n_agents)
        if rr.topology != "complete":
            e = edges[edges.run == rr.run]
            adj = np.zeros((n, n))
            adj[e.u.to_numpy(), e.v.to_numpy()] = 1.0
            adj[e.v.to_numpy(), e.u.to_numpy()] = 1.0
        for _, cc in concepts.iterrows():
            a = a_run[a_run.concept == cc.concept].sort_values(["agent", "k"])
            K = int(cc.K)
            b0 = a.b0.to_numpy().reshape(n, K)
            kappa = a.kappa.to_numpy().reshape(n, K)[:, 0]
            bstar = np.full((n, K), np.nan)
            if not cc.coupled_in:
                try:
                    bstar = dirichlet.fj_fixed_point(kappa, b0, cc.gamma, cc.w, adjacency=adj)
                except ValueError:
                    pass
            out.append(pd.DataFrame({"run": rr.run, "agent": a.agent.to_numpy(), "concept": cc.concept,
                                     "k": a.k.to_numpy(), "b_star": bstar.ravel()}))
    return pd.concat(out, ignore_index=True)


def concept_metrics(tables: dict[str, pd.DataFrame], cfg: BeliefConfig,
                    bstar: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per concept, per concept x stance) metrics."""
    bel, concepts, ap = tables["beliefs"], tables["concepts"], tables["appraisals"]
    rounds = int(tables["runs"].rounds.iloc[0])
    bel = bel.assign(concept=bel.concept.astype(str), stance=bel.stance.astype(str))
    ap = ap.assign(concept=ap.concept.astype(str))
    crow, srow = [], []
    for _, cc in concepts.iterrows():
        b = bel[bel.concept == cc.concept]
        free = b[~b.committed]
        start, end = free[free["round"] == 0], free[free["round"] == rounds]
        var0 = start.groupby(["run", "k"]).b.var(ddof=0).groupby("k").mean()
        var1 = end.groupby(["run", "k"]).b.var(ddof=0).groupby("k").mean()
        allend = b[b["round"] == rounds].merge(bstar[bstar.concept == cc.concept].drop(columns="concept"),
                                               on=["run", "agent", "k"])
        per = allend.groupby(["agent", "k"])[["b", "b_star"]].mean()
        names = json.loads(cc.stances)
        for k, name in enumerate(names):
            pk = per.xs(k, level="k")
            srow.append({"concept": cc.concept, "stance": name, "k": k,
                         "initial_mean": float(start[start.k == k].b.mean()),
                         "final_mean": float(end[end.k == k].b.mean()),
                         "landing_shift": float(end[end.k == k].b.mean() - start[start.k == k].b.mean()),
                         "initial_variance": float(var0.get(k, np.nan)), "final_variance": float(var1.get(k, np.nan)),
                         "fj_r2": r2_no_intercept(pk.b, pk.b_star),
                         "b_star_mean": float(allend[allend.k == k].b_star.mean())})
        a = ap[(ap.concept == cc.concept) & (ap.k == 0)]
        ok = ap[(ap.concept == cc.concept) & ~ap.failed]
        fv = float(var1.sum())
        crow.append({"concept": cc.concept, "K": int(cc.K), "gamma": float(cc.gamma), "w": float(cc.w),
                     "population": cc.population, "coupled_in": bool(cc.coupled_in),
                     "initial_variance": float(var0.sum()), "final_variance": fv,
                     "persists": bool(fv > cfg.analysis.persist_threshold),
                     "max_landing_shift": float(max(abs(r["landing_shift"]) for r in srow if r["concept"] == cc.concept)),
                     "fj_r2": r2_no_intercept(per.b, per.b_star),
                     "utterances": len(a), "appraisal_failures": int(a.failed.sum()),
                     "appraisal_failure_rate": float(a.failed.mean()) if len(a) else float("nan"),
                     "channel_pearson": pearson(ok.s, ok.e_appraised)})
    return pd.DataFrame(crow), pd.DataFrame(srow)


def kappa_recovery(tables: dict[str, pd.DataFrame], cfg: BeliefConfig,
                   by_seed: list[pd.DataFrame] | None = None) -> pd.DataFrame:
    """Per (concept, prescribed kappa): kappa_hat from s per stance coordinate and pooled (least
    squares over the well-conditioned coordinates |s_k - b_k| > filter), the pooled median with a
    run-clustered bootstrap interval, and the exactness check with the consumed e (max relative
    error over coordinates and pooled). ``by_seed`` (a list) receives each concept's per-seed rank
    recovery (``analysis.recovery_by_seed``)."""
    ev, concepts = tables["events"], tables["concepts"]
    thr = cfg.analysis.kappa_filter
    an = cfg.analysis
    rows = []
    for _, cc in concepts.iterrows():
        d = ev[(ev.concept == cc.concept) & np.isfinite(ev.kappa)]
        if d.empty:
            continue
        first, a = _per_event(d, ("b_before", "b_after", "s", "e", "b0"), int(cc.K))
        b, b1, s, e, b0 = (a[c] for c in ("b_before", "b_after", "s", "e", "b0"))
        m, kap = first.m.to_numpy(), first.kappa.to_numpy()
        g, w = float(cc.gamma), float(cc.w)
        k_s = dirichlet.kappa_hat(b, b1, s, b0, m, g, w)
        k_e = dirichlet.kappa_hat(b, b1, e, b0, m, g, w)
        keep_s = dirichlet.well_conditioned(s, b, thr) & np.isfinite(k_s)
        keep_e = dirichlet.well_conditioned(e, b, thr) & np.isfinite(k_e)
        pool_s = dirichlet.kappa_hat_pooled(b, b1, s, b0, m, g, w, mask=keep_s)
        pool_e = dirichlet.kappa_hat_pooled(b, b1, e, b0, m, g, w, mask=keep_e)
        run = first.run.to_numpy()
        if by_seed is not None:
            by_seed.append(recovery_by_seed(first.seed, kap, pool_s).assign(concept=cc.concept, gamma=g))
        for kv in np.unique(kap):
            sel = kap == kv
            fin = np.isfinite(pool_s[sel])
            ps = pool_s[sel][fin]
            iv = kappa_interval(ps, run[sel][fin], n_boot=an.n_boot, seed=cfg.seed, ci=an.ci)
            cs = k_s[sel][keep_s[sel]]
            rel_e = np.concatenate([np.abs(k_e[sel][keep_e[sel]] - kv) / kv,
                                    np.abs(pool_e[sel][np.isfinite(pool_e[sel])] - kv) / kv])
            rows.append({"concept": cc.concept, "K": int(cc.K), "kappa": float(kv), "gamma": g,
                         "events": int(sel.sum()), "retained": float(np.isfinite(pool_s[sel]).mean()),
                         "kappa_hat_median": float(np.median(ps)) if len(ps) else float("nan"),
                         "kappa_hat_iqr": float(np.subtract(*np.percentile(ps, [75, 25]))) if len(ps) else float("nan"),
                         **interval_columns(iv),
                         "kappa_hat_coord_median": float(np.median(cs)) if len(cs) else float("nan"),
                         "rel_error": float(abs(np.median(ps) - kv) / kv) if len(ps) else float("nan"),
                         "exact_max_rel_error": float(rel_e.max()) if len(rel_e) else float("nan")})
    return pd.DataFrame(rows, columns=KAPPA_COLUMNS)


def trajectories(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per (concept, stance, round): mean credence over agents and seeds, and the cross-agent
    variance (mean over seeds)."""
    bel = tables["beliefs"]
    bel = bel.assign(concept=bel.concept.astype(str), stance=bel.stance.astype(str))
    mean = bel.groupby(["concept", "k", "stance", "round"], as_index=False).b.mean()
    var = (bel.groupby(["concept", "k", "run", "round"]).b.var(ddof=0)
           .groupby(["concept", "k", "round"]).mean().rename("variance").reset_index())
    return mean.merge(var, on=["concept", "k", "round"])


def analyse(tables: dict[str, pd.DataFrame], cfg: BeliefConfig,
            provenance: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    prov = provenance or {}
    bstar = fixed_points(tables)
    cm, sm = concept_metrics(tables, cfg, bstar)
    parts: list[pd.DataFrame] = []
    kr = kappa_recovery(tables, cfg, parts)
    ks = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["seed", "levels", "spearman", "median_rel_error", "concept", "gamma"])
    tr = trajectories(tables)
    ap = tables["appraisals"]
    a0 = ap[ap.k == 0]
    headline: dict[str, Any] = {
        "concepts": len(cm), "couplings": bool(cfg.couplings),
        "appraiser_tau": prov.get("appraiser_tau"),
        "appraisal_failure_rate": float(a0.failed.mean()) if len(a0) else None,
        "kappa_exact_max_rel_error": float(kr.exact_max_rel_error.max()) if len(kr) else None,
    }
    for _, r in cm.iterrows():
        kc = kr[kr.concept == r.concept]
        headline.update({f"{r.concept}.final_variance": r.final_variance, f"{r.concept}.persists": r.persists,
                         f"{r.concept}.max_landing_shift": r.max_landing_shift, f"{r.concept}.fj_r2": r.fj_r2,
                         f"{r.concept}.kappa_median_rel_error": float(kc.rel_error.median()) if len(kc) else None,
                         **{f"{r.concept}.{k}": v for k, v in seed_headline(ks[ks.concept == r.concept]).items()}})
    summary = {
        "experiment": cfg.name, "mode": cfg.mode, "kind": KIND, "topic": cfg.topic,
        "model": prov.get("model") if cfg.mode == "llm" else None,
        "runs": len(tables["runs"]), "event_rows": len(tables["events"]),
        "concept_updates": int((tables["events"].k == 0).sum()),
        "utterances": len(tables["utterances"]),
        "headline": {k: nan_to_none(v) for k, v in headline.items()},
        "concepts": records(cm), "stances": records(sm), "kappa_recovery": records(kr),
        "kappa_recovery_by_seed": records(ks),
    }
    derived = {"concept_metrics": cm, "stance_metrics": sm, "kappa_recovery": kr, "kappa_recovery_by_seed": ks,
               "fixed_points": bstar,
               "trajectories": tr}
    return summary, derived
