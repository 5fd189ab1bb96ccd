"""Unit tests of companion.cot's model: the fast teacher-forced loss against a deliberately naive
per-position reference (identical losses and gradients), CoT inference, the construction, conventions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from companion.cot import (
    construction,
    cot_inference,
    cot_tokens,
    embed,
    eval_loss,
    gd_trajectory,
    looped_predict,
    lsa,
    make_generator,
    no_cot_predict,
    outcome_loss,
    sample_prompts,
    sparse_parameters,
    teacher_forced_loss,
    teacher_forced_loss_direct,
)
from companion.cot.reference import naive_teacher_forced_loss
from companion.params import ParameterError


def _random_params(d, gen, scale=0.3):
    D = 2 * d + 2
    A = (scale / math.sqrt(D) * torch.randn(D, D, generator=gen, dtype=torch.float64)).requires_grad_()
    B = (scale / math.sqrt(D) * torch.randn(D, D, generator=gen, dtype=torch.float64)).requires_grad_()
    return A, B


@pytest.mark.parametrize("d,n,k", [(3, 5, 1), (4, 8, 6), (2, 3, 4)])
def test_fast_loss_and_gradient_equal_the_naive_reference(d, n, k):
    gen = make_generator(11 + d + k)
    p = sample_prompts(5, d, n, gen)
    eta = 0.3
    W_KQ, W_PV = _random_params(d, gen)
    fast = teacher_forced_loss(p, gd_trajectory(p, eta, k), W_KQ, W_PV, k)
    gf = torch.autograd.grad(fast, [W_KQ, W_PV])
    naive = naive_teacher_forced_loss(p.X, p.w_star, eta, k, W_KQ, W_PV)
    gn = torch.autograd.grad(naive, [W_KQ, W_PV])
    assert float(fast.detach()) == pytest.approx(float(naive.detach()), rel=1e-13, abs=0)
    for a, b in zip(gf, gn):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_fast_loss_uses_the_convention_half_and_positions_0_to_k_minus_1():
    """With W = 0 the output column is the input token, so the loss is 1/2 sum_{i<k} ||t_i - t_{i+1}||^2."""
    d, n, k = 3, 6, 4
    gen = make_generator(3)
    p = sample_prompts(7, d, n, gen)
    W = gd_trajectory(p, 0.3, k)
    D = 2 * d + 2
    Z = torch.zeros(D, D, dtype=torch.float64)
    expected = 0.5 * ((W[:, 1:] - W[:, :-1]) ** 2).sum(dim=(1, 2)).mean()
    assert float(teacher_forced_loss(p, W, Z, Z, k)) == pytest.approx(float(expected), rel=1e-14)


def test_gd_trajectory_closed_form():
    d, n, k, eta = 4, 9, 7, 0.4
    p = sample_prompts(6, d, n, make_generator(0))
    W = gd_trajectory(p, eta, k)
    I = torch.eye(d, dtype=torch.float64)
    closed = p.w_star - torch.einsum("bij,bj->bi", torch.linalg.matrix_power(I - eta * p.S, k), p.w_star)
    torch.testing.assert_close(W[:, -1], closed, rtol=1e-12, atol=1e-12)
    assert torch.all(W[:, 0] == 0)


def test_embedding_layout():
    d, n = 3, 5
    p = sample_prompts(2, d, n, make_generator(1))
    Z0 = embed(p)
    assert Z0.shape == (2, 2 * d + 2, n + 1)
    torch.testing.assert_close(Z0[:, :d, :n], p.X)
    torch.testing.assert_close(Z0[:, d, :n], p.y)
    assert torch.all(Z0[:, d + 1 :, :n] == 0) and torch.all(Z0[:, : d + 1, n] == 0)
    assert torch.all(Z0[:, 2 * d + 1, n] == 1) and torch.all(Z0[:, d + 1 : 2 * d + 1, n] == 0)
    t = cot_tokens(torch.ones(1, 2, d, dtype=torch.float64))
    assert t.shape == (1, 2, 2 * d + 2) and float(t[0, 0, 2 * d + 1]) == 1.0 and float(t[0, 0, :d + 1].abs().sum()) == 0


@pytest.mark.parametrize("eta", [0.1, 0.3, 0.6])
def test_construction_reproduces_gd_and_has_zero_cot_loss(eta):
    d, n, k = 5, 12, 15
    p = sample_prompts(20, d, n, make_generator(2))
    W = gd_trajectory(p, eta, k)
    W_KQ, W_PV = construction(d, eta)
    torch.testing.assert_close(cot_inference(p, W_KQ, W_PV, k), W, rtol=0, atol=1e-12 * float(W.abs().max()))
    assert float(teacher_forced_loss(p, W, W_KQ, W_PV)) < 1e-25


def test_rescaling_symmetry_and_clean_append_on_the_sparse_manifold():
    d, n, k = 4, 10, 6
    rng = np.random.default_rng(0)
    V, Wm = rng.standard_normal((d, d)) * 0.1, np.eye(d) + 0.1 * rng.standard_normal((d, d))
    p = sample_prompts(8, d, n, make_generator(4))
    a = cot_inference(p, *sparse_parameters(V, Wm, -1.0), k)
    b = cot_inference(p, *sparse_parameters(V / 2.5, 2.5 * Wm, -2.5), k)
    c = cot_inference(p, *sparse_parameters(V, Wm, -1.0), k, append="clean")
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(a, c, rtol=1e-12, atol=1e-12)
    # the recursion w_{i+1} = (I + V S W) w_i - V S w*
    S = p.S.numpy()
    w = np.zeros((8, d))
    for _ in range(k):
        w = w + np.einsum("ij,bjk,kl,bl->bi", V, S, Wm, w) - np.einsum("ij,bjk,bk->bi", V, S, p.w_star.numpy())
    np.testing.assert_allclose(a[:, -1].numpy(), w, rtol=1e-11, atol=1e-12)


def test_no_cot_is_one_gd_step_and_looped_is_k_steps_on_the_sparse_manifold():
    d, n, k, c = 4, 10, 5, 0.55
    p = sample_prompts(10, d, n, make_generator(5))
    W_KQ, W_PV = construction(d, c)
    W = gd_trajectory(p, c, k)
    torch.testing.assert_close(no_cot_predict(p, W_KQ, W_PV), W[:, 1], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(looped_predict(p, W_KQ, W_PV, k), W[:, k], rtol=1e-12, atol=1e-12)
    # eval loss convention: no 1/2, sum over coordinates
    expected = ((W[:, k] - p.w_star) ** 2).sum(1).mean()
    assert float(eval_loss(p, W_KQ, W_PV, k)) == pytest.approx(float(expected), rel=1e-12)
    # outcome loss has the 1/2 (whole column, the const entry is exact)
    assert float(outcome_loss(p, W_KQ, W_PV, k, "looped")) == pytest.approx(0.5 * float(expected), rel=1e-12)


def test_api_validates_inputs():
    gen = make_generator(0)
    with pytest.raises(ParameterError, match="'d'"):
        sample_prompts(2, 0, 3, gen)
    with pytest.raises(ParameterError, match="'Sigma'"):
        sample_prompts(2, 2, 3, gen, Sigma=np.diag([1.0, -1.0]))
    p = sample_prompts(2, 3, 4, gen)
    with pytest.raises(ParameterError, match="'eta'"):
        gd_trajectory(p, 0.0, 3)
    with pytest.raises(ParameterError, match="'W_KQ'"):
        cot_inference(p, torch.zeros(5, 5, dtype=torch.float64), torch.zeros(8, 8, dtype=torch.float64), 2)
    with pytest.raises(ParameterError, match="'k'"):
        teacher_forced_loss(p, gd_trajectory(p, 0.3, 2), *construction(3, 0.3), k=5)


def test_direct_definition_matches_the_fast_loss():
    gen = make_generator(3)
    pr = sample_prompts(3, 3, 5, gen)
    W = gd_trajectory(pr, 0.3, 4)
    A, B = _random_params(3, gen)
    fast = float(teacher_forced_loss(pr, W, A, B, 4).detach())
    direct = float(teacher_forced_loss_direct(pr, W, A, B, 4).detach())
    assert abs(fast - direct) <= 1e-12 * abs(direct)


@pytest.mark.parametrize("replicates", [1, 3])
def test_cot_inference_equals_appending_the_lsa_output_column(replicates):
    """Dense weights, no sparse structure: cot_inference against its definition Z_{i+1} = [Z_i, f(Z_i)[:, -1]],
    the whole LSA recomputed at every step (one model, and R stacked replicates meeting their own prompts)."""
    d, n, k = 3, 5, 4
    gen = make_generator(7)
    p = sample_prompts(2 * replicates, d, n, gen)
    pairs = [_random_params(d, gen) for _ in range(replicates)]
    W_KQ = torch.stack([a.detach() for a, _ in pairs]).squeeze(0)
    W_PV = torch.stack([b.detach() for _, b in pairs]).squeeze(0)
    Z, ws = embed(p), slice(d + 1, 2 * d + 1)
    direct = [Z[:, ws, -1]]
    for _ in range(k):
        Z = torch.cat([Z, lsa(Z, W_KQ, W_PV, n)[:, :, -1:]], dim=2)
        direct.append(Z[:, ws, -1])
    torch.testing.assert_close(cot_inference(p, W_KQ, W_PV, k), torch.stack(direct, 1), rtol=1e-12, atol=1e-14)
