"""The one-coin Beta-marginal posterior (BDA paper Eq. 1-3, Lemma 1) and its priors.

    F_i(g) = B(alpha_i + c_i(g), beta_i + d_i(g)) / B(alpha_i, beta_i) * (K-1)^-(N_i - e_i(g))
    pi(g | T)  ∝  pi_0(g) * prod_i F_i(g) ** tau            (tau = 1: the exact model)

Computed in log space with ``scipy.special.betaln``. Pure numpy/scipy: no model code.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
from scipy.special import betaln, logsumexp

from chorus.aggregate.counts import Pool
from chorus.aggregate.errors import PriorError
from chorus.aggregate.trace import Trace
from chorus.core.config import InputError

MU_CLIP = 0.01  # mu_i is clipped into [MU_CLIP, 1 - MU_CLIP] ("away from the ends")


# -- priors -------------------------------------------------------------------------------
#: what r_i is estimated from (BDA paper Table 7's reliability-estimator ablation)
RELIABILITY_BASES = ("all", "proposals", "round0")


def reliabilities(pool: Pool, idx: np.ndarray, basis: str = "all") -> np.ndarray:
    """r_i: the fraction of agent i's informative moves (all rounds) consistent with gold,
    over the labelled tasks ``idx``. An agent with no informative move there gets the mean
    of the others (so it sits at the centre of Eq. 3); all-silent pools give 1/K.
    ``basis="proposals"``: its propose / vote moves only (the share naming gold);
    ``basis="round0"``: its round-0 proposals only."""
    idx = np.asarray(idx)
    g = pool.gold[idx]
    if basis == "all":
        cons = pool.c[idx, :, :][np.arange(len(idx)), :, g]  # (n, I) c_i(gold)
        num = cons.sum(0).astype(float)
        den = pool.N[idx].sum(0).astype(float)
    elif basis == "proposals":
        P = pool.prop_pos[idx]
        num = P[np.arange(len(idx)), :, g].sum(0).astype(float)
        den = P.sum(-1).sum(0).astype(float)
    elif basis == "round0":
        a = pool.r0_answer[idx]
        num = ((a == g[:, None]) & (a >= 0)).sum(0).astype(float)
        den = (a >= 0).sum(0).astype(float)
    else:
        raise InputError(f"reliability basis must be one of {RELIABILITY_BASES}, got {basis!r}")
    with np.errstate(invalid="ignore", divide="ignore"):
        r = num / den
    bad = ~np.isfinite(r)
    if bad.all():
        return np.full(pool.I, 1.0 / pool.K)
    if bad.any():
        r[bad] = r[~bad].mean()
    return r


def per_agent_mu(r: np.ndarray, b, kappa, mu_clip: float = MU_CLIP) -> np.ndarray:
    """mu_i = clip(b + kappa * (r_i - mean_j r_j)). Broadcasts over grids: ``b``/``kappa`` of
    shape (G,) give (G, I)."""
    r = np.asarray(r, float)
    b = np.asarray(b, float)[..., None]
    kappa = np.asarray(kappa, float)[..., None]
    return np.clip(b + kappa * (r - r.mean()), mu_clip, 1.0 - mu_clip)


def beta_params(mu, s) -> tuple[np.ndarray, np.ndarray]:
    """alpha = mu * s, beta = (1 - mu) * s."""
    mu = np.asarray(mu, float)
    s = np.asarray(s, float)
    if mu.ndim > s.ndim:
        s = s.reshape(s.shape + (1,) * (mu.ndim - s.ndim))
    return mu * s, (1.0 - mu) * s


# -- vectorised posterior over a pool -------------------------------------------------------
def log_prior_vector(K: int, candidate_prior: np.ndarray | None) -> np.ndarray:
    if candidate_prior is None:
        return np.full(K, -math.log(K))
    p = np.asarray(candidate_prior, float)
    with np.errstate(divide="ignore"):
        return np.log(p)


def one_coin_grid_logits(pool: Pool, idx: np.ndarray, alpha: np.ndarray, beta: np.ndarray,
                         tau: np.ndarray | float = 1.0,
                         log_prior: np.ndarray | None = None) -> np.ndarray:
    """Unnormalised log posteriors for G prior configurations at once.

    ``alpha``/``beta``: (G, I); ``tau``: (G,) or scalar; returns (G, n, K). Uses the
    distinct-(c, d)-pair table of the pool, so the Beta functions are evaluated G*I*P times
    (P pairs, a handful) and the rest is a gather. The -log B(alpha, beta) and the
    normalising constants cancel in the normalisation and are left out.
    """
    idx = np.asarray(idx)
    alpha = np.atleast_2d(alpha)
    beta = np.atleast_2d(beta)
    G, I = alpha.shape
    key, ck, dk = pool.pair_keys
    table = betaln(alpha[:, :, None] + ck, beta[:, :, None] + dk)  # (G, I, P)
    P = table.shape[2]
    flat = key[idx] + (np.arange(I) * P)[None, :, None]  # (n, I, K) into (I*P)
    lik = table.reshape(G, I * P)[:, flat].sum(axis=2)  # (G, n, K)
    lik += pool.kterm[idx][None]
    tau = np.asarray(tau, float).reshape(-1, 1, 1) if np.ndim(tau) else float(tau)
    out = tau * lik
    if log_prior is not None:
        out = out + log_prior
    return out


def softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    z = logits - logits.max(axis=axis, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=axis, keepdims=True)
    return z


def one_coin_proba(pool: Pool, idx: np.ndarray, alpha: np.ndarray, beta: np.ndarray,
                   tau: float = 1.0, candidate_prior: np.ndarray | None = None) -> np.ndarray:
    """(n, K) posterior for one prior configuration (``alpha``, ``beta`` of shape (I,))."""
    lp = log_prior_vector(pool.K, candidate_prior)
    return softmax(one_coin_grid_logits(pool, idx, alpha[None], beta[None], tau, lp)[0])


# -- the kept-stable single-trace API ------------------------------------------------------------
def one_coin_posterior(trace: "Trace | Mapping", priors: Mapping[str, Sequence[float]],
                       candidate_prior: Mapping[str, float] | None = None,
                       protocol: str = "general") -> dict[str, float]:
    """Posterior ``{candidate: probability}`` of one trace under the one-coin model.

    ``priors`` maps every agent of the trace to ``(alpha, beta)`` of its Beta reliability
    prior; ``candidate_prior`` maps candidates to prior probabilities (uniform when None).
    Moves are read through the ``protocol`` automaton (the general move algebra by default);
    an illegal move raises. Self-reported confidences and text are never read.
    """
    if not isinstance(trace, Trace):
        trace = Trace.from_dict(trace)
    pool = Pool.from_traces([trace], protocol=protocol)
    K = pool.K
    alpha = np.empty(pool.I)
    beta = np.empty(pool.I)
    for i, a in enumerate(pool.agents):
        if a not in priors:
            raise PriorError(f"task {trace.task_id!r}: agent {a!r} is missing from the priors "
                             f"(priors given for {sorted(priors)!r})")
        try:
            al, be = priors[a]
            al, be = float(al), float(be)
        except (TypeError, ValueError):
            raise PriorError(f"prior of agent {a!r} must be a pair (alpha, beta), got {priors[a]!r}") from None
        if not (math.isfinite(al) and math.isfinite(be) and al > 0 and be > 0):
            raise PriorError(f"prior of agent {a!r} must have alpha > 0 and beta > 0, got ({al}, {be})")
        alpha[i], beta[i] = al, be
    cands = pool.candidates[0]
    if candidate_prior is None:
        log_p0 = np.full(K, -math.log(K))
    else:
        extra = set(candidate_prior) - set(cands)
        if extra:
            raise PriorError(f"candidate_prior names {sorted(extra)!r}, not candidates of task "
                             f"{trace.task_id!r} ({list(cands)!r})")
        missing = [c for c in cands if c not in candidate_prior]
        if missing:
            raise PriorError(f"candidate_prior is missing candidate(s) {missing!r}")
        p0 = np.array([float(candidate_prior[c]) for c in cands])
        if (p0 < 0).any() or not np.isfinite(p0).all() or abs(p0.sum() - 1.0) > 1e-6:
            raise PriorError(f"candidate_prior must be probabilities summing to 1, got "
                             f"{dict(zip(cands, p0.tolist()))!r}")
        with np.errstate(divide="ignore"):
            log_p0 = np.log(p0)
    c = pool.c[0].astype(float)  # (I, K)
    d = pool.d[0].astype(float)
    e = pool.e[0].astype(float)
    N = pool.N[0].astype(float)[:, None]
    logF = (betaln(alpha[:, None] + c, beta[:, None] + d) - betaln(alpha, beta)[:, None]
            - (N - e) * math.log(K - 1))
    logpost = log_p0 + logF.sum(0)
    logpost -= logsumexp(logpost)
    return {cand: float(np.exp(lp)) for cand, lp in zip(cands, logpost)}


def log_odds_weights(priors: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """w_i = log(mu_i / (1 - mu_i)) with mu_i = alpha_i / (alpha_i + beta_i): the vote weight of
    seat i in the single-endorsement weighted-majority form (BDA paper Prop. 1, C.2)."""
    out = {}
    for a, (al, be) in priors.items():
        mu = al / (al + be)
        out[a] = math.log(mu / (1.0 - mu))
    return out
