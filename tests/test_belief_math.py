"""Belief math against its closed forms (seed App. E), to numerical precision."""
import numpy as np
import pytest

from chorus.simulate.belief import (committed_minority_meanfield, committed_minority_product, credence, discounted_count,
                             eta_schedule, fj_fixed_point, fj_lambda, fj_step, kappa_hat, prior_counts,
                             stationary_point, step, total_count)

GAMMAS = [0.5, 0.7, 0.95, 1.0]


def test_step_is_eq1_and_broadcasts():
    a, b = step(np.array([2.0, 3.0]), np.array([1.0, 1.0]), 1.0, 0.5, np.array([[0.2], [0.9]]),
                gamma=0.7, w=2.0)
    assert a.shape == (2, 2)
    np.testing.assert_allclose(a[1, 0], 1.0 + 0.7 * (2.0 - 1.0) + 2.0 * 0.9)
    np.testing.assert_allclose(b[0, 1], 0.5 + 0.7 * (1.0 - 0.5) + 2.0 * 0.8)
    assert step(1.0, 1.0, 1.0, 1.0, 0.5)[0] == pytest.approx(1.5)


@pytest.mark.parametrize("gamma", GAMMAS)
def test_count_is_deterministic_and_onestep_identity(gamma):
    rng = np.random.default_rng(0)
    kappa = rng.uniform(0.1, 30, 50)
    b0 = rng.uniform(0, 1, 50)
    w = 1.3
    a0, be0 = prior_counts(kappa, b0)
    a, be = a0.copy(), be0.copy()
    for c in range(25):
        np.testing.assert_allclose(a + be, total_count(kappa, c, gamma, w), rtol=1e-12)
        e = rng.uniform(0, 1, 50)
        b = credence(a, be)
        a, be = step(a, be, a0, be0, e, gamma, w)
        np.testing.assert_allclose(credence(a, be), fj_step(b, e, b0, kappa, c, gamma, w), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("gamma", GAMMAS)
def test_kappa_hat_exact_with_e(gamma):
    rng = np.random.default_rng(1)
    kappa = rng.uniform(0.3, 40, 200)
    b0 = rng.uniform(0, 1, 200)
    c = rng.integers(0, 30, 200)
    m = discounted_count(c, gamma, 1.0)
    n = kappa + m
    b = rng.uniform(0.02, 0.98, 200)
    a, be = b * n, (1 - b) * n
    a0, be0 = prior_counts(kappa, b0)
    e = rng.uniform(0, 1, 200)
    a1, be1 = step(a, be, a0, be0, e, gamma)
    k = kappa_hat(b, credence(a1, be1), e, b0, m, gamma)
    ok = np.abs(e - b) > 0.05
    np.testing.assert_allclose(k[ok], kappa[ok], rtol=1e-8)


def test_kappa_hat_gamma1_reduces_to_eta_form():
    b, b1, s, m, w = 0.3, 0.4, 0.9, 2.0, 1.0
    eta = (b1 - b) / (s - b)
    assert kappa_hat(b, b1, s, 0.123, m, gamma=1.0, w=w) == pytest.approx(w / eta - m - w)


def test_committed_limit_never_moves():
    a0, be0 = prior_counts(1e15, 0.3)
    a, be = step(a0, be0, a0, be0, 1.0)
    assert abs(credence(a, be) - 0.3) < 1e-12
    assert fj_lambda(np.inf) == 0.0


@pytest.mark.parametrize("gamma", [0.5, 0.7, 0.9])
def test_stationary_point(gamma):
    kappa, b0, e = 3.0, 0.2, 0.8
    a0, be0 = prior_counts(kappa, b0)
    a, be = a0, be0
    for _ in range(400):
        a, be = step(a, be, a0, be0, e, gamma)
    assert credence(a, be) == pytest.approx(stationary_point(kappa, b0, e, gamma), abs=1e-12)


def test_fj_fixed_point_solves_the_fj_equation():
    rng = np.random.default_rng(2)
    n = 12
    kappa = rng.uniform(0.5, 20, n)
    kappa[0] = np.inf
    b0 = rng.uniform(0, 1, n)
    bs = fj_fixed_point(kappa, b0, 0.7, 1.0)
    lam = fj_lambda(kappa, 0.7, 1.0)
    W = (np.ones((n, n)) - np.eye(n)) / (n - 1)
    np.testing.assert_allclose(bs, lam * (W @ bs) + (1 - lam) * b0, atol=1e-12)
    assert bs[0] == pytest.approx(b0[0])
    # batched over leading axes, and a graph's adjacency
    bb = fj_fixed_point(kappa, np.stack([b0, 1 - b0]), 0.7)
    np.testing.assert_allclose(bb[0], bs)
    ring = np.roll(np.eye(n), 1, 1) + np.roll(np.eye(n), -1, 1)
    br = fj_fixed_point(kappa, b0, 0.7, adjacency=ring)
    Wr = ring / ring.sum(1, keepdims=True)
    np.testing.assert_allclose(br, lam * (Wr @ br) + (1 - lam) * b0, atol=1e-12)


def test_fj_fixed_point_bad_input():
    with pytest.raises(ValueError, match="gamma = 1"):
        fj_fixed_point(np.ones(5), np.linspace(0, 1, 5), gamma=1.0)
    with pytest.raises(ValueError, match="kappa"):
        fj_fixed_point(np.array([1.0, -1.0, 2.0]), np.ones(3) * 0.5)
    with pytest.raises(ValueError, match="gamma"):
        fj_fixed_point(np.ones(3), np.ones(3) * 0.5, gamma=1.5)
    with pytest.raises(ValueError, match="N=1"):
        fj_fixed_point(np.ones(1), np.ones(1) * 0.5)
    # a committed agent makes gamma = 1 well-posed: everyone ends at its stance
    k = np.array([np.inf, 1.0, 2.0])
    np.testing.assert_allclose(fj_fixed_point(k, np.array([1.0, 0.2, 0.4]), gamma=1.0), 1.0)


def test_committed_minority_product_is_the_gamma1_recursion():
    f = np.linspace(0.05, 0.4, 8)
    eta = eta_schedule(4.0, 20, gamma=1.0)
    prod = committed_minority_product(f, 0.05, eta)
    np.testing.assert_allclose(prod, committed_minority_meanfield(f, 0.05, 4.0, 20, gamma=1.0), rtol=1e-12)
    for g in (1.0, 0.7):
        curve = committed_minority_meanfield(np.linspace(0, 0.5, 51), 0.05, 4.0, 20, gamma=g)
        d = np.diff(curve)
        assert np.all(d > 0) and np.all(np.abs(np.diff(d)) < 0.01)  # smooth, increasing
