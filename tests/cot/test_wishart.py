"""The law of S = X X^T / n (companion.cot.theory.wishart) and the exact k-step GD error built on its moments
(companion.cot.theory.gd.gd_error_wishart): the Bartlett sampler and the loop-equation moments against closed forms
derived by hand, Monte Carlo at 4 standard errors, the exact importance weights of the defensive mixture.

Each test is meant to fail on a plausible bug: a Bartlett diagonal with n - i instead of n - i + 1 degrees of
freedom, a loop-equation term dropped (the d <-> n symmetry breaks), a top power of the binomial sum missing, a
likelihood ratio without its factor n."""

from __future__ import annotations

import math

import numpy as np
import pytest

from companion.cot.theory import gd, mp, no_cot, wishart
from companion.params import integer, real
from companion.stats import mean_se


def closed_moment(p: int, d: int, n: int) -> float:
    r"""The closed forms (derived by hand, independently of the loop equations) of the Wishart trace moment
    :math:`m_p = \E\tr S^p`, :math:`S = XX^\T/n`, :math:`x \sim N(0, I_d)`, for :math:`p \le 4`
    (e.g. :math:`m_2 = d(n+d+1)/n`).

    Parameters
    ----------
    p : int
        The power, 0..4.
    d, n : int
        Dimension and examples per prompt.

    Returns
    -------
    float
        :math:`m_p`.
    """
    p = integer("p", p, min=0, max=4)
    d, n = wishart.check_dims(d, n)
    if p == 0:
        return float(d)
    if p == 1:
        return float(d)
    if p == 2:
        return d * (n + d + 1) / n
    if p == 3:
        return d * (n**2 + d**2 + 3 * n * d + 3 * n + 3 * d + 4) / n**2
    return d * (n**3 + d**3 + 6 * n**2 * d + 6 * n * d**2 + 6 * n**2 + 6 * d**2 + 17 * n * d + 21 * n + 21 * d + 20) / n**3


def closed_gd_error(k: int, eta: float, d: int, n: int) -> float:
    r"""The error of k GD steps from the closed-form moments, :math:`k \le 2`,

    .. math:: L_k(\eta) = \E\tr(I-\eta S)^{2k} = \sum_{p=0}^{2k}\binom{2k}{p}(-\eta)^p m_p .

    Parameters
    ----------
    k : int
        Steps, 0..2.
    eta : float
        The step, >= 0.
    d, n : int
        Dimension and examples per prompt.

    Returns
    -------
    float
        :math:`L_k(\eta)`.
    """
    k = integer("k", k, min=0, max=2)
    eta = real("eta", eta, min=0)
    return float(sum(math.comb(2 * k, p) * (-eta) ** p * closed_moment(p, d, n) for p in range(2 * k + 1)))


def test_bartlett_sample_has_the_wishart_trace_moments():
    d, n, num = 6, 9, 60_000
    S = wishart.sample_S(d, n, num, np.random.default_rng(0))
    P = np.broadcast_to(np.eye(d), S.shape).copy()
    for p in range(5):
        per = np.trace(P, axis1=1, axis2=2)
        se = per.std(ddof=1) / np.sqrt(num) if p > 0 else 0.0
        assert abs(per.mean() - closed_moment(p, d, n)) <= 4 * se + 1e-12, p
        P = P @ S


def test_loop_equation_moments_are_the_closed_forms_the_chi_square_moments_and_symmetric_in_d_n():
    # the first cases are the closed forms m_p = E tr S^p (p <= 4), derived independently
    for d, n in [(10, 20), (3, 7), (6, 6), (2, 50)]:
        m = wishart.wishart_trace_moments(4, d, n)
        for p in range(5):
            assert m[p] / n**p == pytest.approx(closed_moment(p, d, n), rel=1e-14), (d, n, p)
    # d = 1: W is chi-square with n degrees of freedom, E W^p = n (n + 2) ... (n + 2p - 2)
    m = wishart.wishart_trace_moments(9, 1, 7)
    for p in range(1, 10):
        assert m[p] == int(np.prod([7 + 2 * i for i in range(p)])), p
    # tr (X X^T)^p = tr (X^T X)^p: symmetric in (d, n), which the recursion is not term by term
    assert wishart.wishart_trace_moments(9, 3, 5) == [3] + wishart.wishart_trace_moments(9, 5, 3)[1:]
    assert wishart.wishart_trace_moments(8, 4, 11)[1:] == wishart.wishart_trace_moments(8, 11, 4)[1:]


def test_closed_form_gd_error_against_monte_carlo_and_the_mp_limit():
    d, n = 10, 20
    eigs = wishart.sample_S_eigs(d, n, 40_000, np.random.default_rng(1))
    for k in (1, 2):
        eta = no_cot.eta_star(d, n)
        est = gd.gd_error_mc(k, eta, eigs)
        assert abs(est.mean - closed_gd_error(k, eta, d, n)) <= 4 * est.se
    assert closed_gd_error(2, no_cot.eta_star(10, 20), 10, 20) == pytest.approx(2.1119, abs=1e-4)
    # MP limit: E tr (I - eta S)^2 / d = 1 - 2 eta + eta^2 (1 + gamma) exactly for the MP law
    g, eta = 0.5, 0.4
    assert mp.gd_error_mp(1, eta, g) == pytest.approx(1 - 2 * eta + eta**2 * (1 + g), rel=1e-8)
    # and large d approaches it
    big = wishart.sample_S_eigs(200, 400, 200, np.random.default_rng(2))
    assert gd.gd_error_mc(3, eta, big).mean / 200 == pytest.approx(mp.gd_error_mp(3, eta, g), rel=0.02)


def test_exact_gd_error_against_the_closed_form_and_monte_carlo_and_not_one_step_more():
    for k in (0, 1, 2):
        assert gd.gd_error_wishart(k, 0.3, 10, 20) == pytest.approx(closed_gd_error(k, 0.3, 10, 20), rel=1e-13)
    # k = 3..6 needs the moments up to p = 12: an independent Monte-Carlo sample of spectra (4 SE)
    d, n = 5, 12
    eigs = wishart.sample_S_eigs(d, n, 100_000, np.random.default_rng(3))
    for k in (3, 4, 6):
        est = gd.gd_error_mc(k, 0.4, eigs)
        assert abs(est.mean - gd.gd_error_wishart(k, 0.4, d, n)) <= 4 * est.se, k
        # one step more or less is far outside the band (the test can fail on an off-by-one in k)
        assert abs(est.mean - gd.gd_error_wishart(k + 1, 0.4, d, n)) > 10 * est.se, k
    assert gd.gd_error_wishart(10, 0.3, 10, 20) == pytest.approx(0.815, abs=1e-3)  # Monte Carlo: 0.815


def test_importance_weights_are_exact_likelihood_ratios():
    rng = np.random.default_rng(5)
    e, w = wishart.wishart_is_sample(4, 10, 40_000, rng)
    m, se = mean_se(w)
    assert abs(m - 1) <= 4 * se
    for p in (1, 2, 3):
        est, est_se = mean_se(w * np.sum(e**p, axis=1))
        assert abs(est - wishart.wishart_trace_moments(p, 4, 10)[p] / 10**p) <= 4 * est_se
