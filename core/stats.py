"""The statistics every part reports with, in one place.

* ``cluster_bootstrap``: the bootstrap engine. Any statistic of row indices under resampling
  whole clusters (question families, groups; each row its own cluster when ``clusters`` is None),
  percentile CI. ``mean_ci`` and ``ratio_ci`` (a ratio of means, the knockout / patching /
  ablation shares) are built on it.
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
def cluster_bootstrap(stat: Callable[[np.ndarray], float], clusters: np.ndarray, *, n_boot: int = 2000,
                      seed: int = 0, ci: float = 0.95) -> tuple[float, float, float]:
    """(estimate, low, high) of ``stat(row_indices)`` under resampling whole clusters."""
    clusters = np.asarray(clusters)
    n = len(clusters)
    est = stat(np.arange(n))
    if n == 0 or n_boot == 0:
        return est, float("nan"), float("nan")
    uniq, cid = np.unique(clusters, return_inverse=True)
    members = [np.flatnonzero(cid == k) for k in range(len(uniq))]
    rng = make_rng(seed, 11)
    vals = []
    for _ in range(n_boot):
        pick = rng.integers(0, len(uniq), len(uniq))
        idx = np.concatenate([members[k] for k in pick])
        vals.append(stat(idx))
    vals = np.asarray(vals, float)
    vals = vals[np.isfinite(vals)]
    if not len(vals):
        return est, float("nan"), float("nan")
    return est, float(np.quantile(vals, (1 - ci) / 2)), float(np.quantile(vals, 1 - (1 - ci) / 2))


def mean_ci(values: np.ndarray, clusters: np.ndarray | None = None, *, n_boot: int = 2000, seed: int = 0,
            ci: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of ``values`` (NaNs ignored) under the cluster bootstrap."""
    v = np.asarray(values, float)
    return cluster_bootstrap(lambda i: float(np.nanmean(v[i])) if len(i) else float("nan"),
                             np.arange(len(v)) if clusters is None else clusters, n_boot=n_boot, seed=seed, ci=ci)


def ratio_ci(num: np.ndarray, den: np.ndarray, clusters: np.ndarray, *, share: bool = False, n_boot: int = 2000,
             seed: int = 0, ci: float = 0.95) -> tuple[float, float, float]:
    """(estimate, low, high) of a ratio of means, mean(num) / mean(den) (``share``:
    mean(num) / (mean(num) + mean(den))), under the cluster bootstrap; NaN where the
    denominator is 0. NaNs in the inputs are ignored."""
    num, den = np.asarray(num, float), np.asarray(den, float)

    def stat(idx: np.ndarray) -> float:
        a, b = float(np.nanmean(num[idx])), float(np.nanmean(den[idx]))
        d = (a + b) if share else b
        return a / d if d != 0 else float("nan")
    return cluster_bootstrap(stat, clusters, n_boot=n_boot, seed=seed, ci=ci)


def bootstrap_ci(values: Iterable[float], *, n_boot: int = 2000, ci: float = 0.95, seed: int = 0) -> dict[str, float]:
    """Mean with a percentile bootstrap CI over units (scipy.stats.bootstrap); NaNs dropped."""
    from scipy import stats as scipy_stats
    a = np.asarray(list(values), dtype=float)
    a = a[~np.isnan(a)]
    out = {"mean": float(a.mean()) if len(a) else float("nan"), "lo": float("nan"), "hi": float("nan"), "n": int(len(a))}
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
                     ci: float = 0.95, chunk: int = 500, seeds: np.ndarray | None = None) -> pd.DataFrame:
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
                         "n_clusters": n_q, **({"seed_clustered": True, "n_seeds": n_s} if n_s else {})})
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
