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
    # the exact finite-d value (moments m_0..m_4) is a + b/d to O(1/d^2): the fitted line passes near it
    exact = gd.gd_error_wishart(2, 0.4, 16, 32) / 16
    assert abs(f["a"] + f["b"] / 16 - exact) <= 4 * f["a_se"] + 0.01 * exact


def test_neighbours_take_the_nearer_exact_value():
    for k, eta in ((3, 0.3), (2, 1.2), (5, 0.05)):
        ex = thm3_2.neighbours(k, eta, 4, 12)
        km1, pred, kp1 = (gd.gd_error_wishart(j, eta, 4, 12) for j in (k - 1, k, k + 1))
        assert (ex["pred"], ex["km1"], ex["kp1"]) == (pred, km1, kp1)
        want = min((kp1, k + 1), (km1, k - 1), key=lambda t: abs(t[0] - pred))
        assert (ex["near"], ex["near_k"]) == want
