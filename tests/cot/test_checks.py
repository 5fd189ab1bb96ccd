"""Unit tests of the cot theory added for the evidence claims (rates, horizons, Marchenko--Pastur at n = d,
importance-weighted looped optimum, OOD one-step formula) and of the evidence functions of companion.cot.results.

Each test compares with a closed form or an independent computation and is meant to fail on a plausible bug
(a sign in the Gauss--Newton vector, a missing factor n in the likelihood ratio, the gamma = 1 branch, ...)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from companion.cot import theory as th
from companion.cot.results import cor3_1, thm3_1, thm3_2, thm4_1, thm4_2
from companion.stats import mean_se


def _num_hessian(f, x, h=1e-5):
    x = np.asarray(x, float)
    H = np.zeros((len(x), len(x)))
    for i in range(len(x)):
        for j in range(len(x)):
            e_i, e_j = np.eye(len(x))[i] * h, np.eye(len(x))[j] * h
            H[i, j] = (f(x + e_i + e_j) - f(x + e_i - e_j) - f(x - e_i + e_j) + f(x - e_i - e_j)) / (4 * h * h)
    return H


@pytest.mark.parametrize("eta, k, lam", [(1.0, 10, 1.0), (0.3, 5, None)])
def test_fixed_point_rate_is_the_smallest_hessian_eigenvalue(eta, k, lam):
    if lam is None:
        lam = th.sample_S_eigs(3, 7, 50, np.random.default_rng(0))
    H = _num_hessian(lambda p: th.reduced_loss(p[0], p[1], eta, k, lam), [-eta, 1.0])
    assert th.fixed_point_rate(eta, k, lam) == pytest.approx(np.linalg.eigvalsh(H)[0], rel=1e-5)


def test_rate_derived_horizon_reaches_the_tolerance_and_the_fitted_rate_is_mu():
    a = thm4_1.stage_analysis(0.5, 5, 0.01, tol=1e-6)
    assert a["final"] <= 1e-6
    assert a["T"] == pytest.approx(a["t2"] + math.log(1e-3 * 100 / 1e-6) / a["mu"])
    assert a["rate"] == pytest.approx(a["mu"], rel=1e-3)


def test_separation_parameter_orders_the_reviewers_example():
    # eta = 1, k = 3, sigma = 0.1: no separation (w(t1) = 0.66); eta = 0.3, k = 20: two clear stages
    assert thm4_1.separation_parameter(1.0, 3, 0.1) >= 1
    a = thm4_1.stage_analysis(0.3, 20, 0.01)
    assert a["eps"] < 0.25 and a["w1"] < 0.5
    assert abs(a["t_half"] - a["t_pred"]) <= 2 * a["eps"] * a["t_half"]


@pytest.mark.parametrize("gamma", [0.25, 0.5, 1.0])
def test_mp_integral_reproduces_the_narayana_moments_also_at_n_equal_d(gamma):
    for p in range(5):
        assert th.mp_integral(lambda x: x**p, gamma)  # noqa: B023 - called at once == pytest.approx(th.mp_moment(p, gamma), rel=1e-9, abs=1e-12)
    # MP moments: 1, 1, 1 + gamma, 1 + 3 gamma + gamma^2
    assert th.mp_moment(2, gamma) == pytest.approx(1 + gamma)
    assert th.mp_moment(3, gamma) == pytest.approx(1 + 3 * gamma + gamma**2)


def test_mp_limit_fit_recovers_the_integral_and_the_wishart_moments():
    rng = np.random.default_rng(3)
    f = thm3_2.mp_limit_fit(2, 0.4, 4, 8, 4, 8000, rng)
    assert abs(f["a"] - th.gd_error_mp(2, 0.4, 0.5)) <= 4 * f["a_se"]
    # the exact finite-d value (moments m_0..m_4) is a + b/d to O(1/d^2): the fitted line passes near it
    exact = th.gd_error_wishart(2, 0.4, 16, 32) / 16
    assert abs(f["a"] + f["b"] / 16 - exact) <= 4 * f["a_se"] + 0.01 * exact


def test_importance_weights_are_exact_likelihood_ratios():
    rng = np.random.default_rng(5)
    e, w = th.wishart_is_sample(4, 10, 40_000, rng)
    m, se = mean_se(w)
    assert abs(m - 1) <= 4 * se
    for p in (1, 2, 3):
        est, est_se = mean_se(w * np.sum(e**p, axis=1))
        assert abs(est - th.wishart_trace_moments(p, 4, 10)[p] / 10**p) <= 4 * est_se


def test_heavy_tail_aware_optimum_matches_the_exact_quartic():
    rng = np.random.default_rng(9)
    e, w = th.wishart_is_sample(6, 12, 30_000, rng)
    c, c_se, L, L_se = th.looped_is_optimum(2, e, w)
    c2, L2 = th.looped_optimum_exact_k2(6, 12)
    assert abs(c - c2) <= 4 * c_se and c_se < 0.01
    assert abs(L - L2) <= 4 * L_se + 1e-3 * L2


def test_one_step_ood_formula_against_monte_carlo_and_not_the_printed_factor_two():
    rng = np.random.default_rng(2)
    d, n = 4, 10
    Sigma = np.diag(np.linspace(0.5, 2.0, d))
    V = -th.eta_star(d, n) * np.eye(d)
    S = th.sample_S(d, n, 100_000, rng, Sigma)
    m, se = mean_se(np.sum((np.eye(d) + V @ S) ** 2, axis=(1, 2)))
    assert abs(m - th.one_step_ood_error(V, Sigma, n)) <= 4 * se
    assert abs(m - th.one_step_ood_error(V, Sigma, n, factor=2.0)) > 4 * se


def test_eta_argmin_and_floor_monte_carlo_against_the_closed_forms():
    rng = np.random.default_rng(4)
    S = th.sample_S(5, 9, 50_000, rng)
    eta, se = thm3_1.eta_argmin_mc(S)
    assert abs(eta - th.eta_star(5, 9)) <= 4 * se and se < 5e-3
    m, se = cor3_1.floor_mc(5, 9, 50_000, rng)
    assert abs(m - th.no_cot_floor(5, 9)) <= 4 * se


def test_ood_row_follows_gd_for_the_construction():
    import torch

    from companion.cot import construction

    class R:  # the exact construction as a "trained" model
        W_KQ, W_PV = construction(3, 0.3)

    rng = np.random.default_rng(1)
    row = thm4_2.ood_row(R, np.diag([0.5, 1.0, 1.5]), 0.3, [4, 8], 9, 4000, 4000, 7, rng)
    for k in (4, 8):
        (mm, ms, _), (ml, ls) = row["ks"][k]["model"], row["ks"][k]["law"]
        assert abs(mm - ml) <= 4 * math.hypot(ms, ls)
    m = row["mean"]
    # the construction is GD on every prompt: the paired difference vanishes to round-off, so the control-variate
    # mean is the independent prediction (a K - 1 step GD in the pairing would leave a difference of about 10 %)
    assert m["finite"] and abs(m["diff"]) <= 1e-9 * m["gd"] and m["measured"] == pytest.approx(m["pred"], rel=1e-9)
    assert abs(m["model"] - m["pred"]) <= 4 * math.hypot(m["pred_se"], m["se"] + m["model"] / math.sqrt(4000))
    assert m["next"] < m["pred"] < m["prev"]
    assert row["growth"]["model"] == row["growth"]["law"] == 0.0 and thm4_2.regime(row) == "inside"
    assert row["cond"] == pytest.approx(0.3 * 1.5 * (1 + math.sqrt(3 / 9)) ** 2)
    assert torch.get_num_threads() >= 1


def test_ood_row_mean_against_exact_wishart_moments_and_growth_beyond_the_boundary():
    from companion.cot import construction

    class R:
        W_KQ, W_PV = construction(3, 0.3)

    rng = np.random.default_rng(2)
    row = thm4_2.ood_row(R, np.eye(3), 0.3, [2], 9, 2000, 40_000, 3, rng)
    m = row["mean"]  # E tr(I - eta S)^(2k) at k = 2 (prediction) and k = 1 (competitor), exactly
    assert abs(m["pred"] - th.gd_error_wishart(2, 0.3, 3, 9)) <= 4 * m["pred_se"]
    assert m["prev"] == pytest.approx(th.gd_error_wishart(1, 0.3, 3, 9), rel=0.02)
    row = thm4_2.ood_row(R, 6.0 * np.eye(3), 0.3, [2, 6], 9, 4000, 20_000, 3, rng)
    g = row["growth"]  # most prompts beyond the boundary: the construction's errors grow as GD's
    assert thm4_2.regime(row) == "beyond" and 0.5 < g["law"] < 1
    assert abs(g["model"] - g["law"]) <= 4 * math.hypot(g["se"], g["law_se"])
    assert g["model"] > thm4_2.in_distribution_growth(3, 9, 6, 0.3, 4000, rng) + 0.3


def test_reduced_moments_reproduce_the_sampled_loss_and_gradient():
    lam = th.sample_S_eigs(3, 6, 40, np.random.default_rng(6))
    A0, A1, A2 = th._reduced_moments(0.4, 5, lam)
    for v, w in [(-0.1, 0.3), (0.2, -0.7), (-0.4, 1.0)]:
        P, Q = v * w + 0.4, v + 0.4
        assert 0.5 * np.sum(P**2 * A2 - 2 * P * Q * A1 + Q**2 * A0) == pytest.approx(th.reduced_loss(v, w, 0.4, 5, lam), rel=1e-12)
    r = th.reduced_flow_converged(0.4, 5, 0.01, 1e-6, lam=lam, num_t=11)
    assert r["loss"][0] == pytest.approx(th.reduced_loss(r["v"][0], r["w"][0], 0.4, 5, lam), rel=1e-12)
