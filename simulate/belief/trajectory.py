"""kappa and gamma from belief readings taken now and then along a stream of heard evidence.

The belief engine logs every update, so ``bayes.kappa_hat`` inverts one event at a time. Elsewhere
(a debater's belief, read once per round after it heard several peers) only some beliefs are seen.
The update still has a closed form from the prior (``bayes.credence_after``):

    b = (kappa*b0 + A(gamma)) / (kappa + M(gamma)),   A = sum_k w e_k gamma^lag_k,   M = sum_k w gamma^lag_k,

with ``lag_k`` the number of updates after the k-th. A and M are polynomials in gamma whose
coefficients are fixed by what was heard, so a set of readings is stored as two coefficient
matrices (``Trajectories``) and either inverted for kappa at a given gamma (exact for an agent that
follows the update) or fitted for (kappa, gamma) jointly by least squares on the credences.
Pure numpy / scipy: no model code.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .bayes import check_gamma, kappa_hat_cumulative

LOG_KAPPA_BOUNDS = (-10.0, 15.0)  # kappa in [4.5e-5, 3.3e6]: a reading that never moves ends at the top
GAMMA_FLOOR = 1e-3
GAMMA_STARTS = (0.3, 0.5, 0.7, 0.9, 1.0)


@dataclass(frozen=True)
class Trajectories:
    """Belief readings ``b`` (one per row), each listener's prior stance ``b0`` and the evidence it
    heard before the reading: ``CA[i, l]`` = sum of w*e over the updates at lag l, ``CM[i, l]`` =
    sum of w (so A(gamma) = CA @ gamma^l)."""
    b0: np.ndarray
    b: np.ndarray
    CA: np.ndarray
    CM: np.ndarray

    @classmethod
    def from_events(cls, b0, b, ev_row, ev_lag, ev_e, w: float = 1.0) -> "Trajectories":
        """Readings ``b0``/``b`` (n,) and the heard updates in long form: row of the reading, lag, e.
        Updates with NaN evidence must be left out by the caller (they update nobody, lags included)."""
        b0, b = np.asarray(b0, float), np.asarray(b, float)
        ev_row, ev_lag, ev_e = np.asarray(ev_row, int), np.asarray(ev_lag, int), np.asarray(ev_e, float)
        if np.any(~np.isfinite(ev_e)):
            raise ValueError("evidence must be finite (an update with no evidence is not an update)")
        width = int(ev_lag.max()) + 1 if len(ev_lag) else 1
        CA, CM = np.zeros((len(b), width)), np.zeros((len(b), width))
        np.add.at(CA, (ev_row, ev_lag), w * ev_e)
        np.add.at(CM, (ev_row, ev_lag), w)
        return cls(b0, b, CA, CM)

    def __len__(self) -> int:
        return len(self.b)

    def take(self, idx) -> "Trajectories":
        idx = np.asarray(idx, int)
        return Trajectories(self.b0[idx], self.b[idx], self.CA[idx], self.CM[idx])

    def sums(self, gamma: float) -> tuple[np.ndarray, np.ndarray]:
        """(A, M) at ``gamma``."""
        g = gamma ** np.arange(self.CA.shape[1])
        return self.CA @ g, self.CM @ g

    def sum_derivatives(self, gamma: float) -> tuple[np.ndarray, np.ndarray]:
        """(dA/dgamma, dM/dgamma)."""
        lag = np.arange(self.CA.shape[1])
        d = lag * gamma ** np.maximum(lag - 1, 0)
        return self.CA @ d, self.CM @ d

    def evidence_mean(self, gamma: float) -> np.ndarray:
        """A / M: the discounted mean of what was heard (NaN where nothing was)."""
        A, M = self.sums(gamma)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(M > 0, A / np.where(M > 0, M, 1.0), np.nan)


def kappa_closed_form(tr: Trajectories, gamma: float) -> np.ndarray:
    """kappa_hat per reading at a given gamma (+inf where the belief has not moved; NaN where nothing
    was heard). Exact for an agent that follows the update with that gamma."""
    check_gamma(gamma)
    A, M = tr.sums(gamma)
    k = kappa_hat_cumulative(tr.b, tr.b0, A, M)
    return np.where(M > 0, k, np.nan)


def _residuals(tr: Trajectories, log_kappa: float, gamma: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Credence residuals and their derivatives in log kappa and gamma."""
    k = np.exp(log_kappa)
    A, M = tr.sums(gamma)
    dA, dM = tr.sum_derivatives(gamma)
    den = k + M
    pred = (k * tr.b0 + A) / den
    d_logk = k * (tr.b0 * M - A) / den ** 2
    d_gamma = (dA * den - (k * tr.b0 + A) * dM) / den ** 2
    return pred - tr.b, d_logk, d_gamma


def fit(tr: Trajectories, *, gamma: float | None = None, gamma_starts=GAMMA_STARTS, tol: float = 1e-14) -> dict[str, Any]:
    """Least-squares (kappa, gamma) on the credences (``gamma`` given: kappa alone). Readings after no
    evidence carry no information on either and are left out. Returns kappa, gamma, rmse, n and
    whether kappa ended at a bound (a reading set that barely moves fits kappa -> the upper bound).
    ``gamma_starts``: where the joint fit starts (the best of them is kept)."""
    from scipy.optimize import least_squares

    use = np.flatnonzero(tr.sums(1.0)[1] > 0)
    sub = tr.take(use)
    out: dict[str, Any] = {"n": int(len(sub)), "kappa": float("nan"), "gamma": float("nan") if gamma is None else float(gamma),
                           "rmse": float("nan"), "kappa_at_bound": False, "success": False}
    if not len(sub):
        return out
    lo, hi = LOG_KAPPA_BOUNDS

    def start(g: float) -> float:
        k = kappa_closed_form(sub, g)
        k = k[np.isfinite(k) & (k > 0)]
        return float(np.clip(np.log(np.median(k)) if len(k) else 0.0, lo + 1e-6, hi - 1e-6))

    if gamma is not None:
        check_gamma(gamma)
        res = least_squares(lambda x: _residuals(sub, x[0], gamma)[0], [start(gamma)],
                            jac=lambda x: _residuals(sub, x[0], gamma)[1][:, None],
                            bounds=([lo], [hi]), xtol=tol, ftol=tol, gtol=tol, method="trf")
        lk, g = float(res.x[0]), float(gamma)
    else:
        def f(x):
            return _residuals(sub, x[0], x[1])[0]

        def j(x):
            _, a, b = _residuals(sub, x[0], x[1])
            return np.column_stack([a, b])
        best = None
        for g0 in gamma_starts:  # the surface can be flat in gamma: start from several, keep the best
            r = least_squares(f, [start(g0), g0], jac=j, bounds=([lo, GAMMA_FLOOR], [hi, 1.0]),
                              xtol=tol, ftol=tol, gtol=tol, method="trf")
            if best is None or r.cost < best.cost:
                best = r
        res = best
        lk, g = float(res.x[0]), float(res.x[1])
    resid = _residuals(sub, lk, g)[0]
    out.update(kappa=float(np.exp(lk)), gamma=g, rmse=float(np.sqrt(np.mean(resid ** 2))),
               kappa_at_bound=bool(lk <= lo + 1e-6 or lk >= hi - 1e-6), success=bool(res.success))
    return out
