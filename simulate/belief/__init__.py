"""Bayesian belief layer (BCA): explicit Beta beliefs moved only by appraised evidence.

Kept-stable entry points: ``step``, ``kappa_hat``, ``fj_fixed_point`` (numpy, broadcasting).
The engine, roles, topics and experiments live in the submodules; this package imports no
model code.
"""
from chorus.core.lazy import lazy_getattr

# a lazy package (PEP 562, as ``aggregate``): ``chorus --help`` mounts chorus.simulate.belief.cli without numpy
_EXPORTS = {
    "step": "core", "kappa_hat": "core", "fj_fixed_point": "core", "credence": "core",
    "prior_counts": "core", "discounted_count": "core", "total_count": "core", "step_coefficients": "core",
    "fj_step": "core", "fj_lambda": "core", "stationary_point": "core", "eta_schedule": "core",
    "committed_minority_product": "core", "committed_minority_meanfield": "core", "well_conditioned": "core",
    "credence_after": "core", "kappa_hat_cumulative": "core",
}
__all__ = list(_EXPORTS)


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())
