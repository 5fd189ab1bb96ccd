"""Theorem 3.2 (companion.cot.theory.mp, companion.cot.results.thm3_2): the Marchenko-Pastur quadrature against the
Narayana moments (also at n = d), the finite-d fit of the limit, and the competitor of the claims at k (the nearer of
the exact L_{k-1}, L_{k+1}).

Each test is meant to fail on a plausible bug: the gamma = 1 branch of the quadrature, an edge without its square
root, a fit intercept that ignores the 1/d correction, the farther neighbour taken as the competitor."""

from __future__ import annotations

import numpy as np
import pytest

from companion.cot.results import thm3_2
from companion.cot.theory import gd, mp


@pytest.mark.parametrize("gamma", [0.25, 0.5, 1.0])
def test_mp_integral_reproduces_the_narayana_moments_also_at_n_equal_d(gamma):
    for p in range(5):
        assert mp.mp_integral(lambda x, p=p: x**p, gamma) == pytest.approx(mp.mp_moment(p, gamma), rel=1e-9, abs=1e-12)
    # MP moments: 1, 1, 1 + gamma, 1 + 3 gamma + gamma^2
    assert mp.mp_moment(2, gamma) == pytest.approx(1 + gamma)
    assert mp.mp_moment(3, gamma) == pytest.approx(1 + 3 * gamma + gamma**2)


def test_mp_limit_fit_recovers_the_integral_and_the_wishart_moments():
    rng = np.random.default_rng(3)
    f = thm3_2.mp_limit_fit(2, 0.4, 4, 8, 4, 8000, rng)
    assert abs(f["a"] - mp.gd_error_mp(2, 0.4, 0.5)) <= 4 * f["a_se"]
    # the exact finite-d value (moments m_0..m_4) is a + b/d + c/d^2 to O(1/d^3): the fitted curve passes near it
    exact = gd.gd_error_wishart(2, 0.4, 16, 32) / 16
    assert abs(f["a"] + f["b"] / 16 + f["c"] / 16**2 - exact) <= 4 * f["a_se"] + 0.01 * exact
    assert f["dof"] == 1


def test_the_inverse_d_fit_extrapolates_exact_wishart_values_to_the_marchenko_pastur_integral():
    """Fed the exact finite-d errors at (d, n) = (4, 8) ... (32, 64), the fit a + b/d + c/d^2 lands on the
    integral to O(1/d^3) (3e-5); a fit a + b/d (the 1/d^2 term left out) misses it by 7e-4, about the
    intercept's Monte-Carlo standard error at the smoke point."""
    k, eta, gamma = 3, 0.3, 0.5
    ds = np.array([4, 8, 16, 32])
    exact = np.array([gd.gd_error_wishart(k, eta, int(d), int(d / gamma)) / d for d in ds])
    f = thm3_2.inverse_d_fit(ds, exact, np.full(4, 1e-3))
    assert abs(f["a"] - mp.gd_error_mp(k, eta, gamma)) < 1e-4
    assert (f["b"], f["c"]) != (0.0, 0.0) and f["dof"] == 1


def test_neighbours_take_the_nearer_exact_value():
    for k, eta in ((3, 0.3), (2, 1.2), (5, 0.05)):
        ex = thm3_2.neighbours(k, eta, 4, 12)
        km1, pred, kp1 = (gd.gd_error_wishart(j, eta, 4, 12) for j in (k - 1, k, k + 1))
        assert (ex["pred"], ex["km1"], ex["kp1"]) == (pred, km1, kp1)
        want = min((kp1, k + 1), (km1, k - 1), key=lambda t: abs(t[0] - pred))
        assert (ex["near"], ex["near_k"]) == want
