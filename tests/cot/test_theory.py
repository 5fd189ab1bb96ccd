"""Unit tests of companion.cot.theory and companion.cot.train: closed forms against Monte Carlo (4
standard errors), the OOD one-step formula, the reduced ODE, the restricted flow and training guards."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

from companion.cot import make_generator, sample_prompts
from companion.cot import theory as th
from companion.cot import train as tr
from companion.params import ParameterError


@pytest.fixture(autouse=True)
def _no_run_cache(monkeypatch):
    monkeypatch.setenv("COMPANION_CACHE_DIR", "off")


# ------------------------------------------------------------- the closed forms: an independent reference
def closed_moment(p: int, d: int, n: int) -> float:
    r"""The closed forms (derived by hand, independently of the loop equations) of the Wishart trace moment
    :math:`m_p = \E\tr S^p`, :math:`S = XX^\T/n`, :math:`x \sim N(0, I_d)`, for :math:`p \le 4`
    (e.g. :math:`m_2 = d(n+d+1)/n`).

    Args:
        p: the power, 0..4.  d, n: dimension and examples per prompt.
    Returns:
        :math:`m_p` (float).
    """
    p = th.integer("p", p, min=0, max=4)
    d, n = th._dn(d, n)
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
    r"""The error of k GD steps from the closed-form moments, :math:`k \le 2`:

    .. math:: L_k(\eta) = \E\tr(I-\eta S)^{2k} = \sum_{p=0}^{2k}\binom{2k}{p}(-\eta)^p m_p .

    Args:
        k: steps, 0..2.  eta: step, >= 0.  d, n: dimension and examples per prompt.
    Returns:
        :math:`L_k(\eta)` (float).
    """
    k = th.integer("k", k, min=0, max=2)
    eta = th.real("eta", eta, min=0)
    return float(sum(math.comb(2 * k, p) * (-eta) ** p * closed_moment(p, d, n) for p in range(2 * k + 1)))



def test_eta_star_and_floor_values_and_relation():
    assert th.eta_star(10, 20) == pytest.approx(0.64516, abs=1e-5)
    assert th.no_cot_floor(10, 20) == pytest.approx(3.5484, abs=1e-4)
    for d, n in [(10, 20), (5, 10), (20, 40), (10, 100)]:
        # floor = d - d * eta* = min_eta E tr (I - eta S)^2
        assert th.no_cot_floor(d, n) == pytest.approx(d - d * th.eta_star(d, n), rel=1e-14)
        assert closed_gd_error(1, th.eta_star(d, n), d, n) == pytest.approx(th.no_cot_floor(d, n), rel=1e-13)
        assert th.gd_error_wishart(1, th.eta_star(d, n), d, n) == pytest.approx(th.no_cot_floor(d, n), rel=1e-13)


def test_wishart_moments_against_monte_carlo():
    d, n, num = 6, 9, 60_000
    S = th.sample_S(d, n, num, np.random.default_rng(0))
    P = np.broadcast_to(np.eye(d), S.shape).copy()
    for p in range(5):
        per = np.trace(P, axis1=1, axis2=2)
        se = per.std(ddof=1) / np.sqrt(num) if p > 0 else 0.0
        assert abs(per.mean() - closed_moment(p, d, n)) <= 4 * se + 1e-12, p
        P = P @ S


def test_closed_form_gd_error_against_monte_carlo_and_mp_limit():
    d, n = 10, 20
    eigs = th.sample_S_eigs(d, n, 40_000, np.random.default_rng(1))
    for k in (1, 2):
        eta = th.eta_star(d, n)
        est = th.gd_error_mc(k, eta, eigs)
        assert abs(est.mean - closed_gd_error(k, eta, d, n)) <= 4 * est.se
    assert closed_gd_error(2, th.eta_star(10, 20), 10, 20) == pytest.approx(2.1119, abs=1e-4)
    # MP limit: E tr (I - eta S)^2 / d = 1 - 2 eta + eta^2 (1 + gamma) exactly for the MP law
    g, eta = 0.5, 0.4
    assert th.gd_error_mp(1, eta, g) == pytest.approx(1 - 2 * eta + eta**2 * (1 + g), rel=1e-8)
    # and large d approaches it
    big = th.sample_S_eigs(200, 400, 200, np.random.default_rng(2))
    assert th.gd_error_mc(3, eta, big).mean / 200 == pytest.approx(th.gd_error_mp(3, eta, g), rel=0.02)


def test_wishart_loop_equation_moments():
    # the first cases are the closed forms m_p = E tr S^p (p <= 4), derived independently
    for d, n in [(10, 20), (3, 7), (6, 6), (2, 50)]:
        m = th.wishart_trace_moments(4, d, n)
        for p in range(5):
            assert m[p] / n**p == pytest.approx(closed_moment(p, d, n), rel=1e-14), (d, n, p)
    # d = 1: W is chi-square with n degrees of freedom, E W^p = n (n + 2) ... (n + 2p - 2)
    m = th.wishart_trace_moments(9, 1, 7)
    for p in range(1, 10):
        assert m[p] == int(np.prod([7 + 2 * i for i in range(p)])), p
    # tr (X X^T)^p = tr (X^T X)^p: symmetric in (d, n), which the recursion is not term by term
    assert th.wishart_trace_moments(9, 3, 5) == [3] + th.wishart_trace_moments(9, 5, 3)[1:]
    assert th.wishart_trace_moments(8, 4, 11)[1:] == th.wishart_trace_moments(8, 11, 4)[1:]


def test_gd_error_wishart_against_closed_form_and_monte_carlo():
    for k in (0, 1, 2):
        assert th.gd_error_wishart(k, 0.3, 10, 20) == pytest.approx(closed_gd_error(k, 0.3, 10, 20), rel=1e-13)
    # k = 3..6 needs the moments up to p = 12: an independent Monte-Carlo sample of spectra (4 SE)
    d, n = 5, 12
    eigs = th.sample_S_eigs(d, n, 100_000, np.random.default_rng(3))
    for k in (3, 4, 6):
        est = th.gd_error_mc(k, 0.4, eigs)
        assert abs(est.mean - th.gd_error_wishart(k, 0.4, d, n)) <= 4 * est.se, k
        # one step more or less is far outside the band (the test can fail on an off-by-one in k)
        assert abs(est.mean - th.gd_error_wishart(k + 1, 0.4, d, n)) > 10 * est.se, k
    assert th.gd_error_wishart(10, 0.3, 10, 20) == pytest.approx(0.815, abs=1e-3)  # the spec's table (MC 0.815)


def test_one_step_ood_formula_against_monte_carlo():
    d, n, num = 4, 12, 40_000
    rng = np.random.default_rng(3)
    Sigma = np.diag([0.5, 1.0, 1.5, 2.0])
    V = -0.4 * np.eye(d) + 0.05 * rng.standard_normal((d, d))
    S = th.sample_S(d, n, num, rng, Sigma)
    # E_w* ||(I + V S) w*||^2 = ||I + V S||_F^2
    per = np.sum((np.eye(d) + V @ S) ** 2, axis=(1, 2))
    pred = th.one_step_ood_error(V, Sigma, n)
    assert abs(per.mean() - pred) <= 4 * per.std(ddof=1) / np.sqrt(num)
    # isotropic: the formula at V = -eta* I is the no-CoT floor
    assert th.one_step_ood_error(-th.eta_star(10, 20) * np.eye(10), np.eye(10), 20) == pytest.approx(
        th.no_cot_floor(10, 20), rel=1e-13)


def test_reduced_flow_converges_to_the_construction_and_stage1_equilibrium():
    eta, k = 1.0, 10
    t, v, w, loss = th.solve_reduced_flow(eta, k, 0.01, 20.0)
    assert abs(v[-1] + eta) < 1e-6 and abs(w[-1] - 1) < 1e-6 and loss[-1] < 1e-12
    assert th.reduced_loss(-eta, 1.0, eta, k) == 0.0
    # at w = 0 the stage-1 equilibrium is -(eta/k) sum_i (1 - eta)^i; for eta = 0.5:
    e = 0.5
    assert th.stage1_v(0.0, e, k) == pytest.approx(-(e / k) * sum((1 - e) ** i for i in range(k)), rel=1e-12)
    gv, gw = th.reduced_grad(-0.3, 0.7, 0.5, 5)
    h = 1e-6
    num_v = (th.reduced_loss(-0.3 + h, 0.7, 0.5, 5) - th.reduced_loss(-0.3 - h, 0.7, 0.5, 5)) / (2 * h)
    num_w = (th.reduced_loss(-0.3, 0.7 + h, 0.5, 5) - th.reduced_loss(-0.3, 0.7 - h, 0.5, 5)) / (2 * h)
    assert gv == pytest.approx(num_v, rel=1e-6) and gw == pytest.approx(num_w, rel=1e-6)


def test_restricted_gradient_matches_finite_differences_and_flow_converges():
    d, n, k, eta = 3, 8, 4, 0.5
    rng = np.random.default_rng(4)
    S = th.sample_S(d, n, 300, rng)
    A = th._A(S, eta, k)
    V, W = 0.1 * rng.standard_normal((d, d)), 0.1 * rng.standard_normal((d, d))
    L, gV, gW = th.restricted_loss_grad(V, W, S, A, eta)
    h = 1e-6
    E = np.zeros((d, d))
    E[1, 2] = h
    assert gV[1, 2] == pytest.approx((th.restricted_loss_grad(V + E, W, S, A, eta)[0] - th.restricted_loss_grad(V - E, W, S, A, eta)[0]) / (2 * h), rel=1e-6)
    assert gW[1, 2] == pytest.approx((th.restricted_loss_grad(V, W + E, S, A, eta)[0] - th.restricted_loss_grad(V, W - E, S, A, eta)[0]) / (2 * h), rel=1e-6)
    V0, W0 = th.assumption41_init(d, 0.05, rng)
    assert np.allclose(V0, V0.T) and np.allclose(V0, W0)
    t, Vt, Wt, Lt = th.restricted_flow(V0, W0, S, eta, k, 200.0, num_t=11)
    assert np.abs(Vt[-1] + eta * np.eye(d)).max() < 1e-3 and np.abs(Wt[-1] - np.eye(d)).max() < 1e-3


def test_looped_optimum_exact_k2_matches_sample_and_k1_is_eta_star():
    c2, l2 = th.looped_optimum_exact_k2(10, 20)
    assert c2 == pytest.approx(0.628, abs=2e-3) and l2 == pytest.approx(2.11, abs=0.01)
    eigs = th.sample_S_eigs(10, 20, 20_000, np.random.default_rng(5))
    c1, _ = th.looped_optimum(1, eigs)
    assert c1 == pytest.approx(th.eta_star(10, 20), abs=0.01)


def test_training_reaches_the_no_cot_floor_quickly_and_divergence_names_lr():
    r = tr.train_full("no_cot", 3, 12, 1, steps=600, lr=1e-2, batch=64, seed=0, eval_every=600, eval_batch=4000)
    floor = th.no_cot_floor(3, 12)
    assert abs(r.eval_loss[-1] - floor) < 0.1 * floor
    with pytest.raises(ParameterError, match="'lr'"):
        tr.train_full("cot", 3, 6, 3, 0.3, steps=200, lr=50.0, batch=16, seed=0, init_scale=1.0)


def test_cache_is_disabled_in_tests():
    from companion.cache import cache_dir

    assert os.environ["COMPANION_CACHE_DIR"] == "off" and cache_dir() is None


def test_per_prompt_error_law_and_two_param_looped():
    d, n = 6, 12
    rng = np.random.default_rng(7)
    eigs = th.sample_S_eigs(d, n, 40_000, rng)
    per = th.gd_error_samples(3, 0.4, eigs, rng)
    est = th.gd_error_mc(3, 0.4, eigs)
    assert abs(per.mean() - est.mean) <= 4 * per.std(ddof=1) / np.sqrt(len(per))
    # two-parameter looped optimum: k = 1 gives back the one-step floor, and k >= 2 improves on W13 = I
    assert th.looped_two_param_optimum(1, eigs)[2] == pytest.approx(th.looped_optimum(1, eigs)[1], rel=1e-8)
    c, b, L = th.looped_two_param_optimum(3, eigs)
    assert L < th.looped_optimum(3, eigs)[1] and b > 1


def test_symmetrised_sample_keeps_the_flow_in_the_eigenbasis():
    d, n, k, eta = 3, 6, 3, 0.4
    rng = np.random.default_rng(8)
    V0, W0 = th.assumption41_init(d, 0.05, rng)
    _, U = np.linalg.eigh(V0)
    S = th.symmetrised_S_sample(th.sample_S(d, n, 5, rng), U)
    assert S.shape == (20, d, d)
    _, gV, gW = th.restricted_loss_grad(V0, W0, S, th._A(S, eta, k), eta)
    for G in (gV, gW):
        Gu = U.T @ G @ U
        assert np.abs(Gu - np.diag(np.diag(Gu))).max() < 1e-13 * np.abs(Gu).max()


def test_ood_prompts_have_the_requested_covariance():
    Sigma = np.diag([0.5, 2.0])
    p = sample_prompts(40_000, 2, 3, make_generator(9), Sigma=Sigma)
    emp = torch.einsum("bdn,ben->de", p.X, p.X).numpy() / (40_000 * 3)
    np.testing.assert_allclose(emp, Sigma, atol=0.03)


def test_sigma_optimal_one_step_predictor_minimises_the_ood_formula():
    Sigma, n = np.diag([0.5, 1.0, 2.0]), 7
    V = th.one_step_optimal_V(Sigma, n)
    base = th.one_step_ood_error(V, Sigma, n)
    rng = np.random.default_rng(10)
    for _ in range(20):
        E = 1e-3 * rng.standard_normal((3, 3))
        assert th.one_step_ood_error(V + E, Sigma, n) >= base
    # isotropic case: Gamma^{-1} = eta* I and the optimum is the floor
    assert np.allclose(th.one_step_optimal_V(np.eye(10), 20), -th.eta_star(10, 20) * np.eye(10))


def test_mp_floor_is_the_proportional_limit_of_the_floor():
    # d * min_eta (1 - 2 eta + eta^2 * int lambda^2 dMP), minimised numerically with the MP moments
    for d, n in ((10, 20), (10, 40), (3, 12)):
        gamma = d / n
        m1, m2 = th.mp_moment(1, gamma), th.mp_moment(2, gamma)
        etas = np.linspace(0, 1.5, 150001)
        assert th.no_cot_floor_mp(d, n) == pytest.approx(d * np.min(1 - 2 * etas * m1 + etas**2 * m2), rel=1e-8)
        assert th.no_cot_floor_mp(d, n) < th.no_cot_floor(d, n)
    # the finite-size corrections vanish at fixed d/n
    assert th.no_cot_floor_mp(1000, 2000) == pytest.approx(th.no_cot_floor(1000, 2000), rel=1e-3)
    assert th.no_cot_floor_mp(10, 20) == pytest.approx(100 / 30, rel=1e-14)


def test_the_divergence_step_lets_the_stated_fraction_of_prompts_diverge():
    # GD on a prompt diverges iff eta lambda_max(S) > 2: from theory.divergence_step(eigs, p) on, a fraction p of
    # the sampled spectra do (up to the quantile's interpolation between two draws)
    import numpy as np

    from companion.cot import theory as th

    eigs = th.sample_S_eigs(4, 8, 20000, np.random.default_rng(3))
    for p in (1e-3, 1e-2):
        step, q = th.divergence_step(eigs, p)
        assert step == 2 / q
        frac = np.mean(step * eigs[:, -1] > 2)
        assert p - 2 / len(eigs) <= frac <= p, (p, frac)
        assert np.mean(0.99 * step * eigs[:, -1] > 2) < frac + 2 / len(eigs)
