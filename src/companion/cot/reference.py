"""The autograd path of cot training, kept as the tests' reference (not used by the book).

:func:`train_full_autograd` and :func:`train_looped_isotropic_autograd` run the training loops of
:mod:`companion.cot.train` with the gradients of torch autograd on the losses of :mod:`companion.cot.model`
and the optimisers of ``torch.optim`` (``Adam`` / ``SGD``, ``ExponentialLR``, ``clip_grad_norm_``): an
implementation independent of the closed-form gradients (:mod:`companion.cot.grads`) and the written-out optimiser
that :mod:`companion.cot.train` uses, against which the tests check them. Importing ``torch.optim``'s optimisers imports ``torch._dynamo`` (about 1 s).

:func:`torch_cot_inference` is the torch implementation of :func:`companion.cot.model.cot_inference` (prefix
products per step), against which the tests check the NumPy one and ``benchmarks/bench_cot.py`` times it.

:func:`naive_teacher_forced_loss` is the deliberately naive per-position loss (one prompt and one position at a
time) that ``tests/cot/test_model.py`` compares the fast loss with and ``benchmarks/bench_cot.py`` times.
"""

from __future__ import annotations

import inspect

import torch

from . import train
from .data import gd_trajectory
from .model import _check_params, _wT, outcome_loss, teacher_forced_loss

__all__ = ["autograd_full", "autograd_isotropic", "TorchOptimizer", "AUTOGRAD", "train_full_autograd",
           "train_looped_isotropic_autograd", "naive_teacher_forced_loss", "torch_cot_inference"]


def autograd_full(objective: str, prompts, eta: float, W_KQ: torch.Tensor, W_PV: torch.Tensor, k: int):
    """``(loss, grad_W_KQ, grad_W_PV)`` of the training loss of ``objective`` by autograd (CoT: on the GD
    trajectory of step ``eta`` of :func:`~companion.cot.data.gd_trajectory`)."""
    A = W_KQ.detach().requires_grad_()
    B = W_PV.detach().requires_grad_()
    with torch.enable_grad():
        if objective == "cot":
            loss = teacher_forced_loss(prompts, gd_trajectory(prompts, eta, k), A, B, k)
        else:
            loss = outcome_loss(prompts, A, B, k, objective)
        g_KQ, g_PV = torch.autograd.grad(loss, [A, B])
    return loss.detach(), g_KQ, g_PV


def autograd_isotropic(S: torch.Tensor, w_star: torch.Tensor, v: torch.Tensor, w: torch.Tensor, k: int):
    """``(loss, grad_v, grad_w)`` of the isotropic looped loss (replicates' means summed) by autograd."""
    v = v.detach().requires_grad_()
    w = w.detach().requires_grad_()
    with torch.enable_grad():
        w_hat = torch.zeros_like(w_star)
        for _ in range(k):
            w_hat = w_hat + v[:, None, None] * torch.einsum("rbij,rbj->rbi", S, w[:, None, None] * w_hat - w_star)
        loss = 0.5 * ((w_hat - w_star) ** 2).sum(-1).mean(1).sum()
        g_v, g_w = torch.autograd.grad(loss, [v, w])
    return loss.detach(), g_v, g_w


class TorchOptimizer:
    """``torch.optim.Adam`` (or ``SGD``) with ``ExponentialLR`` and optional ``clip_grad_norm_``, behind the
    ``step(grads)`` interface of :class:`companion.cot.train.Optimizer`."""

    def __init__(self, params: list, kind: str, lr: float, gamma: float = 1.0, clip: float | None = None):
        self.params, self.clip = params, clip
        self.opt = torch.optim.Adam(params, lr=lr) if kind == "adam" else torch.optim.SGD(params, lr=lr)
        self.sched = torch.optim.lr_scheduler.ExponentialLR(self.opt, gamma)

    def step(self, grads: list) -> None:
        for p, g in zip(self.params, grads):
            p.grad = g
        if self.clip is not None:
            torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.opt.step()
        self.sched.step()


AUTOGRAD = train._Engine(autograd_full, autograd_isotropic, TorchOptimizer)


def train_full_autograd(*args, **kwargs) -> train.TrainResult:
    """:func:`companion.cot.train.train_full` (same arguments) on the autograd + ``torch.optim`` path."""
    bound = inspect.signature(train.train_full).bind(*args, **kwargs)
    bound.apply_defaults()
    return train._train_full_checked(AUTOGRAD, **bound.arguments)


def train_looped_isotropic_autograd(*args, **kwargs):
    """:func:`companion.cot.train.train_looped_isotropic` (same arguments) on the autograd + ``torch.optim``
    path."""
    bound = inspect.signature(train.train_looped_isotropic).bind(*args, **kwargs)
    bound.apply_defaults()
    return train._train_looped_isotropic(AUTOGRAD, **bound.arguments)


# ------------------------------------------------- the naive teacher-forced loss (tests and benchmarks)
def naive_teacher_forced_loss(X, w_star, eta, k, W_KQ, W_PV):
    """Deliberately naive: one prompt and one position at a time; builds every prefix matrix Z_i with
    explicit Python loops, runs the GD recursion in its original form w - (eta/n) X (X^T w - y^T), applies
    the full LSA f(Z) = Z + W_PV Z (Z^T W_KQ Z)/n to the whole Z_i and takes the last column.
    Convention: 1/2 * sum_{i=0}^{k-1} ||f(Z_i)[:, -1] - (0, 0, w_{i+1}, 1)||^2, averaged over prompts."""
    B, d, n = X.shape
    D = 2 * d + 2
    total = 0.0
    for b in range(B):
        Xb, wb = X[b], w_star[b]
        y = wb @ Xb  # (n,)
        traj = [torch.zeros(d, dtype=X.dtype)]
        for _ in range(k):
            w = traj[-1]
            traj.append(w - (eta / n) * (Xb @ (Xb.T @ w - y)))
        cols = []
        for m in range(n):
            c = torch.zeros(D, dtype=X.dtype)
            c[:d] = Xb[:, m]
            c[d] = y[m]
            cols.append(c)

        def token(w):
            t = torch.zeros(D, dtype=X.dtype)
            t[d + 1 : 2 * d + 1] = w
            t[2 * d + 1] = 1.0
            return t

        for i in range(k):
            Zi = torch.stack(cols + [token(traj[j]) for j in range(i + 1)], dim=1)
            F = Zi + W_PV @ Zi @ (Zi.T @ W_KQ @ Zi) / n
            total = total + 0.5 * torch.sum((F[:, -1] - token(traj[i + 1])) ** 2)
    return total / B


def torch_cot_inference(prompts, W_KQ: torch.Tensor, W_PV: torch.Tensor, k: int) -> torch.Tensor:
    r"""Autoregressive CoT as :func:`companion.cot.model.cot_inference` (``append="column"``), in torch: at step i,
    :math:`h = G_{xy} u^E + \frac1n \sum_{j \le i} t_j (t_j^\top u)` with batched products over the prefix of tokens."""
    X, y = prompts.X, prompts.y
    B, d, n = X.shape
    _check_params(W_KQ, W_PV, d, B)
    ws, D = slice(d + 1, 2 * d + 1), 2 * d + 2
    E = torch.cat([X, y.unsqueeze(1)], dim=1)
    G_xy = E @ E.transpose(1, 2) / n
    tok = X.new_zeros(B, k + 1, D)
    tok[:, 0, 2 * d + 1] = 1.0
    out = [tok[:, 0, ws]]
    for i in range(k):
        t = tok[:, i]
        u = _wT(t, W_KQ)
        prev = tok[:, : i + 1]
        h = (prev.transpose(1, 2) @ (prev @ u.unsqueeze(-1))).squeeze(-1) / n
        h[:, : d + 1] += (G_xy @ u[:, : d + 1].unsqueeze(-1)).squeeze(-1)
        tok[:, i + 1] = t + _wT(h, W_PV)
        out.append(tok[:, i + 1, ws])
    return torch.stack(out, dim=1)
