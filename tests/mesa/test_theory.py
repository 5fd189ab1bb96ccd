"""companion.mesa.theory against exact population computations.

Exact population averages: the phases theta_j are put on the grid 2 pi l / G (l = 0..G-1). Every
quantity below is a trigonometric polynomial in theta whose frequencies are bounded by 6(T-2) per
coordinate, so with G > 6(T-2) the grid average equals the expectation over uniform phases exactly;
x_1 is averaged over its atoms (sparse, Rademacher, full-one) or a Gauss-Hermite rule (Gaussian, exact
for the degree-12 polynomials that occur). The gradients are then autograd gradients of the model.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from companion.mesa import theory as th
from companion.mesa.empirical import diagonal_gd, diagonal_stats, exact_population
from companion.mesa.model import loss_and_grad, loss_grad_fast, per_sequence_loss
from companion.mesa.train import init_diagonal
from companion.params import ParameterError


def test_checkable_numbers():
    assert th.harmonic(98) == pytest.approx(5.167277, abs=1e-6)
    assert th.c_star("gaussian", 1.0, 5, 100) == pytest.approx(0.191905, abs=1e-6)
    for s, v in [(0.5, 0.767620), (2.0, 0.047976)]:
        assert th.c_star("gaussian", s, 5, 100) == pytest.approx(v, abs=1e-6)
    for c in (0.5, 1.0, 2.0):
        assert th.c_star("sparse", c, 5, 100) == pytest.approx(1 / c**2, rel=1e-14)
    assert th.masked_full_one_c_star(5, 100) == pytest.approx(0.825826, abs=1e-6)
    assert th.c_star("full_one", 1.0, 5, 100) == pytest.approx(th.masked_full_one_c_star(5, 100), rel=1e-14)
    al, be = th.alpha_beta("gaussian", 1.0, 5, 100)
    assert (al, be) == (pytest.approx(1532.007, abs=1e-3), 294)
    a, b = th.limits(0.5, 1.5, th.c_star("gaussian", 1.0, 5, 100))
    assert (a, b) == (pytest.approx(0.13508, abs=1e-5), pytest.approx(1.42065, abs=1e-5))
    a, b = th.limits(0.5, 1.5, th.masked_full_one_c_star(5, 100))
    assert (a, b) == (pytest.approx(0.54490, abs=1e-5), pytest.approx(1.51556, abs=1e-5))
    assert th.population_loss("gaussian", 1.0, 5, 100, th.c_star("gaussian", 1.0, 5, 100)) == pytest.approx(103.95, abs=0.01)
    assert th.last_position_loss("full_one", 1.0, 5, 100, th.masked_full_one_c_star(5, 100)) == pytest.approx(0.145, abs=1e-3)


@pytest.mark.parametrize("law,d,T", [("full_one", 2, 5), ("sparse", 3, 4), ("rademacher", 3, 4), ("gaussian", 2, 4)])
def test_reduced_loss_and_diagonal_gradient_exact(law, d, T):
    data, w = exact_population(law, d, T, scale=1.3)
    a, b = 0.7, 0.9
    W_KQ, W_PV = init_diagonal(d, a, b, torch.complex128)
    L, gA, gP = loss_grad_fast(data, W_KQ, W_PV, weights=w)
    al, be = th.alpha_beta(law, 1.3, d, T)
    assert float(L) == pytest.approx(float(th.population_loss(law, 1.3, d, T, a * b)), rel=1e-10)
    g = al * a * b - be
    assert torch.allclose(torch.diagonal(gA[d:, :d]).real, torch.full((d,), b * g, dtype=torch.float64), rtol=1e-9)
    assert torch.allclose(torch.diagonal(gP[:, :d]).real, torch.full((d,), a * g, dtype=torch.float64), rtol=1e-9)
    # block structure: the population gradient vanishes outside the red blocks, for every law
    other = torch.cat([gA[:d].reshape(-1), gA[d:, d:].reshape(-1), gP[:, d:].reshape(-1)])
    assert float(other.abs().max()) <= 1e-10 * abs(b * g)
    # under sign symmetry (Assumption 4.1) the off-diagonal red entries vanish too
    if law != "full_one":
        off = ~torch.eye(d, dtype=torch.bool)
        assert float(gA[d:, :d][off].abs().max()) <= 1e-10 * abs(b * g)
        assert float(gP[:, :d][off].abs().max()) <= 1e-10 * abs(b * g)


@pytest.mark.parametrize("d,T", [(2, 5), (3, 4), (3, 5)])
def test_offdiagonal_gradient_full_one_exact(d, T):
    """Prop 4.2: the off-diagonal red-block gradient at (aI, bI) for x_1 = 1 equals the closed form."""
    data, w = exact_population("full_one", d, T)
    a, b = 0.7, 0.9
    W_KQ, W_PV = init_diagonal(d, a, b, torch.complex128)
    _, gA, gP = loss_grad_fast(data, W_KQ, W_PV, weights=w)
    g_pv, g_kq = th.offdiag_gradient("full_one", 1.0, d, T, a, b)
    off = ~torch.eye(d, dtype=torch.bool)
    assert torch.allclose(gP[:, :d][off], torch.full_like(gP[:, :d][off], g_pv), rtol=1e-9, atol=1e-12)
    assert torch.allclose(gA[d:, :d][off], torch.full_like(gA[d:, :d][off], g_kq), rtol=1e-9, atol=1e-12)
    assert g_pv != 0


def test_exact_grid_autograd_agrees():
    data, w = exact_population("full_one", 2, 4)
    W_KQ, W_PV = init_diagonal(2, 0.3, -0.8, torch.complex128)
    L1, a1, p1 = loss_grad_fast(data, W_KQ, W_PV, weights=w)
    L2, a2, p2 = loss_and_grad(data, W_KQ, W_PV, weights=w)
    assert torch.allclose(a1, a2, atol=1e-12) and torch.allclose(p1, p2, atol=1e-12)


def test_flow_conservation_and_euler():
    al, be = th.alpha_beta("gaussian", 1.0, 5, 100)
    tau = np.linspace(0, 0.05, 11)
    a, b, c = th.gradient_flow(0.5, 1.5, tau, al, be)
    assert np.allclose(a**2 - b**2, 0.25 - 2.25, atol=1e-9)
    lim = th.limits(0.5, 1.5, be / al)
    assert a[-1] == pytest.approx(lim[0], rel=1e-7) and b[-1] == pytest.approx(lim[1], rel=1e-7)
    # forward Euler converges to the flow as the step shrinks (first order)
    e1 = abs(th.reduced_gd(0.1, 0.1, 1e-5, 200, al, be)[2][-1] - th.gradient_flow(0.1, 0.1, [0, 2e-3], al, be)[2][-1])
    e2 = abs(th.reduced_gd(0.1, 0.1, 5e-6, 400, al, be)[2][-1] - th.gradient_flow(0.1, 0.1, [0, 2e-3], al, be)[2][-1])
    assert e2 < 0.6 * e1


def test_stability_and_limits_errors():
    al, be = th.alpha_beta("gaussian", 2.0, 5, 100)
    th.check_stability(2e-6, al, be, 2.0, 2.0)  # the Table 1 step size is stable
    with pytest.raises(ParameterError, match="'lr'"):
        th.check_stability(3e-6, al, be, 2.0, 2.0)
    with pytest.raises(ParameterError, match="'a0'"):
        th.limits(1.0, -1.0, 0.2)
    assert th.limits(-2.0, -0.5, 0.3)[0] < 0


def test_assumption_4_2():
    assert th.assumption_4_2("sparse", 2.0, 5)["holds"]
    g = th.assumption_4_2("gaussian", 1.0, 5)
    assert not g["i_m24_zero"] and not g["ii_cauchy_schwarz_equality"]
    r = th.assumption_4_2("rademacher", 1.0, 5)
    assert not r["i_m24_zero"] and r["ii_cauchy_schwarz_equality"]
    assert th.assumption_4_2("rademacher", 1.0, 1)["holds"]  # d = 1: no cross term


def test_moments_mc_matches_exact():
    for law in ("gaussian", "sparse", "full_one", "rademacher"):
        mc = th.moments_mc(law, 1.0, 5, n=400_000, rng=0)
        ex = th.moments(law, 1.0, 5)
        assert mc.m2 == pytest.approx(ex.m2, rel=0.02, abs=1e-12)
        assert mc.m4 == pytest.approx(ex.m4, rel=0.03, abs=1e-12)
        assert mc.m24 == pytest.approx(ex.m24, rel=0.05, abs=1e-12)


def test_one_step_gd_predict_matches_model():
    from companion.mesa.data import generate
    from companion.mesa.model import predict

    data = generate("gaussian", 10, 3, 12, 1.0, rng=4)
    W_KQ, W_PV = init_diagonal(3, 0.4, 1.7, torch.complex128)
    y = predict(data, W_KQ, W_PV)
    y_gd = th.one_step_gd_predict(data.tokens(), 0.4, 1.7)
    assert float((y - y_gd).abs().max()) <= 1e-12 * float(y.abs().max())


def test_diagonal_stats_population_limit():
    """The restricted-GD statistics on the exact population reproduce alpha and beta."""
    data, w = exact_population("sparse", 2, 5, scale=1.5)
    d = 2
    # weighted means: replicate by weights (all equal for sparse)
    Q, P = diagonal_stats(data, 1)
    al, be = th.alpha_beta("sparse", 1.5, d, 5)
    assert np.allclose([Q[0, j, j, j] for j in range(d)], al, rtol=1e-10)
    assert np.allclose([P[0, j, j] for j in range(d)], be, rtol=1e-10)
    ab = diagonal_gd(0.1, 0.1, 1e-3, 50, Q[0], P[0])
    assert np.allclose(ab, th.reduced_gd(0.1, 0.1, 1e-3, 50, al, be)[2], rtol=1e-10)


def test_gradient_blocks_at_a_diagonal_point_match_the_prop_4_2_formula():
    from companion.mesa.analysis import gradient_blocks
    from companion.mesa.empirical import exact_population

    data, w = exact_population("full_one", 2, 6)
    g = gradient_blocks(data, 0.7, 0.9, weights=w)
    f_pv, f_kq = th.offdiag_gradient("full_one", 1.0, 2, 6, 0.7, 0.9)
    assert np.allclose(g["pv_off"].real, f_pv, rtol=1e-10) and np.allclose(g["kq_off"].real, f_kq, rtol=1e-10)
    assert np.abs(g["other"]).max() < 1e-12 * np.abs(g["kq_diag"]).max()  # the block structure is kept


@pytest.mark.parametrize("law", ["gaussian", "sparse", "full_one"])
def test_position_loss_is_exact_at_every_position(law):
    """l_t(c) against the exact phase-grid expectation at each position: a t <-> t-1 shift is 1/(t-1)-1/t of
    the cross term, i.e. 1/6 of it at t = 3 (caught at 1e-10)."""
    d, T, c = 2, 6, 0.7
    data, w = exact_population(law, d, T, gh_nodes=7)
    W = init_diagonal(d, 1.0, c, torch.complex128)
    for t in range(2, T):
        exact = float((w * torch.from_numpy(per_sequence_loss(data, *W, positions=[t], backend="torch"))).sum() / w.sum())
        assert abs(exact - float(th.position_loss(law, 1.0, d, t, c))) <= 1e-10 * max(1.0, abs(exact)), t


def test_population_loss_is_the_sum_of_position_losses():
    d, T, c = 3, 9, 0.4
    total = sum(float(th.position_loss("gaussian", 1.0, d, t, c)) for t in range(2, T))
    assert total == pytest.approx(float(th.population_loss("gaussian", 1.0, d, T, c)), rel=1e-13)
