"""Evaluation helpers for the checks: per-entry ratios, per-sequence losses (standard errors come from
:mod:`companion.stats`), trained weights as tensors, gradients split by block. Kept out of the modules a training run depends on, so editing them never
invalidates the run cache."""

from __future__ import annotations

import numpy as np
import torch

from companion.mesa.data import ARData, generate
from companion.mesa.model import loss_grad_fast, per_sequence_loss, predict, ratio_entries  # noqa: F401 (re-exported)
from companion.mesa.train import init_diagonal
from companion.seeds import MESA_TEST_DATA, MESA_TRAIN_DATA

__all__ = ["weights", "ratio_entries", "per_sequence_loss", "test_data", "train_data", "gradient_blocks"]


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
