"""The one-layer linear self-attention (LSA) f(Z) = Z + W_PV Z (Z^T W_KQ Z) / n and what is built on it:
autoregressive CoT inference, the fast teacher-forced CoT loss (6), the evaluation loss (7), the no-CoT
model (k = 1) and the looped model (f applied k times, supervised at the end).

Conventions (stated in ``notebooks/cot/setup.md``):

* **no attention mask**: every column of the current matrix (data columns and all CoT tokens) is a key and
  a value; the normaliser is the fixed 1/n (n = number of examples), not the number of columns;
* CoT inference **appends the whole last output column** f(Z_i)[:, -1] as the next token (on the sparse
  parameter manifold of the theory this column is exactly (0, 0, w_hat, 1));
* the CoT loss (6) is 1/2 * sum_{i=0}^{k-1} ||f(Z_i)[:, -1] - (0, 0, w_{i+1}, 1)||^2 (whole column), averaged
  over prompts; the evaluation loss (7) is E||w_hat_k - w*||^2 with no 1/2.
"""

from __future__ import annotations

import numpy as np
import torch

from companion.params import ParameterError, integer, real

from .data import Prompts, cot_tokens, embed

__all__ = [
    "construction",
    "sparse_parameters",
    "blocks",
    "lsa",
    "teacher_forced_loss",
    "teacher_forced_loss_direct",
    "cot_inference",
    "eval_loss",
    "per_prompt_error",
    "no_cot_predict",
    "looped_predict",
    "outcome_loss",
    "no_cot_effective_matrix",
    "cot_effective_blocks",
]


def _check_params(W_KQ: torch.Tensor, W_PV: torch.Tensor, d: int, batch: int | None = None) -> None:
    """Weights are one (D, D) model, or R replicate models stacked as (R, D, D); with replicates the prompt
    batch is replicate-major (prompt b belongs to model b // (batch / R))."""
    D = 2 * d + 2
    for name, M in (("W_KQ", W_KQ), ("W_PV", W_PV)):
        if tuple(M.shape[-2:]) != (D, D) or M.dim() not in (2, 3) or tuple(M.shape) != tuple(W_KQ.shape):
            raise ParameterError(name, f"must be a {D}x{D} matrix (or R stacked ones, shape (R, {D}, {D})) for d = {d}; "
                                       f"got shape {tuple(M.shape)}")
    if batch is not None and W_KQ.dim() == 3 and batch % W_KQ.shape[0]:
        raise ParameterError("W_KQ", f"{W_KQ.shape[0]} replicate models need a prompt batch divisible by "
                                     f"{W_KQ.shape[0]}; got {batch}")


def _wT(x: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """``x @ W^T`` for one model (W of shape (D, D)) or for R replicate models (W of shape (R, D, D), the
    leading dimension of ``x`` replicate-major): each replicate's rows meet their own matrix."""
    if W.dim() == 2:
        return x @ W.T
    return (x.reshape(W.shape[0], -1, x.shape[-1]) @ W.mT).reshape(*x.shape[:-1], W.shape[-2])


def sparse_parameters(V31, W13, W24: float = -1.0, dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """(W_KQ, W_PV) with the sparse pattern of the theory: only V31 (W_PV), W13 and W24 (W_KQ) non-zero."""
    V31 = torch.as_tensor(np.asarray(V31, dtype=float), dtype=dtype)
    W13 = torch.as_tensor(np.asarray(W13, dtype=float), dtype=dtype)
    d = V31.shape[0]
    D = 2 * d + 2
    W_KQ = torch.zeros(D, D, dtype=dtype)
    W_PV = torch.zeros(D, D, dtype=dtype)
    W_KQ[:d, d + 1 : 2 * d + 1] = W13
    W_KQ[d, 2 * d + 1] = float(W24)
    W_PV[d + 1 : 2 * d + 1, :d] = V31
    return W_KQ, W_PV


def construction(d: int, eta: float, dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """Theorem 3.2: W13 = I, W24 = -1, V31 = -eta I (all other blocks 0)."""
    d = integer("d", d, min=1)
    eta = real("eta", eta, min=0, min_open=True)
    return sparse_parameters(-eta * np.eye(d), np.eye(d), -1.0, dtype)


def blocks(M, d: int) -> dict[str, np.ndarray]:
    """Named blocks of a (2d+2)x(2d+2) matrix: '11', '13', '24', '31', ... (1 = x, 2 = y, 3 = w, 4 = const)."""
    M = M.detach().cpu().numpy() if isinstance(M, torch.Tensor) else np.asarray(M)
    sl = [slice(0, d), slice(d, d + 1), slice(d + 1, 2 * d + 1), slice(2 * d + 1, 2 * d + 2)]
    return {f"{r + 1}{c + 1}": M[sl[r], sl[c]] for r in range(4) for c in range(4)}


def lsa(Z: torch.Tensor, W_KQ: torch.Tensor, W_PV: torch.Tensor, n: int) -> torch.Tensor:
    """f(Z) = Z + W_PV Z (Z^T W_KQ Z) / n for Z of shape (..., D, N) (no mask, normaliser 1/n); with R stacked
    replicate models (W of shape (R, D, D)) Z is (R * B, D, N), replicate-major."""
    if W_KQ.dim() == 2:
        return Z + W_PV @ Z @ (Z.transpose(-1, -2) @ W_KQ @ Z) / n
    Zt = Z.transpose(-1, -2)
    return Z + _wT(Zt, W_PV).transpose(-1, -2) @ (Zt @ _wT(Zt, W_KQ).transpose(-1, -2)) / n


def teacher_forced_loss(prompts: Prompts, W_traj: torch.Tensor, W_KQ: torch.Tensor, W_PV: torch.Tensor,
                        k: int | None = None) -> torch.Tensor:
    """CoT training loss (6), all k positions in one batched pass:

        1/2 * mean_b sum_{i=0}^{k-1} || f(Z_i)[:, -1] - (0, 0, w_{i+1}, 1) ||^2,

    where Z_i = [Z0, t_1, ..., t_i] holds the true tokens t_j = (0, 0, w_j, 1). With G_data = E E^T/n over the
    data columns E and u_i = W_KQ t_i, the prefix attention is  Z_i Z_i^T u_i / n = G_data u_i + sum_{j<=i}
    t_j (t_j^T u_i) / n  (a lower-triangular (k x k) product instead of k separate attentions).
    """
    X, y = prompts.X, prompts.y
    B, d, n = X.shape
    _check_params(W_KQ, W_PV, d, B)
    if k is None:
        k = W_traj.shape[1] - 1
    k = integer("k", k, min=1, max=W_traj.shape[1] - 1)
    E = torch.cat([X, y.unsqueeze(1)], dim=1)  # (B, d+1, n): the non-zero rows of the data columns
    G_xy = E @ E.transpose(1, 2) / n  # (B, d+1, d+1)
    tok = cot_tokens(W_traj[:, :k])  # t_0..t_{k-1}  (B, k, D)
    tgt = cot_tokens(W_traj[:, 1 : k + 1])
    a = tok[..., d + 1 :]  # the non-zero entries (w_i, 1) of t_i: the x, y entries of a token are zero
    U = _wT(a, W_KQ[..., d + 1 :])  # u_i = W_KQ t_i
    P = (U[..., d + 1 :] @ a.transpose(1, 2)).tril()  # P[i, j] = t_j^T u_i for j <= i
    # G_data u_i lives in the x, y rows (G_data is zero outside them), sum_j t_j (t_j^T u_i) / n in the w, 1 rows
    H = torch.cat([U[..., : d + 1] @ G_xy, P @ a / n], dim=-1)
    out = tok + _wT(H, W_PV)
    return 0.5 * ((out - tgt) ** 2).sum(dim=(1, 2)).mean()


def teacher_forced_loss_direct(prompts: Prompts, W_traj: torch.Tensor, W_KQ: torch.Tensor, W_PV: torch.Tensor,
                               k: int) -> torch.Tensor:
    """The same loss (6) straight from its definition, for checks on a few prompts: build every Z_i with its
    true tokens, apply :func:`lsa`, compare the last column with the next token (a loop per prompt and
    position; use :func:`teacher_forced_loss` for anything larger)."""
    Z0, tok = embed(prompts), cot_tokens(W_traj)
    k = integer("k", k, min=1, max=W_traj.shape[1] - 1)
    total = 0.0
    for b in range(Z0.shape[0]):
        for i in range(k):
            Zi = torch.cat([Z0[b], tok[b, 1 : i + 1].T], dim=1)
            total = total + 0.5 * ((lsa(Zi, W_KQ, W_PV, prompts.n)[:, -1] - tok[b, i + 1]) ** 2).sum()
    return total / Z0.shape[0]


def cot_inference(prompts: Prompts, W_KQ: torch.Tensor, W_PV: torch.Tensor, k: int,
                  append: str = "column") -> torch.Tensor:
    r"""Autoregressive CoT: Z_{i+1} = [Z_i, f(Z_i)[:, -1]]; returns w_hat_0 = 0, ..., w_hat_k as (B, k+1, d).

    ``append="column"`` (the book's convention) appends the whole output column; ``append="clean"``
    appends (0, 0, w_hat, 1) instead (identical on the sparse manifold).

    Only the last column of :math:`f(Z_i)` is needed, and it needs no :math:`D \times D` matrix per step: with
    the tokens :math:`t_0, \dots, t_i` after the data columns (:math:`t_0 = (0, 0, 0, 1)`) and
    :math:`u = W_{KQ} t_i`,

    .. math::

        t_{i+1} = t_i + W_{PV} h_i, \qquad
        h_i = \tfrac1n Z_i Z_i^\top u = \begin{pmatrix} G_{xy} u^{E} \\ 0 \end{pmatrix}
              + \tfrac1n \sum_{j \le i} t_j\,(t_j^\top u),

    with :math:`G_{xy} = E E^\top / n` the data rows' Gram matrix (the data columns have no
    :math:`\mathcal T` part). Computed in NumPy (float64): the products with the weights per replicate, the
    rest as batched contractions over the prompts. ``tests/cot/test_model.py`` compares it with the definition
    (the whole LSA recomputed at every step); ``benchmarks/bench_cot.py`` times it against the torch version,
    :func:`companion.cot.reference.torch_cot_inference`."""
    k = integer("k", k, min=0)
    if append not in ("column", "clean"):
        raise ParameterError("append", f"must be 'column' or 'clean'; got {append!r}")
    B, d, n = prompts.X.shape
    _check_params(W_KQ, W_PV, d, B)
    X = prompts.X.detach().numpy()
    y = prompts.y.detach().numpy()
    D, m = 2 * d + 2, d + 1
    KT = W_KQ.detach().numpy().reshape(-1, D, D).transpose(0, 2, 1)  # (R, D, D): W_KQ^T of each replicate
    VT = W_PV.detach().numpy().reshape(-1, D, D).transpose(0, 2, 1)
    R = KT.shape[0]
    E = np.concatenate([X, y[:, None, :]], axis=1)  # (B, d+1, n): the non-zero rows of the data columns
    G_xy = np.matmul(E, E.transpose(0, 2, 1)) / n  # (B, d+1, d+1)
    tok = np.zeros((k + 1, B, D))  # position-major, each position's tokens contiguous
    tok[0, :, 2 * d + 1] = 1.0
    u, h = np.empty((B, D)), np.empty((B, D))
    for i in range(k):
        np.matmul(tok[i].reshape(R, -1, D), KT, out=u.reshape(R, -1, D))  # u = W_KQ t_i, replicate-major
        prev = tok[: i + 1]
        np.einsum("jbd,jb->bd", prev, np.einsum("jbd,bd->jb", prev, u), out=h)  # sum_j t_j (t_j . u)
        h /= n
        h[:, :m] += np.einsum("bij,bj->bi", G_xy, u[:, :m])
        nxt = tok[i + 1]
        np.matmul(h.reshape(R, -1, D), VT, out=nxt.reshape(R, -1, D))
        nxt += tok[i]
        if append == "clean":
            w = nxt[:, d + 1 : 2 * d + 1].copy()
            nxt[:] = 0.0
            nxt[:, d + 1 : 2 * d + 1] = w
            nxt[:, 2 * d + 1] = 1.0
    return torch.from_numpy(np.ascontiguousarray(tok[:, :, d + 1 : 2 * d + 1].transpose(1, 0, 2)))


def per_prompt_error(w_hat: torch.Tensor, prompts: Prompts) -> torch.Tensor:
    """||w_hat - w*||^2 per prompt (no 1/2)."""
    return ((w_hat - prompts.w_star) ** 2).sum(dim=-1)


def eval_loss(prompts: Prompts, W_KQ, W_PV, k: int) -> torch.Tensor:
    """Evaluation loss (7): mean over prompts of ||w_hat_k - w*||^2, w_hat_k from autoregressive CoT."""
    return per_prompt_error(cot_inference(prompts, W_KQ, W_PV, k)[:, -1], prompts).mean()


def no_cot_predict(prompts: Prompts, W_KQ, W_PV) -> torch.Tensor:
    """No-CoT model: the w-block of f(Z0)[:, -1] (= CoT inference with k = 1)."""
    return cot_inference(prompts, W_KQ, W_PV, 1)[:, 1]


def looped_predict(prompts: Prompts, W_KQ, W_PV, k: int) -> torch.Tensor:
    """Looped model: Z^{(t+1)} = f(Z^{(t)}) for t < k from Z^{(0)} = Z0; the w-block of the last column."""
    k = integer("k", k, min=1)
    d, n = prompts.d, prompts.n
    _check_params(W_KQ, W_PV, d, prompts.X.shape[0])
    Z = embed(prompts)
    for _ in range(k):
        Z = lsa(Z, W_KQ, W_PV, n)
    return Z[:, d + 1 : 2 * d + 1, -1]


def _final_column(prompts: Prompts, W_KQ, W_PV, k: int, objective: str) -> torch.Tensor:
    n = prompts.n
    if objective == "no_cot":
        Z0 = embed(prompts)
        z = Z0[:, :, -1]
        G = Z0 @ Z0.transpose(1, 2) / n
        return z + _wT(torch.einsum("bij,bj->bi", G, _wT(z, W_KQ)), W_PV)
    Z = embed(prompts)
    for _ in range(k):
        Z = lsa(Z, W_KQ, W_PV, n)
    return Z[:, :, -1]


def outcome_loss(prompts: Prompts, W_KQ, W_PV, k: int, objective: str) -> torch.Tensor:
    """Outcome-supervised training loss 1/2 * mean_b ||final column - (0, 0, w*, 1)||^2 for the no-CoT model
    (``objective="no_cot"``, one layer) or the looped model (``"looped"``, f applied k times)."""
    if objective not in ("no_cot", "looped"):
        raise ParameterError("objective", f"must be 'no_cot' or 'looped'; got {objective!r}")
    col = _final_column(prompts, W_KQ, W_PV, k, objective)
    tgt = cot_tokens(prompts.w_star[:, None, :])[:, 0]
    return 0.5 * ((col - tgt) ** 2).sum(dim=1).mean()


def no_cot_effective_matrix(W_KQ, W_PV, d: int) -> np.ndarray:
    """The matrix A of the odd part w_hat = A S w* of a no-CoT LSA (w_0 = 0): A = W24 V31 + V32 W14^T."""
    bk, bp = blocks(W_KQ, d), blocks(W_PV, d)
    return bk["24"][0, 0] * bp["31"] + bp["32"] @ bk["14"].T


def cot_effective_blocks(W_KQ, W_PV, d: int) -> dict[str, np.ndarray]:
    """Rescaling-invariant products of a trained CoT model: V31 W13 (-> -eta I) and V31 W24 (-> +eta I)."""
    bk, bp = blocks(W_KQ, d), blocks(W_PV, d)
    return {"V31W13": bp["31"] @ bk["13"], "V31W24": bp["31"] * bk["24"][0, 0]}
