"""Spectral initialisation of the one-coin Dawid-Skene model, and the label-switching symmetry of K = 2.

One-coin model: seat i answers the truth with probability p_i, else one of the K - 1 other labels
uniformly. With a uniform class prior, two seats agree with probability
A_ij = p_i p_j + (1 - p_i)(1 - p_j) / (K - 1), so the centred agreement
M_ij = (A_ij - 1/K) K / (K - 1) = q_i q_j with q_i = (K p_i - 1) / (K - 1): a rank-one matrix off its
diagonal. ``spectral_skills`` fits that rank-one structure to the observed pairwise agreement rates
(the diagonal, which votes never observe, is filled in iteratively from the current fit) and reads
each seat's accuracy off its coordinate. This is the second-moment, one-coin special case of the
spectral initialisation of Zhang, Chen, Zhou and Jordan (2016), whose general method uses third-order
moments to initialise full confusion matrices; the one-coin model needs only the rank-one part.

The sign of q is not identified: q and -q give the same M. The rule taken here is sum q > 0, which is
the seats' mean accuracy above chance (mean p > 1/K, since p_i = (1 + (K - 1) q_i) / K): the usual
assumption of spectral one-coin estimators (workers better than random on average, e.g. Dalvi et al.
2013). It is not "most seats better than chance": two good seats can outweigh three bad ones (p =
0.85, 0.85, 0.3, 0.3, 0.3 has sum q = 0.3 > 0 with three of five seats below 1/2), and the mean, unlike
a count, moves continuously with the fit. At K = 2 the symmetry is exact for the whole
model: reliabilities p and 1 - p with every truth flipped give every vote the same likelihood
(``one_coin_loglik`` of both orientations is equal), so no amount of unlabelled data can tell them
apart; a council whose majority of seats is worse than chance is then read upside down by any
unsupervised estimator, and only labels (a supervised prior) orient it (the BDA paper, App. F.10).
Pure numpy: no model calls.
"""
from __future__ import annotations

import numpy as np

from chorus.core.config import InputError

_EPS = 1e-10


def agreement(votes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(A, n): the pairwise agreement rate of the seats' votes ((tasks, seats) label indices, -1:
    no vote) over the tasks both voted on, and how many such tasks (A is NaN where none)."""
    V = np.asarray(votes)
    has = (V >= 0).astype(float)
    n = has.T @ has
    L = int(V.max()) + 1 if (V >= 0).any() else 1
    same = np.zeros_like(n)
    for lab in range(L):  # one indicator matrix per label: agreements are co-occurrences of a label
        x = (V == lab).astype(float)
        same += x.T @ x
    with np.errstate(invalid="ignore", divide="ignore"):
        A = np.where(n > 0, same / np.maximum(n, 1), np.nan)
    return A, n


def spectral_skills(votes: np.ndarray, K: int, *, iters: int = 5000) -> np.ndarray:
    """Each seat's one-coin accuracy p_i from the rank-one structure of its pairwise agreements
    (module docstring), oriented so that the seats' mean accuracy is above chance (sum q > 0) and clipped into
    [1e-10, 1 - 1e-10]. Pairs that never voted on a common task are filled in from the fit."""
    return skills_from_agreement(agreement(votes)[0], K, iters=iters)


def skills_from_agreement(A: np.ndarray, K: int, *, iters: int = 5000) -> np.ndarray:
    """``spectral_skills`` from a pairwise agreement matrix (NaN: never observed; the diagonal is
    ignored). Exact when A is the one-coin model's own: A_ij = p_i p_j + (1 - p_i)(1 - p_j) / (K - 1)."""
    if K < 2:
        raise InputError(f"K must be at least 2, got {K}")
    A = np.asarray(A, dtype=float)
    W = A.shape[0]
    M = (A - 1.0 / K) * K / (K - 1)
    seen = np.isfinite(M) & ~np.eye(W, dtype=bool)
    if W < 3 or not seen.any():
        return np.full(W, 1.0 / K + _EPS)  # no triangle of seats: nothing identifies the skills
    # unseen entries (the diagonal among them) imputed from the current rank-one fit, refitted until it
    # stops moving: linear convergence, slow where q is small (K = 2, p near 1/2), but each step is the
    # eigendecomposition of a seats x seats matrix
    q = np.zeros(W)
    for _ in range(iters):
        w, V = np.linalg.eigh(np.where(seen, M, np.outer(q, q)))
        q_new = V[:, -1] * np.sqrt(max(w[-1], 0.0))
        done = np.allclose(np.abs(q_new), np.abs(q), rtol=0, atol=1e-13)
        q = q_new
        if done:
            break
    if q.sum() < 0:
        q = -q
    p = (1.0 + (K - 1) * q) / K
    return np.clip(p, _EPS, 1 - _EPS)


def log_joint(votes: np.ndarray, skill: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """(tasks, K): log prior[z] + sum_i log e_i(z, y_ti), with e_i(z, y) = p_i if z == y else
    (1 - p_i) / (K - 1), K = len(prior); skills and prior clipped / floored at 1e-10 (crowd-kit's)."""
    V = np.asarray(votes)
    K = len(prior)
    has = V >= 0
    y = np.where(has, V, 0)
    hit = np.log(np.clip(skill, _EPS, 1 - _EPS))
    miss = np.log(np.clip((1 - skill) / (K - 1), _EPS, 1 - _EPS))
    # every vote adds miss to all labels, and hit - miss to the label it names
    logp = np.log(np.maximum(prior, _EPS))[None, :] + (has * miss).sum(1)[:, None]
    np.add.at(logp, (np.nonzero(has)[0], y[has]), (hit - miss)[np.nonzero(has)[1]])
    return logp


def one_coin_posterior(votes: np.ndarray, skill: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """The E-step: P[t, z] proportional to exp(log_joint)."""
    logp = log_joint(votes, skill, prior)
    logp -= logp.max(1, keepdims=True)
    P = np.exp(logp)
    return P / P.sum(1, keepdims=True)


def one_coin_loglik(votes: np.ndarray, skill: np.ndarray, prior: np.ndarray) -> float:
    """The one-coin model's marginal log-likelihood of every task's votes (the truth summed out)."""
    logp = log_joint(votes, skill, prior)
    m = logp.max(1, keepdims=True)
    return float((m[:, 0] + np.log(np.exp(logp - m).sum(1))).sum())


def mirrored(skill: np.ndarray, prior: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The K = 2 mirror image of a one-coin fit: every reliability p -> 1 - p, the class prior
    reversed. Its likelihood of any set of votes equals the original's."""
    if len(prior) != 2:
        raise InputError(f"the mirror symmetry is exact at K = 2 only, got K = {len(prior)}")
    return 1.0 - np.asarray(skill, float), np.asarray(prior, float)[::-1].copy()
