"""The decomposition of a cross-appraisal run (``cross.py``): pure math over its appraisals table,
no model code and no I/O.

Each (generator g, appraiser a) pair's channel bias, mean over g's utterances of (e - s), and
its slope of e on s (``pair_stats`` over the crossed matrices of ``crossed``) are fitted to
``mu + r_g + q_a`` by least squares (``additive_fit``, effects-coded ``design``): sum-to-zero r
and q by default, or q_anchor = 0 and mu = 0 with an anchor. Intervals: percentile bootstrap
over utterances (``bootstrap_pairs``, stream ``STREAM_BOOT`` of the root seed), each generator's
utterances resampled with all their appraisals. ``decompose`` returns the pair and part tables
and the fit diagnostics; ``transfer_curves`` the binned transfer curve of every pair."""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd

from chorus.core.seeding import rng

from . import analysis
from chorus.core.config import InputError

STREAM_BOOT = 32


def _effects(n: int, i: int) -> np.ndarray:
    """Effects coding of level i of n under a sum-to-zero constraint (n - 1 columns)."""
    v = np.zeros(n - 1)
    if i < n - 1:
        v[i] = 1.0
    else:
        v[:] = -1.0
    return v


def design(n_gen: int, n_app: int, pairs: list[tuple[int, int]]) -> np.ndarray:
    """Effects-coded design of bias(g, a) = mu + r_g + q_a under sum r = sum q = 0: columns
    [mu, r_0..r_{G-2}, q_0..q_{A-2}]; the last generator's (appraiser's) part is minus the sum
    of the others."""
    return np.array([np.concatenate([[1.0], _effects(n_gen, g), _effects(n_app, a)]) for g, a in pairs])


def additive_fit(B: np.ndarray, anchor: int | None = None) -> dict[str, np.ndarray]:
    """Least-squares fit of the (..., M, M) pair matrix B[g, a] (NaN = unobserved pair) to
    mu + r_g + q_a. Sum-to-zero r and q, mu the grand mean (with every pair observed: r = row
    means - mu, q = column means - mu); ``anchor`` k: q_k = 0 and mu = 0 instead (r_g absolute,
    as k reads). A generator (appraiser) with no observed pair is left out of the fit and of its
    constraint (its part NaN). Leading dimensions are replicates; a replicate missing a pair the
    others have is NaN. Returns mu (...), r (..., M), q (..., M), fitted and resid (..., M, M).
    Raises ValueError when the observed pairs do not identify the parts."""
    B = np.asarray(B, dtype=float)
    M = B.shape[-1]
    lead = B.shape[:-2]
    flat = B.reshape(-1, M * M)
    seen = np.isfinite(flat).any(0)
    gens = [g for g in range(M) if seen.reshape(M, M)[g].any()]
    apps = [a for a in range(M) if seen.reshape(M, M)[:, a].any()]
    pairs = [(g, a) for g in range(M) for a in range(M) if seen[g * M + a]]
    if not pairs:
        raise InputError("no pair has a finite value (no valid appraisal; for the slope, a single speaker belief)")
    if anchor is not None and anchor not in apps:
        raise InputError(f"the anchor (model {anchor}) has no valid appraisal to anchor on")
    X = design(len(gens), len(apps), [(gens.index(g), apps.index(a)) for g, a in pairs])
    if np.linalg.matrix_rank(X) < X.shape[1]:
        raise InputError(f"the observed pairs {pairs} do not identify the additive model (every generator and "
                         f"every appraiser must be linked through observed pairs)")
    with np.errstate(invalid="ignore"):
        theta = flat[:, seen] @ np.linalg.pinv(X).T  # rows with a NaN stay NaN
    G = len(gens)
    mu = theta[:, 0]
    r, q = np.full((len(flat), M), np.nan), np.full((len(flat), M), np.nan)
    rg, qa = theta[:, 1:G], theta[:, G:]
    r[:, gens] = np.concatenate([rg, -rg.sum(1, keepdims=True)], axis=1)
    q[:, apps] = np.concatenate([qa, -qa.sum(1, keepdims=True)], axis=1)
    if anchor is not None:
        r = r + (mu + q[:, anchor])[:, None]
        q = q - q[:, [anchor]]
        mu = np.where(np.isfinite(mu), 0.0, np.nan)
    fitted = mu[:, None, None] + r[:, :, None] + q[:, None, :]
    resid = flat.reshape(-1, M, M) - fitted
    return {"mu": mu.reshape(lead), "r": r.reshape(*lead, M), "q": q.reshape(*lead, M),
            "fitted": fitted.reshape(*lead, M, M), "resid": resid.reshape(*lead, M, M)}


def pair_stats(s: np.ndarray, E: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bias mean(e - s) and OLS slope of e on s per appraiser column, over the valid rows.
    ``s``: (..., n), ``E``: (..., n, M) with NaN for failed appraisals; returns (..., M) each."""
    ok = np.isfinite(E)
    S = np.broadcast_to(s[..., None], E.shape)
    cnt = ok.sum(-2)
    with np.errstate(invalid="ignore", divide="ignore"):
        bias = np.where(ok, E - S, 0.0).sum(-2) / cnt
        sbar = np.where(ok, S, 0.0).sum(-2) / cnt
        ebar = np.where(ok, E, 0.0).sum(-2) / cnt
        ds = np.where(ok, S - sbar[..., None, :], 0.0)
        de = np.where(ok, E - ebar[..., None, :], 0.0)
        var = (ds * ds).sum(-2)
        slope = np.where((cnt >= 2) & (var > 0), (ds * de).sum(-2) / var, np.nan)
    return np.where(cnt > 0, bias, np.nan), slope


def crossed(app: pd.DataFrame, models: list[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per generator: s (n,) and the appraisals E (n, M) in panel order (NaN = failed)."""
    out = {}
    for g in models:
        d = app[app.generator == g]
        if d.empty:
            continue
        E = d.pivot(index="uid", columns="appraiser", values="e").reindex(columns=models)
        s = d.drop_duplicates("uid").set_index("uid").s.reindex(E.index)
        out[g] = (s.to_numpy(float), E.to_numpy(float))
    return out


def bootstrap_pairs(mats: dict[str, tuple[np.ndarray, np.ndarray]], models: list[str], n_boot: int,
                    seed: int, chunk: int = 250) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pair bias and slope matrices (M, M) and their bootstrap replicates (n_boot, M, M):
    each generator's utterances are resampled with all their appraisals."""
    M = len(models)
    bias, slope = np.full((M, M), np.nan), np.full((M, M), np.nan)
    bb, bs = np.full((n_boot, M, M), np.nan), np.full((n_boot, M, M), np.nan)
    g_rng = rng(seed, STREAM_BOOT)
    for gi, g in enumerate(models):
        if g not in mats:
            continue
        s, E = mats[g]
        bias[gi], slope[gi] = pair_stats(s, E)
        idx = g_rng.integers(0, len(s), (n_boot, len(s)))
        for c0 in range(0, n_boot, chunk):  # bounded memory: chunk x n x M
            i = idx[c0:c0 + chunk]
            bb[c0:c0 + chunk, gi], bs[c0:c0 + chunk, gi] = pair_stats(s[i], E[i])
    return bias, slope, bb, bs


def _interval(x: np.ndarray, ci: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval over the replicates (axis 0), each element over its finite values."""
    x = np.asarray(x, dtype=float)
    if x.shape[0] == 0:
        nan = np.full(x.shape[1:], np.nan)
        return nan, nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN element: NaN, said so by the value
        lo, hi = np.nanquantile(x, [(1 - ci) / 2, 1 - (1 - ci) / 2], axis=0)
    return lo, hi


def decompose(app: pd.DataFrame, models: list[str], n_boot: int = 1000, seed: int = 0, ci: float = 0.95,
              anchor: str | None = None) -> dict[str, Any]:
    """Pair statistics and the additive decomposition of bias and slope, with bootstrap
    intervals. Returns {"pairs": DataFrame, "parts": DataFrame, "fit": {...}}."""
    M = len(models)
    k = models.index(anchor) if anchor is not None else None
    mats = crossed(app, models)
    bias, slope, bb, bs = bootstrap_pairs(mats, models, n_boot, seed)
    rows, parts, fit_info = [], [], {}
    fits = {}
    # what every part's interval resamples: each generator's utterances, with all their appraisals
    level = {"resampled": "utterance", "n_units": int(sum(len(s) for s, _ in mats.values()))}
    for qname, point, boot in (("bias", bias, bb), ("slope", slope, bs)):
        try:
            f = additive_fit(point, k)
            fb = additive_fit(boot, k) if n_boot else None
            why = None
        except ValueError as err:  # e.g. an appraiser that failed every appraisal: said, not fitted
            nan = {"mu": np.nan, "r": np.full(M, np.nan), "q": np.full(M, np.nan),
                   "fitted": np.full((M, M), np.nan), "resid": np.full((M, M), np.nan)}
            f, fb, why = nan, None, str(err)
        fits[qname] = (f, fb)
        used = np.isfinite(fb["mu"]) if fb is not None else np.zeros(0, bool)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            fit_info[qname] = {"identified": why is None, "why_not": why,
                               "replicates_used": int(used.sum()), "replicates": n_boot,
                               "residual_rms": float(np.sqrt(np.nanmean(f["resid"] ** 2))),
                               "residual_max_abs": float(np.nanmax(np.abs(f["resid"]))),
                               "pair_sd": float(np.nanstd(point))}
        mu_lo, mu_hi = _interval(fb["mu"], ci) if fb is not None else (np.nan, np.nan)
        parts.append({"quantity": qname, "model": "*", "part": "shared", "estimate": float(f["mu"]),
                      "lo": float(mu_lo), "hi": float(mu_hi), **level})
        for part, key in (("render", "r"), ("read", "q")):
            lo, hi = _interval(fb[key], ci) if fb is not None else (np.full(M, np.nan),) * 2
            for i, m in enumerate(models):
                parts.append({"quantity": qname, "model": m, "part": part, "estimate": float(f[key][i]),
                              "lo": float(lo[i]), "hi": float(hi[i]), **level})
    b_lo, b_hi = _interval(bb, ci) if n_boot else (np.full((M, M), np.nan),) * 2
    s_lo, s_hi = _interval(bs, ci) if n_boot else (np.full((M, M), np.nan),) * 2
    for gi, g in enumerate(models):
        for ai, a in enumerate(models):
            d = app[(app.generator == g) & (app.appraiser == a)]
            rows.append({"generator": g, "appraiser": a, "self": g == a, "n": len(d),
                         "n_failed": int(d.failed.sum()),
                         "failure_rate": float(d.failed.mean()) if len(d) else np.nan,
                         "bias": bias[gi, ai], "bias_lo": b_lo[gi, ai], "bias_hi": b_hi[gi, ai],
                         "slope": slope[gi, ai], "slope_lo": s_lo[gi, ai], "slope_hi": s_hi[gi, ai],
                         "pearson": analysis.pearson(d.s, d.e),
                         "mae": float(np.nanmean(np.abs(d.e - d.s))) if d.e.notna().any() else np.nan,
                         "bias_fitted": fits["bias"][0]["fitted"][gi, ai],
                         "bias_interaction": fits["bias"][0]["resid"][gi, ai],
                         "slope_fitted": fits["slope"][0]["fitted"][gi, ai]})
    return {"pairs": pd.DataFrame(rows), "parts": pd.DataFrame(parts), "fit": fit_info}


def transfer_curves(app: pd.DataFrame, models: list[str], bins: int, z: float = 1.96) -> pd.DataFrame:
    """The binned transfer curve (analysis.transfer_curve) of every pair, with a normal-theory
    interval on each bin's mean e."""
    out = []
    for g in models:
        for a in models:
            d = app[(app.generator == g) & (app.appraiser == a)]
            tc = analysis.transfer_curve(d, bins)
            half = z * tc.e_std / np.sqrt(tc.n)
            out.append(tc.assign(generator=g, appraiser=a, e_lo=tc.e_mean - half, e_hi=tc.e_mean + half))
    cols = ["generator", "appraiser", "bin", "s_lo", "s_hi", "s_mean", "e_mean", "e_std", "e_lo", "e_hi", "n"]
    return pd.concat(out, ignore_index=True)[cols]
