"""Bayesian belief layer (BCA): explicit Beta beliefs moved only by appraised evidence.

Kept-stable entry points: ``step``, ``kappa_hat``, ``fj_fixed_point`` (numpy, broadcasting).
The belief math (``bayes``), the lockstep engine (``lockstep``), the channel's roles (``channel``),
topics and experiments live in the submodules; this package imports no model code.
"""
from chorus.core.lazy import lazy_getattr

# a lazy package (PEP 562, as ``aggregate``): ``chorus --help`` mounts chorus.simulate.belief.cli without numpy
_EXPORTS = {
    "step": "bayes", "kappa_hat": "bayes", "fj_fixed_point": "bayes", "credence": "bayes",
    "prior_counts": "bayes", "discounted_count": "bayes", "total_count": "bayes", "step_coefficients": "bayes",
    "fj_step": "bayes", "fj_lambda": "bayes", "stationary_point": "bayes", "eta_schedule": "bayes",
    "committed_minority_product": "bayes", "committed_minority_meanfield": "bayes", "well_conditioned": "bayes",
    "credence_after": "bayes", "kappa_hat_cumulative": "bayes",
}
__all__ = list(_EXPORTS)


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())
