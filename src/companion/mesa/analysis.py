"""Evaluation helpers for the checks: per-entry ratios, per-sequence losses (standard errors come from
:mod:`companion.stats`), trained weights as tensors, gradients split by block. Kept out of the modules a training run depends on, so editing them never
invalidates the run cache."""

from __future__ import annotations

import numpy as np
import torch
from scipy import stats

from companion.mesa.data import ARData, generate
from companion.mesa.model import loss_grad_fast, per_sequence_loss, predict, ratio_entries  # noqa: F401 (re-exported)
from companion.mesa.train import init_diagonal
from companion.seeds import MESA_TEST_DATA, MESA_TRAIN_DATA

__all__ = ["weights", "ratio_entries", "per_sequence_loss", "radial_moments", "radial_losses", "radial_terms", "manifold_part", "test_data",
           "train_data", "gradient_blocks"]


def radial_moments(d: int, scale: float) -> tuple[float, float, float]:
    r"""The moments :math:`E\,r^2, E\,r^4, E\,r^6` of the radius :math:`r=|x_1|` of :math:`x_1\sim N(0,\sigma^2 I_d)`:
    :math:`r^2/\sigma^2\sim\chi^2_d`, so :math:`E\,r^{2k}=\sigma^{2k}\,d(d+2)\cdots(d+2k-2)` (from scipy's chi-square
    law, not from the moments of :mod:`companion.mesa.theory` that the predictions use). For the sparse-Gaussian
    law (one active coordinate :math:`g\,e_J`) the radius is :math:`|g|`: ``d`` = 1."""
    chi2 = stats.chi2(int(d))
    return tuple(float(scale ** (2 * k) * chi2.moment(k)) for k in (1, 2, 3))


def radial_losses(data: ARData, W_KQ, W_PV, scale: float, positions=None, dof: int | None = None) -> np.ndarray:
    r"""Per-sequence losses of any weights on a Gaussian start with the radius of :math:`x_1` integrated exactly: an
    unbiased, light-tailed replacement of :func:`per_sequence_loss` for test-set means.

    The prediction is cubic in the tokens (:math:`\hat y_t = W^{PV}E_tE_t^HW^{KQ}e_t/\rho_t`) and the target linear,
    so for :math:`x_1=r\,u`, :math:`|u|=1`, a sequence's loss over any positions is
    :math:`L(r) = r^2A + r^4B + r^6C` with A, B, C the coefficients of its unit-radius sequence (read off the losses
    at :math:`r^2 = 1, 2, 3`). For :math:`x_1\sim N(0,\sigma^2I)` the radius is independent of the direction u and
    of the phases, so :math:`v = E[r^2]A + E[r^4]B + E[r^6]C` (:func:`radial_moments`) has the mean of L, while L
    itself is of degree six in :math:`x_1` and its test-set mean has an SE that under-covers (its z has s.d. 1.25
    at d = 4, T = 30 and 1000 sequences). ``data``: the test set, drawn at scale ``scale``;
    ``dof``: the chi-square degrees of freedom of the radius (:func:`radial_moments`; default ``data.d``, the
    Gaussian law)."""
    return radial_terms(data, lambda unit: per_sequence_loss(unit, W_KQ, W_PV, positions=positions), dof, scale)


def radial_terms(data: ARData, f, dof: int | None = None, scale: float = 1.0):
    r"""Any statistic ``f(data)`` that is a polynomial :math:`r^2A+r^4B+r^6C` in the radius of a Gaussian start (a
    loss, a gradient, a mean over sequences of either), with the radius integrated exactly: ``f`` evaluated on the
    unit-radius sequences scaled to :math:`r^2 = 1, 2, 3`, the coefficients solved for, and combined with
    :func:`radial_moments` (``dof`` as in :func:`radial_losses`). Returns what ``f`` returns, as a NumPy array."""
    u = data.x1 / data.x1.abs().pow(2).sum(1, keepdim=True).sqrt()
    r2 = np.array([1.0, 2.0, 3.0])
    vals = np.array([np.asarray(f(ARData(x1=u * float(np.sqrt(q)), lam=data.lam, T=data.T, theta=data.theta)))
                     for q in r2])
    coef = np.linalg.solve(r2[:, None] ** np.arange(1, 4)[None, :], vals.reshape(3, -1)).reshape(vals.shape)
    return np.tensordot(np.asarray(radial_moments(data.d if dof is None else dof, scale)), coef, axes=1)


def manifold_part(W_KQ: torch.Tensor, W_PV: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The weights kept on the diagonal manifold: the real diagonals of the red blocks (``a_j``, ``b_j``), every other
    entry zero (the model the population predictions describe)."""
    d = W_PV.shape[0]
    K, P = torch.zeros_like(W_KQ), torch.zeros_like(W_PV)
    j = torch.arange(d)
    K[d + j, j] = W_KQ[d + j, j].real.to(W_KQ.dtype)
    P[j, j] = W_PV[j, j].real.to(W_PV.dtype)
    return K, P


def weights(result, dtype=torch.complex128):
    """The final (W_KQ, W_PV) of a :class:`TrainResult` as tensors."""
    return torch.from_numpy(result.W_KQ).to(dtype), torch.from_numpy(result.W_PV).to(dtype)


def test_data(result, m: int | None = None, dtype=torch.complex128) -> ARData:
    """The test set of a run (same seed stream as in training), optionally only its first m sequences."""
    c = result.config
    data = generate(c["law"], c["m_test"], c["d"], c["T"], c["scale"], MESA_TEST_DATA.rng(c["seed"]), dtype)
    return data if m is None else data.subset(slice(0, m))


def train_data(result, dtype=torch.complex128) -> ARData:
    c = result.config
    return generate(c["law"], c["m"], c["d"], c["T"], c["scale"], MESA_TRAIN_DATA.rng(c["seed"]), dtype)


def gradient_blocks(data: ARData, a: float, b: float, weights=None) -> dict[str, np.ndarray]:
    """The loss gradient at the diagonal point W_KQ_21 = aI, W_PV_11 = bI (complex128), split by block:
    ``pv_off`` and ``kq_off`` are the off-diagonal entries of the two red blocks (complex, row-major),
    ``kq_diag`` the diagonal of the red W_KQ block and ``other`` every entry outside the red blocks.
    ``weights`` are per-sequence weights (e.g. of an exact phase grid, see ``mesa.empirical``)."""

    d = data.d
    W_KQ, W_PV = init_diagonal(d, a, b, torch.complex128)
    _, gA, gP = loss_grad_fast(data.to(torch.complex128), W_KQ, W_PV, weights=weights)
    off = ~torch.eye(d, dtype=torch.bool)
    other = torch.cat([gA[:d].reshape(-1), gA[d:, d:].reshape(-1), gP[:, d:].reshape(-1)])
    return dict(
        pv_off=gP[:, :d][off].numpy(),
        kq_off=gA[d:, :d][off].numpy(),
        kq_diag=torch.diagonal(gA[d:, :d]).numpy(),
        other=other.numpy(),
    )
