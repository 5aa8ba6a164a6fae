"""The estimator protocol shared by BDA and the baselines (scikit-learn / crowd-kit style).

Configure in the constructor; ``fit(traces, gold)``; ``predict_proba(traces)`` returns a tidy
DataFrame (task_id, candidate, probability); ``predict(traces)`` returns (task_id, answer,
confidence) with seeded random tie-breaks. Fitted attributes end with an underscore.

Internally every arm works on a ``Pool`` and row indices (``_fit(pool, idx)``,
``_decide(pool, idx, rng)``), so nested cross-validation never re-reads traces.
"""
from __future__ import annotations

import inspect
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from chorus.aggregate.counts import Pool
from chorus.aggregate.selection import argmax_random, stratified_splits
from chorus.aggregate.trace import Trace, as_traces
from chorus.core.seeding import rng as make_rng


class Aggregator:
    """Base class. Subclasses set ``supervised`` and implement ``_fit`` and ``_proba``
    (or ``_decide`` when the decision is not the argmax of the probabilities)."""

    supervised: bool = True
    #: requires the label set to be shared by every task (confusion rows, candidate prior)
    needs_shared_labels: bool = False

    def __init__(self, *, inner_folds: int = 5, random_state: int = 0, protocol: str = "strict",
                 on_violation: str = "error"):
        self.inner_folds = inner_folds
        self.random_state = random_state
        self.protocol = protocol
        self.on_violation = on_violation

    # -- sklearn-ish plumbing ------------------------------------------------------------
    def get_params(self) -> dict[str, Any]:
        out = {}
        for cls in type(self).__mro__:
            init = cls.__dict__.get("__init__")
            if init is None:
                continue
            for p in inspect.signature(init).parameters.values():
                if p.name != "self" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) \
                        and p.name not in out and hasattr(self, p.name):
                    out[p.name] = getattr(self, p.name)
        return out

    def clone(self, **overrides: Any) -> "Aggregator":
        params = self.get_params()
        for k, v in params.items():
            if isinstance(v, Aggregator):
                params[k] = v.clone(**{kk: vv for kk, vv in overrides.items()
                                       if kk in ("random_state", "inner_folds")})
        params.update({k: v for k, v in overrides.items() if k in params})
        return type(self)(**params)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    # -- to implement ------------------------------------------------------------------------
    def _fit(self, pool: Pool, idx: np.ndarray) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _proba(self, pool: Pool, idx: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _decide(self, pool: Pool, idx: np.ndarray, rng: np.random.Generator) \
            -> tuple[np.ndarray, np.ndarray]:
        p = self._proba(pool, idx)
        return argmax_random(p, rng), p

    def fitted_summary(self) -> dict[str, Any]:
        """Flat scalars worth recording per fold (chosen hyperparameters, reliabilities)."""
        return {}

    # -- helpers for subclasses --------------------------------------------------------------
    def _inner(self, pool: Pool, idx: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Inner folds of ``idx`` (as row indices), stratified by gold, seeded by random_state:
        identical for every arm given the same training part and random_state."""
        return [(idx[a], idx[b]) for a, b in
                stratified_splits(pool.gold[idx], self.inner_folds, self.random_state,
                                  f"inner folds of {len(idx)} training tasks")]

    def _rng(self, *key: int) -> np.random.Generator:
        return make_rng(int(self.random_state), *key)

    # -- public API ------------------------------------------------------------------------------
    def _pool(self, traces: Any, gold: Any = None, fitted: bool = False) -> Pool:
        trs: Sequence[Trace] = as_traces(traces)
        agents = getattr(self, "agents_", None) if fitted else None
        cands = getattr(self, "candidates_", None) if fitted else None
        return Pool.from_traces(trs, protocol=self.protocol, on_violation=self.on_violation,
                                agents=agents, candidates=cands, gold=gold)

    def fit(self, traces: Any, gold: "Mapping[str, Any] | Sequence[Any] | None" = None) -> "Aggregator":
        """Fit on labelled traces (``gold`` overrides the traces' own gold fields)."""
        pool = self._pool(traces, gold)
        idx = np.arange(pool.T)
        if self.supervised:
            pool.require_labels(idx, f"{type(self).__name__}.fit")
        if self.needs_shared_labels:
            pool.require_shared_labels(type(self).__name__)
        self.agents_ = pool.agents
        self.candidates_ = pool.shared_candidates if self.needs_shared_labels else None
        self.n_labels_ = int((pool.gold >= 0).sum())
        self._fit(pool, idx)
        self.protocol_report_ = pool.report.to_dict()
        return self

    def _check_fitted(self) -> None:
        if self.supervised and not hasattr(self, "agents_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted: call fit(traces, gold) first")

    def predict_proba(self, traces: Any) -> pd.DataFrame:
        """Tidy posterior: one row per (task_id, candidate) with its probability."""
        self._check_fitted()
        pool = self._pool(traces, fitted=self.supervised)
        p = self._proba(pool, np.arange(pool.T))
        return _tidy(pool, p)

    def predict(self, traces: Any) -> pd.DataFrame:
        """Decisions: (task_id, answer, confidence); ties broken by a draw seeded with
        ``random_state``."""
        self._check_fitted()
        pool = self._pool(traces, fitted=self.supervised)
        a, p = self._decide(pool, np.arange(pool.T), self._rng(99))
        return pd.DataFrame({"task_id": list(pool.task_ids),
                             "answer": [pool.candidates[t][k] for t, k in enumerate(a)],
                             "confidence": p[np.arange(pool.T), a]})


def _tidy(pool: Pool, p: np.ndarray) -> pd.DataFrame:
    K = pool.K
    return pd.DataFrame({
        "task_id": np.repeat(np.asarray(pool.task_ids, dtype=object), K),
        "candidate": [c for cl in pool.candidates for c in cl],
        "probability": p.ravel(),
    })


def wide(proba: pd.DataFrame) -> pd.DataFrame:
    """Tidy (task_id, candidate, probability) -> tasks x candidates (crowd-kit's layout)."""
    return proba.pivot(index="task_id", columns="candidate", values="probability")
