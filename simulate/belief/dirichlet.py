"""K-way beliefs: the Dirichlet generalisation of the Beta update, in plain numpy.

An agent's credence on a concept with K competing stances is a Dirichlet with pseudo-counts
``alpha`` (trailing axis K; every leading axis broadcasts: runs, agents, concepts, events).
The prior counts are ``alpha0 = kappa * b0`` (``b0`` a point of the simplex, kappa = sum of the
prior counts), the credence is ``b = alpha / sum(alpha)``, and each heard utterance with
appraised evidence ``e`` (a point of the simplex) takes the update

    alpha_k <- alpha0_k + gamma * (alpha_k - alpha0_k) + w * e_k            (every k)

The Beta layer (``bayes.step``) is the K = 2 case with ``e = (e, 1 - e)`` (``binary``); the
arithmetic is the same, operation for operation, so K = 2 results equal the Beta layer's bit for
bit (tested). The total count ``n = sum(alpha)`` follows the same deterministic schedule as the
Beta's (``bayes.total_count``), so the mean update is linear per stance with the Beta's
coefficients: ``b'_k = b_k + eta_c (e_k - b_k) + rho_c (b0_k - b_k)``. Every closed form of
``bayes`` therefore holds per stance coordinate: the FJ step, the FJ fixed point (per stance,
no coupling) and the kappa estimator (exact per coordinate when fed the consumed evidence; the
pooled least-squares estimate over coordinates is then exact too).

Coupling (off unless a topic declares it and the run enables it). A coupling ``A -> B`` with
signed weight ``c`` in [-1, 1] and a stance map (a row-stochastic ``K_A x K_B`` matrix ``M``)
turns the evidence on A into a target on B's simplex:

    t = e_A @ M                        (c > 0: towards the mapped stances)
    t = (1 - e_A @ M) / (K_B - 1)      (c < 0: away from them, evenly onto B's other stances)

and B consumes the convex mixture ``e_B' = (1 - sum_j |c_j|) e_B + sum_j |c_j| t_j`` over its
incoming couplings (sum_j |c_j| <= 1). Both targets lie on B's simplex, so ``e_B'`` does; at
c = 0 it is ``e_B`` exactly. Only appraised evidence is mixed (never coupled evidence: no
chains, no order dependence); a failed source (NaN) gives its weight back to ``e_B``; a failed
``e_B`` stays failed (B does not move). The closed forms above are for uncoupled concepts.
"""
from __future__ import annotations

import numpy as np

from . import bayes

__all__ = [
    "binary", "check_simplex", "close_simplex", "coupling_target", "credence", "fj_fixed_point",
    "fj_step", "kappa_hat", "kappa_hat_pooled", "kappa_terms", "mix_evidence", "prior_counts",
    "step", "temperature_scale", "well_conditioned",
]


def _k(x) -> np.ndarray:
    """A per-agent parameter (kappa, c, gamma, w, m) broadcast against the stance axis."""
    return np.asarray(x, dtype=float)[..., None]


def step(alpha, alpha0, e, gamma=0.7, w=1.0):
    """One update: ``alpha0 + gamma * (alpha - alpha0) + w * e`` per stance (``e`` on the simplex).

    ``gamma`` and ``w`` broadcast against ``alpha`` as given (pass a trailing length-1 axis for
    per-agent values). With K = 2 and ``e = binary(e)`` this is ``bayes.step`` exactly."""
    alpha = np.asarray(alpha, dtype=float)
    e = np.asarray(e, dtype=float)
    return alpha0 + gamma * (alpha - alpha0) + w * e


def credence(alpha):
    """b = alpha / sum(alpha) over the stance axis."""
    alpha = np.asarray(alpha, dtype=float)
    return alpha / alpha.sum(-1, keepdims=True)


def prior_counts(kappa, b0):
    """alpha0 = kappa * b0 (``kappa`` has the leading axes of ``b0`` without the stance axis)."""
    return _k(kappa) * np.asarray(b0, dtype=float)


def binary(b):
    """The K = 2 embedding of a Beta credence or evidence: ``(b, 1 - b)`` on a trailing axis."""
    b = np.asarray(b, dtype=float)
    return np.stack([b, 1.0 - b], axis=-1)


def close_simplex(p, last=None):
    """``p`` with its last stance replaced by ``1 - sum(the others)`` (clipped at 0).

    The oracle's evidence: for K = 2 it is ``(s, 1 - s)``, the Beta layer's pair, so the K = 2
    engine reproduces the Beta engine bit for bit. ``last``: per-row index of the last valid
    stance when rows are padded with zeros (concepts of different K in one array), or directly
    a boolean mask over the stance axis that marks it."""
    p = np.asarray(p, dtype=float)
    K = p.shape[-1]
    if last is None:
        last = np.full(p.shape[:-1], K - 1)
    last = np.asarray(last)
    onehot = last if last.dtype == bool else np.arange(K) == last[..., None]
    rest = np.where(onehot, 0.0, p).sum(-1)
    return np.where(onehot, np.maximum(1.0 - rest, 0.0)[..., None], p)


def fj_step(b, e, b0, kappa, c, gamma=0.7, w=1.0):
    """b' = b + eta_c (e - b) + rho_c (b0 - b) per stance (``bayes.fj_step`` per coordinate)."""
    return bayes.fj_step(b, e, b0, _k(kappa), _k(c), _k(gamma), _k(w))


def fj_fixed_point(kappa, b0, gamma=0.7, w=1.0, *, adjacency=None):
    """Per-stance mean-field FJ fixed point b*_k = (I - Lambda W)^-1 (I - Lambda) b0_k.

    ``b0``: (..., N, K); ``kappa``: (N,) or (..., N) (``inf`` = committed). Returns (..., N, K);
    each row sums to 1 (the system maps the simplex to itself). Raises ValueError where
    ``bayes.fj_fixed_point`` does (gamma = 1 without committed agents)."""
    b0 = np.asarray(b0, dtype=float)
    per_stance = np.moveaxis(b0, -1, -2)                                  # (..., K, N)
    kappa = np.asarray(kappa, dtype=float)[..., None, :]
    kappa = np.broadcast_to(kappa, per_stance.shape)
    return np.moveaxis(bayes.fj_fixed_point(kappa, per_stance, gamma, w, adjacency=adjacency), -1, -2)


def kappa_hat(b, b_next, s, b0, m, gamma=0.7, w=1.0):
    """Per-stance kappa estimator (``bayes.kappa_hat`` per coordinate), no filtering inside.
    Given the consumed evidence e in place of s it returns kappa on every coordinate that moved."""
    return bayes.kappa_hat(b, b_next, s, b0, _k(m), _k(gamma), _k(w))


def kappa_terms(b, b_next, s, b0, m, gamma=0.7, w=1.0):
    """(num, den) per stance with ``num = kappa * den`` exactly when s is the consumed evidence:
    num = w (s - b) - (b' - b)(gamma m + w), den = (b' - b) - (1 - gamma)(b0 - b)."""
    b = np.asarray(b, dtype=float)
    db = np.asarray(b_next, dtype=float) - b
    num = _k(w) * (np.asarray(s, dtype=float) - b) - db * (_k(gamma) * _k(m) + _k(w))
    den = db - (1.0 - _k(gamma)) * (np.asarray(b0, dtype=float) - b)
    return num, den


def kappa_hat_pooled(b, b_next, s, b0, m, gamma=0.7, w=1.0, mask=None):
    """One kappa per event: the least-squares fit of ``num_k = kappa * den_k`` over the stances
    (``sum num den / sum den^2``; ``mask`` keeps a subset of coordinates, e.g. the
    well-conditioned ones). Exact with the consumed evidence; NaN where nothing is kept."""
    num, den = kappa_terms(b, b_next, s, b0, m, gamma, w)
    keep = np.isfinite(num) & np.isfinite(den)
    if mask is not None:
        keep &= np.asarray(mask, dtype=bool)
    num, den = np.where(keep, num, 0.0), np.where(keep, den, 0.0)
    sxx = (den * den).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sxx > 0, (num * den).sum(-1) / np.where(sxx > 0, sxx, 1.0), np.nan)


def well_conditioned(s, b, threshold=0.05):
    """Coordinates worth inverting: |s_k - b_k| > threshold (the seed's filter, per stance)."""
    return bayes.well_conditioned(s, b, threshold)


def coupling_target(e_from, M, weight):
    """The target a coupling of signed ``weight`` puts on the linked concept's simplex:
    ``e_from @ M`` (weight > 0) or ``(1 - e_from @ M) / (K_to - 1)`` (weight < 0). ``M`` is the
    row-stochastic (K_from, K_to) stance map. NaN evidence gives a NaN target."""
    m = np.asarray(e_from, dtype=float) @ np.asarray(M, dtype=float)
    if weight >= 0:
        return m
    return (1.0 - m) / (m.shape[-1] - 1)


def mix_evidence(e_own, targets, weights):
    """``(1 - sum |c_j|) e_own + sum |c_j| t_j`` over the couplings into one concept; a NaN
    target (failed source) drops out and its weight returns to ``e_own``. At every c_j = 0 the
    result is ``e_own`` exactly."""
    e_own = np.asarray(e_own, dtype=float)
    own_w = np.ones(e_own.shape[:-1])
    acc = np.zeros(e_own.shape)
    for t, c in zip(targets, weights):
        t = np.asarray(t, dtype=float)
        ok = np.isfinite(t).all(-1)
        own_w = own_w - np.where(ok, abs(c), 0.0)
        acc = acc + np.where(ok[..., None], abs(c) * np.where(ok[..., None], t, 0.0), 0.0)
    return own_w[..., None] * e_own + acc


def temperature_scale(p, tau, eps: float = 1e-6):
    """Temperature scaling on the simplex: e proportional to p^(1/tau) (p clipped to
    [eps, 1]); the K = 2 case is ``sigmoid(logit(p) / tau)``. tau = 1 only renormalises."""
    p = np.asarray(p, dtype=float)
    if np.all(np.asarray(tau) == 1.0):
        return p / p.sum(-1, keepdims=True)
    z = np.log(np.clip(p, eps, 1.0)) / _k(tau)
    z = z - z.max(-1, keepdims=True)
    q = np.exp(z)
    return q / q.sum(-1, keepdims=True)


def check_simplex(e, atol: float = 1e-9) -> None:
    """Raise ValueError unless every row of ``e`` is a point of the simplex."""
    e = np.asarray(e, dtype=float)
    if np.any(~np.isfinite(e)) or np.any(e < -atol) or np.any(np.abs(e.sum(-1) - 1.0) > atol):
        raise ValueError("evidence must be a point of the simplex (non-negative, summing to 1)")
