"""The compiled lane kernel (companion.mesa.lanes, float64) against its plain NumPy interpreter
(companion.mesa.lanes.reference), and the interpreter against the model's definition and the package's
batched torch path: per-sequence losses, both gradients and the predictions agree to a relative 1e-10 for
d in {1, 2, 5, 7}.

The kernel runs at float64 here (it is generated for float and double alike, from the same statements), so
no float32 tolerance is needed. Errors are relative to the largest entry of the reference (a gradient
entry that is zero by symmetry has no relative error of its own); measured: about 1e-15."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from companion.mesa.data import ARData
from companion.mesa.lanes import host
from companion.mesa.lanes import reference as ref
from companion.mesa.model import loss_grad_fast, predict_fast

RTOL = 1e-10
DIMS = (1, 2, 5, 7)
T = 12
POSITIONS = {"all": np.arange(2, T), "subset": np.array([2, 3, 7, T - 1])}  # a run and jumps


def _rel(got, want) -> float:
    return float(np.abs(np.asarray(got) - np.asarray(want)).max() / np.abs(np.asarray(want)).max())


@functools.lru_cache(maxsize=None)
def _problem(d: int):
    """37 sequences (three blocks of 16 lanes, the last with 11 padding lanes), complex x_1 and complex
    weights (every conjugation of the backward pass matters), unequal sequence weights."""
    rng = np.random.default_rng(100 + d)
    m = 37
    theta = rng.uniform(0, 2 * np.pi, (m, d))
    x1 = rng.standard_normal((m, d)) + 1j * rng.standard_normal((m, d))
    W_KQ = 0.3 * (rng.standard_normal((2 * d, 2 * d)) + 1j * rng.standard_normal((2 * d, 2 * d)))
    W_PV = 0.3 * (rng.standard_normal((d, 2 * d)) + 1j * rng.standard_normal((d, 2 * d)))
    w = rng.uniform(0.2, 1.0, m)
    return theta, x1, W_KQ, W_PV, w / w.sum()


@functools.lru_cache(maxsize=None)
def _interpreted(d: int, which: str):
    theta, x1, W_KQ, W_PV, wn = _problem(d)
    return ref.sweep(theta, x1, POSITIONS[which], W_KQ, W_PV, wn)


def _compiled(d: int, which: str, mode: int):
    """host.sweep on the float64 tables: (per-sequence loss, dL/dW_KQ, dL/dW_PV, predictions)."""
    theta, x1, W_KQ, W_PV, wn = _problem(d)
    pos = POSITIONS[which]
    lam = np.exp(1j * theta)
    K = np.stack([ref.cauchy(row) for row in lam])
    TB, SQ = host.tables(theta, x1, lam, K, pos, np.float64)
    m, nb, N = len(x1), TB.shape[0], len(pos)
    loss = np.empty(m)
    gA = np.zeros((nb, 2 * d, 2 * d), complex)
    gP = np.zeros((nb, d, 2 * d), complex)
    pred = np.full((2, m, d, N), np.nan)  # modes 0 and 1 write no predictions: NaN, not uninitialised memory
    host.sweep(TB, SQ, pos, 1.0 / (pos - 1), W_KQ, W_PV, wn, mode, loss, gA, gP, pred)
    return loss, gA.sum(0), gP.sum(0), (pred[0] + 1j * pred[1]).transpose(0, 2, 1)


@pytest.mark.parametrize("which", sorted(POSITIONS))
@pytest.mark.parametrize("d", DIMS)
def test_compiled_kernel_equals_interpreter(d, which):
    loss, gA, gP, yhat = _interpreted(d, which)
    k_loss, k_gA, k_gP, _ = _compiled(d, which, 1)
    assert np.abs(k_loss - loss).max() <= RTOL * loss.min()  # every sequence's loss
    assert _rel(k_gA, gA) <= RTOL and _rel(k_gP, gP) <= RTOL
    loss0 = _compiled(d, which, 0)[0]  # the loss-only step
    loss2, _, _, k_yhat = _compiled(d, which, 2)  # the prediction step
    assert np.abs(loss0 - loss).max() <= RTOL * loss.min() and np.abs(loss2 - loss).max() <= RTOL * loss.min()
    assert _rel(k_yhat, yhat) <= RTOL


@pytest.mark.parametrize("which", sorted(POSITIONS))
@pytest.mark.parametrize("d", DIMS)
def test_interpreter_equals_the_definition(d, which):
    # the closed form of the prefix sum and the hand-derived backward pass against the model as defined
    # (S_t = S_{t-1} + e_t e_t^H, built position by position) and its direct gradient formulas
    theta, x1, W_KQ, W_PV, wn = _problem(d)
    loss, gA, gP, yhat = _interpreted(d, which)
    d_loss, d_gA, d_gP, d_yhat = ref.definition(theta, x1, POSITIONS[which], W_KQ, W_PV, wn)
    assert np.abs(d_loss - loss).max() <= RTOL * loss.min()
    assert _rel(gA, d_gA) <= RTOL and _rel(gP, d_gP) <= RTOL and _rel(yhat, d_yhat) <= RTOL


@pytest.mark.parametrize("d", DIMS)
def test_interpreter_equals_the_torch_path(d):
    # the package's batched torch path (companion.mesa.model, backend="torch": the same formulas as
    # batched products, and PyTorch's own complex arithmetic), the weights' normalisation included
    theta, x1, W_KQ, W_PV, wn = _problem(d)
    loss, gA, gP, yhat = _interpreted(d, "subset")
    data = ARData(x1=torch.from_numpy(x1), lam=torch.from_numpy(np.exp(1j * theta)), T=T, theta=theta)
    A, Pm = torch.from_numpy(W_KQ), torch.from_numpy(W_PV)
    pos = POSITIONS["subset"]
    L, t_gA, t_gP = loss_grad_fast(data, A, Pm, weights=3.0 * wn, positions=pos, backend="torch")
    assert abs(float(L) - float(loss @ wn)) <= RTOL * float(L)
    assert _rel(t_gA.numpy(), gA) <= RTOL and _rel(t_gP.numpy(), gP) <= RTOL
    assert _rel(predict_fast(data, A, Pm, pos, backend="torch").numpy(), yhat) <= RTOL
