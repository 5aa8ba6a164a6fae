"""The correction map g of ``chorus.simulate.belief.correction``: a monotone map of appraised evidence e
onto speaker belief s, its families, its (de)serialisation and its fit (``fit_map``: every family
scored by K-fold cross-validation on the corrected transfer curve's distance from the diagonal).
The stored files and the application are ``correction.py``, the measure of success
``correction_measure.py`` (``correction.py`` re-exports these names); the figures of
``correction_plots.py`` draw maps read back from a fit. Below all three, so none imports another."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from chorus.core.config import ConfigError
from chorus.core.seeding import rng

FAMILIES = ("isotonic", "logit_linear", "beta", "moment")
EPS = 1e-6
MIN_EVENTS = 50
FOLDS = 5
STREAM_FOLDS = 31


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-np.asarray(z, dtype=float)))


def _logit(p):
    p = np.clip(np.asarray(p, dtype=float), EPS, 1.0 - EPS)
    return np.log(p) - np.log1p(-p)


# -- the monotone map ----------------------------------------------------------------------------
_S_GRID = np.concatenate([[0.0], _sigmoid(np.linspace(-14.0, 14.0, 2801)), [1.0]])


def _invert(xs: np.ndarray, ys: np.ndarray):
    """The inverse of a non-decreasing piecewise-linear curve through (xs, ys), as (levels,
    first s, last s) of each distinct e level. A flat piece (an e that does not tell its s values
    apart) inverts to a jump across it, with its midpoint at the level itself."""
    ys_u, start = np.unique(ys, return_index=True)
    end = np.r_[start[1:], len(ys)] - 1
    return ys_u, xs[start], xs[end]


def _apply_inverse(e: np.ndarray, inv) -> np.ndarray:
    """Evaluate ``_invert``'s inverse: linear from the last s of one level to the first s of the
    next; clipped to the end values outside the levels."""
    y, lo, hi = inv
    k = np.searchsorted(y, e, side="right") - 1
    kc = np.clip(k, 0, len(y) - 1)
    kn = np.clip(k + 1, 0, len(y) - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(kn > kc, (e - y[kc]) / (y[kn] - y[kc]), 0.0)
    out = hi[kc] + frac * (lo[kn] - hi[kc])
    out = np.where(k < 0, lo[0], out)
    return np.where(e == y[kc], 0.5 * (lo[kc] + hi[kc]), out)


def _ramps(e, knots) -> np.ndarray:
    """Design matrix of a monotone piecewise-linear map: a constant and one ramp per knot interval."""
    e = np.asarray(e, dtype=float)
    k = np.asarray(knots, dtype=float)
    cols = [np.ones_like(e)] + [np.clip((e - k[j - 1]) / (k[j] - k[j - 1]), 0.0, 1.0) for j in range(1, len(k))]
    return np.column_stack(cols)


@dataclass(frozen=True)
class CorrectionMap:
    """The correction g. ``params``: for g = f^-1 of a fitted transfer curve f, isotonic
    ``{"s": knots, "e": values}`` (f piecewise linear through them, clipped outside),
    logit_linear ``{"a", "b"}``: f(s) = sigmoid(a logit(s) + b), beta ``{"a", "b", "c"}``:
    f(s) = sigmoid(a ln s - b ln(1-s) + c) (Kull et al., 2017); both parametric families contain
    the identity (a = 1, b = 0; a = b = 1, c = 0). For ``moment``, g itself: ``{"knots", "coef"}``,
    g(e) = coef[0] + sum_j coef[j] * ramp_j(e), coef[j >= 1] >= 0, clipped to [0, 1]."""
    family: str
    params: dict[str, Any]
    _inv: tuple = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ConfigError(f"correction family {self.family!r}: expected one of {FAMILIES}")
        if self.family == "isotonic":
            xs, ys = np.asarray(self.params["s"], float), np.asarray(self.params["e"], float)
            if len(xs) < 1 or len(xs) != len(ys) or np.any(np.diff(xs) < 0) or np.any(np.diff(ys) < 0):
                raise ConfigError("isotonic correction: knots 's' and 'e' must be non-decreasing and "
                                  "of equal, non-zero length")
            object.__setattr__(self, "_inv", _invert(xs, ys))
        elif self.family == "beta":
            object.__setattr__(self, "_inv", _invert(_S_GRID, np.maximum.accumulate(self.forward(_S_GRID))))
        elif self.family == "moment":
            k, c = np.asarray(self.params["knots"], float), np.asarray(self.params["coef"], float)
            if len(k) < 2 or np.any(np.diff(k) <= 0) or len(c) != len(k) or np.any(c[1:] < 0):
                raise ConfigError("moment correction: 'knots' must increase and 'coef' (one per knot) "
                                  "must be non-negative after the first")

    @property
    def has_forward(self) -> bool:
        return self.family != "moment"

    def forward(self, s) -> np.ndarray:
        """The fitted transfer curve f(s) = E[e | s] (NaN for ``moment``, which fits g directly)."""
        s = np.asarray(s, dtype=float)
        p = self.params
        if self.family == "moment":
            return np.full(s.shape, np.nan)
        if self.family == "isotonic":
            return np.interp(s, p["s"], p["e"])
        if self.family == "logit_linear":
            return _sigmoid(p["a"] * _logit(s) + p["b"])
        sc = np.clip(s, EPS, 1.0 - EPS)
        return _sigmoid(p["a"] * np.log(sc) - p["b"] * np.log1p(-sc) + p["c"])

    def __call__(self, e) -> np.ndarray:
        """g(e): the speaker belief the evidence e stands for (NaN stays NaN)."""
        e = np.asarray(e, dtype=float)
        if self.family == "logit_linear":
            out = _sigmoid((_logit(e) - self.params["b"]) / self.params["a"])
        elif self.family == "moment":
            # the design matrix is built on a flat copy: any input shape, as the other families take
            flat = _ramps(np.nan_to_num(e).ravel(), self.params["knots"]) @ np.asarray(self.params["coef"], float)
            out = flat.reshape(e.shape)
        else:
            out = _apply_inverse(np.nan_to_num(e), self._inv)
        return np.where(np.isfinite(e), np.clip(out, 0.0, 1.0), np.nan)

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family,
                "params": {k: (np.asarray(v, float).tolist() if isinstance(v, (list, np.ndarray)) else float(v))
                           for k, v in self.params.items()}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CorrectionMap":
        return cls(family=d["family"], params=dict(d["params"]))


# -- fitting the monotone map --------------------------------------------------------------------
def s_bins(s: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin index of each s: (at most) ``n_bins`` bins of equal count."""
    q = np.unique(np.quantile(s, np.linspace(0, 1, n_bins + 1)))
    return np.clip(np.digitize(s, q[1:-1]), 0, max(len(q) - 2, 0))


def diagonal_mse(s, g_e, n_bins: int) -> float:
    """Count-weighted mean squared bias of the corrected transfer curve over quantile bins of s:
    sum_b n_b (mean_b g(e) - mean_b s)^2 / n."""
    s, g_e = np.asarray(s, float), np.asarray(g_e, float)
    d = pd.DataFrame({"b": s_bins(s, n_bins), "d": g_e - s}).groupby("b").d.agg(["mean", "size"])
    return float((d["size"] * d["mean"] ** 2).sum() / d["size"].sum())


def _fit_moment(s: np.ndarray, e: np.ndarray) -> CorrectionMap:
    """g monotone piecewise linear (knots at quantiles of e) with mean g(e) = mean s in every
    quantile bin of s: non-negative least squares on the bin means, weighted by sqrt(count)."""
    from scipy.optimize import lsq_linear
    n = len(s)
    knots = np.unique(np.quantile(e, np.linspace(0, 1, max(2, min(12, n // 20)) + 1)))
    if len(knots) < 2:  # e constant: g can only be a constant
        knots = np.array([knots[0], knots[0] + EPS])
    X = _ramps(e, knots)
    b = s_bins(s, max(X.shape[1] + 2, min(2 * X.shape[1], n // 5)))
    df = pd.DataFrame(X).assign(b=b, s=s).groupby("b")
    A, y, w = df[list(range(X.shape[1]))].mean().to_numpy(), df.s.mean().to_numpy(), np.sqrt(df.size().to_numpy())
    lo, hi = np.r_[0.0, np.zeros(X.shape[1] - 1)], np.r_[1.0, np.full(X.shape[1] - 1, np.inf)]
    r = lsq_linear(A * w[:, None], y * w, bounds=(lo, hi))
    return CorrectionMap("moment", {"knots": knots.tolist(), "coef": r.x.tolist()})


def _fit_family(family: str, s: np.ndarray, e: np.ndarray) -> CorrectionMap:
    if family == "moment":
        return _fit_moment(s, e)
    if family == "isotonic":
        from sklearn.isotonic import IsotonicRegression
        ir = IsotonicRegression(increasing=True, y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(s, e)
        return CorrectionMap("isotonic", {"s": ir.X_thresholds_.tolist(), "e": ir.y_thresholds_.tolist()})
    from scipy.optimize import least_squares
    if family == "logit_linear":
        x = _logit(s)
        r = least_squares(lambda p: _sigmoid(p[0] * x + p[1]) - e, x0=[1.0, 0.0],
                          bounds=([1e-3, -20.0], [100.0, 20.0]))
        return CorrectionMap("logit_linear", {"a": float(r.x[0]), "b": float(r.x[1])})
    sc = np.clip(s, EPS, 1.0 - EPS)
    ls, l1s = np.log(sc), np.log1p(-sc)
    r = least_squares(lambda p: _sigmoid(p[0] * ls - p[1] * l1s + p[2]) - e, x0=[1.0, 1.0, 0.0],
                      bounds=([0.0, 0.0, -20.0], [100.0, 100.0, 20.0]))
    a, b, c = (float(v) for v in r.x)
    if a + b < 1e-9:  # flat: keep it strictly increasing so it has an inverse
        a = b = 1e-9
    return CorrectionMap("beta", {"a": a, "b": b, "c": c})


def folds(n: int, k: int, seed: int) -> np.ndarray:
    """Fold index of each pair: a seeded permutation cut into k nearly equal parts."""
    f = np.empty(n, dtype=np.int64)
    f[rng(seed, STREAM_FOLDS).permutation(n)] = np.arange(n) % k
    return f


def usable_pairs(s, e, *, min_events: int = MIN_EVENTS) -> tuple[np.ndarray, np.ndarray]:
    """The finite (s, e) pairs a map can be fitted on; fewer than ``min_events`` of them, or
    speakers all at one belief, refused in one line (``chorus belief correct fit --check`` asks
    this without fitting)."""
    s = np.asarray(s, dtype=float)
    e = np.asarray(e, dtype=float)
    ok = np.isfinite(s) & np.isfinite(e)
    n = int(ok.sum())
    if n < min_events:
        raise ConfigError(f"channel correction: {n} appraised utterances with finite (s, e) "
                          f"({int((~ok).sum())} failed or missing), fewer than min_events = {min_events}; "
                          f"fit it on a longer calibration run (or lower --min-events, at your risk)")
    s, e = s[ok], e[ok]
    if np.ptp(s) == 0:
        raise ConfigError(f"channel correction: all {n} speaker beliefs s equal {s[0]:.4g}; a map "
                          f"of e onto s needs a calibration run whose speakers span the stance range")
    return s, e


def fit_map(s, e, *, min_events: int = MIN_EVENTS, n_folds: int = FOLDS, seed: int = 0,
            families: Sequence[str] = FAMILIES) -> dict[str, Any]:
    """Fit every family on the (s, e) pairs and score it by K-fold cross-validation: each pair's
    g(e) from the fit without its fold, then the corrected transfer curve's distance from the
    diagonal (``heldout_diagonal_mse``, the criterion), the per-pair squared error of g(e)
    against s (``heldout_mse``) and of f(s) against e (``heldout_forward_mse``). The lowest
    criterion is chosen; every family is refit on all pairs. Fewer than ``min_events`` valid
    pairs is refused with the count."""
    n_pairs = np.asarray(s).size
    s, e = usable_pairs(s, e, min_events=min_events)
    n = len(s)
    k = max(2, min(n_folds, n // 2))
    fold = folds(n, k, seed)
    n_bins = max(2, min(20, n // 10))
    cands: dict[str, dict[str, Any]] = {}
    for fam in families:
        g_e, f_s = np.empty(n), np.empty(n)
        for j in range(k):
            tr, va = fold != j, fold == j
            m = _fit_family(fam, s[tr], e[tr])
            g_e[va], f_s[va] = m(e[va]), m.forward(s[va])
        full = _fit_family(fam, s, e)
        cands[fam] = {"heldout_diagonal_mse": diagonal_mse(s, g_e, n_bins),
                      "heldout_mse": float(np.mean((g_e - s) ** 2)),
                      "heldout_forward_mse": float(np.mean((f_s - e) ** 2)) if full.has_forward else None,
                      "map": full.to_dict()}
    best = min(cands, key=lambda f: cands[f]["heldout_diagonal_mse"])
    # does e rise with s at all? (the isotonic transfer curve's rise over the calibration range)
    iso = _fit_family("isotonic", s, e)
    spread = float(np.ptp(iso.forward(np.linspace(s.min(), s.max(), 101))))
    return {
        "family": best, "map": cands[best]["map"], "candidates": cands, "criterion": "heldout_diagonal_mse",
        "n_events": n, "n_dropped": int(n_pairs - n), "min_events": int(min_events),
        "folds": int(k), "diagonal_bins": int(n_bins), "split_seed": int(seed),
        "s_range": [float(s.min()), float(s.max())], "e_range": [float(e.min()), float(e.max())],
        "pearson_s_e": float(np.corrcoef(s, e)[0, 1]) if np.ptp(e) > 0 else None,
        # a transfer curve that barely rises carries no stance signal: its inverse is arbitrary
        "informative": bool(spread > 0.05),
    }
