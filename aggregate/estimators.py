"""BDA estimators: the one-coin model with shared or per-agent priors, and the tempered
confusion model. Hyperparameters are chosen by inner CV on the multi-class Brier score over
the grids of the BDA paper §D.1, the whole grid evaluated at once per inner fold.

    >>> est = OneCoinBDA(prior="per_agent").fit(train_traces)
    >>> est.hyperparams_, est.reliabilities_, est.priors_
    >>> est.predict_proba(test_traces)      # tidy: task_id, candidate, probability
"""
from __future__ import annotations

import itertools
from typing import Any, Sequence

import numpy as np
import pandas as pd

from chorus.aggregate.base import Aggregator
from chorus.aggregate.confusion import (confusion_counts, confusion_grid_brier, confusion_log_rows, confusion_logits,
                                 label_prior)
from chorus.aggregate.counts import Pool
from chorus.aggregate.keys import check_key, keyed_pool
from chorus.aggregate.metrics import brier_sum_logits
from chorus.aggregate.posterior import (MU_CLIP, RELIABILITY_BASES, beta_params, one_coin_grid_logits, per_agent_mu,
                                 reliabilities, softmax)
from chorus.aggregate.selection import argmin_random
from chorus.core.config import InputError

B_GRID = (0.52, 0.55, 0.58, 0.60)
KAPPA_GRID = (0.0, 1.0, 2.0, 3.0, 4.0)
S_GRID = (4.0, 8.0, 16.0, 32.0)
# The BDA paper leaves the confusion grids open (tau in (0, 1]; E.2 mentions {0.25, .., 1}); these
# extend below 0.25 because K > 2 selections drive tau "well below one" (BDA paper §E.2).
LAMBDA_GRID = (1.0, 4.0, 16.0, 64.0, 256.0)
TAU_GRID = (0.1, 0.2, 0.3, 0.5, 0.75, 1.0)


class OneCoinBDA(Aggregator):
    """One-coin BDA (BDA paper Eq. 1-3).

    ``prior="per_agent"``: mu_i = clip(b + kappa (r_i - mean r)), (b, kappa, s) by inner CV;
    ``prior="shared"``: the kappa = 0 slice, (mu = b, s) by inner CV. ``tau_grid`` other than
    (1,) adds a temperature on the joint likelihood (the tempered one-coin control of BDA paper §E.5).
    ``hyperparams`` (a dict b/kappa/s/tau) skips the inner CV. ``candidate_prior``: uniform
    (None) or a probability vector over the shared candidates. ``reliability``: what r_i is read from
    (``all`` informative moves, the paper's estimator; ``proposals`` only; ``round0`` proposals only:
    BDA paper Table 7's estimator ablation). ``key``: which moves share one reliability (``agent``, the
    paper's; ``shared``, ``agent_round``, ``agent_force``: ``chorus.aggregate.keys``, Table 7's granularity
    ablation); a finer key's pseudo-seats are one-coin seats of their own (r, mu, weight each), and
    ``reliabilities_`` / ``priors_`` are indexed by them (``seats_``). A pseudo-seat the fit never saw
    gets mu = b at prediction.

    Fitted: ``reliabilities_`` (Series agent -> r_i), ``mu_``, ``weights_`` (log-odds w_i),
    ``priors_`` ({agent: (alpha, beta)}), ``hyperparams_``, ``cv_results_`` (grid + Brier).
    """

    def __init__(self, prior: str = "per_agent", *, b_grid: Sequence[float] = B_GRID,
                 kappa_grid: Sequence[float] = KAPPA_GRID, s_grid: Sequence[float] = S_GRID,
                 tau_grid: Sequence[float] = (1.0,), hyperparams: dict[str, float] | None = None,
                 mu_clip: float = MU_CLIP, candidate_prior: Sequence[float] | None = None,
                 reliability: str = "all", inner_folds: int = 5, random_state: int = 0, protocol: str = "strict",
                 on_violation: str = "error", key: str = "agent"):
        super().__init__(inner_folds=inner_folds, random_state=random_state, protocol=protocol,
                         on_violation=on_violation)
        if prior not in ("per_agent", "shared"):
            raise InputError(f"prior must be 'per_agent' or 'shared', got {prior!r}")
        if reliability not in RELIABILITY_BASES:
            raise InputError(f"reliability must be one of {RELIABILITY_BASES}, got {reliability!r}")
        self.reliability = reliability
        self.key = check_key(key)
        if key != "agent" and reliability == "round0":  # round-0 votes are per seat, not per pseudo-seat
            raise InputError(f"reliability='round0' needs key='agent', got key={key!r}")
        for name, grid in (("b_grid", b_grid), ("s_grid", s_grid), ("tau_grid", tau_grid)):
            if len(grid) == 0 or any(not np.isfinite(v) or v <= 0 for v in grid):
                raise InputError(f"{name} must hold positive numbers, got {list(grid)!r}")
        if any(not 0 < b < 1 for b in b_grid):
            raise InputError(f"b_grid values must lie in (0, 1), got {list(b_grid)!r}")
        if any(t > 1 for t in tau_grid):
            raise InputError(f"tau_grid values must lie in (0, 1], got {list(tau_grid)!r}")
        if not 0 < mu_clip < 0.5:
            raise InputError(f"mu_clip must lie in (0, 0.5), got {mu_clip!r}")
        self.prior = prior
        self.b_grid = tuple(b_grid)
        self.kappa_grid = tuple(kappa_grid)
        self.s_grid = tuple(s_grid)
        self.tau_grid = tuple(tau_grid)
        self.hyperparams = hyperparams
        self.mu_clip = mu_clip
        self.candidate_prior = candidate_prior

    # -- grid ------------------------------------------------------------------------------
    def grid(self) -> pd.DataFrame:
        kappas = (0.0,) if self.prior == "shared" else self.kappa_grid
        rows = list(itertools.product(self.b_grid, kappas, self.s_grid, self.tau_grid))
        return pd.DataFrame(rows, columns=["b", "kappa", "s", "tau"])

    def _grid_params(self, r: np.ndarray, grid: pd.DataFrame):
        mu = per_agent_mu(r, grid["b"].to_numpy(), grid["kappa"].to_numpy(), self.mu_clip)  # (G, I)
        alpha, beta = beta_params(mu, grid["s"].to_numpy())
        return alpha, beta, grid["tau"].to_numpy()

    def _log_prior(self, K: int) -> np.ndarray:
        if self.candidate_prior is None:
            return np.full(K, -np.log(K))
        p = np.asarray(self.candidate_prior, float)
        if p.shape != (K,):
            raise InputError(f"candidate_prior has {p.size} entries for K={K}")
        with np.errstate(divide="ignore"):
            return np.log(p)

    # -- fit -------------------------------------------------------------------------------
    def _fit(self, pool: Pool, idx: np.ndarray) -> None:
        idx = np.asarray(idx)
        self.agents_ = pool.agents
        pool = keyed_pool(pool, self.key)
        self.seats_ = pool.agents
        lp = self._log_prior(pool.K)
        if self.hyperparams is not None:
            hp = dict(self.hyperparams)
            hp.setdefault("kappa", 0.0)
            hp.setdefault("tau", 1.0)
            if "mu" in hp and "b" not in hp:
                hp["b"] = hp.pop("mu")
            missing = {"b", "s"} - set(hp)
            if missing:
                raise ValueError(f"hyperparams lacks {sorted(missing)!r}: {self.hyperparams!r}")
            self.cv_results_ = None
        else:
            grid = self.grid()
            scores = np.zeros(len(grid))
            for tr, va in self._inner(pool, idx):
                r = reliabilities(pool, tr, self.reliability)
                alpha, beta, tau = self._grid_params(r, grid)
                logits = one_coin_grid_logits(pool, va, alpha, beta, tau, lp)
                scores += brier_sum_logits(logits, pool.gold[va])
            scores /= len(idx)
            best = argmin_random(scores, self._rng(1))
            self.cv_results_ = grid.assign(brier=scores)
            hp = grid.iloc[best].to_dict()
        self.hyperparams_ = {k: float(v) for k, v in hp.items() if k in ("b", "kappa", "s", "tau")}
        if self.prior == "shared":
            self.hyperparams_["kappa"] = 0.0
        r = reliabilities(pool, idx, self.reliability)
        mu = per_agent_mu(r, self.hyperparams_["b"], self.hyperparams_["kappa"], self.mu_clip)
        alpha, beta = beta_params(mu, self.hyperparams_["s"])
        self._alpha, self._beta = alpha, beta
        ag = list(pool.agents)
        self.reliabilities_ = pd.Series(r, index=ag, name="r")
        self.mu_ = pd.Series(mu, index=ag, name="mu")
        self.weights_ = pd.Series(np.log(mu / (1 - mu)), index=ag, name="w")
        self.priors_ = {a: (float(al), float(be)) for a, al, be in zip(ag, alpha, beta)}

    def _proba(self, pool: Pool, idx: np.ndarray) -> np.ndarray:
        pool = keyed_pool(pool, self.key)
        alpha, beta = self._alpha, self._beta
        if pool.agents != self.seats_:  # other pseudo-seats than fitted (fit / predict on new traces)
            mu0 = float(np.clip(self.hyperparams_["b"], self.mu_clip, 1.0 - self.mu_clip))
            a0, b0 = beta_params(mu0, self.hyperparams_["s"])
            fitted = dict(zip(self.seats_, zip(self._alpha, self._beta)))
            alpha, beta = (np.array([fitted.get(a, (a0, b0))[j] for a in pool.agents], float) for j in (0, 1))
        return softmax(one_coin_grid_logits(pool, idx, alpha[None], beta[None],
                                            self.hyperparams_["tau"], self._log_prior(pool.K))[0])

    def fitted_summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {f"hp_{k}": v for k, v in self.hyperparams_.items()}
        for a, v in self.reliabilities_.items():
            out[f"r[{a}]"] = float(v)
        for a, v in self.weights_.items():
            out[f"w[{a}]"] = float(v)
        return out


class ConfusionBDA(Aggregator):
    """Tempered confusion model (BDA paper Eq. 4, C.5).

    Per-seat rows P_i(g'|g): Dirichlet posterior means on the training part's labelled tasks,
    prior mean the one-coin row (r_i on the diagonal, (1 - r_i)/(K-1) elsewhere, r_i clipped
    into [mu_clip, 1 - mu_clip]) with concentration lambda; candidate prior = training label
    frequencies smoothed by ``label_smoothing`` (add-one by default);
    pi_tau(g|T) ∝ pi_0(g) exp(tau sum_i sum_g' n_i(g') log P_i(g'|g)). (lambda, tau) by inner CV.

    Fitted: ``confusion_`` ({agent: DataFrame rows=true g, cols=observed g'}),
    ``candidate_prior_``, ``reliabilities_``, ``hyperparams_``, ``cv_results_``.
    """

    needs_shared_labels = True

    def __init__(self, *, lambda_grid: Sequence[float] = LAMBDA_GRID,
                 tau_grid: Sequence[float] = TAU_GRID, hyperparams: dict[str, float] | None = None,
                 mu_clip: float = MU_CLIP, label_smoothing: float = 1.0, inner_folds: int = 5,
                 random_state: int = 0, protocol: str = "strict", on_violation: str = "error"):
        super().__init__(inner_folds=inner_folds, random_state=random_state, protocol=protocol,
                         on_violation=on_violation)
        if len(lambda_grid) == 0 or any(not np.isfinite(v) or v <= 0 for v in lambda_grid):
            raise InputError(f"lambda_grid must hold positive numbers, got {list(lambda_grid)!r}")
        if len(tau_grid) == 0 or any(not 0 < t <= 1 for t in tau_grid):
            raise InputError(f"tau_grid values must lie in (0, 1], got {list(tau_grid)!r}")
        if label_smoothing < 0:
            raise InputError(f"label_smoothing must be >= 0, got {label_smoothing!r}")
        self.lambda_grid = tuple(lambda_grid)
        self.tau_grid = tuple(tau_grid)
        self.hyperparams = hyperparams
        self.mu_clip = mu_clip
        self.label_smoothing = label_smoothing

    def grid(self) -> pd.DataFrame:
        return pd.DataFrame(list(itertools.product(self.lambda_grid, self.tau_grid)),
                            columns=["lambda", "tau"])

    def _fit(self, pool: Pool, idx: np.ndarray) -> None:
        cands = pool.require_shared_labels("the confusion model")
        idx = np.asarray(idx)
        self.agents_ = pool.agents
        self.candidates_ = cands
        lam = np.asarray(self.lambda_grid, float)
        tau = np.asarray(self.tau_grid, float)
        if self.hyperparams is not None:
            hp = {"lambda": float(self.hyperparams["lambda"]), "tau": float(self.hyperparams.get("tau", 1.0))}
            self.cv_results_ = None
        else:
            scores = np.zeros((len(lam), len(tau)))
            for tr, va in self._inner(pool, idx):
                scores += confusion_grid_brier(pool, tr, va, lam, tau, self.mu_clip,
                                               self.label_smoothing)
            scores /= len(idx)
            grid = self.grid()
            flat = scores.ravel()  # lambda-major, matches grid()
            best = argmin_random(flat, self._rng(1))
            self.cv_results_ = grid.assign(brier=flat)
            hp = {"lambda": float(grid["lambda"].iloc[best]), "tau": float(grid["tau"].iloc[best])}
        self.hyperparams_ = hp
        r = reliabilities(pool, idx)
        M = confusion_counts(pool, idx)
        self._logP = confusion_log_rows(M, r, np.array([hp["lambda"]]), self.mu_clip)[0]  # (I, K, K)
        self._logpi0 = np.log(label_prior(pool, idx, self.label_smoothing))
        ag = list(pool.agents)
        self.reliabilities_ = pd.Series(r, index=ag, name="r")
        self.confusion_ = {a: pd.DataFrame(np.exp(self._logP[i]), index=pd.Index(cands, name="true"),
                                           columns=pd.Index(cands, name="observed"))
                           for i, a in enumerate(ag)}
        self.candidate_prior_ = pd.Series(np.exp(self._logpi0), index=list(cands), name="pi0")

    def _proba(self, pool: Pool, idx: np.ndarray) -> np.ndarray:
        if pool.shared_candidates != self.candidates_:
            raise InputError(f"the confusion model was fitted on candidates {list(self.candidates_)!r}; "
                             f"got {pool.shared_candidates!r}")
        return softmax(confusion_logits(pool, idx, self._logP, self._logpi0, self.hyperparams_["tau"]))

    def fitted_summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {f"hp_{k}": v for k, v in self.hyperparams_.items()}
        for a, v in self.reliabilities_.items():
            out[f"r[{a}]"] = float(v)
        return out
