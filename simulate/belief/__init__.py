"""Bayesian belief layer (BCA): explicit Beta beliefs moved only by appraised evidence.

Kept-stable entry points: ``step``, ``kappa_hat``, ``fj_fixed_point`` (numpy, broadcasting).
The engine, roles, topics and experiments live in the submodules; this package imports no
model code.
"""
from .core import (committed_minority_meanfield, committed_minority_product, credence, discounted_count, eta_schedule,
                   fj_fixed_point, fj_lambda, fj_step, kappa_hat, prior_counts, stationary_point, step,
                   step_coefficients, total_count, well_conditioned)

__all__ = [
    "step", "kappa_hat", "fj_fixed_point", "credence", "prior_counts", "discounted_count",
    "total_count", "step_coefficients", "fj_step", "fj_lambda", "stationary_point",
    "eta_schedule", "committed_minority_product", "committed_minority_meanfield",
    "well_conditioned",
]
