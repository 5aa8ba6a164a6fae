"""The tempered confusion model (BDA paper Eq. 4, C.5): per-seat Dirichlet confusion rows over the
expanded pseudo-observations, a smoothed training candidate prior, and a temperature tau.

    P_i(g'|g) = (M_i[g, g'] + lambda * R_i[g, g']) / (sum_g' M_i[g, g'] + lambda)
    R_i = one-coin row: r_i on the diagonal, (1 - r_i)/(K-1) elsewhere
    pi_tau(g|T) ∝ pi_0(g) * exp(tau * sum_i sum_g' n_i(g') log P_i(g'|g))

``M_i[g, g']`` sums agent i's expanded observations in cell g' over training tasks whose gold
is g. Pure numpy.
"""
from __future__ import annotations

import numpy as np

from chorus.aggregate.counts import Pool
from chorus.aggregate.metrics import brier_sum_logits
from chorus.aggregate.posterior import reliabilities


def confusion_counts(pool: Pool, idx: np.ndarray) -> np.ndarray:
    """(I, K, K): M[i, g, g'] = sum over training tasks with gold g of n_i(g')."""
    idx = np.asarray(idx)
    return np.einsum("tg,tik->igk", pool.onehot(idx), pool.n[idx].astype(float))


def one_coin_rows(r: np.ndarray, K: int, mu_clip: float) -> np.ndarray:
    """(I, K, K) rows with r_i (clipped) on the diagonal and (1 - r_i)/(K-1) elsewhere."""
    r = np.clip(np.asarray(r, float), mu_clip, 1.0 - mu_clip)
    off = (1.0 - r) / (K - 1)
    R = np.repeat(off[:, None, None], K, axis=1).repeat(K, axis=2)
    ii = np.arange(K)
    R[:, ii, ii] = r[:, None]
    return R


def confusion_log_rows(M: np.ndarray, r: np.ndarray, lambdas: np.ndarray, mu_clip: float) -> np.ndarray:
    """(L, I, K, K) log Dirichlet posterior-mean rows for each concentration in ``lambdas``."""
    K = M.shape[-1]
    R = one_coin_rows(r, K, mu_clip)
    lam = np.asarray(lambdas, float).reshape(-1, 1, 1, 1)
    P = (M[None] + lam * R[None]) / (M.sum(-1, keepdims=True)[None] + lam)
    return np.log(P)


def label_prior(pool: Pool, idx: np.ndarray, smoothing: float = 1.0) -> np.ndarray:
    """Training label frequencies, add-``smoothing`` (Laplace) smoothed."""
    cnt = np.bincount(pool.gold[np.asarray(idx)], minlength=pool.K).astype(float)
    p = (cnt + smoothing) / (cnt.sum() + smoothing * pool.K)
    if (p <= 0).any():  # smoothing 0 with an unseen class
        p = np.where(p <= 0, 1e-12, p)
        p /= p.sum()
    return p


def confusion_logits(pool: Pool, idx: np.ndarray, logP: np.ndarray, logpi0: np.ndarray,
                     tau: float) -> np.ndarray:
    """(n, K) unnormalised log posterior for one fitted model (logP: (I, K, K))."""
    E = np.einsum("tik,igk->tg", pool.n[np.asarray(idx)].astype(float), logP)
    return logpi0 + tau * E


def confusion_grid_brier(pool: Pool, tr: np.ndarray, va: np.ndarray, lambdas: np.ndarray,
                         taus: np.ndarray, mu_clip: float, smoothing: float) -> np.ndarray:
    """(L, Tau) summed multi-class Brier on ``va`` of the model fitted on ``tr``, for every
    (lambda, tau) pair at once."""
    r = reliabilities(pool, tr)
    logP = confusion_log_rows(confusion_counts(pool, tr), r, lambdas, mu_clip)  # (L, I, K, K)
    logpi0 = np.log(label_prior(pool, tr, smoothing))
    E = np.einsum("tik,ligk->ltg", pool.n[va].astype(float), logP)  # (L, n, K)
    logits = logpi0 + np.asarray(taus, float)[None, :, None, None] * E[:, None]
    return brier_sum_logits(logits, pool.gold[va])
