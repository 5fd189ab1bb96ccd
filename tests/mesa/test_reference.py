"""companion.mesa's fast model against a deliberately naive per-prefix reference: identical predictions,
loss and gradients (complex128, float precision), for several laws, dimensions and lengths."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from companion.mesa.data import ARData, embed, generate
from companion.mesa.model import loss, loss_and_grad, loss_fast, loss_grad_fast, predict, predict_direct, predict_fast
from companion.mesa.reference import naive_loss_and_grad, naive_tokens


def _weights(d, seed):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(2 * d, 2 * d, dtype=torch.complex128, generator=g)
    P = torch.randn(d, 2 * d, dtype=torch.complex128, generator=g)
    return A, P


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


CASES = [("gaussian", 5, 12, 2.0), ("sparse", 3, 7, 0.7), ("full_one", 2, 9, 1.0), ("rademacher", 4, 3, 1.5),
         ("gaussian", 1, 5, 1.0), ("gaussian", 5, 4, 0.5)]


@pytest.mark.parametrize("law,d,T,scale", CASES)
def test_fast_equals_naive(law, d, T, scale):
    data = generate(law, 6, d, T, scale, rng=3)
    A, P = _weights(d, 7)
    w = torch.rand(6, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) + 0.5
    for weights in (None, w):
        L0, gA0, gP0, y0 = naive_loss_and_grad(data, A, P, weights)
        L1, gA1, gP1 = loss_grad_fast(data, A, P, weights=weights)  # fused kernel
        L3, gA3, gP3 = loss_grad_fast(data, A, P, weights=weights, backend="torch")  # batched torch products
        L2, gA2, gP2 = loss_and_grad(data, A, P, weights=weights)
        for L in (L1, L2, L3):
            assert abs(float(L) - float(L0)) <= 1e-12 * float(L0)
        for g_fast, g_ref in ((gA1, gA0), (gP1, gP0), (gA2, gA0), (gP2, gP0), (gA3, gA0), (gP3, gP0)):
            assert _rel(g_fast, g_ref) <= 1e-11
        assert abs(loss_fast(data, A, P, weights=weights) - float(L0)) <= 1e-12 * float(L0)
    y1 = predict(data, A, P)
    assert _rel(y1, y0) <= 1e-11
    assert _rel(predict_fast(data, A, P), y0) <= 1e-11
    assert _rel(predict_direct(data, A, P), y0) <= 1e-11


def test_positions_subset_and_tokens():
    data = generate("gaussian", 4, 3, 10, 1.0, rng=0)
    A, P = _weights(3, 1)
    full = predict(data, A, P)
    sub = predict(data, A, P, positions=[2, 5, 9])
    assert _rel(sub, full[:, [0, 3, 7]]) <= 1e-13
    x = data.tokens()
    for n in range(4):
        ref = naive_tokens(data.x1.real.numpy()[n], data.theta[n], 10)
        assert torch.allclose(x[n], ref, atol=1e-12)
    e = embed(x)
    assert torch.all(e[:, 0, 3:] == 0) and torch.allclose(e[:, 1:, 3:], x[:, :-1])


def test_complex64_close_to_complex128():
    data = generate("gaussian", 50, 5, 30, 1.0, rng=2)
    A, P = _weights(5, 3)
    L128, gA128, gP128 = loss_grad_fast(data, A, P)
    L64, gA64, gP64 = loss_grad_fast(data.to(torch.complex64), A.to(torch.complex64), P.to(torch.complex64))
    assert abs(float(L64) - float(L128)) <= 1e-4 * float(L128)
    assert _rel(gA64.to(torch.complex128), gA128) <= 1e-4
    assert _rel(gP64.to(torch.complex128), gP128) <= 1e-4


def test_loss_helpers_agree():
    data = generate("sparse", 20, 4, 15, 1.0, rng=5)
    A, P = _weights(4, 2)
    assert abs(float(loss(data, A, P)) - float(loss_grad_fast(data, A, P)[0])) <= 1e-12 * float(loss(data, A, P))


def test_coinciding_phases():
    """Exactly equal phases (lam_j = lam_k) take the t-limit of the geometric sum, not 1/0."""
    theta = np.array([[0.3, 0.3, 1.0], [2.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    x1 = np.array([[1.0, -0.5, 2.0], [0.3, 1.0, -1.0], [1.0, 2.0, 3.0]])
    data = ARData(torch.from_numpy(x1.astype(complex)), torch.from_numpy(np.exp(1j * theta)), 8, theta)
    A, P = _weights(3, 4)
    L0, gA0, gP0, y0 = naive_loss_and_grad(data, A, P)
    L1, gA1, gP1 = loss_grad_fast(data, A, P)
    assert abs(float(L1) - float(L0)) <= 1e-12 * float(L0)
    assert _rel(gA1, gA0) <= 1e-11 and _rel(gP1, gP0) <= 1e-11
    assert _rel(predict(data, A, P), y0) <= 1e-11
