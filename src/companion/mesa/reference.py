"""The deliberately naive reference of the mesa model: one sequence and one prefix at a time, in the book's
notation, for the tests (``tests/mesa/test_reference.py``: the fast model equals it) and the benchmarks
(``benchmarks/bench_mesa.py``: how much faster the fast model is). Not used by the book.

(The compiled lane kernel has its own reference, the NumPy interpreter of its recurrences,
:mod:`companion.mesa.lanes.reference`.)
"""

from __future__ import annotations

import numpy as np
import torch

from companion.mesa.data import ARData

__all__ = ["naive_tokens", "naive_loss", "naive_loss_and_grad"]


def naive_tokens(x1: np.ndarray, theta: np.ndarray, T: int) -> torch.Tensor:
    """x_{t+1} = W x_t with W = diag(exp(i theta)), by repeated multiplication (one sequence)."""
    W = torch.diag(torch.from_numpy(np.exp(1j * theta)))
    xs = [torch.from_numpy(x1.astype(complex))]
    for _ in range(T - 1):
        xs.append(W @ xs[-1])
    return torch.stack(xs)  # (T, d)


def naive_loss(data: ARData, W_KQ: torch.Tensor, W_PV: torch.Tensor, weights=None):
    """Deliberately naive: one sequence and one prefix at a time; builds E_t column by column with x_0 = 0,
    forms E_t E_t^H, applies yhat_t = W_PV E_t E_t^H W_KQ e_t / (t-1), sums 1/2|yhat_t - x_{t+1}|^2 over
    t = 2..T-1, averages over sequences (or weights them). Returns (loss, predictions (m, T-2, d))."""
    m, d, T = data.m, data.d, data.T
    x1 = data.x1.real.numpy()
    total = 0.0
    wsum = 0.0
    preds = []
    for n in range(m):
        x = naive_tokens(x1[n], data.theta[n], T)
        cols = []
        for t in range(1, T + 1):
            prev = x[t - 2] if t >= 2 else torch.zeros(d, dtype=x.dtype)
            cols.append(torch.cat([x[t - 1], prev]))
        p_n = []
        seq = 0.0
        for t in range(2, T):
            E = torch.stack(cols[:t], dim=1)  # (2d, t)
            yhat = W_PV @ (E @ E.conj().T) @ W_KQ @ cols[t - 1] / (t - 1)
            seq = seq + 0.5 * ((yhat - x[t]).abs() ** 2).sum()
            p_n.append(yhat)
        preds.append(torch.stack(p_n))
        wn = 1.0 if weights is None else float(weights[n])
        total = total + wn * seq
        wsum += wn
    return total / wsum, torch.stack(preds)


def naive_loss_and_grad(data, W_KQ, W_PV, weights=None):
    """``(loss, grad_W_KQ, grad_W_PV, predictions)`` of :func:`naive_loss` by autograd."""
    A = W_KQ.clone().requires_grad_(True)
    P = W_PV.clone().requires_grad_(True)
    L, preds = naive_loss(data, A, P, weights)
    gA, gP = torch.autograd.grad(L, (A, P))
    return L.detach(), gA, gP, preds.detach()
