"""Evaluation helpers for the notebooks: per-entry ratios, per-sequence losses (for standard errors),
trained weights as tensors. Kept out of the modules a training run depends on, so editing them never
invalidates the run cache."""

from __future__ import annotations

import numpy as np
import torch

from companion.mesa.data import ARData, generate
from companion.mesa.model import loss_grad_fast, per_sequence_loss, predict, ratio_entries  # noqa: F401 (re-exported)

__all__ = ["weights", "ratio_entries", "per_sequence_loss", "test_data", "train_data", "mean_se", "gradient_blocks"]


def weights(result, dtype=torch.complex128):
    """The final (W_KQ, W_PV) of a :class:`TrainResult` as tensors."""
    return torch.from_numpy(result.W_KQ).to(dtype), torch.from_numpy(result.W_PV).to(dtype)


def test_data(result, m: int | None = None, dtype=torch.complex128) -> ARData:
    """The test set of a run (same seed stream as in training), optionally only its first m sequences."""
    c = result.config
    data = generate(c["law"], c["m_test"], c["d"], c["T"], c["scale"], np.random.default_rng([c["seed"], 1]), dtype)
    return data if m is None else data.subset(slice(0, m))


def train_data(result, dtype=torch.complex128) -> ARData:
    c = result.config
    return generate(c["law"], c["m"], c["d"], c["T"], c["scale"], np.random.default_rng([c["seed"], 0]), dtype)


def mean_se(v) -> tuple[float, float]:
    v = np.asarray(v, dtype=float)
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(len(v)))


def check_ab(v, name: str, what: str, gd: float, restricted: float, pop: float, se: float, d: int, m: int) -> None:
    """Two verdict claims for a finite-sample value of a*b (or of a, b) against the population GD.

    * ``<name>_sampling``: the finite-sample GD *restricted to the diagonal manifold* (same data, exact
      empirical statistics) against the population GD: the difference is pure sampling error, tested at
      4 jackknife standard errors (+ 2e-5 relative float32 round-off of the runs).
    * ``<name>_leak``: the full-parameter GD against that restricted GD: the difference is the feedback of
      the 6 d^2 off-manifold parameters, zero in population and a finite-sample effect of relative order
      p/m (p = 6 d^2 free real parameters fitted to m sequences); tested at p/m relative.
    """
    v.check(f"{name}_sampling", quantity=f"{what}: diagonal-restricted finite-sample GD vs population GD",
            predicted=pop, measured=restricted, tolerance=4 * se + 2e-5 * abs(pop), comparison="abs",
            reason="4 sampling standard errors (delete-one-batch jackknife of the restricted GD) + float32 round-off")
    p = 6 * d * d
    v.check(f"{name}_leak", quantity=f"{what}: full-parameter GD vs diagonal-restricted GD on the same data",
            predicted=restricted, measured=gd, tolerance=2 * p / m * abs(restricted) + 2e-5 * abs(restricted), comparison="abs",
            reason=f"off-manifold feedback: zero in population, relative order p/m (p = 6d^2 = {p} parameters, m = {m}); "
                   "2 p/m allows an O(1) constant up to 2")


def diag_projection(result, dtype=torch.complex128):
    """The trained weights projected on the diagonal red-block manifold: (W_KQ, W_PV) with only the real
    diagonals of the two red blocks kept. Returns (W_KQ, W_PV, a, b)."""
    d = result.W_PV.shape[0]
    a = np.diag(result.W_KQ[d:, :d].real).copy()
    b = np.diag(result.W_PV[:, :d].real).copy()
    W_KQ = torch.zeros(2 * d, 2 * d, dtype=dtype)
    W_PV = torch.zeros(d, 2 * d, dtype=dtype)
    W_KQ[d:, :d] = torch.diag(torch.from_numpy(a).to(dtype))
    W_PV[:, :d] = torch.diag(torch.from_numpy(b).to(dtype))
    return W_KQ, W_PV, a, b


def diag_population_loss(law: str, scale: float, T: int, a, b) -> float:
    """Population AR loss at a diagonal red-block point with per-coordinate (a_j, b_j) (spec §4.1):
    1/2 sum_j [ N b_j^2 a_j^2 m6 + H b_j^2 sum_{k != j} a_k^2 m24 - 2 N a_j b_j m4 + N m2 ]."""
    from companion.mesa import theory as th

    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    d = len(a)
    mo = th.moments(law, scale, d)
    N = T - 2
    H = th.harmonic(N)
    cross = (a**2).sum() - a**2
    return float(0.5 * np.sum(N * b**2 * a**2 * mo.m6 + H * b**2 * cross * mo.m24 - 2 * N * a * b * mo.m4 + N * mo.m2))


def gradient_blocks(data: ARData, a: float, b: float, weights=None) -> dict[str, np.ndarray]:
    """The loss gradient at the diagonal point W_KQ_21 = aI, W_PV_11 = bI (complex128), split by block:
    ``pv_off`` and ``kq_off`` are the off-diagonal entries of the two red blocks (complex, row-major),
    ``kq_diag`` the diagonal of the red W_KQ block and ``other`` every entry outside the red blocks.
    ``weights`` are per-sequence weights (e.g. of an exact phase grid, see ``mesa.empirical``)."""
    from companion.mesa.train import init_diagonal

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
