"""aggregate: Bayesian Dialectical Argumentation (BDA) over council traces.

Kept-stable entry points::

    chorus.aggregate.Trace.from_dict(d)                                  # one JSONL record -> Trace
    chorus.aggregate.one_coin_posterior(trace, priors, candidate_prior=None) -> {candidate: prob}

Estimators (configure, ``fit(traces, gold)``, ``predict_proba(traces)`` -> tidy DataFrame,
fitted attributes end in ``_``): ``OneCoinBDA``, ``ConfusionBDA`` and the baselines
``Plurality``, ``VerbalizedVote``, ``BestMember``, ``LogisticStacker``, ``GatedVote``,
``DawidSkeneEM``, ``IsotonicRecalibrated``. Selection: ``nested_cv``. Metrics: ``summarize``,
``ece``, ``brier``, ``paired_bootstrap``. Synthetic councils: ``generate_council``,
``Adversary``, ``sleeper_traces``, ``permute_labels``, ``truncate_traces``.

Pure numpy/scipy math; no model code is imported. scikit-learn, crowd-kit and matplotlib are
imported only where used.
"""
from __future__ import annotations

from chorus.core.lazy import lazy_getattr

# name -> submodule; imported on first access (PEP 562) so that ``import aggregate`` (done by
# the ``chorus`` CLI on every call) stays cheap.
_EXPORTS = {
    "Trace": "trace", "Move": "trace", "load_traces": "trace", "dump_traces": "trace",
    "one_coin_posterior": "posterior", "log_odds_weights": "posterior",
    "Protocol": "moves", "STRICT": "moves", "GENERAL": "moves", "Endorsement": "moves",
    "ProtocolReport": "moves", "extract_endorsements": "moves",
    "Pool": "counts", "trace_counts": "counts",
    "Aggregator": "base", "wide": "base",
    "OneCoinBDA": "estimators", "ConfusionBDA": "estimators",
    "Plurality": "baselines", "VerbalizedVote": "baselines", "BestMember": "baselines",
    "LogisticStacker": "baselines", "GatedVote": "baselines", "DawidSkeneEM": "baselines",
    "IsotonicRecalibrated": "baselines",
    "make_method": "methods", "method_names": "methods",
    "nested_cv": "selection", "outer_splits": "selection", "CVResult": "selection",
    "accuracy": "metrics", "brier": "metrics", "ece": "metrics", "summarize": "metrics",
    "paired_bootstrap": "metrics", "reliability_table": "metrics",
    "Adversary": "synthetic_councils", "CouncilSpec": "synthetic_councils", "generate_council": "synthetic_councils",
    "sleeper_traces": "synthetic_councils", "permute_labels": "synthetic_councils",
    "truncate_traces": "synthetic_councils",
    "RowDriftDetector": "drift", "StreamCounts": "drift", "Policy": "policy_shift", "shift_table": "policy_shift",
    "TraceError": "errors", "ProtocolError": "errors", "LabelError": "errors",
    "PriorError": "errors", "VerifyError": "errors",
}

__all__ = list(_EXPORTS)


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
