"""Belief math of the Bayesian Chronicle Agents (belief-layer paper Eq. 1-3, App. E), in plain numpy.

Everything here broadcasts over arrays (agents, runs, events) and imports no model code.
Names follow the seed: kappa (prior strength), gamma (forgetting), w (evidence weight),
b (credence), b0 (initial stance), e (appraised evidence), s (speaker's latent belief),
m (a listener's discounted evidence count before an update, ``n - kappa``).
"""
from __future__ import annotations

import numpy as np

from chorus.core.config import InputError

__all__ = [
    "step", "credence", "prior_counts", "discounted_count", "total_count", "step_coefficients",
    "fj_step", "fj_lambda", "stationary_point", "fj_fixed_point", "eta_schedule",
    "committed_minority_product", "committed_minority_meanfield", "kappa_hat",
    "well_conditioned", "check_gamma", "check_kappa", "credence_after", "kappa_hat_cumulative",
]


def check_gamma(gamma) -> None:
    g = np.asarray(gamma, dtype=float)
    if np.any(~np.isfinite(g)) or np.any(g <= 0) or np.any(g > 1):
        raise InputError(f"gamma must lie in (0, 1], got {gamma!r}")


def check_kappa(kappa) -> None:
    k = np.asarray(kappa, dtype=float)
    if np.any(np.isnan(k)) or np.any(k <= 0):
        raise InputError(f"kappa must be > 0 (inf = committed), got {kappa!r}")


def step(alpha, beta, alpha0, beta0, e, gamma=0.7, w=1.0):
    """One update (belief-layer paper Eq. 1): returns the new ``(alpha, beta)``.

    ``alpha <- alpha0 + gamma*(alpha - alpha0) + w*e``;
    ``beta  <- beta0  + gamma*(beta  - beta0)  + w*(1 - e)``.
    """
    alpha = np.asarray(alpha, dtype=float)
    beta = np.asarray(beta, dtype=float)
    e = np.asarray(e, dtype=float)
    return (alpha0 + gamma * (alpha - alpha0) + w * e,
            beta0 + gamma * (beta - beta0) + w * (1.0 - e))


def credence(alpha, beta):
    """b = alpha / (alpha + beta)."""
    alpha = np.asarray(alpha, dtype=float)
    return alpha / (alpha + np.asarray(beta, dtype=float))


def prior_counts(kappa, b0):
    """(alpha0, beta0) = (kappa*b0, kappa*(1-b0))."""
    kappa = np.asarray(kappa, dtype=float)
    b0 = np.asarray(b0, dtype=float)
    return kappa * b0, kappa * (1.0 - b0)


def discounted_count(c, gamma=0.7, w=1.0):
    """m_c = n_c - kappa = w(1-gamma^c)/(1-gamma), or w*c at gamma = 1 (App. E.1)."""
    c = np.asarray(c, dtype=float)
    gamma = np.asarray(gamma, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        geo = w * (1.0 - gamma ** c) / (1.0 - gamma)
    return np.where(gamma == 1.0, w * c, geo)


def total_count(kappa, c, gamma=0.7, w=1.0):
    """n_c = kappa + m_c: the count after c updates, independent of what was said."""
    return np.asarray(kappa, dtype=float) + discounted_count(c, gamma, w)


def step_coefficients(kappa, c, gamma=0.7, w=1.0):
    """(eta_c, rho_c) of the exact one-step identity (App. E.2):
    eta_c = w / n_{c+1}, rho_c = kappa(1-gamma) / n_{c+1}."""
    n_next = total_count(kappa, np.asarray(c, dtype=float) + 1, gamma, w)
    kappa = np.asarray(kappa, dtype=float)
    return w / n_next, kappa * (1.0 - np.asarray(gamma, dtype=float)) / n_next


def fj_step(b, e, b0, kappa, c, gamma=0.7, w=1.0):
    """b' = b + eta_c (e - b) + rho_c (b0 - b): the update written as a FJ step."""
    eta, rho = step_coefficients(kappa, c, gamma, w)
    b = np.asarray(b, dtype=float)
    return b + eta * (np.asarray(e, dtype=float) - b) + rho * (np.asarray(b0, dtype=float) - b)


def fj_lambda(kappa, gamma=0.7, w=1.0):
    """Per-agent susceptibility lambda_i = w / (kappa_i (1-gamma) + w); 0 for kappa = inf."""
    kappa = np.asarray(kappa, dtype=float)
    with np.errstate(invalid="ignore"):
        denom = kappa * (1.0 - np.asarray(gamma, dtype=float)) + w
    return np.where(np.isinf(kappa), 0.0, w / np.where(np.isinf(denom), 1.0, denom))


def stationary_point(kappa, b0, e_bar, gamma=0.7, w=1.0):
    """b* = lambda0 b0 + (1-lambda0) e_bar, lambda0 = kappa(1-gamma)/(kappa(1-gamma)+w) (App. E.3)."""
    lam = fj_lambda(kappa, gamma, w)  # = 1 - lambda0
    return (1.0 - lam) * np.asarray(b0, dtype=float) + lam * np.asarray(e_bar, dtype=float)


def fj_fixed_point(kappa, b0, gamma=0.7, w=1.0, *, adjacency=None):
    """Mean-field Friedkin-Johnsen fixed point b* = (I - Lambda W)^-1 (I - Lambda) b0.

    ``kappa`` and ``b0`` are per-agent vectors (``kappa`` may be a scalar; ``inf`` marks a
    committed agent). W is the complete graph's ``1/(N-1)`` off the diagonal unless an
    ``adjacency`` matrix is given (then rows are normalised). Leading batch axes broadcast:
    ``b0`` of shape (..., N) gives b* of shape (..., N). Raises ValueError when the system
    is singular (gamma = 1 with no committed agent: every consensus is a fixed point).
    """
    b0 = np.asarray(b0, dtype=float)
    n = b0.shape[-1]
    if n < 2:
        raise InputError(f"need at least 2 agents, got N={n}")
    kappa = np.broadcast_to(np.asarray(kappa, dtype=float), b0.shape)
    check_kappa(kappa)
    check_gamma(gamma)
    if adjacency is None:
        W = (np.ones((n, n)) - np.eye(n)) / (n - 1)
    else:
        A = np.asarray(adjacency, dtype=float)
        deg = A.sum(-1, keepdims=True)
        if np.any(deg == 0):
            raise InputError("adjacency has an isolated agent (no neighbours)")
        W = A / deg
    lam = fj_lambda(kappa, gamma, w)
    if np.any(np.all(lam == 1.0, axis=-1)):
        raise InputError("the FJ system is singular: at gamma = 1 with no committed agent every "
                         "consensus is a fixed point (no unique reference)")
    eye = np.eye(n)
    M = eye - lam[..., :, None] * W
    rhs = (1.0 - lam) * b0
    try:
        return np.linalg.solve(M, rhs[..., None])[..., 0]
    except np.linalg.LinAlgError:
        raise InputError("the FJ system is singular: at gamma = 1 with no committed agent every "
                         "consensus is a fixed point (no unique reference)") from None


def eta_schedule(kappa, steps, gamma=1.0, w=1.0):
    """eta_c = w / n_{c+1} for c = 0..steps-1 (the susceptibility of each successive update)."""
    eta, _ = step_coefficients(kappa, np.arange(steps), gamma, w)
    return eta


def committed_minority_product(f, b_free0, eta):
    """App. E.5 at gamma = 1: b_F^(T) = 1 - (1 - b_F^(0)) prod_t (1 - eta_t f).

    ``f`` (fractions committed at b = 1) broadcasts against the scalar ``b_free0``; ``eta``
    is the schedule of the aggregated per-round updates (``eta_schedule``)."""
    f = np.asarray(f, dtype=float)[..., None]
    eta = np.asarray(eta, dtype=float)
    return 1.0 - (1.0 - b_free0) * np.prod(1.0 - eta * f, axis=-1)


def committed_minority_meanfield(f, b_free0, kappa, steps, gamma=0.7, w=1.0, committed_b=1.0):
    """The stylised full-following reference for any gamma: free agents (common belief b)
    take ``steps`` aggregated updates with evidence ``f*committed_b + (1-f)*b``, each the
    exact FJ step (eta_c, rho_c). Equals ``committed_minority_product`` at gamma = 1."""
    f = np.asarray(f, dtype=float)
    b = np.full_like(f, float(b_free0))
    for c in range(steps):
        e = f * committed_b + (1.0 - f) * b
        b = fj_step(b, e, b_free0, kappa, c, gamma, w)
    return b


def kappa_hat(b, b_next, s, b0, m, gamma=0.7, w=1.0):
    """Per-event kappa estimator (belief-layer paper Eq. 3), no filtering inside:

    kappa_hat = (w(s-b) - (b'-b)(gamma m + w)) / ((b'-b) - (1-gamma)(b0-b)).

    Given the consumed evidence e in place of s it returns the listener's kappa exactly."""
    b = np.asarray(b, dtype=float)
    db = np.asarray(b_next, dtype=float) - b
    num = w * (np.asarray(s, dtype=float) - b) - db * (gamma * np.asarray(m, dtype=float) + w)
    den = db - (1.0 - np.asarray(gamma, dtype=float)) * (np.asarray(b0, dtype=float) - b)
    with np.errstate(divide="ignore", invalid="ignore"):
        return num / den


def well_conditioned(s, b, threshold=0.05):
    """Events worth inverting: |s - b| > threshold (the seed's conditioning filter)."""
    return np.abs(np.asarray(s, dtype=float) - np.asarray(b, dtype=float)) > threshold


def credence_after(kappa, b0, A, M):
    """The credence after a sequence of updates from the prior, in closed form:
    b = (kappa*b0 + A) / (kappa + M), with A = sum_k gamma^lag_k w e_k and M = sum_k gamma^lag_k w
    (``lag_k``: how many updates came after the k-th). A and M do not depend on kappa, which is why a
    belief read only now and then (a debater's, once per round) still inverts to kappa exactly."""
    kappa = np.asarray(kappa, dtype=float)
    return (kappa * np.asarray(b0, dtype=float) + A) / (kappa + M)


def kappa_hat_cumulative(b, b0, A, M):
    """kappa from one belief reading after a sequence of updates (``credence_after`` solved for kappa):
    kappa_hat = (A - b*M) / (b - b0); +inf where the belief has not moved (b = b0: a committed agent).
    With one update from the prior it is ``kappa_hat`` at b = b0, m = 0."""
    b = np.asarray(b, dtype=float)
    den = b - np.asarray(b0, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den == 0, np.inf, (A - b * M) / np.where(den == 0, 1.0, den))
