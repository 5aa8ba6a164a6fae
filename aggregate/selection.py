"""Folds, seeded tie-breaks and leak-free nested cross-validation (BDA paper §D.1).

* ``outer_splits``: 5 folds stratified by gold; the reported numbers come only from the
  held-out rows of these folds.
* Inside each outer training part every supervised arm runs its own 5-fold inner CV
  (``inner_splits``, also stratified) to choose hyperparameters by the multi-class Brier score
  and refits its reliabilities / confusion rows on that training part only. All arms share
  the outer folds, the inner folds (same seed) and the label budget.
* Every argmax (decisions, and the argmin over a hyperparameter grid) breaks exact ties by
  a seeded random draw, never by position (BDA paper §D.6).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from chorus.aggregate.counts import Pool
from chorus.aggregate.errors import LabelError
from chorus.core.progress import Progress
from chorus.core.seeding import rng as make_rng
from chorus.core.seeding import stable_int
from chorus.core.config import InputError

TIE_TOL = 1e-12

# spawn keys of the seed's streams (kept stable: changing them changes every number)
KEY_OUTER, KEY_BUDGET, KEY_FIT, KEY_DECIDE, KEY_BOOT = 1, 2, 3, 4, 5


def name_key(name: str) -> int:
    """A stable integer for a method name, to key its random streams."""
    return stable_int(name, bits=32, algo="crc32")


def seed_int(seed: int, *key: int) -> int:
    """A 31-bit integer seed (for scikit-learn) derived from the root seed and a key."""
    return int(make_rng(seed, *key).integers(0, 2**31 - 1))


def argmax_random(P: np.ndarray, rng: np.random.Generator, tol: float = TIE_TOL) -> np.ndarray:
    """Row-wise argmax; rows whose maximum is shared (within ``tol``) pick uniformly among
    the tied columns with ``rng``."""
    P = np.asarray(P, float)
    mx = P.max(axis=1, keepdims=True)
    tied = P >= mx - tol
    u = rng.random(P.shape)
    return np.where(tied, u, -1.0).argmax(axis=1)


def argmin_random(scores: np.ndarray, rng: np.random.Generator, rel_tol: float = 1e-12) -> int:
    """Index of the smallest score; exact (to ``rel_tol``) ties broken by ``rng``."""
    scores = np.asarray(scores, float)
    lo = np.nanmin(scores)
    tied = np.flatnonzero(scores <= lo + rel_tol * max(1.0, abs(lo)))
    return int(tied[0] if len(tied) == 1 else rng.choice(tied))


def stratified_splits(y: np.ndarray, n_splits: int, seed: int, what: str = "data") \
        -> list[tuple[np.ndarray, np.ndarray]]:
    """``n_splits`` stratified folds of positions 0..len(y)-1 (shuffled with ``seed``).
    Raises ``LabelError`` when some class has fewer members than folds."""
    from sklearn.model_selection import StratifiedKFold

    y = np.asarray(y)
    if n_splits < 2:
        raise InputError(f"folds must be >= 2, got {n_splits}")
    if (y < 0).any():
        raise LabelError(f"{what}: {(y < 0).sum()} tasks have no gold label")
    classes, cnt = np.unique(y, return_counts=True)
    if len(y) < 2 * n_splits or cnt.min() < n_splits:
        worst = int(classes[cnt.argmin()])
        raise LabelError(f"{what}: too few labels for {n_splits} stratified folds: {len(y)} labelled "
                         f"tasks, the rarest gold class (index {worst}) has {int(cnt.min())} "
                         f"(need >= {n_splits} per class present)")
    skf = StratifiedKFold(n_splits=n_splits, shuffle=True, random_state=seed)
    return [(tr, va) for tr, va in skf.split(np.zeros(len(y)), y)]


def outer_splits(pool: Pool, n_folds: int = 5, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Outer folds over the whole pool, stratified by gold."""
    pool.require_labels(np.arange(pool.T), "nested cross-validation")
    return stratified_splits(pool.gold, n_folds, seed_int(seed, KEY_OUTER), "outer folds")


def budget_subsample(pool: Pool, idx: np.ndarray, budget: int | None, seed: int) -> np.ndarray:
    """A stratified random subset of ``budget`` labelled tasks of ``idx`` (all when None)."""
    if budget is None or budget >= len(idx):
        return np.asarray(idx)
    from sklearn.model_selection import train_test_split

    y = pool.gold[idx]
    try:
        keep, _ = train_test_split(np.asarray(idx), train_size=budget, stratify=y,
                                   random_state=seed)
    except ValueError as err:
        raise LabelError(f"label budget {budget}: cannot draw a stratified subset ({err})") from None
    return np.sort(keep)


# -- nested CV --------------------------------------------------------------------------
@dataclass
class CVResult:
    """Held-out predictions of every method, and what each fold chose."""

    pool: Pool
    methods: list[str]
    fold: np.ndarray  # (T,) outer fold of each task
    answer: dict[str, np.ndarray]  # method -> (T,) candidate index
    proba: dict[str, np.ndarray]  # method -> (T, K)
    fitted: list[dict[str, Any]] = field(default_factory=list)  # rows: method, fold, attrs
    splits: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)

    def confidence(self, method: str) -> np.ndarray:
        p = self.proba[method]
        return p[np.arange(len(p)), self.answer[method]]

    def correct(self, method: str) -> np.ndarray:
        return (self.answer[method] == self.pool.gold).astype(float)

    def predictions_frame(self) -> pd.DataFrame:
        pool = self.pool
        frames = []
        for m in self.methods:
            ans = self.answer[m]
            frames.append(pd.DataFrame({
                "task_id": list(pool.task_ids), "question_id": list(pool.question_ids),
                "fold": self.fold, "method": m,
                "gold": [pool.candidates[t][g] for t, g in enumerate(pool.gold)],
                "answer": [pool.candidates[t][a] for t, a in enumerate(ans)],
                "confidence": self.confidence(m), "correct": self.correct(m).astype(bool),
            }))
        return pd.concat(frames, ignore_index=True)

    def posteriors_frame(self) -> pd.DataFrame:
        pool = self.pool
        K = pool.K
        frames = []
        for m in self.methods:
            frames.append(pd.DataFrame({
                "task_id": np.repeat(np.asarray(pool.task_ids, dtype=object), K),
                "method": m,
                "candidate": [c for cl in pool.candidates for c in cl],
                "probability": self.proba[m].ravel(),
            }))
        return pd.concat(frames, ignore_index=True)

    def fitted_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.fitted)


def nested_cv(pool: Pool, methods: Mapping[str, Any], *, outer_folds: int = 5,
              inner_folds: int = 5, seed: int = 0, label_budget: int | None = None,
              splits: Sequence[tuple[np.ndarray, np.ndarray]] | None = None,
              progress: Progress | None = None) -> CVResult:
    """Run every method over the same outer folds, label budget and inner folds.

    ``methods`` maps a name to an (unfitted) aggregator; each is cloned per fold. ``splits``
    pins the outer folds (for the leak-freeness check: held-out labels then cannot move
    anything fitted for that fold).
    """
    T, K = pool.T, pool.K
    if splits is None:
        splits = outer_splits(pool, outer_folds, seed)
    fold = np.full(T, -1)
    answer = {m: np.full(T, -1) for m in methods}
    proba = {m: np.full((T, K), np.nan) for m in methods}
    fitted: list[dict[str, Any]] = []
    for k, (tr, te) in enumerate(splits):
        fold[te] = k
        train = budget_subsample(pool, np.asarray(tr), label_budget, seed_int(seed, KEY_BUDGET, k))
        fold_seed = seed_int(seed, KEY_FIT, k)
        for name, proto in methods.items():
            est = proto.clone(random_state=fold_seed, inner_folds=inner_folds)
            if est.supervised:
                pool.require_labels(train, f"fitting {name}")
            est._fit(pool, train)
            dec_rng = make_rng(seed, KEY_DECIDE, k, name_key(name))
            a, p = est._decide(pool, np.asarray(te), dec_rng)
            answer[name][te] = a
            proba[name][te] = p
            row = {"method": name, "fold": k, "n_train": len(train)}
            row.update(est.fitted_summary())
            fitted.append(row)
            if progress is not None:  # one unit per (outer fold, method)
                progress(len(splits) * len(methods), 1)
    return CVResult(pool=pool, methods=list(methods), fold=fold, answer=answer, proba=proba,
                    fitted=fitted, splits=[(np.asarray(a), np.asarray(b)) for a, b in splits])


def fit_predict_split(pool: Pool, methods: Mapping[str, Any], train: np.ndarray, test: np.ndarray,
                      *, inner_folds: int = 5, seed: int = 0) -> CVResult:
    """Fit on ``train`` (labelled), predict ``test``: the calibrate/deploy design of the sleeper
    sweep (one split, inner CV inside the calibration part)."""
    T, K = pool.T, pool.K
    fold = np.full(T, -1)
    fold[test] = 0
    answer = {m: np.full(T, -1) for m in methods}
    proba = {m: np.full((T, K), np.nan) for m in methods}
    fitted = []
    fit_seed = seed_int(seed, KEY_FIT, 0)
    for name, proto in methods.items():
        est = proto.clone(random_state=fit_seed, inner_folds=inner_folds)
        if est.supervised:
            pool.require_labels(train, f"fitting {name}")
        est._fit(pool, np.asarray(train))
        a, p = est._decide(pool, np.asarray(test), make_rng(seed, KEY_DECIDE, 0, name_key(name)))
        answer[name][test] = a
        proba[name][test] = p
        row = {"method": name, "fold": 0, "n_train": len(train)}
        row.update(est.fitted_summary())
        fitted.append(row)
    return CVResult(pool=pool, methods=list(methods), fold=fold, answer=answer, proba=proba,
                    fitted=fitted, splits=[(np.asarray(train), np.asarray(test))])
