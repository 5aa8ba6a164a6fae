"""The statistics every part reports with, in one place.

* Every interval names its level: ``cluster_bootstrap`` returns an ``Interval`` (a tuple carrying
  ``resampled``, ``n_units``, ``ci``, ``refused``), the dict and row helpers carry ``resampled`` and
  ``n_units``, and ``interval_text`` prints "[lo, hi] (95%, 40 questions resampled)". A bootstrap may
  refuse over fewer than ``MIN_UNITS`` units (``min_units``), saying why, rather than print bounds that
  are mostly its own draw.
* ``cluster_bootstrap``: the bootstrap engine. Any statistic of row indices under resampling
  whole clusters (question families, groups; each row its own cluster when ``clusters`` is None),
  percentile CI. ``mean_ci`` is built on it.
* ``ratio_interval`` / ``ratio_ci``: a ratio of means (the knockout / patching / ablation / transfer
  shares) with a Fieller interval from cluster-robust variances, unbounded (and saying so) when the
  denominator's own interval contains 0.
* ``max_t_band``: a family-wise (simultaneous) band over many statistics of the same rows (the
  layers of a knockout sweep) by the cluster bootstrap of the max-|t|, with single-step adjusted
  p-values: the interval of a "best" entry chosen after looking.
* ``paired_bootstrap``: the same resampling, vectorised through per-cluster sufficient
  statistics for accuracy / Brier / ECE deltas between methods (10,000 resamples of many
  method pairs in seconds), every pair on the same resamples. With ``seeds`` (generation seeds crossed
  with questions) it is the seed-clustered variant: seeds and questions resampled, two-way.
* ``bootstrap_ci``: a mean's percentile CI over independent units (``scipy.stats.bootstrap``).
* ``permutation_pvalue`` (cluster sign flips), ``benjamini_hochberg`` (scipy).
* ``ece`` and ``reliability_table`` (equal-width or equal-mass bins; soft labels allowed).

Every random draw comes from ``chorus.core.seeding`` streams of the caller's seed.
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from chorus.core.seeding import rng as make_rng
from chorus.core.config import InputError

LOWER_IS_BETTER = {"brier": True, "ece_ew": True, "accuracy": False}


# -- calibration ---------------------------------------------------------------------------------
def check_tolerance(tolerance: float, flag: str = "--tolerance") -> float:
    """A verification tolerance: a finite number >= 0. NaN would pass every comparison (no difference
    is "beyond" NaN), infinity likewise, and a negative one none: each is bad input, named."""
    import math

    if not isinstance(tolerance, (int, float)) or not math.isfinite(tolerance) or tolerance < 0:
        raise InputError(f"{flag} {tolerance!r}: must be a finite number >= 0 (NaN or infinity would pass any "
                         f"difference as agreement)")
    return float(tolerance)


def bins(conf: np.ndarray, n_bins: int, strategy: str) -> np.ndarray:
    """Bin id of every task.

    ``width``: bin k holds confidences in [k/B, (k+1)/B) (1.0 in the last bin).
    ``mass``: with the n confidences sorted, s_0 <= ... <= s_{n-1}, and B bins of the sizes
    ``np.array_split`` gives (the first n mod B bins one larger), bin k starts at sorted position
    c_k; its lower edge is the value s_{c_k}, and a confidence goes to the number of edges at or
    below it (``searchsorted(edges, conf, side="right")``). Without ties this is exactly the split
    of the sorted list; a run of tied values that straddles an edge goes whole to the upper bin
    (a repeated edge leaves a bin empty). The bins depend only on the values, never on row order."""
    conf = np.asarray(conf, float)
    if strategy in ("width", "uniform", "ew"):
        return np.minimum((conf * n_bins).astype(int), n_bins - 1)
    if strategy in ("mass", "quantile", "em"):
        n = len(conf)
        sizes = np.full(n_bins, n // n_bins) + (np.arange(n_bins) < n % n_bins)
        starts = np.cumsum(sizes)[:-1]
        edges = np.sort(conf)[starts[starts < n]]
        return np.searchsorted(edges, conf, side="right")
    raise InputError(f"binning strategy must be 'width' or 'mass', got {strategy!r}")


def reliability_table(conf: np.ndarray, correct: np.ndarray, n_bins: int = 10,
                      strategy: str = "width") -> pd.DataFrame:
    """Per-bin count, mean confidence and accuracy (empty bins dropped)."""
    conf = np.asarray(conf, float)
    correct = np.asarray(correct, float)
    b = bins(conf, n_bins, strategy)
    cnt = np.bincount(b, minlength=n_bins)
    sc = np.bincount(b, weights=conf, minlength=n_bins)
    sa = np.bincount(b, weights=correct, minlength=n_bins)
    keep = cnt > 0
    with np.errstate(invalid="ignore"):
        return pd.DataFrame({"bin": np.arange(n_bins)[keep], "count": cnt[keep],
                             "confidence": (sc / cnt)[keep], "accuracy": (sa / cnt)[keep]})


def ece(conf: np.ndarray, correct: np.ndarray, n_bins: int = 10, strategy: str = "width") -> float:
    conf = np.asarray(conf, float)
    correct = np.asarray(correct, float)
    if len(conf) == 0:
        return float("nan")
    b = bins(conf, n_bins, strategy)
    sc = np.bincount(b, weights=conf, minlength=n_bins)
    sa = np.bincount(b, weights=correct, minlength=n_bins)
    return float(np.abs(sa - sc).sum() / len(conf))


# -- bootstrap -----------------------------------------------------------------------------------
MIN_UNITS = 10  # fewer resampled units than this and a percentile interval is mostly the draw's own noise


class Interval(tuple):
    """``(estimate, low, high)`` as every caller unpacks it, carrying what the interval resamples:
    ``resampled`` (the unit's name: "question family", "run", "seed"), ``n_units`` (how many),
    ``ci`` (the level) and ``refused`` (None, or why there are no bounds: too few units, nothing
    kept). A tuple, so ``k, lo, hi = cluster_bootstrap(...)`` keeps working where the label is not read."""
    resampled: str
    n_units: int
    ci: float
    refused: str | None

    def __new__(cls, est, lo, hi, *, resampled: str, n_units: int, ci: float, refused: str | None = None):
        self = super().__new__(cls, (est, lo, hi))
        self.resampled, self.n_units, self.ci, self.refused = resampled, int(n_units), float(ci), refused
        return self

    def __getnewargs_ex__(self):  # pickling and copying: __new__ takes the labels by keyword
        return tuple(self), {"resampled": self.resampled, "n_units": self.n_units, "ci": self.ci,
                             "refused": self.refused}

    def fields(self, prefix: str = "") -> dict:
        """The record a report row carries beside its bounds: ``{prefix}resampled``, ``{prefix}n_units``,
        ``{prefix}ci_refused``."""
        return {f"{prefix}resampled": self.resampled, f"{prefix}n_units": self.n_units,
                f"{prefix}ci_refused": self.refused}

    def text(self, nd: int = 3) -> str:
        """``[0.31, 0.52] (95%, 40 question families resampled)``; a refused one says why."""
        return interval_text(self[1], self[2], ci=self.ci, n_units=self.n_units, resampled=self.resampled,
                             refused=self.refused, nd=nd)


def plural(unit: str, n: int) -> str:
    """``unit`` counted: "1 run", "40 question families", "12 seeds"."""
    if n == 1:
        return f"{n} {unit}"
    if unit.endswith("y") and unit[-2:-1] not in "aeiou":
        return f"{n} {unit[:-1]}ies"
    return f"{n} {unit}es" if unit.endswith(("s", "x", "ch", "sh")) else f"{n} {unit}s"


def interval_text(lo, hi, *, ci: float, n_units: int | None, resampled: str | None, refused: str | None = None,
                  nd: int = 3, fmt: str | None = None, method: str | None = None) -> str:
    """How a report prints an interval with its level: "[0.310, 0.520] (95%, 40 questions resampled)",
    or "no interval (only 5 runs to resample; ...)" where it was refused. Why the level is printed: a
    question-level and a seed-level interval of one number differ by half their width (issue 51), and
    a reader cannot tell which was drawn from the bounds alone."""
    def num(x):
        if x is None or x != x:
            return "nan"
        if fmt:  # the caller's own number format ("+.3f"), so only the level text is added to its bounds
            return format(x, fmt)
        return f"{x:.{nd}f}" if x == 0 or abs(x) >= 10 ** -nd else f"{x:.3g}"
    if method:  # not a bootstrap: the method and the units it counts ("Wilson, 120 tasks")
        unit = f", {method}" + (f", {plural(resampled, int(n_units))}" if resampled and n_units is not None else "")
    else:
        unit = f", {plural(resampled, int(n_units))} resampled" if resampled and n_units is not None else ""
    if refused:
        return f"no interval ({refused})"
    return f"[{num(lo)}, {num(hi)}] ({ci:.0%}{unit})"


def record_interval_text(rec: Mapping, *, lo: str = "ci_low", hi: str = "ci_high", ci: float | None = None,
                         resampled: str | None = None, n_units: int | None = None, prefix: str = "",
                         method: str | None = None, nd: int = 3, fmt: str | None = None,
                         min_units: int = MIN_UNITS) -> str:
    """A report record's interval (``rec[lo]``, ``rec[hi]``) with its level, read from the record where
    it carries one (``{prefix}resampled``, ``{prefix}n_units``, else ``n_clusters`` / ``n_groups``;
    ``{prefix}ci_refused``; ``ci_level``) and else from the caller (``resampled``, ``n_units``: what the
    producing code resamples). A bootstrap over fewer than ``min_units`` units is refused with its
    reason; ``method`` names an interval that is no bootstrap ("Fieller", "Wilson"), never refused
    here. A record whose level nobody knows says so ("level not recorded") rather than print bare bounds."""
    def first(*keys):
        for k in keys:
            v = rec.get(k)
            if v is not None and not (isinstance(v, float) and v != v):
                return v
        return None
    unit = first(f"{prefix}resampled") or resampled
    n = first(f"{prefix}n_units", f"{prefix}n_clusters", "n_clusters", "n_groups")
    n = int(n) if n is not None else n_units
    level = ci if ci is not None else (first("ci_level") or 0.95)
    refused = first(f"{prefix}ci_refused")
    if refused is None and method is None and unit and n is not None and min_units:
        refused = too_few_units(int(n), unit, min_units)
    if unit is None or n is None:
        text = interval_text(rec.get(lo), rec.get(hi), ci=level, n_units=None, resampled=None, refused=refused,
                             nd=nd, fmt=fmt, method=method)
        return text[:-1] + ", level not recorded)" if not refused and not method else text
    text = interval_text(rec.get(lo), rec.get(hi), ci=level, n_units=n, resampled=unit, refused=refused, nd=nd,
                         fmt=fmt, method=method)
    seeds = first("n_seeds") if rec.get("seed_clustered") else None
    if seeds and not refused:  # the two-way bootstrap: seeds and questions both resampled
        text = text.replace(f"({level:.0%}, ", f"({level:.0%}, {plural('seed', int(seeds))} x ", 1)
    return text


def record_level(rec: Mapping, **kw) -> tuple[str, bool]:
    """(what the record's interval rests on, refused): ("95%, 40 question families resampled", False),
    or (why there is no interval, True) below ``MIN_UNITS`` units; ``kw`` as ``record_interval_text``.
    For tables that print the bounds in cells of their own and the level beside them."""
    text = record_interval_text(rec, **kw)
    if text.startswith("no interval ("):
        return text[len("no interval ("):-1], True
    return text[text.rfind(" (") + 2:-1], False


def too_few_units(n_units: int, resampled: str, min_units: int = MIN_UNITS) -> str | None:
    """Why a bootstrap over ``n_units`` units is refused (None when there are enough)."""
    if n_units >= min_units:
        return None
    return (f"only {plural(resampled, n_units)} to resample; a bootstrap over fewer than {min_units} units "
            f"gives bounds that are mostly its own draw")


def cluster_bootstrap(stat: Callable[[np.ndarray], float], clusters: np.ndarray, *, n_boot: int = 2000,
                      seed: int = 0, ci: float = 0.95, resampled: str = "cluster",
                      min_units: int = 0) -> Interval:
    """(estimate, low, high) of ``stat(row_indices)`` under resampling whole clusters, as an ``Interval``
    that names what it resamples (``resampled``: the unit's name) and how many units there are.
    ``min_units``: refuse (NaN bounds, ``refused`` the reason) over fewer units than this."""
    clusters = np.asarray(clusters)
    n = len(clusters)
    est = stat(np.arange(n))
    uniq, cid = np.unique(clusters, return_inverse=True)
    G = len(uniq)
    nan = float("nan")

    def out(lo, hi, refused=None):
        return Interval(est, lo, hi, resampled=resampled, n_units=G, ci=ci, refused=refused)
    if n == 0 or n_boot == 0:
        return out(nan, nan, "nothing to resample" if n == 0 else None)
    few = too_few_units(G, resampled, min_units) if min_units else None
    if few:
        return out(nan, nan, few)
    members = [np.flatnonzero(cid == k) for k in range(G)]
    rng = make_rng(seed, 11)
    vals = []
    for _ in range(n_boot):
        pick = rng.integers(0, G, G)
        idx = np.concatenate([members[k] for k in pick])
        vals.append(stat(idx))
    vals = np.asarray(vals, float)
    vals = vals[np.isfinite(vals)]
    if not len(vals):
        return out(nan, nan, "no resample gave a finite value")
    return out(float(np.quantile(vals, (1 - ci) / 2)), float(np.quantile(vals, 1 - (1 - ci) / 2)))


def mean_ci(values: np.ndarray, clusters: np.ndarray | None = None, *, n_boot: int = 2000, seed: int = 0,
            ci: float = 0.95, resampled: str | None = None) -> Interval:
    """(mean, low, high) of ``values`` (NaNs ignored) under the cluster bootstrap (``resampled``: the
    clusters' name; default "cluster", or "row" when every row is its own)."""
    v = np.asarray(values, float)
    unit = resampled or ("row" if clusters is None else "cluster")
    return cluster_bootstrap(lambda i: float(np.nanmean(v[i])) if len(i) else float("nan"),
                             np.arange(len(v)) if clusters is None else clusters, n_boot=n_boot, seed=seed, ci=ci,
                             resampled=unit)


UNBOUNDED = "unbounded (denominator interval contains 0)"  # how a table cell prints such a ratio's bounds


def _cluster_cov(U: np.ndarray, clusters: np.ndarray | None) -> tuple[np.ndarray, int]:
    """(covariance, G): the cluster-robust (CR1, Liang-Zeger with the G / (G - 1) small-sample factor)
    covariance of estimators whose per-row influence values are the columns of ``U`` (rows, k), and
    the number of clusters G. Why not the bootstrap: these are closed-form, so an interval built on
    them is exact to test and does not depend on a draw."""
    U = np.asarray(U, float)
    if clusters is None:
        cid, G = np.arange(len(U)), len(U)
    else:
        _, cid = np.unique(np.asarray(clusters), return_inverse=True)
        G = int(cid.max()) + 1 if len(cid) else 0
    S = np.zeros((G, U.shape[1]))
    np.add.at(S, cid, U)
    return (S.T @ S) * (G / (G - 1) if G > 1 else np.nan), G


def ratio_interval(num: np.ndarray, den: np.ndarray, clusters: np.ndarray | None = None, *, share: bool = False,
                   ci: float = 0.95, resampled: str | None = None) -> dict:
    """A ratio of means, R = mean(num) / mean(den) (``share``: mean(num) / (mean(num) + mean(den))),
    with its Fieller interval. NaNs in either input are ignored (each mean over its own finite rows).

    Fieller: with a = mean(num), d = the denominator's mean, their cluster-robust covariance V
    (``clusters``: rows of one cluster resampled together, as the bootstrap's; None: every row its own)
    and t the two-sided ``ci`` quantile of Student's t with G - 1 degrees of freedom (G clusters), the
    interval is every R with (a - R d)^2 <= t^2 (V_aa - 2 R V_ad + R^2 V_dd): the ratios a t-test of
    a - R d = 0 does not reject. Its bounds are the roots of
    (d^2 - t^2 V_dd) R^2 - 2 (a d - t^2 V_ad) R + (a^2 - t^2 V_aa) = 0, a finite interval exactly when
    d^2 > t^2 V_dd, that is when the denominator's own t-interval d +- t sqrt(V_dd) excludes 0.
    Otherwise the set is the whole line or two rays out to infinity: no interval of the ratio exists,
    and we say so (``ci_low`` / ``ci_high`` None, ``unbounded`` the reason, ``denominator_ci`` the
    interval that contains 0), where a percentile bootstrap would print a finite but meaningless
    interval (the resampled ratio's tails are the near-zero denominators).

    Returns {estimate, ci_low, ci_high, interval: "fieller", unbounded: None or the reason,
    denominator: d, denominator_ci: [lo, hi], n_clusters, resampled: the clusters' name (``resampled``;
    "cluster", or "row" without clusters), n_units = n_clusters}. The estimate is NaN where d is 0."""
    from scipy.stats import t as student_t

    if not 0 < ci < 1:
        raise InputError(f"interval level must be in (0, 1), got {ci!r}")
    num, den = np.asarray(num, float), np.asarray(den, float)
    if num.shape != den.shape:
        raise InputError(f"ratio: numerator has {num.shape} values, denominator {den.shape}")
    fa, fb = np.isfinite(num), np.isfinite(den)
    a = float(num[fa].mean()) if fa.any() else float("nan")
    b = float(den[fb].mean()) if fb.any() else float("nan")
    # influence of each row on each mean (0 where the row is missing from that mean)
    ua = np.where(fa, num - a, 0.0) / max(int(fa.sum()), 1)
    ub = np.where(fb, den - b, 0.0) / max(int(fb.sum()), 1)
    d, ud = (a + b, ua + ub) if share else (b, ub)
    est = a / d if d != 0 else float("nan")
    out = {"estimate": est, "ci_low": None, "ci_high": None, "interval": "fieller", "unbounded": None,
           "denominator": d, "denominator_ci": [None, None], "n_clusters": 0,
           "resampled": resampled or ("row" if clusters is None else "cluster"), "n_units": 0}
    if not len(num):
        out["unbounded"] = "no rows"
        return out
    V, G = _cluster_cov(np.column_stack([ua, ud]), clusters)
    out["n_clusters"] = out["n_units"] = G
    if G < 2 or not np.isfinite(V).all() or not np.isfinite(d):
        out["unbounded"] = f"no interval: {G} cluster(s)" if G < 2 else "no interval: missing values"
        return out
    t = float(student_t.ppf(1 - (1 - ci) / 2, G - 1))
    vaa, vad, vdd = float(V[0, 0]), float(V[0, 1]), float(V[1, 1])
    half = t * np.sqrt(vdd)
    out["denominator_ci"] = [d - half, d + half]
    A = d * d - t * t * vdd
    if A <= 0:  # the denominator's interval reaches 0: the Fieller set is unbounded
        out["unbounded"] = (f"{UNBOUNDED}: the denominator's {ci:.0%} interval is "
                            f"[{d - half:.3g}, {d + half:.3g}]")
        return out
    B = a * d - t * t * vad
    C = a * a - t * t * vaa
    root = np.sqrt(max(B * B - A * C, 0.0))  # >= 0 when A > 0: R = a / d satisfies the inequality
    out["ci_low"], out["ci_high"] = float((B - root) / A), float((B + root) / A)
    return out


def ratio_ci(num: np.ndarray, den: np.ndarray, clusters: np.ndarray | None, *, share: bool = False,
             n_boot: int = 2000, seed: int = 0, ci: float = 0.95) -> tuple[float, float, float]:
    """(estimate, low, high) of ``ratio_interval`` (Fieller), the bounds NaN where it is unbounded
    (a caller that reports the ratio should carry ``ratio_interval``'s reason: ``ratio_fields``).
    ``n_boot`` and ``seed`` are accepted for the callers written for the bootstrap interval it
    replaced and are unused: Fieller draws nothing."""
    r = ratio_interval(num, den, clusters, share=share, ci=ci)
    nan = float("nan")
    return (r["estimate"], nan if r["ci_low"] is None else r["ci_low"], nan if r["ci_high"] is None else r["ci_high"])


def ratio_fields(r: dict) -> dict:
    """The fields a report row carries for a ``ratio_interval``: the bounds (None when unbounded),
    ``interval`` ("fieller") and ``unbounded`` (None, or why there is no interval)."""
    return {"ci_low": r["ci_low"], "ci_high": r["ci_high"], "interval": r["interval"], "unbounded": r["unbounded"],
            "denominator_ci": r["denominator_ci"], "resampled": r.get("resampled"), "n_units": r.get("n_units")}


def max_t_band(num: np.ndarray, den: np.ndarray | None, clusters: np.ndarray, *, n_boot: int = 2000,
               seed: int = 0, ci: float = 0.95, chunk: int = 250, resampled: str = "cluster") -> dict:
    """A family-wise (simultaneous) band over m ratios of means R_j = mean(num[:, j]) / mean(den) (``den``
    None: the means themselves), one per layer say, and each entry's family-wise p-value for R_j = 0.

    Studentised cluster bootstrap of the max-|t| (bootstrap-t): whole clusters are resampled (the units
    of ``cluster_bootstrap``: question families, say), and per resample
    T* = max_j |R*_j - R_j| / se*_j, where se*_j is the cluster-robust (CR1, delta-method for a ratio)
    standard error computed inside that resample: studentising with the resample's own standard error
    carries the t-like tails of a few dozen clusters, which a band scaled by one bootstrap standard
    deviation misses (it covered 0.84-0.87 for a nominal 0.95 at 30 clusters and 30 layers). With c the
    ``ci`` quantile of T*, the band R_j +- c se_j covers every entry's true value at once with probability
    about ``ci``, so it covers the entry picked after looking (the largest): the interval a selected
    entry can be reported with. The single-step max-T adjusted p-value of entry j is
    (1 + #{T* >= |R_j| / se_j}) / (B + 1) (Westfall and Young 1993; Romano and Wolf 2005). Rows with a
    missing value in any column are dropped (one row set for the whole family); a resample whose
    denominator mean is 0 or whose entries are not finite is dropped.

    Returns {estimate, se, ci_low, ci_high, p_value (lists, per entry), critical: c, n_boot: resamples
    kept, n_clusters, resampled: the clusters' name, n_units = n_clusters}."""
    num = np.asarray(num, float)
    if num.ndim != 2:
        raise InputError(f"max_t_band: num must be (rows, entries), got shape {num.shape}")
    n, m = num.shape
    d = np.ones(n) if den is None else np.asarray(den, float)
    clusters = np.asarray(clusters)
    if len(d) != n or len(clusters) != n:
        raise InputError(f"max_t_band: {n} rows of num, {len(d)} of den, {len(clusters)} clusters")
    ok = np.isfinite(num).all(1) & np.isfinite(d)
    num, d, clusters = num[ok], d[ok], clusters[ok]
    nan = [float("nan")] * m
    out = {"estimate": nan, "se": nan, "ci_low": nan, "ci_high": nan, "p_value": nan, "critical": float("nan"),
           "n_boot": 0, "n_clusters": 0, "resampled": resampled, "n_units": 0}
    if not len(d):
        return out
    _, cid = np.unique(clusters, return_inverse=True)
    G = int(cid.max()) + 1
    out["n_clusters"] = out["n_units"] = G
    Sn = np.zeros((G, m))
    np.add.at(Sn, cid, num)          # per-cluster sums: every resample's statistics are weighted sums
    Sd = np.bincount(cid, weights=d, minlength=G)

    def fit(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(R, se) per weight row of W (B, G): a cluster drawn w times counts as w clusters."""
        A, D = W @ Sn, W @ Sd            # (B, m), (B,)
        with np.errstate(invalid="ignore", divide="ignore"):
            R = A / D[:, None]
            # delta-method influence of cluster g on R_j: (Sn_gj - R_j Sd_g) / D; CR1: G_eff / (G_eff - 1)
            U = (Sn[None, :, :] - R[:, None, :] * Sd[None, :, None]) / D[:, None, None]
            k = W.sum(1)
            V = (W[:, :, None] * U ** 2).sum(1) * (k / (k - 1))[:, None]
        return R, np.sqrt(V)

    R0, se0 = (x[0] for x in fit(np.ones((1, G))))
    out["estimate"] = R0.tolist()
    if G < 2 or n_boot == 0 or not np.isfinite(R0).all():
        return out
    rng = make_rng(seed, 11)
    T = []
    done = 0
    while done < n_boot:
        r = min(chunk, n_boot - done)
        draw = rng.integers(0, G, size=(r, G))
        W = np.bincount((np.arange(r)[:, None] * G + draw).ravel(), minlength=r * G).reshape(r, G).astype(float)
        R, se = fit(W)
        with np.errstate(invalid="ignore", divide="ignore"):
            t = np.where(se > 0, np.abs(R - R0) / se, 0.0)   # an entry that cannot move cannot lead the max
        keep = np.isfinite(R).all(1) & np.isfinite(t).all(1)
        T.append(t[keep].max(1))
        done += r
    T = np.concatenate(T)
    if len(T) < 2:
        return out
    c = float(np.quantile(T, ci))
    with np.errstate(invalid="ignore", divide="ignore"):
        obs = np.where(se0 > 0, np.abs(R0) / se0, np.where(R0 != 0, np.inf, 0.0))
    p = (1 + (T[:, None] >= obs[None, :] - 1e-12).sum(0)) / (len(T) + 1)
    out.update(se=se0.tolist(), ci_low=(R0 - c * se0).tolist(), ci_high=(R0 + c * se0).tolist(),
               p_value=p.tolist(), critical=c, n_boot=int(len(T)))
    return out


def bootstrap_ci(values: Iterable[float], *, n_boot: int = 2000, ci: float = 0.95, seed: int = 0,
                 resampled: str = "unit") -> dict[str, float]:
    """Mean with a percentile bootstrap CI over units (scipy.stats.bootstrap); NaNs dropped. The record
    names what it resamples (``resampled``, ``n_units`` = n)."""
    from scipy import stats as scipy_stats
    a = np.asarray(list(values), dtype=float)
    a = a[~np.isnan(a)]
    out = {"mean": float(a.mean()) if len(a) else float("nan"), "lo": float("nan"), "hi": float("nan"), "n": int(len(a)),
           "resampled": resampled, "n_units": int(len(a))}
    if len(a) >= 2 and n_boot > 0:
        if np.all(a == a[0]):
            out["lo"] = out["hi"] = float(a[0])
        else:
            r = scipy_stats.bootstrap((a,), np.mean, n_resamples=n_boot, confidence_level=ci, method="percentile",
                                rng=np.random.default_rng(seed))
            out["lo"], out["hi"] = float(r.confidence_interval.low), float(r.confidence_interval.high)
    return out


def paired_bootstrap(per_method: Mapping[str, Mapping[str, np.ndarray]],
                     pairs: Sequence[tuple[str, str]], *, metrics: Sequence[str] = ("accuracy", "brier", "ece_ew"),
                     clusters: np.ndarray | None = None, n_resamples: int = 10_000, seed: int = 0,
                     ci: float = 0.95, chunk: int = 500, seeds: np.ndarray | None = None,
                     resampled: str | None = None) -> pd.DataFrame:
    """Paired bootstrap of metric deltas (A - B) for each (A, B) in ``pairs``.

    ``per_method[m]`` holds per-task arrays ``correct``, ``confidence`` and ``brier``. Every
    pair is evaluated on the *same* resamples. With ``clusters`` (e.g. question ids) whole
    clusters are resampled (the question-clustered variant). Returns one row per pair and
    metric: observed delta, CI bounds, p_win (fraction of resamples in which A is strictly
    better than B: higher accuracy, lower Brier / ECE) and p_tie.

    ``seeds`` (one generation seed per task; the seed-clustered variant): each resample draws the S
    seeds with replacement and, independently, the question clusters with replacement, and a task weighs
    (draws of its seed) x (draws of its question). This is the hierarchical bootstrap (seeds, then
    questions) for the design councils write, where every question is asked under every seed (crossed,
    not nested): the drawn questions are the same for every drawn seed, so a question's outcomes under
    the several seeds stay together (as in the question-clustered variant) and a seed's shift over all
    its questions is resampled too (the two-way "pigeonhole" bootstrap, Owen 2007, Ann. Appl. Stat.).
    It is conservative: the seed and question main effects are resampled as by their one-way bootstraps,
    but the product weights also re-weigh the seed x question noise, so even when seeds carry no effect
    its intervals are wider than the question-clustered ones (the more so the fewer the seeds). Resampling questions independently within each drawn seed would split a
    question's copies across seeds and understate the question-level variance. The question draws use
    the same stream as without ``seeds``, so with one seed, or with seeds whose tasks are identical
    copies, the result equals the question-clustered one exactly. A resample whose drawn seeds hold none
    of its drawn questions (possible only when questions are not crossed with seeds) is dropped.
    Rows then also carry ``seed_clustered`` and ``n_seeds``.

    Every row names what it resamples: ``resampled`` (``resampled``, default "question" with clusters,
    "task" without) and ``n_units`` (the clusters drawn); the seed-clustered variant's seeds are its
    ``n_seeds``.
    """
    methods = sorted({m for p in pairs for m in p})
    for m in methods:
        if m not in per_method:
            raise KeyError(f"bootstrap: no per-task results for method {m!r}")
    for m in metrics:
        if m not in LOWER_IS_BETTER:
            raise InputError(f"bootstrap metric must be one of {sorted(LOWER_IS_BETTER)}, got {m!r}")
    n = len(next(iter(per_method.values()))["correct"])
    if clusters is None:
        cid = np.arange(n)
    else:
        _, cid = np.unique(np.asarray(clusters), return_inverse=True)
    C = int(cid.max()) + 1
    n_q, cell_q, cell_s, n_s = C, None, None, 0  # the question draw; with seeds the statistics are per cell
    if seeds is not None:
        seeds = np.asarray(seeds)
        if len(seeds) != n:
            raise ValueError(f"bootstrap: seeds has {len(seeds)} entries for {n} tasks")
        _, sid = np.unique(seeds.astype(str), return_inverse=True)
        n_s = int(sid.max()) + 1
        cells, cid = np.unique(cid * n_s + sid, return_inverse=True)  # (question, seed) cells
        cell_q, cell_s, C = cells // n_s, cells % n_s, len(cells)
    nb = 10
    # per-cluster sufficient statistics, one column block per method
    cols: list[np.ndarray] = [np.bincount(cid, minlength=C).astype(float)]
    layout: dict[tuple[str, str], slice] = {}
    pos = 1
    for m in methods:
        d = per_method[m]
        cor = np.asarray(d["correct"], float)
        conf = np.asarray(d["confidence"], float)
        bri = np.asarray(d["brier"], float)
        cols.append(np.bincount(cid, weights=cor, minlength=C)); layout[(m, "accuracy")] = slice(pos, pos + 1); pos += 1
        cols.append(np.bincount(cid, weights=bri, minlength=C)); layout[(m, "brier")] = slice(pos, pos + 1); pos += 1
        b = bins(conf, nb, "width")
        key = cid * nb + b
        sa = np.bincount(key, weights=cor, minlength=C * nb).reshape(C, nb)
        sc = np.bincount(key, weights=conf, minlength=C * nb).reshape(C, nb)
        cols.extend((sa - sc).T)  # signed gap per bin: ECE = sum_b |sum gap| / n
        layout[(m, "ece_ew")] = slice(pos, pos + nb); pos += nb
    S = np.column_stack(cols)  # (C, F)

    def stat(X: np.ndarray, m: str, metric: str) -> np.ndarray:
        block = X[..., layout[(m, metric)]]
        cnt = X[..., 0]
        with np.errstate(invalid="ignore", divide="ignore"):  # an empty seed-clustered resample: NaN, dropped
            if metric == "ece_ew":
                return np.abs(block).sum(-1) / cnt
            return block[..., 0] / cnt

    observed = S.sum(0)
    rng = make_rng(seed)
    rng_s = make_rng(seed, 17)  # the seed draws: a stream apart, so the question draws stay the same
    deltas = {(a, b, mt): [] for a, b in pairs for mt in metrics}
    done = 0
    while done < n_resamples:
        r = min(chunk, n_resamples - done)
        draw = rng.integers(0, n_q, size=(r, n_q))
        W = np.bincount((np.arange(r)[:, None] * n_q + draw).ravel(), minlength=r * n_q).reshape(r, n_q)
        if cell_q is not None:  # a cell weighs (its question's draws) x (its seed's draws)
            ds = rng_s.integers(0, n_s, size=(r, n_s))
            Ws = np.bincount((np.arange(r)[:, None] * n_s + ds).ravel(), minlength=r * n_s).reshape(r, n_s)
            W = W[:, cell_q] * Ws[:, cell_s]
        X = W.astype(float) @ S  # (r, F)
        for a, b in pairs:
            for mt in metrics:
                deltas[(a, b, mt)].append(stat(X, a, mt) - stat(X, b, mt))
        done += r
    lo_q, hi_q = (1 - ci) / 2, 1 - (1 - ci) / 2
    unit = resampled or ("question" if clusters is not None else "task")  # the seeds: seed_clustered, n_seeds
    rows = []
    for a, b in pairs:
        for mt in metrics:
            dd = np.concatenate(deltas[(a, b, mt)])
            if cell_q is not None:
                dd = dd[np.isfinite(dd)]
            obs = float(stat(observed, a, mt) - stat(observed, b, mt))
            better = dd < 0 if LOWER_IS_BETTER[mt] else dd > 0
            rows.append({"a": a, "b": b, "metric": mt, "delta": obs,
                         "ci_low": float(np.quantile(dd, lo_q)), "ci_high": float(np.quantile(dd, hi_q)),
                         "p_win": float(better.mean()), "p_tie": float((dd == 0).mean()),
                         "n_resamples": int(n_resamples), "clustered": clusters is not None,
                         "n_clusters": n_q, "resampled": unit, "n_units": n_q,
                         **({"seed_clustered": True, "n_seeds": n_s} if n_s else {})})
    return pd.DataFrame(rows)


# -- tests ---------------------------------------------------------------------------------------
def permutation_pvalue(a: np.ndarray, b: np.ndarray, clusters: np.ndarray, *, n_perm: int = 2000,
                       seed: int = 0) -> float:
    """Two-sided p-value of mean(a - b) under the paired null: the condition labels of each
    cluster are swapped with probability 1/2 (sign flip of the cluster's summed difference)."""
    d = np.asarray(a, float) - np.asarray(b, float)
    if len(d) == 0:
        return float("nan")
    _, cid = np.unique(np.asarray(clusters), return_inverse=True)
    s = np.bincount(cid, weights=d)
    obs = abs(s.sum())
    if n_perm == 0:
        return float("nan")
    rng = make_rng(seed, 13)
    signs = rng.choice([-1.0, 1.0], size=(n_perm, len(s)))
    null = np.abs(signs @ s)
    return float((1 + (null >= obs - 1e-12).sum()) / (n_perm + 1))


def benjamini_hochberg(pvals: Sequence[float]) -> np.ndarray:
    """BH-adjusted p-values (q-values, ``scipy.stats.false_discovery_control``) over the finite
    p-values; NaN stays NaN and does not count in the family size."""
    from scipy.stats import false_discovery_control
    p = np.asarray(pvals, float)
    out = np.full_like(p, np.nan)
    ok = np.isfinite(p)
    if ok.any():
        out[ok] = false_discovery_control(p[ok], method="bh")
    return out
