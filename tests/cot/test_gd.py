"""The k-step GD error on a spectrum, written once (companion.cot.theory.gd): the residual factor and its sum against
the matrix powers they stand for, their derivatives, the delta-method standard error of an argmin, the per-prompt
law and the divergence step.

Each test is meant to fail on a plausible bug: a repeated squaring that drops a factor (an odd exponent, the last
bit), a step array broadcast on the wrong axis, (1 - eta lambda)^k for ^2k, z not squared, a derivative with a
wrong sign or factor, a standard error of the argmin divided by N instead of sqrt(N) or taken from the mean of F'
instead of its spread."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from companion.cot.theory import gd, no_cot, wishart


def test_residual_power_is_the_power_for_every_exponent_and_step_shape():
    rng = np.random.default_rng(0)
    eigs = rng.uniform(0.0, 5.0, (7, 3))  # 1 - c lambda of both signs and |.| > 1
    for p in range(41):
        assert np.allclose(gd.residual_power(0.7, eigs, p), (1.0 - 0.7 * eigs) ** p, rtol=1e-13, atol=0), p
    steps = np.array([[0.1, 0.4], [0.9, 1.3]])
    got = gd.residual_power(steps, eigs, 5)
    assert got.shape == (2, 2, 7, 3)
    for i, j in np.ndindex(2, 2):
        assert np.allclose(got[i, j], (1.0 - steps[i, j] * eigs) ** 5, rtol=1e-13, atol=0)


def test_gd_trace_is_the_trace_of_the_matrix_power_and_the_error_of_one_w_star():
    d, n, k, eta = 4, 9, 3, 0.45
    rng = np.random.default_rng(1)
    S = wishart.sample_S(d, n, 20, rng)
    lam, U = np.linalg.eigh(S)
    w_star = rng.standard_normal((20, d))
    z = np.einsum("bji,bj->bi", U, w_star)  # coordinates of w* in the eigenbasis of S
    M = np.linalg.matrix_power(np.eye(d) - eta * S, k)
    assert np.allclose(gd.gd_trace(eta, lam, k), np.trace(M @ M, axis1=1, axis2=2), rtol=1e-10)
    err = np.sum(np.einsum("bij,bj->bi", M, w_star) ** 2, axis=-1)  # ||(I - eta S)^k w*||^2 = ||w_k - w*||^2
    assert np.allclose(gd.gd_trace(eta, lam, k, z=z), err, rtol=1e-10)
    steps = np.array([0.2, 0.45])
    assert np.allclose(gd.gd_trace(steps, lam, k), [gd.gd_trace(s, lam, k) for s in steps], rtol=1e-14)


def test_gd_trace_beyond_the_boundary_is_infinite_without_a_warning():
    eigs = np.array([[0.5, 30.0], [0.5, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tr = gd.gd_trace(1.0, eigs, 200)
    assert np.isinf(tr[0]) and np.isfinite(tr[1])


def test_gd_trace_derivatives_are_those_of_the_trace():
    eigs = wishart.sample_S_eigs(3, 7, 50, np.random.default_rng(2))
    h = 1e-5
    for k, c in ((1, 0.5), (3, 0.3), (4, 0.7)):
        first, second = gd.gd_trace_derivatives(c, eigs, k)
        up, mid, down = (gd.gd_trace(x, eigs, k) for x in (c + h, c, c - h))
        assert np.allclose(first, (up - down) / (2 * h), rtol=1e-6, atol=1e-8), k
        assert np.allclose(second, (up - 2 * mid + down) / h**2, rtol=1e-4, atol=1e-5), k


def test_argmin_se_is_the_delta_method_of_the_ratio_of_means_at_k_1():
    # argmin_c mean tr(I - cS)^2 = mean tr S / mean tr S^2; its textbook delta-method SE linearises the ratio of
    # the two means with their sample covariance
    S = wishart.sample_S(3, 8, 5000, np.random.default_rng(3))
    a, b = np.trace(S, axis1=1, axis2=2), np.einsum("bij,bji->b", S, S)
    c = a.mean() / b.mean()
    g = np.array([1 / b.mean(), -a.mean() / b.mean() ** 2])
    ratio_se = np.sqrt(g @ np.cov(a, b) @ g / len(a))
    first, second = gd.gd_trace_derivatives(c, np.linalg.eigvalsh(S), 1)
    assert gd.argmin_se(first, second) == pytest.approx(ratio_se, rel=1e-10)


# (3, 8): a mid-sized sample; (4, 4): n = d, where tr S^2 is heaviest-tailed, at the num_mc of the Theorem 3.1
# page's second domain point
@pytest.mark.parametrize("d,n,num", [(3, 8, 400), pytest.param(4, 4, 4000, marks=pytest.mark.slow)])
def test_argmin_se_covers_the_spread_of_the_argmin_over_independent_samples(d, n, num):
    rng = np.random.default_rng(4)
    argmins, ses = [], []
    for _ in range(200):
        eigs = wishart.sample_S_eigs(d, n, num, rng)
        c = eigs.sum(axis=1).mean() / (eigs**2).sum(axis=1).mean()  # the argmin at k = 1
        argmins.append(c)
        ses.append(gd.argmin_se(*gd.gd_trace_derivatives(c, eigs, 1)))
    # the spread of the argmins against the typical standard error: a sample SD on k - 1 dof, relative SE
    # 1/sqrt(2(k - 1)) (0.05 here); accepted within 4 of them
    k = len(argmins)
    assert np.std(argmins, ddof=1) / np.mean(ses) == pytest.approx(1.0, abs=4 / np.sqrt(2 * (k - 1)))
    # and the z of each sample against the exact argmin: root-mean-square 1 (chi-square over k), mean 0
    z = (np.array(argmins) - no_cot.eta_star(d, n)) / np.array(ses)
    assert np.sqrt(np.mean(z**2)) == pytest.approx(1.0, abs=4 / np.sqrt(2 * k))
    assert abs(z.mean()) <= 4 / np.sqrt(k)


def test_per_prompt_error_law_has_the_mean_of_the_trace():
    d, n = 6, 12
    rng = np.random.default_rng(7)
    eigs = wishart.sample_S_eigs(d, n, 40_000, rng)
    per = gd.gd_error_samples(3, 0.4, eigs, rng)
    est = gd.gd_error_mc(3, 0.4, eigs)
    assert abs(per.mean() - est.mean) <= 4 * per.std(ddof=1) / np.sqrt(len(per))


def test_the_divergence_step_lets_the_stated_fraction_of_prompts_diverge():
    # GD on a prompt diverges iff eta lambda_max(S) > 2: from divergence_step(eigs, p) on, a fraction p of the sampled
    # spectra do (up to the quantile's interpolation between two draws)
    eigs = wishart.sample_S_eigs(4, 8, 20000, np.random.default_rng(3))
    for p in (1e-3, 1e-2):
        step, q = gd.divergence_step(eigs, p)
        assert step == 2 / q
        frac = np.mean(step * eigs[:, -1] > 2)
        assert p - 2 / len(eigs) <= frac <= p, (p, frac)
        assert np.mean(0.99 * step * eigs[:, -1] > 2) < frac + 2 / len(eigs)
