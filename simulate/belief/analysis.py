"""Headline metrics computed from a run directory's tables alone.

Per condition: where beliefs start and land, cross-agent variance, whether disagreement
persists, R^2 of terminal beliefs against the mean-field FJ fixed point (at gamma = 1, where the
system is singular, against its gamma -> 1 limit; ``fj_reference`` names which); per (condition, kappa):
kappa recovered from events with the speaker's latent belief s (the channel test) and with the
consumed evidence e (exact by construction); across conditions: the committed-minority
dose-response and kappa-recovery rank order; the channel audit (transfer curve of e against s,
Pearson) and the probe audit (belief vs self-report r)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from . import bayes
from .config import BeliefConfig
from chorus.core.stats import MIN_UNITS, Interval, cluster_bootstrap
from chorus.core.config import InputError


def pearson(x, y) -> float:
    return float("nan") if pearson_undefined(x, y) else float(np.corrcoef(*_finite_pairs(x, y))[0, 1])


def _finite_pairs(x, y) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    return x[ok], y[ok]


def pearson_undefined(x, y, names: tuple[str, str] = ("x", "y")) -> str | None:
    """Why Pearson's r of ``x`` and ``y`` is undefined (fewer than 3 finite pairs, or one side constant:
    r divides by its spread), else None. The summary records it beside the missing value."""
    a, b = _finite_pairs(x, y)
    if len(a) < 3:
        return f"fewer than 3 finite ({names[0]}, {names[1]}) pairs ({len(a)})"
    for v, nm in ((a, names[0]), (b, names[1])):
        if np.ptp(v) == 0:
            return f"{nm} is constant ({v[0]:.4g} on all {len(v)} pairs): a correlation needs spread on both sides"
    return None


def kappa_interval(values, clusters, *, n_boot: int, seed: int, ci: float, resampled: str = "run",
                   min_units: int = MIN_UNITS) -> Interval:
    """The median of ``values`` (the retained kappa_hat of one prescribed kappa) with its ``ci`` interval
    under a bootstrap that resamples whole ``clusters`` (runs: a run's events share its agents and its
    history, so agents or events of one run are not independent units). Over fewer than ``min_units``
    runs it is refused (NaN bounds, the reason in ``refused``): five runs resampled give bounds that are
    mostly the draw's own noise. The ``Interval`` names the unit and how many there were."""
    v = np.asarray(values, dtype=float)
    return cluster_bootstrap(lambda i: float(np.median(v[i])) if len(i) else float("nan"), np.asarray(clusters),
                             n_boot=n_boot, seed=seed, ci=ci, resampled=resampled, min_units=min_units)


def interval_columns(iv: Interval, prefix: str = "kappa_hat_ci") -> dict:
    """A kappa row's interval columns: ``{prefix}_low``, ``_high``, ``_resampled``, ``_units``, ``_refused``,
    ``_level``."""
    return {f"{prefix}_low": float(iv[1]), f"{prefix}_high": float(iv[2]), f"{prefix}_resampled": iv.resampled,
            f"{prefix}_units": iv.n_units, f"{prefix}_refused": iv.refused, f"{prefix}_level": iv.ci}


def median_interval(values, clusters, *, n_boot: int, seed: int, ci: float, min_units: int = 0) -> tuple[float, float]:
    """``kappa_interval``'s bounds alone (no floor on the units unless ``min_units``)."""
    v = np.asarray(values, dtype=float)
    if not len(v) or n_boot == 0:
        return float("nan"), float("nan")
    _, lo, hi = kappa_interval(v, clusters, n_boot=n_boot, seed=seed, ci=ci, min_units=min_units)
    return float(lo), float(hi)


def recovery_by_seed(seed, kappa, k_hat) -> pd.DataFrame:
    """Table 2's caption (the belief-layer paper): per replicate seed, the median kappa_hat of each
    prescribed kappa (NaN estimates dropped) and the Spearman correlation over the levels, beside the
    median relative error. Pass the retained events of one gamma (and one concept)."""
    df = pd.DataFrame({"seed": np.asarray(seed), "kappa": np.asarray(kappa, float),
                       "k": np.asarray(k_hat, float)})
    df = df[np.isfinite(df.k)]
    rows = []
    for s, d in df.groupby("seed", sort=True):
        lv = d.groupby("kappa").k.median()
        rel = (lv - lv.index.to_numpy()).abs() / lv.index.to_numpy()
        rows.append({"seed": int(s), "levels": int(len(lv)),
                     "spearman": spearman(lv.index, lv.values) if len(lv) >= 3 else float("nan"),
                     "median_rel_error": float(rel.median()) if len(rel) else float("nan")})
    return pd.DataFrame(rows, columns=["seed", "levels", "spearman", "median_rel_error"])


def seed_headline(by_seed: pd.DataFrame) -> dict[str, Any]:
    """The per-seed recovery in three numbers: how many seeds have a rank correlation, its smallest
    value, and whether every one is 1."""
    sp = by_seed["spearman"].dropna() if len(by_seed) else pd.Series(dtype=float)
    return {"kappa_spearman_seeds": int(len(sp)), "kappa_spearman_by_seed_min": float(sp.min()) if len(sp) else None,
            "kappa_spearman_every_seed_one": bool(len(sp) and np.allclose(sp, 1.0)) if len(sp) else None}


def spearman(x, y) -> float:
    from scipy.stats import spearmanr
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3 or np.ptp(x[ok]) == 0 or np.ptp(y[ok]) == 0:
        return float("nan")
    return float(spearmanr(x[ok], y[ok]).statistic)


def r2_no_intercept(y, ref) -> float:
    """1 - SS_res/SS_tot with the reference used as is (no refit)."""
    y = np.asarray(y, dtype=float)
    ref = np.asarray(ref, dtype=float)
    ok = np.isfinite(y) & np.isfinite(ref)
    if ok.sum() < 2:
        return float("nan")
    ss_tot = float(np.sum((y[ok] - y[ok].mean()) ** 2))
    if ss_tot == 0:
        return float("nan")
    return 1.0 - float(np.sum((y[ok] - ref[ok]) ** 2)) / ss_tot


#: what ``b_star`` is: the FJ fixed point, or (gamma = 1, no committed agent: the system is
#: singular, every consensus is a fixed point) the limit of the fixed point as gamma -> 1
FJ_REFERENCES = ("fj_fixed_point", "fj_limit_gamma_to_1")


def fj_limit_gamma_to_1(kappa, b0, adjacency=None) -> np.ndarray:
    """lim_{gamma -> 1} of the mean-field FJ fixed point with every kappa finite: a consensus
    per connected component at c = sum_i pi_i kappa_i b0_i / sum_i pi_i kappa_i, pi the
    stationary weights of W (uniform on the complete graph, the degree on an undirected graph).

    Why: with eps = 1 - gamma, 1 - lambda_i = kappa_i eps / w + O(eps^2); writing b* = c 1 + eps v
    in b* = Lambda W b* + (I - Lambda) b0 gives (I - W) v = (kappa / w) (b0 - c) to first order,
    and pi (I - W) = 0 forces sum_i pi_i kappa_i (b0_i - c) = 0 (w drops out)."""
    from scipy.sparse.csgraph import connected_components

    kappa = np.asarray(kappa, dtype=float)
    b0 = np.asarray(b0, dtype=float)
    n = len(b0)
    kappa = np.broadcast_to(kappa, b0.shape)
    if not np.all(np.isfinite(kappa)):
        raise InputError("the gamma -> 1 limit is for populations without committed agents (kappa = inf); "
                         "with one the fixed point exists at gamma = 1")
    if adjacency is None:
        pi, comp = np.ones(n), np.zeros(n, dtype=int)
    else:
        A = np.asarray(adjacency, dtype=float)
        A = np.maximum(A, A.T)
        pi = A.sum(1)
        if np.any(pi == 0):
            raise InputError("adjacency has an isolated agent (no neighbours)")
        _, comp = connected_components(A, directed=False)
    out = np.empty(n)
    for c in np.unique(comp):
        m = comp == c
        wgt = pi[m] * kappa[m]
        out[m] = float(np.sum(wgt * b0[m]) / np.sum(wgt))
    return out


def fixed_points(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Mean-field FJ reference b* per (run, agent), from each run's own graph; ``reference`` says
    which (``FJ_REFERENCES``): the FJ fixed point, or at gamma = 1 without committed agents, where
    the system is singular, its limit as gamma -> 1 (``fj_limit_gamma_to_1``: the consensus at the
    kappa-weighted initial mean). NaN where neither exists."""
    runs, agents, edges = tables["runs"], tables["agents"], tables["edges"]
    out = []
    for _, rr in runs.iterrows():
        a = agents[agents.run == rr.run].sort_values("agent")
        n = len(a)
        adj = None
        if rr.topology != "complete":
            e = edges[edges.run == rr.run]
            adj = np.zeros((n, n))
            adj[e.u.to_numpy(), e.v.to_numpy()] = 1.0
            adj[e.v.to_numpy(), e.u.to_numpy()] = 1.0
        ref = FJ_REFERENCES[0]
        try:
            bstar = bayes.fj_fixed_point(a.kappa.to_numpy(), a.b0.to_numpy(), rr.gamma, rr.w,
                                        adjacency=adj)
        except ValueError:
            bstar, ref = np.full(n, np.nan), None
            if float(rr.gamma) == 1.0 and np.all(np.isfinite(a.kappa.to_numpy())):
                try:
                    bstar, ref = fj_limit_gamma_to_1(a.kappa.to_numpy(), a.b0.to_numpy(), adj), FJ_REFERENCES[1]
                except ValueError:
                    pass
        out.append(pd.DataFrame({"run": rr.run, "agent": a.agent.to_numpy(), "b_star": bstar,
                                 "reference": ref}))
    return pd.concat(out, ignore_index=True)


def trajectories(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per (condition, round, agent): belief averaged over seeds."""
    bel = tables["beliefs"]
    return bel.groupby(["condition", "round", "agent"], as_index=False)["b"].mean()


def condition_metrics(tables: dict[str, pd.DataFrame], cfg: BeliefConfig,
                      bstar: pd.DataFrame) -> pd.DataFrame:
    runs, bel, ut = tables["runs"], tables["beliefs"], tables["utterances"]
    rows = []
    for cond, rs in runs.groupby("condition", sort=True):
        r0 = rs.iloc[0]
        b = bel[bel.condition == cond]
        free = b[~b.committed]
        start = free[free["round"] == 0]
        end = free[free["round"] == r0.rounds]
        late = free[free["round"] > 0.75 * r0.rounds]
        init_var = start.groupby("run")["b"].var(ddof=0).mean()
        final_var = end.groupby("run")["b"].var(ddof=0).mean()
        # per-agent terminal belief averaged over seeds vs seed-averaged fixed point
        allend = b[b["round"] == r0.rounds].merge(bstar, on=["run", "agent"])
        per_agent = allend.groupby("agent")[["b", "b_star"]].mean()
        u = ut[ut.condition == cond]
        rows.append({
            "condition": int(cond), "label": r0.label, "population": r0.population,
            "gamma": float(r0.gamma), "w": float(r0.w), "kappa": float(r0.kappa),
            "committed_fraction": float(r0.committed_fraction), "n_committed": int(r0.n_committed),
            "n_agents": int(r0.n_agents), "rounds": int(r0.rounds), "topology": r0.topology,
            "topic": r0.topic, "n_runs": int(len(rs)),
            "initial_mean": float(start.b.mean()), "final_mean": float(end.b.mean()),
            "late_mean": float(late.b.mean()),
            "landing_shift": float(end.b.mean() - start.b.mean()),
            "initial_variance": float(init_var), "final_variance": float(final_var),
            "persists": bool(final_var > cfg.analysis.persist_threshold),
            "fj_r2": r2_no_intercept(per_agent.b, per_agent.b_star),
            "fj_reference": _reference(bstar, rs.run),
            # R^2 against a consensus reference is <= 0 by construction (the reference has no spread);
            # the root-mean-square distance to it is the readable number there
            "fj_rmse": float(np.sqrt(np.mean((per_agent.b - per_agent.b_star) ** 2))),
            "free_b_star_mean": float(allend[~allend.committed].b_star.mean()),
            "utterances": int(len(u)), "appraisal_failures": int(u.failed.sum()),
            "appraisal_failure_rate": float(u.failed.mean()) if len(u) else float("nan"),
            "channel_pearson": pearson(u.s, u.e),
            "belief_probe_r": pearson(b.b, b.probe),
            "probe_failures": int(((b["round"] > 0) & b.probe.isna()).sum()),
        })
    return pd.DataFrame(rows)


def _reference(bstar: pd.DataFrame, runs: pd.Series) -> str | None:
    """The condition's FJ reference (``FJ_REFERENCES``); None where no run has one."""
    refs = sorted(set(bstar[bstar.run.isin(runs)].reference.dropna()))
    return "+".join(refs) if refs else None


def _kappa_events(tables: dict[str, pd.DataFrame], cfg: BeliefConfig) -> pd.DataFrame:
    """Per listener event with a finite kappa: kappa_hat from s and from e, whether each is well
    conditioned (|x - b| > filter), and the event's run, seed and gamma."""
    ev, runs = tables["events"], tables["runs"]
    thr = cfg.analysis.kappa_filter
    ev = ev[np.isfinite(ev.kappa.to_numpy())]
    g = runs.set_index("run")[["gamma", "w"]]
    gamma = g.gamma.reindex(ev.run).to_numpy()
    w = g.w.reindex(ev.run).to_numpy()
    b, b1, s, e = (ev[c].to_numpy() for c in ("b_before", "b_after", "s", "e"))
    k_s = bayes.kappa_hat(b, b1, s, ev.b0.to_numpy(), ev.m.to_numpy(), gamma, w)
    k_e = bayes.kappa_hat(b, b1, e, ev.b0.to_numpy(), ev.m.to_numpy(), gamma, w)
    keep_s = bayes.well_conditioned(s, b, thr) & np.isfinite(k_s)
    keep_e = bayes.well_conditioned(e, b, thr) & np.isfinite(k_e)
    kappa = ev.kappa.to_numpy()
    return pd.DataFrame({"condition": ev.condition.to_numpy(), "run": ev.run.to_numpy(),
                         "seed": runs.set_index("run").seed.reindex(ev.run).to_numpy(), "gamma": gamma,
                         "kappa": kappa, "k_s": k_s, "keep_s": keep_s, "k_e": k_e, "keep_e": keep_e,
                         "rel_e": np.abs(k_e - kappa) / kappa})


def kappa_recovery(tables: dict[str, pd.DataFrame], cfg: BeliefConfig) -> pd.DataFrame:
    """Per (condition, prescribed kappa): kappa_hat from s on well-conditioned events
    (|s-b| > filter), its median with a run-clustered bootstrap interval (refused, with the reason, over
    fewer than ``MIN_UNITS`` runs; ``kappa_interval``), and the exactness check with e."""
    df = _kappa_events(tables, cfg)
    a = cfg.analysis
    rows = []
    for (cond, kap), d in df.groupby(["condition", "kappa"], sort=True):
        ks = d.k_s[d.keep_s]
        iv = kappa_interval(ks, d.run[d.keep_s], n_boot=a.n_boot, seed=cfg.seed, ci=a.ci)
        rows.append({"condition": int(cond), "kappa": float(kap), "gamma": float(d.gamma.iloc[0]),
                     "events": int(len(d)), "retained": float(d.keep_s.mean()),
                     "kappa_hat_median": float(ks.median()) if len(ks) else float("nan"),
                     "kappa_hat_iqr": float(ks.quantile(.75) - ks.quantile(.25)) if len(ks) else float("nan"),
                     **interval_columns(iv),
                     "rel_error": float(abs(ks.median() - kap) / kap) if len(ks) else float("nan"),
                     "exact_max_rel_error": float(d.rel_e[d.keep_e].max()) if d.keep_e.any() else float("nan")})
    return pd.DataFrame(rows)


def kappa_recovery_by_seed(tables: dict[str, pd.DataFrame], cfg: BeliefConfig) -> pd.DataFrame:
    """``recovery_by_seed`` per gamma: each replicate seed's rank recovery over the kappa levels."""
    df = _kappa_events(tables, cfg)
    df = df[df.keep_s]
    parts = [recovery_by_seed(d.seed, d.kappa, d.k_s).assign(gamma=float(g)) for g, d in df.groupby("gamma")]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["seed", "levels", "spearman", "median_rel_error", "gamma"])


def transfer_curve(ut: pd.DataFrame, bins: int) -> pd.DataFrame:
    edges = np.linspace(0, 1, bins + 1)
    u = ut[np.isfinite(ut.e)]
    idx = np.clip(np.digitize(u.s, edges) - 1, 0, bins - 1)
    g = pd.DataFrame({"bin": idx, "s": u.s.to_numpy(), "e": u.e.to_numpy()}).groupby("bin")
    out = g.agg(s_mean=("s", "mean"), e_mean=("e", "mean"), e_std=("e", "std"), n=("e", "size"))
    out = out.reindex(range(bins)).reset_index()
    out["s_lo"], out["s_hi"] = edges[:-1], edges[1:]
    return out


def dose_response(cm: pd.DataFrame, runs: pd.DataFrame, tipping_ratio: float) -> tuple[pd.DataFrame, list[dict]]:
    """Committed conditions: free agents' mean belief vs the committed fraction, per family of
    otherwise-equal conditions, with the stylised full-following reference and the mean-field
    FJ level. The response is the free agents' mean over the last quarter of rounds
    (``late_mean``; the round-end snapshot ``final_mean`` is kept beside it): with sequential
    turns a pliable agent's round-end belief depends on who happened to speak last, and the
    late-time average removes that turn-order noise. ``smooth`` = monotone and no slope above
    ``tipping_ratio`` x the median slope."""
    c = cm[cm.population == "committed"].copy()
    if c.empty:
        return pd.DataFrame(), []
    c["f"] = c.n_committed / c.n_agents
    fam_cols = ["gamma", "w", "kappa", "n_agents", "rounds", "topology", "topic"]
    free_b0 = c.initial_mean  # free agents start at free_b0
    c["reference"] = [float(bayes.committed_minority_meanfield(f, b, k, r, g, w))
                      for f, b, k, r, g, w in zip(c.f, free_b0, c.kappa, c.rounds, c.gamma, c.w)]
    fams = []
    for key, d in c.groupby(fam_cols, sort=True):
        # conditions of one family at the same fraction (they differ only outside the family's
        # columns) are one point, their mean: a slope needs two distinct fractions
        d = d.groupby("f", as_index=False, sort=True)["late_mean"].mean()
        y, f = d.late_mean.to_numpy(), d.f.to_numpy()
        if len(d) < 2:
            continue  # one point is no dose-response
        slopes = np.diff(y) / np.diff(f)
        monotone = bool(np.all(slopes > 0))
        ratio = float(slopes.max() / np.median(slopes)) if monotone else float("nan")
        fams.append({**dict(zip(fam_cols, key)), "points": int(len(d)), "monotone": monotone,
                     "tipping_ratio": ratio,
                     "smooth": bool(monotone and len(slopes) >= 2 and ratio < tipping_ratio)})
    return c[["condition", "label", "gamma", "kappa", "f", "late_mean", "final_mean", "reference",
              "free_b_star_mean"]], fams


def nan_to_none(x: Any) -> Any:
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, (np.floating,)):
        return None if np.isnan(x) else float(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def records(df: pd.DataFrame) -> list[dict]:
    return [{k: nan_to_none(v) for k, v in r.items()} for r in df.to_dict(orient="records")]


def analyse(tables: dict[str, pd.DataFrame], cfg: BeliefConfig,
            provenance: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    """(summary, derived tables) from the run's tables."""
    prov = provenance or {}
    bstar = fixed_points(tables)
    cm = condition_metrics(tables, cfg, bstar)
    kr = kappa_recovery(tables, cfg)
    ks = kappa_recovery_by_seed(tables, cfg)
    tc = transfer_curve(tables["utterances"], cfg.analysis.transfer_bins)
    dr, fams = dose_response(cm, tables["runs"], cfg.analysis.tipping_ratio)
    ut, bel = tables["utterances"], tables["beliefs"]

    gammas = sorted(cm.gamma.unique())
    g0 = cfg.gamma if cfg.gamma in gammas else gammas[0]
    at = cm[cm.gamma == g0]

    def first(pop: str) -> dict | None:
        d = at[at.population == pop]
        return None if d.empty else d.iloc[0].to_dict()

    dg, fj = first("degroot"), first("fj")
    krg = kr[(kr.gamma == g0)].dropna(subset=["kappa_hat_median"])
    kap_levels = krg.groupby("kappa").kappa_hat_median.median()
    rel = krg.groupby("kappa").rel_error.median()
    fam0 = [f for f in fams if f["gamma"] == g0]
    headline = {
        "gamma": g0,
        "appraiser_tau": prov.get("appraiser_tau"),
        "appraisal_failure_rate": float(ut.failed.mean()) if len(ut) else None,
        "channel_pearson": pearson(ut.s, ut.e),
        "belief_probe_r": pearson(bel.b, bel.probe),
        "degroot_initial_mean": dg["initial_mean"] if dg else None,
        "degroot_landing": dg["final_mean"] if dg else None,
        "degroot_final_variance": dg["final_variance"] if dg else None,
        "fj_final_variance": fj["final_variance"] if fj else None,
        "fj_persists": fj["persists"] if fj else None,
        "fj_r2": fj["fj_r2"] if fj else None,
        "fj_reference": fj["fj_reference"] if fj else None,
        "fj_rmse": fj["fj_rmse"] if fj else None,
        "committed_monotone": fam0[0]["monotone"] if fam0 else None,
        "committed_smooth": fam0[0]["smooth"] if fam0 else None,
        "committed_tipping_ratio": fam0[0]["tipping_ratio"] if fam0 else None,
        "kappa_levels": int(len(kap_levels)),
        "kappa_spearman": spearman(kap_levels.index, kap_levels.values) if len(kap_levels) >= 3 else None,
        "kappa_median_rel_error": float(rel.median()) if len(rel) else None,
        "kappa_mean_rel_error": float(rel.mean()) if len(rel) else None,
        "kappa_exact_max_rel_error": float(kr.exact_max_rel_error.max()) if len(kr) else None,
        "kappa_retained": float(krg.retained.mean()) if len(krg) else None,
        **seed_headline(ks[ks.gamma == g0] if len(ks) else ks),
    }
    summary = {
        "experiment": cfg.name, "mode": cfg.mode,
        "model": prov.get("model") if cfg.mode == "llm" else None,
        "conditions_n": int(len(cm)), "runs": int(len(tables["runs"])),
        "events": int(len(tables["events"])), "utterances": int(len(ut)),
        "headline": {k: nan_to_none(v) for k, v in headline.items()},
        # why a headline value is undefined, beside it (the report shows the reason, never a bare blank)
        "undefined": {k: why for k, why in {
            "channel_pearson": pearson_undefined(ut.s, ut.e, ("stance s", "appraised evidence e")),
            "belief_probe_r": pearson_undefined(bel.b, bel.probe, ("belief b", "probe reading")),
            "kappa_spearman": None if len(kap_levels) >= 3 else
            f"needs at least 3 kappa levels with a recovered estimate ({len(kap_levels)})",
        }.items() if why is not None and nan_to_none(headline.get(k)) is None},
        "conditions": records(cm), "kappa_recovery": records(kr), "kappa_recovery_by_seed": records(ks),
        "committed_families": [{k: nan_to_none(v) for k, v in f.items()} for f in fams],
        "dose_response": records(dr) if len(dr) else [],
        "transfer": records(tc),
    }
    derived = {"condition_metrics": cm, "kappa_recovery": kr, "kappa_recovery_by_seed": ks, "transfer": tc,
               "fixed_points": bstar}
    if len(dr):
        derived["dose_response"] = dr
    return summary, derived
