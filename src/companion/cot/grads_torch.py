r"""The closed-form gradients of :mod:`companion.cot.grads` in torch operations, on any torch device (a GPU).

Same mathematics, same conventions, same return values as :func:`companion.cot.grads.cot_step_grads` and
:func:`~companion.cot.grads.outcome_loss_grads` (the module docstring of :mod:`companion.cot.grads` derives every
formula); no autograd. The NumPy versions stay the CPU path (faster there at these sizes); these run where the
weights and prompts live, so :func:`companion.cot.train.train_full` with ``device="cuda"`` keeps every step on the
GPU. The tests compare both on the CPU (``"cpu:0"``) at float64, relative 1e-10.

Shapes: B prompts, R replicate models (B divisible by R, replicate-major), D = 2d + 2, m = d + 1 (the
:math:`\mathcal E` rows x, y come first, the :math:`\mathcal T` rows w, 1 after them), k positions or loops."""

from __future__ import annotations

import torch

from companion.params import ParameterError, integer

from .data import Prompts, embed
from .grads import _looped_backprop
from .model import _check_params

__all__ = ["cot_step_grads", "outcome_loss_grads"]


def _stacked(W: torch.Tensor) -> torch.Tensor:
    return W[None] if W.dim() == 2 else W


def _shaped(loss, g_KQ, g_PV, W: torch.Tensor):
    """``(loss, grad_W_KQ, grad_W_PV)`` shaped like the weights ``W`` (one model or R stacked ones)."""
    return (loss, g_KQ[0], g_PV[0]) if W.dim() == 2 else (loss, g_KQ, g_PV)


def _gram_xy(S: torch.Tensor, w_star: torch.Tensor) -> torch.Tensor:
    r""":math:`G_{xy} = \begin{pmatrix} S & S w^\star \\ w^{\star\top} S & w^{\star\top} S w^\star \end{pmatrix}`,
    (B, d+1, d+1)."""
    Sw = torch.einsum("bij,bj->bi", S, w_star)
    top = torch.cat([S, Sw[..., None]], dim=-1)
    bottom = torch.cat([Sw, (w_star * Sw).sum(-1, keepdim=True)], dim=-1)[:, None]
    return torch.cat([top, bottom], dim=1)


def _column(A: torch.Tensor, delta: torch.Tensor, G: torch.Tensor, K: torch.Tensor, V: torch.Tensor, n: int):
    r"""Loss and gradients (R, D, D) of :math:`\frac1B \sum_b \sum_i \tfrac12 \|t_i + W_{PV} G_i W_{KQ} t_i -
    \tau_i\|^2` (:func:`companion.cot.grads._column`): ``A`` (B, k, m) the token parts :math:`a_i`, ``delta``
    (B, k, m) :math:`a_i - a_i^{\rm tgt}`, ``G`` (B, m, m) the data Gram matrices, ``K``, ``V`` (R, D, D)."""
    B, k, m = A.shape
    R, D = K.shape[0], 2 * m

    def rows(a):  # (B, k, p) -> (R, B k / R, p): each replicate's rows
        return a.reshape(R, -1, a.shape[-1])

    At = A.transpose(1, 2)
    mask = torch.tril(torch.ones(k, k, dtype=A.dtype, device=A.device)) / n  # j <= i, with 1/n

    def gram(v):  # G_i v_i for every position: (G_xy v^E, sum_{j<=i} a_j (a_j^T v^T) / n)
        return torch.cat([v[..., :m] @ G, ((v[..., m:] @ At) * mask) @ A], dim=-1)

    U = (rows(A) @ K[:, :, m:].transpose(1, 2)).reshape(B, k, D)  # u_i = W_KQ t_i  (t_i^E = 0)
    H = gram(U)  # h_i = G_i u_i
    r = (rows(H) @ V.transpose(1, 2)).reshape(B, k, D)  # r_i = W_PV h_i + t_i - tau_i
    r[..., m:] += delta
    loss = 0.5 * (r * r).sum() / B
    q = gram((rows(r) @ V).reshape(B, k, D))  # q_i = G_i W_PV^T r_i
    g_PV = rows(r).transpose(1, 2) @ rows(H) / B  # sum_i r_i h_i^T
    g_KQ = torch.zeros_like(K)
    g_KQ[:, :, m:] = rows(q).transpose(1, 2) @ rows(A) / B  # sum_i q_i t_i^T
    return loss, g_KQ, g_PV


def cot_step_grads(prompts: Prompts, eta: float, k: int, W_KQ: torch.Tensor, W_PV: torch.Tensor):
    r"""One training step's CoT loss (6) on the GD trajectory :math:`w_{i+1} = w_i - \eta S (w_i - w^\star)` from
    :math:`w_0 = 0` and its gradients, on the device of the tensors (:func:`companion.cot.grads.cot_step_grads`).
    Returns ``(loss, grad_W_KQ, grad_W_PV)``, the loss a 0-dim tensor."""
    B, d, n = prompts.X.shape
    _check_params(W_KQ, W_PV, d, B)
    X, w_star = prompts.X, prompts.w_star
    S = X @ X.transpose(1, 2) / n
    e, parts, steps = -w_star, [], []
    for _ in range(k):  # e_i = w_i - w*: a_i = (w* + e_i, 1), a_i - a_{i+1} = (eta S e_i, 0)
        step = eta * torch.einsum("bij,bj->bi", S, e)
        parts.append(w_star + e)
        steps.append(step)
        e = e - step
    ones, zeros = torch.ones_like(w_star[:, :1]), torch.zeros_like(w_star[:, :1])
    A = torch.stack([torch.cat([a, ones], -1) for a in parts], dim=1)
    delta = torch.stack([torch.cat([s, zeros], -1) for s in steps], dim=1)
    return _shaped(*_column(A, delta, _gram_xy(S, w_star), _stacked(W_KQ), _stacked(W_PV), n), W_KQ)


def outcome_loss_grads(prompts: Prompts, W_KQ: torch.Tensor, W_PV: torch.Tensor, k: int, objective: str):
    r"""The outcome-supervised loss of the no-CoT (``"no_cot"``) or looped (``"looped"``) model and its
    gradients, on the device of the tensors (:func:`companion.cot.grads.outcome_loss_grads`)."""
    if objective not in ("no_cot", "looped"):
        raise ParameterError("objective", f"must be 'no_cot' or 'looped'; got {objective!r}")
    B, d, n = prompts.X.shape
    _check_params(W_KQ, W_PV, d, B)
    K, V = _stacked(W_KQ), _stacked(W_PV)
    if objective == "no_cot":
        # the case k = 1 of the CoT column: t_0 = e_D (a_0 = (0, 1)), target tau = (0, 0, w*, 1)
        S = prompts.X @ prompts.X.transpose(1, 2) / n
        ones = torch.ones_like(prompts.w_star[:, :1])
        A = torch.cat([torch.zeros_like(prompts.w_star), ones], -1)[:, None]
        delta = torch.cat([-prompts.w_star, 0 * ones], -1)[:, None]
        return _shaped(*_column(A, delta, _gram_xy(S, prompts.w_star), K, V, n), W_KQ)
    k = integer("k", k, min=1)
    return _shaped(*_looped(embed(prompts).transpose(1, 2), prompts.w_star, K, V, k, n), W_KQ)


def _looped(X: torch.Tensor, w_star: torch.Tensor, K: torch.Tensor, V: torch.Tensor, k: int, n: int):
    r"""Loss and gradients of the looped model by the backpropagation of :func:`companion.cot.grads._looped` (the
    same code, :func:`companion.cot.grads._looped_backprop`, here on tensors), on the prompts' columns as rows
    ``X`` = :math:`Z^{(0)\top}` (B, N, D)."""
    D = X.shape[-1]
    R = K.shape[0]

    def times(a, W):  # every row of a times W (R, D, D) of its replicate: (B, p, D)
        return (a.reshape(R, -1, D) @ W).reshape(a.shape)

    def summed(a, b):  # sum over each replicate's rows of a_j b_j^T: (R, D, D)
        return a.reshape(R, -1, D).transpose(1, 2) @ b.reshape(R, -1, D)

    a_tgt = torch.cat([w_star, torch.ones_like(w_star[:, :1])], -1)  # (w*, 1)
    return _looped_backprop(X, a_tgt, K, V, k, n, times, summed, lambda r: (r * r).sum())
