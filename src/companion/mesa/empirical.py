"""The finite-sample loss restricted to the diagonal red-block manifold, and the sampling error of GD.

On W_KQ21 = diag(a), W_PV11 = diag(b) (everything else 0) the model is
``yhat_{t,j} = b_j sum_k a_k F_{t,jk}`` with ``F_{t,jk} = (1/(t-1)) sum_{i<t} x_{i+1,j} conj(x_{i,k}) x_{t,k}``,
so the empirical loss is exactly

    L(a, b) = 1/2 sum_j [ b_j^2 a^T Q_j a - 2 b_j a^T P_j ] + const,
    Q_{j,kl} = (1/m) sum_{n,t} Re F_{t,jk} conj(F_{t,jl}),   P_{j,k} = (1/m) sum_{n,t} Re conj(F_{t,jk}) x_{t+1,j}.

GD on (a, b) with these statistics is the finite-sample counterpart of the population reduced GD
(:func:`companion.mesa.theory.reduced_gd`). Splitting the training set into batches and rerunning the
restricted GD with one batch left out at a time (jackknife) gives the sampling standard error of a*b at any
epoch, which is the noise scale used to compare a finite-sample run with the population prediction.
Statistics are homogeneous in the data: Q scales like scale^6 and P like scale^4.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from companion import params, stats
from companion.mesa.data import ARData

__all__ = ["diagonal_stats", "diagonal_gd", "sampling_spread", "jackknife_ab", "exact_population"]


def _F(data: ARData) -> tuple[torch.Tensor, torch.Tensor]:
    x = data.tokens().to(torch.complex128)  # (m, T, d)
    outer = x[:, 1:, :, None] * x[:, :-1, None, :].conj()  # x_{i+1} x_i^H, i = 1..T-1
    cs = torch.cumsum(outer, dim=1)[:, : data.T - 2]  # index t-2: sum_{i<t}, t = 2..T-1
    t = torch.arange(2, data.T, dtype=torch.float64)
    F = cs * (x[:, 1 : data.T - 1, None, :] / (t - 1)[None, :, None, None])  # (m, N, d, d)
    return F, x[:, 2:]


def diagonal_stats(data: ARData, n_batches: int = 1, chunk: int = 500):
    """(Q, P) summed per batch: arrays (n_batches, d, d, d) and (n_batches, d, d) of batch means (for a tilted set,
    :func:`companion.mesa.data.generate`, of the importance-weighted per-sequence statistics, divided by the batch's
    number of sequences: unbiased, as the set's loss is)."""
    n_batches = params.integer("n_batches", n_batches, min=1, max=data.m)
    d = data.d
    bounds = np.linspace(0, data.m, n_batches + 1).astype(int)
    Q = np.zeros((n_batches, d, d, d))
    Pm = np.zeros((n_batches, d, d))
    for b in range(n_batches):
        for i in range(bounds[b], bounds[b + 1], chunk):
            sub = data.subset(slice(i, min(i + chunk, bounds[b + 1])))
            F, y = _F(sub)
            if sub.w is not None:
                F, y = _weighted(F, sub.w), _weighted(y, sub.w)
            Q[b] += torch.einsum("ntjk,ntjl->jkl", F, F.conj()).real.numpy()
            Pm[b] += torch.einsum("ntjk,ntj->jk", F.conj(), y).real.numpy()
        Q[b] /= bounds[b + 1] - bounds[b]
        Pm[b] /= bounds[b + 1] - bounds[b]
    return Q, Pm


def _weighted(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x (n, ...) times sqrt(w_n): both factors of a product of two so weighted carry w_n once."""
    return x * torch.sqrt(w).to(x.dtype).reshape((-1,) + (1,) * (x.dim() - 1))


def diagonal_gd(a0, b0, lr: float, epochs: int, Q: np.ndarray, P: np.ndarray, return_ab: bool = False):
    """GD on the empirical loss restricted to diagonal red blocks; returns mean_j a_j b_j per epoch.

    ``a0``, ``b0``: scalars or per-coordinate vectors. Accepts a leading batch axis on (Q, P) and returns
    (batches, epochs+1) in that case. With ``return_ab`` also the final per-coordinate (a, b)."""
    Q = np.asarray(Q, dtype=float)
    P = np.asarray(P, dtype=float)
    single = Q.ndim == 3
    if single:
        Q, P = Q[None], P[None]
    B, d = Q.shape[0], Q.shape[1]
    a = np.broadcast_to(np.asarray(a0, dtype=float), (B, d)).copy()
    b = np.broadcast_to(np.asarray(b0, dtype=float), (B, d)).copy()
    out = np.empty((B, epochs + 1))
    out[:, 0] = (a * b).mean(1)
    for k in range(epochs):
        Qa = np.einsum("bjkl,bl->bjk", Q, a)  # (B, j, k)
        aQa = np.einsum("bk,bjk->bj", a, Qa)
        aP = np.einsum("bk,bjk->bj", a, P)
        ga = np.einsum("bj,bjk->bk", b**2, Qa) - np.einsum("bj,bjk->bk", b, P)
        gb = b * aQa - aP
        a, b = a - lr * ga, b - lr * gb
        out[:, k + 1] = (a * b).mean(1)
    if return_ab:
        return (out[0], a[0], b[0]) if single else (out, a, b)
    return out[0] if single else out


def sampling_spread(data: ARData, a0: float, b0: float, lr: float, epochs: int, scale: float = 1.0,
                    n_batches: int = 20, batch_stats=None):
    """Finite-sample restricted GD on the whole set and its sampling standard error at every epoch.

    The standard error is the delete-one-batch jackknife: the restricted GD is rerun on the statistics of the
    training set without batch g (g = 1..G), and se^2 = (G-1)/G sum_g (ab_(-g) - mean)^2. Each jackknife
    replicate uses (G-1)/G of the data, so the nonlinearity of ab in the heavy-tailed empirical moments does
    not inflate the estimate (as it would with the spread of single small batches).
    ``data`` may be the scale-1 draw and ``scale`` the factor (Q ~ scale^6, P ~ scale^4); ``batch_stats``: the
    batch statistics of :func:`diagonal_stats` (else computed from ``data``).
    Returns (ab_full (epochs+1,), se (epochs+1,))."""
    if batch_stats is None:
        batch_stats = diagonal_stats(data, n_batches)
    Qb, Pb = batch_stats
    Qb = Qb * scale**6
    Pb = Pb * scale**4
    G = len(Qb)
    full = diagonal_gd(a0, b0, lr, epochs, Qb.mean(0), Pb.mean(0))
    Q_loo = (Qb.sum(0)[None] - Qb) / (G - 1)
    P_loo = (Pb.sum(0)[None] - Pb) / (G - 1)
    per = diagonal_gd(a0, b0, lr, epochs, Q_loo, P_loo)
    _, se = stats.jackknife_se(full, per, axis=0)
    return full, np.asarray(se)


def jackknife_ab(a0, b0, lr: float, epochs: int, batch_stats, scale: float = 1.0):
    """Delete-one-batch jackknife of the final per-coordinate (a, b) and a*b of the restricted GD.
    Returns dict with the full-data values and their standard errors (arrays over coordinates), and ``dof``,
    the G - 1 degrees of freedom of the jackknife."""
    Qb, Pb = batch_stats
    Qb = Qb * scale**6
    Pb = Pb * scale**4
    G = len(Qb)
    _, a_f, b_f = diagonal_gd(a0, b0, lr, epochs, Qb.mean(0), Pb.mean(0), return_ab=True)
    _, a_l, b_l = diagonal_gd(a0, b0, lr, epochs, (Qb.sum(0)[None] - Qb) / (G - 1), (Pb.sum(0)[None] - Pb) / (G - 1),
                              return_ab=True)
    def jk(v):
        return np.asarray(stats.jackknife_se(v.mean(0), v, axis=0)[1])

    return dict(a=a_f, b=b_f, ab=a_f * b_f, se_a=jk(a_l), se_b=jk(b_l), se_ab=jk(a_l * b_l),
                se_a_mean=jk(a_l.mean(1)), se_b_mean=jk(b_l.mean(1)), dof=G - 1)


def exact_population(law: str, d: int, T: int, scale: float = 1.0, gh_nodes: int = 7):
    """A weighted data set whose weighted mean is the exact population expectation.

    Phases on the grid 2 pi l / G with G = 6(T-2)+1: every per-sequence loss and gradient is a
    trigonometric polynomial with frequencies at most 6(T-2) per coordinate, so the grid average is exact.
    x_1 is averaged over its atoms (sparse, Rademacher, full-one) or a ``gh_nodes``-point Gauss-Hermite rule
    per coordinate (Gaussian; exact for polynomials of degree <= 2 gh_nodes - 1 per coordinate: 7 nodes cover
    the degree-12 squared gradients, 4 nodes the degree-6 losses and gradients).
    Returns (ARData in complex128, weights). Size G^d x atoms: keep d and T small."""

    d = params.integer("d", d, min=1, max=4)
    T = params.integer("T", T, min=3, max=12)
    G = 6 * (T - 2) + 1
    grid = 2 * np.pi * np.arange(G) / G
    thetas = np.array(list(itertools.product(grid, repeat=d)))
    if law == "full_one":
        atoms, w = np.ones((1, d)), np.ones(1)
    elif law == "sparse":
        atoms, w = np.concatenate([np.eye(d), -np.eye(d)]), np.ones(2 * d)
    elif law == "rademacher":
        atoms = np.array(list(itertools.product([-1.0, 1.0], repeat=d)))
        w = np.ones(len(atoms))
    elif law == "gaussian":
        nodes, wts = np.polynomial.hermite_e.hermegauss(params.integer("gh_nodes", gh_nodes, min=1, max=12))
        atoms = np.array(list(itertools.product(nodes, repeat=d)))
        w = np.prod(np.array(list(itertools.product(wts, repeat=d))), axis=1)
    else:
        raise params.ParameterError("law", f"exact population needs one of gaussian, sparse, full_one, rademacher; got {law!r}")
    atoms = scale * atoms
    th_all = np.repeat(thetas, len(atoms), axis=0)
    x1 = np.tile(atoms, (len(thetas), 1))
    weights = torch.from_numpy(np.tile(w, len(thetas)))
    data = ARData(torch.from_numpy(x1.astype(complex)), torch.from_numpy(np.exp(1j * th_all)), T, th_all)
    return data, weights
