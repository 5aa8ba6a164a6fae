"""Baselines (BDA paper §B.1), run on the same folds, label budget and tie-break discipline as BDA.

* ``Plurality``: round-0 proposals; confidence = the winning fraction.
* ``FinalPlurality``: the last round's endorsements (a debate's final majority), the same way.
* ``VoteArm``: an independent vote arm's tallies carried in the trace (``vote_arm``), the same way.
* ``VerbalizedVote``: round-0 proposals weighted by stated confidence; confidence = the
  winner's mean stated confidence.
* ``BestMember``: the seat with the best round-0 accuracy on the training part.
* ``LogisticStacker``: l2 logistic regression (scikit-learn) on per-candidate features
  [c_i(g), d_i(g)] of all seats, weights shared across candidates (label-indifferent),
  C by inner CV on Brier.
* ``GatedVote``: plurality over seats whose training round-0 accuracy exceeds 1/K.
* ``DawidSkeneEM``: crowd-kit's unsupervised one-coin Dawid-Skene EM on the round-0 votes of
  the deployment pool (no labels), continued to its fixed point (``one_coin_em_step``), from several
  starts (majority vote, spectral, seeded random), the highest likelihood kept and every start's
  likelihood and fixed point recorded (``starts_``).
* ``IsotonicRecalibrated``: leak-free 5-fold isotonic recalibration (scikit-learn) of any arm.
"""
from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np
import pandas as pd

from chorus.aggregate.base import Aggregator
from chorus.aggregate.counts import Pool
from chorus.aggregate.errors import TraceError
from chorus.aggregate.metrics import brier_per_task
from chorus.aggregate.selection import argmax_random, argmin_random
from chorus.aggregate.spectral import one_coin_loglik, one_coin_posterior, spectral_skills
from chorus.core.config import InputError


def _vote_counts(pool: Pool, idx: np.ndarray, seats: np.ndarray | None = None,
                 weights: np.ndarray | None = None) -> np.ndarray:
    """(n, K) round-0 proposal tallies (optionally per-seat weights, a seat mask)."""
    a = pool.r0_answer[np.asarray(idx)]  # (n, I)
    n, I = a.shape
    w = np.ones((n, I)) if weights is None else np.asarray(weights, float)
    ok = a >= 0
    if seats is not None:
        ok &= np.asarray(seats, bool)[None, :]
    V = np.zeros((n, pool.K))
    rows = np.repeat(np.arange(n), I).reshape(n, I)
    np.add.at(V, (rows[ok], a[ok]), w[ok])
    return V


def _fractions(V: np.ndarray) -> np.ndarray:
    tot = V.sum(1, keepdims=True)
    K = V.shape[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tot > 0, V / np.where(tot > 0, tot, 1), 1.0 / K)


def _spread(answer: np.ndarray, conf: np.ndarray, K: int) -> np.ndarray:
    """Probability vector with ``conf`` on ``answer`` and the rest spread evenly."""
    n = len(answer)
    P = np.repeat(((1.0 - conf) / (K - 1))[:, None], K, axis=1)
    P[np.arange(n), answer] = conf
    return P


def _round0_accuracy(pool: Pool, idx: np.ndarray) -> np.ndarray:
    """(I,) round-0 accuracy per seat on labelled tasks (a missing proposal counts as wrong);
    -inf for a seat that never proposed there."""
    a = pool.r0_answer[idx]
    g = pool.gold[idx][:, None]
    has = (a >= 0).sum(0)
    acc = ((a == g) & (a >= 0)).sum(0) / np.maximum(len(idx), 1)
    return np.where(has > 0, acc, -np.inf)


class Plurality(Aggregator):
    """Most-proposed round-0 answer; probabilities = vote shares (uniform without votes)."""

    supervised = False

    def _fit(self, pool: Pool, idx: np.ndarray) -> None:
        self.agents_ = pool.agents

    def _proba(self, pool: Pool, idx: np.ndarray) -> np.ndarray:
        return _fractions(_vote_counts(pool, idx))


class FinalPlurality(Aggregator):
    """Most-endorsed answer of each trace's last round (a debate's own final majority: every seat's
    final answer); probabilities = those shares (uniform when the last round endorses nothing)."""

    supervised = False

    def _fit(self, pool: Pool, idx: np.ndarray) -> None:
        self.agents_ = pool.agents

    def _proba(self, pool: Pool, idx: np.ndarray) -> np.ndarray:
        return _fractions(pool.final_votes[np.asarray(idx)])


class VoteArm(Aggregator):
    """Plurality of an independent vote arm carried in each trace (``vote_arm``: {candidate: count},
    e.g. a debate's compute-matched majority vote); probabilities = its vote shares."""

    supervised = False

    def _fit(self, pool: Pool, idx: np.ndarray) -> None:
        self.agents_ = pool.agents

    def _proba(self, pool: Pool, idx: np.ndarray) -> np.ndarray:
        V = pool.arm_votes[np.asarray(idx)]
        miss = np.flatnonzero(np.isnan(V).any(1))
        if len(miss):
            raise TraceError(f"vote_arm: {len(miss)} of {len(V)} traces carry no 'vote_arm' tallies "
                             f"(e.g. task {pool.task_ids[np.asarray(idx)[miss[0]]]!r}); run the vote arm or drop the method")
        return _fractions(V)


class VerbalizedVote(Aggregator):
    """Confidence-weighted round-0 vote; confidence = the winner's mean stated confidence
    (the remaining mass spread evenly). A round-0 proposal without a stated confidence is an
    error unless ``missing_confidence`` is a number to substitute."""

    supervised = False

    def __init__(self, *, missing_confidence: float | None = None, inner_folds: int = 5,
                 random_state: int = 0, protocol: str = "strict", on_violation: str = "error"):
        super().__init__(inner_folds=inner_folds, random_state=random_state, protocol=protocol,
                         on_violation=on_violation)
        self.missing_confidence = missing_confidence

    def _fit(self, pool: Pool, idx: np.ndarray) -> None:
        self.agents_ = pool.agents

    def _conf(self, pool: Pool, idx: np.ndarray) -> np.ndarray:
        a = pool.r0_answer[idx]
        c = pool.r0_conf[idx].copy()
        miss = (a >= 0) & np.isnan(c)
        if miss.any():
            if self.missing_confidence is None:
                t, i = np.argwhere(miss)[0]
                raise TraceError(f"verbalized vote: task {pool.task_ids[idx[t]]!r}, agent "
                                 f"{pool.agents[i]!r} proposes without a stated confidence "
                                 f"({int(miss.sum())} such proposals; set missing_confidence)")
            c[miss] = self.missing_confidence
        return c

    def _decide(self, pool: Pool, idx: np.ndarray, rng: np.random.Generator):
        idx = np.asarray(idx)
        c = self._conf(pool, idx)
        W = _vote_counts(pool, idx, weights=np.nan_to_num(c))
        V = _vote_counts(pool, idx)
        K = pool.K
        ans = argmax_random(np.where(V > 0, W, -1.0), rng)  # only answers someone proposed
        with np.errstate(invalid="ignore", divide="ignore"):
            mean_c = W[np.arange(len(idx)), ans] / V[np.arange(len(idx)), ans]
        conf = np.where(V.sum(1) > 0, mean_c, 1.0 / K)
        conf = np.clip(np.nan_to_num(conf, nan=1.0 / K), 0.0, 1.0)
        return ans, _spread(ans, conf, K)

    def _proba(self, pool: Pool, idx: np.ndarray) -> np.ndarray:
        return self._decide(pool, idx, self._rng(7))[1]


class BestMember(Aggregator):
    """The seat with the best round-0 accuracy on the training part (ties: seeded draw).
    ``confidence="train_accuracy"`` puts that accuracy on its answer; ``"stated"`` uses the
    seat's own stated confidence. Where the seat did not propose: uniform."""

    def __init__(self, *, confidence: str = "train_accuracy", inner_folds: int = 5,
                 random_state: int = 0, protocol: str = "strict", on_violation: str = "error"):
        super().__init__(inner_folds=inner_folds, random_state=random_state, protocol=protocol,
                         on_violation=on_violation)
        if confidence not in ("train_accuracy", "stated"):
            raise InputError(f"confidence must be 'train_accuracy' or 'stated', got {confidence!r}")
        self.confidence = confidence

    def _fit(self, pool: Pool, idx: np.ndarray) -> None:
        self.agents_ = pool.agents
        acc = _round0_accuracy(pool, np.asarray(idx))
        best = argmin_random(-acc, self._rng(1))
        self.seat_ = pool.agents[best]
        self._seat = best
        self.seat_accuracy_ = pd.Series(acc, index=list(pool.agents), name="round0_accuracy")

    def _proba(self, pool: Pool, idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx)
        i = pool.agents.index(self.seat_)
        a = pool.r0_answer[idx, i]
        K = pool.K
        if self.confidence == "stated":
            conf = pool.r0_conf[idx, i]
            if np.isnan(conf[a >= 0]).any():
                raise TraceError("best member (stated confidence): a proposal of seat "
                                 f"{self.seat_!r} has no stated confidence")
        else:
            conf = np.full(len(idx), float(self.seat_accuracy_[self.seat_]))
        conf = np.clip(np.maximum(conf, 0.0), 0.0, 1.0)
        P = _spread(np.maximum(a, 0), conf, K)
        P[a < 0] = 1.0 / K
        return P

    def fitted_summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seat": self.seat_}
        out.update({f"acc[{a}]": float(v) for a, v in self.seat_accuracy_.items()})
        return out


class GatedVote(Aggregator):
    """Plurality over the seats whose training round-0 accuracy exceeds 1/K; confidence = the
    winning fraction among surviving seats. If no seat clears the gate, all seats vote
    (recorded as ``gate_fallback_``)."""

    def _fit(self, pool: Pool, idx: np.ndarray) -> None:
        self.agents_ = pool.agents
        acc = _round0_accuracy(pool, np.asarray(idx))
        keep = acc > 1.0 / pool.K
        self.gate_fallback_ = not keep.any()
        if self.gate_fallback_:
            keep = np.ones_like(keep)
        self.seats_ = [a for a, k in zip(pool.agents, keep) if k]
        self.seat_accuracy_ = pd.Series(acc, index=list(pool.agents), name="round0_accuracy")

    def _proba(self, pool: Pool, idx: np.ndarray) -> np.ndarray:
        mask = np.array([a in self.seats_ for a in pool.agents])
        return _fractions(_vote_counts(pool, idx, seats=mask))

    def fitted_summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"gate_fallback": bool(self.gate_fallback_)}
        out.update({f"gate[{a}]": a in self.seats_ for a in self.agents_})
        return out


def _stack_features(pool: Pool, idx: np.ndarray) -> np.ndarray:
    """(n, K, 2I) per-candidate features [c_i(g), d_i(g)] for all seats."""
    idx = np.asarray(idx)
    c = pool.c[idx].astype(float)  # (n, I, K)
    d = pool.d[idx].astype(float)
    return np.concatenate([c.transpose(0, 2, 1), d.transpose(0, 2, 1)], axis=2)


class LogisticStacker(Aggregator):
    """l2 logistic regression on per-candidate rows (task, g) with features [c_i(g), d_i(g)]_i
    and target 1[g = gold]; the weights are shared across candidates (label-indifferent).
    Probabilities: the per-row probabilities normalised over each task's candidates. The
    regulariser C is chosen by inner CV on the task-level Brier score."""

    def __init__(self, *, C_grid: Sequence[float] = (0.01, 0.1, 1.0, 10.0, 100.0),
                 inner_folds: int = 5, random_state: int = 0, protocol: str = "strict",
                 on_violation: str = "error"):
        super().__init__(inner_folds=inner_folds, random_state=random_state, protocol=protocol,
                         on_violation=on_violation)
        self.C_grid = tuple(C_grid)

    @staticmethod
    def _fit_lr(X: np.ndarray, y: np.ndarray, C: float):
        from sklearn.linear_model import LogisticRegression

        lr = LogisticRegression(C=C, solver="newton-cholesky", max_iter=200)
        lr.fit(X, y)
        return lr

    @staticmethod
    def _rows(pool: Pool, idx: np.ndarray):
        F = _stack_features(pool, idx)  # (n, K, f)
        n, K, f = F.shape
        y = (np.arange(K)[None, :] == pool.gold[idx][:, None]).astype(int).ravel()
        return F.reshape(n * K, f), y, (n, K)

    @staticmethod
    def _task_proba(lr, pool: Pool, idx: np.ndarray) -> np.ndarray:
        F = _stack_features(pool, idx)
        n, K, f = F.shape
        p = lr.predict_proba(F.reshape(n * K, f))[:, 1].reshape(n, K)
        return p / p.sum(1, keepdims=True)

    def _fit(self, pool: Pool, idx: np.ndarray) -> None:
        idx = np.asarray(idx)
        self.agents_ = pool.agents
        if len(self.C_grid) == 1:
            self.C_ = float(self.C_grid[0])
            self.cv_results_ = None
        else:
            scores = np.zeros(len(self.C_grid))
            for tr, va in self._inner(pool, idx):
                X, y, _ = self._rows(pool, tr)
                for j, C in enumerate(self.C_grid):
                    lr = self._fit_lr(X, y, C)
                    scores[j] += brier_per_task(self._task_proba(lr, pool, va), pool.gold[va]).sum()
            scores /= len(idx)
            self.cv_results_ = pd.DataFrame({"C": self.C_grid, "brier": scores})
            self.C_ = float(self.C_grid[argmin_random(scores, self._rng(1))])
        X, y, _ = self._rows(pool, idx)
        self.model_ = self._fit_lr(X, y, self.C_)
        names = [f"c[{a}]" for a in pool.agents] + [f"d[{a}]" for a in pool.agents]
        self.coef_ = pd.Series(self.model_.coef_[0], index=names, name="coef")

    def _proba(self, pool: Pool, idx: np.ndarray) -> np.ndarray:
        return self._task_proba(self.model_, pool, np.asarray(idx))

    def fitted_summary(self) -> dict[str, Any]:
        return {"hp_C": self.C_}


_DS_EPS = 1e-10  # crowd-kit's _EPS: the floor of priors and the clip of error rates


def one_coin_em_step(votes: np.ndarray, P: np.ndarray) -> np.ndarray:
    """One EM step of crowd-kit's one-coin Dawid-Skene (``OneCoinDawidSkene`` 1.4: M-step, then
    E-step), vectorised: ``votes`` (tasks, workers) holds label indices (-1: no vote), ``P``
    (tasks, L) the current posteriors over the L labels that occur in the votes.

    M: prior = mean of P over tasks (floored at 1e-10); skill s_w = mean of P[t, y_tw] over the
    worker's votes; error rates e_w(z, y) = s_w if z == y else (1 - s_w) / (L - 1), clipped into
    [1e-10, 1 - 1e-10]. E: P'[t, z] ∝ prior[z] * prod_w e_w(z, y_tw)."""
    return one_coin_posterior(votes, *one_coin_m_step(votes, P))


def one_coin_m_step(votes: np.ndarray, P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(skill, prior): ``one_coin_em_step``'s M-step alone (the parameters a set of posteriors implies)."""
    T, L = P.shape
    has = votes >= 0
    y = np.where(has, votes, 0)
    skill = (P[np.arange(T)[:, None], y] * has).sum(0) / np.maximum(has.sum(0), 1)
    return skill, np.maximum(P.mean(0), _DS_EPS)


class DawidSkeneEM(Aggregator):
    """crowd-kit's ``OneCoinDawidSkene`` (majority-vote initialised EM) on the round-0 votes
    of the pool it predicts (no labels), run on to its fixed point. Tasks without votes get a
    uniform posterior; labels nobody voted for get probability 0. ``init="spectral"`` starts the
    same EM from the one-coin spectral estimate of the seats' accuracies instead
    (``chorus.aggregate.spectral.spectral_skills``; the BDA paper's App. F.10 arm), without crowd-kit.

    crowd-kit stops when its evidence lower bound gains less than ``tol`` in a step; that
    quantity is not monotone along its iterations, so it can stop with posteriors up to ~0.07
    from the EM fixed point (K = 3-4). From crowd-kit's result we therefore continue the same
    EM (``one_coin_em_step``, crowd-kit's M- and E-step written in numpy: its own step functions
    are private, pandas row-wise and ~100x slower) until no posterior moves by more than
    ``posterior_tol`` in a step, at most ``max_em_steps`` more steps (``em_converged`` says
    whether it got there).

    EM finds a fixed point, not the maximum likelihood: the majority and spectral starts can end at
    different fixed points (at K = 2 the exact mirror image, or a different one). So every fit runs
    from the majority-vote start, the spectral start and ``n_random_starts`` seeded random ones (each
    seat's accuracy uniform in (0, 1), uniform prior, seeded by ``random_state``), keeps the highest
    one-coin marginal log-likelihood, and records each start (``starts_``: start, log-likelihood, EM
    steps, converged, the fixed point it reached), ``n_fixed_points_`` (starts whose posteriors differ by
    more than ``same_point_tol`` are different points) and ``start_kept_``. A tie (log-likelihoods within
    1e-9 relative: the K = 2 mirror is an exact one, and unlabelled votes cannot break it) keeps the
    ``init`` start's point, so ``init`` still names the orientation a tie falls to. ``n_random_starts=0``
    with ``multi_start=False`` is the single-start fit of before."""

    supervised = False

    def __init__(self, *, init: str = "majority", n_iter: int = 100, tol: float = 1e-5,
                 posterior_tol: float = 1e-10, max_em_steps: int = 10_000, multi_start: bool = True,
                 n_random_starts: int = 3, same_point_tol: float = 1e-6, inner_folds: int = 5,
                 random_state: int = 0, protocol: str = "strict", on_violation: str = "error"):
        super().__init__(inner_folds=inner_folds, random_state=random_state, protocol=protocol,
                         on_violation=on_violation)
        if init not in ("majority", "spectral"):
            raise InputError(f"DawidSkeneEM init must be 'majority' or 'spectral', got {init!r}")
        if not isinstance(n_random_starts, int) or n_random_starts < 0:
            raise InputError(f"DawidSkeneEM n_random_starts must be an integer >= 0, got {n_random_starts!r}")
        self.init = init
        self.multi_start = multi_start
        self.n_random_starts = n_random_starts
        self.same_point_tol = same_point_tol
        self.n_iter = n_iter
        self.tol = tol
        self.posterior_tol = posterior_tol
        self.max_em_steps = max_em_steps

    def _fit(self, pool: Pool, idx: np.ndarray) -> None:
        self.agents_ = pool.agents

    def votes_frame(self, pool: Pool, idx: np.ndarray) -> pd.DataFrame:
        a = pool.r0_answer[np.asarray(idx)]
        t, i = np.nonzero(a >= 0)
        return pd.DataFrame({"task": np.asarray(idx)[t], "worker": np.asarray(pool.agents)[i],
                             "label": a[t, i]})

    def converge(self, data: pd.DataFrame, probas: pd.DataFrame) -> tuple[pd.DataFrame, int, bool]:
        """Continue EM from ``probas`` (tasks x labels, crowd-kit's layout) to its fixed point:
        (posteriors, extra steps, converged)."""
        labels = list(probas.columns)
        if len(labels) < 2:  # one label voted: nothing to infer
            return probas, 0, True
        tasks = pd.Index(probas.index)
        workers = pd.Index(sorted(data["worker"].unique()))
        V = np.full((len(tasks), len(workers)), -1, dtype=int)
        V[tasks.get_indexer(data["task"]), workers.get_indexer(data["worker"])] = \
            pd.Index(labels).get_indexer(data["label"])
        P = probas.to_numpy(dtype=float)
        for step in range(1, self.max_em_steps + 1):
            new = one_coin_em_step(V, P)
            delta = float(np.abs(new - P).max())
            P = new
            if delta < self.posterior_tol:
                return pd.DataFrame(P, index=tasks, columns=labels), step, True
        return pd.DataFrame(P, index=tasks, columns=labels), self.max_em_steps, False

    def spectral_start(self, data: pd.DataFrame) -> pd.DataFrame:
        """Posteriors (crowd-kit's layout) of the E-step at the spectral skill estimate, uniform prior."""
        labels = sorted(data["label"].unique())
        tasks = pd.Index(sorted(data["task"].unique()))
        workers = pd.Index(sorted(data["worker"].unique()))
        if len(labels) < 2:
            return pd.DataFrame(1.0, index=tasks, columns=labels)
        V = self._matrix(data, tasks, workers, labels)
        skill = spectral_skills(V, len(labels))
        self.init_skills_ = pd.Series(skill, index=list(workers), name="init_skill")
        return pd.DataFrame(one_coin_posterior(V, skill, np.full(len(labels), 1.0 / len(labels))),
                            index=tasks, columns=labels)

    def majority_start(self, data: pd.DataFrame) -> pd.DataFrame:
        """crowd-kit's own fit (majority-vote initialised, stopped by its bound): the start we continue."""
        from crowdkit.aggregation import OneCoinDawidSkene

        with warnings.catch_warnings():  # crowd-kit 1.4 trips pandas 3 deprecation warnings
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            return OneCoinDawidSkene(n_iter=self.n_iter, tol=self.tol).fit(data).probas_

    def random_starts(self, data: pd.DataFrame) -> list[pd.DataFrame]:
        """``n_random_starts`` seeded starts: the E-step at seat accuracies drawn uniform in (0, 1)
        (either orientation, so a mirror image is reachable), uniform prior."""
        labels = sorted(data["label"].unique())
        tasks = pd.Index(sorted(data["task"].unique()))
        workers = pd.Index(sorted(data["worker"].unique()))
        V = self._matrix(data, tasks, workers, labels)
        rng = self._rng(51)
        return [pd.DataFrame(one_coin_posterior(V, rng.uniform(0.0, 1.0, len(workers)),
                                                np.full(len(labels), 1.0 / len(labels))), index=tasks, columns=labels)
                for _ in range(self.n_random_starts)]

    @staticmethod
    def _matrix(data: pd.DataFrame, tasks: pd.Index, workers: pd.Index, labels: list) -> np.ndarray:
        V = np.full((len(tasks), len(workers)), -1, dtype=int)
        V[tasks.get_indexer(data["task"]), workers.get_indexer(data["worker"])] = \
            pd.Index(labels).get_indexer(data["label"])
        return V

    def fit_starts(self, data: pd.DataFrame) -> pd.DataFrame:
        """Every start run to its fixed point, the highest log-likelihood kept (class docstring); sets
        ``starts_``, ``n_fixed_points_``, ``start_kept_``, ``em_steps_``, ``em_converged_``."""
        order = [self.init] + [s for s in ("majority", "spectral") if s != self.init] if self.multi_start else [self.init]
        starts = [(name, self.majority_start(data) if name == "majority" else self.spectral_start(data))
                  for name in order]
        if self.multi_start:
            starts += [(f"random{k}", p) for k, p in enumerate(self.random_starts(data))]
        runs = []
        tasks = pd.Index(sorted(data["task"].unique()))
        for name, start in starts:
            probas, steps, ok = self.converge(data, start)
            # one row and column order for every start (crowd-kit's differs), so their posteriors compare
            labels = sorted(probas.columns)
            probas = probas.reindex(index=tasks, columns=labels)
            if len(labels) < 2:
                ll = 0.0
            else:
                V = self._matrix(data, pd.Index(probas.index), pd.Index(sorted(data["worker"].unique())), labels)
                ll = one_coin_loglik(V, *one_coin_m_step(V, probas.to_numpy(float)))
            runs.append({"start": name, "loglik": float(ll), "em_steps": int(steps), "converged": bool(ok),
                         "probas": probas})
        points: list[np.ndarray] = []   # one representative posterior per distinct fixed point
        for r in runs:
            P = r["probas"].to_numpy(float)
            same = [k for k, Q in enumerate(points) if np.abs(P - Q).max() <= self.same_point_tol]
            if not same:
                points.append(P)
            r["fixed_point"] = same[0] if same else len(points) - 1
            r["mirror_of_kept"] = None
        top = max(r["loglik"] for r in runs)
        tie = 1e-9 * max(abs(top), 1.0)
        kept = next(r for r in runs if r["loglik"] >= top - tie)   # the init start first: a tie falls to it
        for r in runs:
            P, Q = r["probas"].to_numpy(float), kept["probas"].to_numpy(float)
            if r["fixed_point"] != kept["fixed_point"] and P.shape[1] == 2:
                r["mirror_of_kept"] = bool(np.abs(P - Q[:, ::-1]).max() <= self.same_point_tol)
        self.starts_ = [{k: v for k, v in r.items() if k != "probas"} for r in runs]
        self.n_fixed_points_ = len(points)
        self.start_kept_ = kept["start"]
        self.em_steps_, self.em_converged_ = kept["em_steps"], kept["converged"]
        return kept["probas"]

    def starts_warning(self) -> str | None:
        """One line when the starts reached different fixed points: how many, which start was kept, each
        point's best log-likelihood. None when they agree (or before a fit)."""
        if getattr(self, "n_fixed_points_", 1) <= 1:
            return None
        best: dict[int, dict] = {}
        for r in sorted(self.starts_, key=lambda r: r["start"] != self.start_kept_):   # the kept start names its point
            if r["fixed_point"] not in best:
                best[r["fixed_point"]] = r
        pts = "; ".join(f"{r['start']} {r['loglik']:.10g}" + (" (the kept point's mirror image)" if r["mirror_of_kept"]
                                                              else "") for r in best.values())
        return (f"Dawid-Skene: {len(self.starts_)} starts reached {self.n_fixed_points_} different fixed points "
                f"(log-likelihood: {pts}); kept the {self.start_kept_} start's")

    def _proba(self, pool: Pool, idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx)
        K = pool.K
        data = self.votes_frame(pool, idx)
        P = np.full((len(idx), K), 1.0 / K)
        if len(data) == 0:
            return P
        probas = self.fit_starts(data)
        probas = probas.reindex(columns=range(K), fill_value=0.0).fillna(0.0)
        # the skills at the fixed point (the M-step of its posteriors)
        got = probas.to_numpy()[pd.Index(probas.index).get_indexer(data["task"]), data["label"].to_numpy()]
        sk = pd.Series(got).groupby(data["worker"].to_numpy()).mean()
        self.skills_ = pd.Series(sk.to_numpy(), index=list(sk.index), name="skill")
        pos = pd.Series(np.arange(len(idx)), index=idx)
        rows = pos.loc[probas.index.to_numpy()].to_numpy()
        P[rows] = probas.to_numpy()
        return P

    def fitted_summary(self) -> dict[str, Any]:
        out = {f"skill[{a}]": float(v) for a, v in getattr(self, "skills_", pd.Series(dtype=float)).items()}
        if hasattr(self, "em_steps_"):
            out["em_extra_steps"] = int(self.em_steps_)
            out["em_converged"] = int(self.em_converged_)  # 0/1: a parquet column beside NaNs
        if hasattr(self, "starts_"):   # flat columns: the folds table is a parquet file
            out["ds_start_kept"] = self.start_kept_
            out["ds_fixed_points"] = int(self.n_fixed_points_)
            out.update({f"ds_loglik[{r['start']}]": r["loglik"] for r in self.starts_})
            out["ds_starts_warning"] = self.starts_warning() or ""
        return out


class IsotonicRecalibrated(Aggregator):
    """Leak-free isotonic recalibration of ``base``: out-of-fold confidences from ``n_folds``
    folds of the training part (default: the run's inner folds, so ``inner_folds`` sets both) (the base refitted on each inner training part, so no label
    scores its own calibration) fit an ``IsotonicRegression`` of correctness on confidence;
    the base is then refitted on the whole training part and its decided answer keeps its
    place while its confidence is mapped (the other candidates share the remaining mass in
    proportion)."""

    def __init__(self, base: Aggregator, *, n_folds: int | None = None, inner_folds: int = 5,
                 random_state: int = 0, protocol: str = "strict", on_violation: str = "error"):
        super().__init__(inner_folds=inner_folds, random_state=random_state, protocol=protocol,
                         on_violation=on_violation)
        self.base = base
        self.n_folds = n_folds
        self.needs_shared_labels = base.needs_shared_labels

    def _fit(self, pool: Pool, idx: np.ndarray) -> None:
        from sklearn.isotonic import IsotonicRegression

        idx = np.asarray(idx)
        self.agents_ = pool.agents
        conf = np.empty(len(idx))
        correct = np.empty(len(idx))
        pos = pd.Series(np.arange(len(idx)), index=idx)
        # the recalibration folds: the same stratified split as every arm's inner folds
        saved = self.inner_folds
        self.inner_folds = self.n_folds or saved
        folds = self._inner(pool, idx)
        self.inner_folds = saved
        for j, (tr, va) in enumerate(folds):
            b = self.base.clone(random_state=self.random_state, inner_folds=self.inner_folds)
            b._fit(pool, tr)
            a, p = b._decide(pool, va, self._rng(2, j))
            k = pos.loc[va].to_numpy()
            conf[k] = p[np.arange(len(va)), a]
            correct[k] = (a == pool.gold[va])
        self.iso_ = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(conf, correct)
        self.base_ = self.base.clone(random_state=self.random_state, inner_folds=self.inner_folds)
        self.base_._fit(pool, idx)

    def _decide(self, pool: Pool, idx: np.ndarray, rng: np.random.Generator):
        a, p = self.base_._decide(pool, idx, rng)
        return a, self._remap(a, p)

    def _remap(self, a: np.ndarray, p: np.ndarray) -> np.ndarray:
        n, K = p.shape
        old = p[np.arange(n), a]
        new = np.clip(self.iso_.predict(old), 0.0, 1.0)
        rest = 1.0 - old
        with np.errstate(invalid="ignore", divide="ignore"):
            scale = np.where(rest > 0, (1.0 - new) / rest, 0.0)
        q = p * scale[:, None]
        even = rest <= 0
        if even.any():
            q[even] = ((1.0 - new[even]) / (K - 1))[:, None]
        q[np.arange(n), a] = new
        return q

    def _proba(self, pool: Pool, idx: np.ndarray) -> np.ndarray:
        return self._decide(pool, idx, self._rng(7))[1]

    def fitted_summary(self) -> dict[str, Any]:
        return {f"base.{k}": v for k, v in self.base_.fitted_summary().items()}
