"""The correction map g of ``simulate.belief.correction``: a monotone map of appraised evidence e
onto speaker belief s, its families and its (de)serialisation. The fit, the stored files and
the measure of success are ``correction.py`` (which re-exports these names); the figures of
``correction_plots.py`` draw maps read back from a fit. Below both, so neither imports the other."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.config import ConfigError

FAMILIES = ("isotonic", "logit_linear", "beta", "moment")
EPS = 1e-6


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
