r"""Closed-form gradients of every loss the cot part trains, computed in NumPy (no autograd).

The trained model is the one-layer LSA of :mod:`companion.cot.model`,

.. math::

    f(Z) = Z + \frac1n W_{PV} Z \left(Z^\top W_{KQ} Z\right), \qquad W_{KQ}, W_{PV} \in \mathbb R^{D\times D},
    \quad D = 2d + 2,

with the token blocks (x, y, w, 1) = (1, 2, 3, 4). Write :math:`\mathcal E = \{1, 2\}` for the rows of the data
(x and y, d + 1 coordinates) and :math:`\mathcal T = \{3, 4\}` for the rows of a CoT token (w and the constant,
d + 1 coordinates). Every loss below is a mean over the B prompts of a batch; with R replicate models stacked as
(R, D, D) the batch is replicate-major (prompt b belongs to model b // (B / R)), the loss is the mean over all B
prompts, and the gradient with respect to replicate r's matrices is the sum over *its* prompts only, divided by B
(so the gradient of R times the loss is replicate r's own gradient, as :func:`companion.cot.train.train_full`
uses it). Every function returns the loss and its gradient with respect to each parameter block; the
tests compare them with torch autograd on the definitions in :mod:`companion.cot.model` (float64, rtol 1e-10).
The public functions take and return torch tensors (float64, CPU) like the model; the work is done on their
NumPy views, whose stacked matrix products are faster than torch's at these sizes (a few dozen rows per matrix).

**One output column.** All three losses of the one-layer models are built from one output column
:math:`o = t + W_{PV} h` of an input column t with :math:`h = G u`, :math:`u = W_{KQ} t`, where
:math:`G = Z Z^\top / n` is the (symmetric) Gram matrix of the columns the column attends to. For
:math:`\ell = \tfrac12 \|o - \tau\|^2` with a target :math:`\tau` that does not depend on the weights, the residual
:math:`r = o - \tau` and :math:`g = W_{PV}^\top r` give

.. math::

    \frac{\partial \ell}{\partial W_{PV}} = r\, h^\top, \qquad
    \frac{\partial \ell}{\partial W_{KQ}} = G\, g\, t^\top .

**CoT teacher-forced loss (6)** (:func:`teacher_forced_loss_grads`, :func:`~companion.cot.model.teacher_forced_loss`).
With the true tokens :math:`t_i = (0, 0, w_i, 1)`, :math:`a_i = (w_i, 1)` their :math:`\mathcal T` part,
:math:`G_{xy} = E E^\top / n` the Gram matrix of the non-zero rows E = (X; y) of the data columns, and the prefix
:math:`Z_i = [Z_0, t_1, \dots, t_i]`,

.. math::

    L_{\rm CoT} = \frac1B \sum_b \sum_{i=0}^{k-1} \tfrac12 \|r_i\|^2, \quad
    r_i = t_i + W_{PV} h_i - t_{i+1}, \quad h_i = G_i W_{KQ} t_i, \quad
    G_i = \begin{pmatrix} G_{xy} & 0 \\ 0 & \frac1n \sum_{j\le i} a_j a_j^\top \end{pmatrix},

(the data columns have zero :math:`\mathcal T` rows and the tokens zero :math:`\mathcal E` rows, so
:math:`Z_i Z_i^\top / n` is block diagonal), and with :math:`g_i = W_{PV}^\top r_i`

.. math::

    \nabla_{W_{PV}} L_{\rm CoT} = \frac1B \sum_b \sum_{i<k} r_i h_i^\top, \qquad
    \nabla_{W_{KQ}} L_{\rm CoT} = \frac1B \sum_b \sum_{i<k} q_i\, t_i^\top, \quad
    q_i = G_i g_i = \begin{pmatrix} G_{xy}\, g_i^{\mathcal E} \\
    \frac1n \sum_{j\le i} a_j\, (a_j^\top g_i^{\mathcal T}) \end{pmatrix}.

Since :math:`t_i^{\mathcal E} = 0`, the columns :math:`\mathcal E` of :math:`\nabla_{W_{KQ}}` are exactly zero. Both
prefix sums over :math:`j \le i` are lower-triangular (k x k) products, as in the forward pass.

**No-CoT loss** (:func:`outcome_loss_grads` with ``"no_cot"``): the last column of :math:`f(Z_0)` against
:math:`\tau = (0, 0, w^\star, 1)`; it is the case k = 1 of the above with :math:`t_0 = (0, 0, 0, 1)` and target
:math:`\tau` instead of :math:`t_1`:

.. math::

    L_{\rm no\,CoT} = \frac1B \sum_b \tfrac12 \|t_0 + W_{PV} G_0 W_{KQ} t_0 - \tau\|^2, \quad
    \nabla_{W_{PV}} = \frac1B \sum_b r h^\top, \quad \nabla_{W_{KQ}} = \frac1B \sum_b G_0 W_{PV}^\top r\, t_0^\top .

**Looped (outcome) loss** (:func:`outcome_loss_grads` with ``"looped"``): :math:`Z^{(t+1)} = f(Z^{(t)})` for
t < k from :math:`Z^{(0)} = Z_0`, every column attending to every column (no mask), and
:math:`L = \frac1B \sum_b \tfrac12 \|Z^{(k)}_{:, N} - \tau\|^2`. Backpropagation through the k layers by hand:
start from :math:`\bar Z^{(k)} = \partial L / \partial Z^{(k)}`, zero except its last column
:math:`(Z^{(k)}_{:, N} - \tau)/B`. For a layer :math:`Y = Z + W_{PV} Z A / n` with :math:`A = Z^\top W_{KQ} Z`
(N x N) and upstream gradient :math:`\bar Y`, let :math:`M = W_{PV}^\top \bar Y` and :math:`C = Z^\top M`; then

.. math::

    \frac{\partial L}{\partial W_{PV}} \mathrel{+}= \frac1n \bar Y (Z A)^\top, \qquad
    \frac{\partial L}{\partial W_{KQ}} \mathrel{+}= \frac1n Z\, C\, Z^\top, \qquad
    \bar Z = \bar Y + \frac1n \left(M A^\top + W_{KQ} Z\, C^\top + W_{KQ}^\top Z\, C\right),

(the three terms of :math:`\bar Z` are the three appearances of Z in :math:`Z\,Z^\top W_{KQ} Z`), summed over
the layers t = k-1, ..., 0 with :math:`Z = Z^{(t)}`, :math:`\bar Y = \bar Z^{(t+1)}`, and over the prompts.

**Isotropic looped model** (:func:`looped_isotropic_grads`, the two-parameter training of
:func:`companion.cot.train.train_looped_isotropic`): :math:`\hat w_0 = 0`,
:math:`\hat w_{t+1} = \hat w_t + v S e_t` with :math:`e_t = w \hat w_t - w^\star`, and
:math:`L = \sum_r \frac1B \sum_b \tfrac12 \|\hat w_k - w^\star\|^2` (the replicates' mean losses summed, each
replicate r with its own scalars :math:`v_r, w_r`). With the adjoint :math:`\lambda_k = (\hat w_k - w^\star)/B`,
:math:`s_t = S \lambda_{t+1}` (S is symmetric) and :math:`\lambda_t = \lambda_{t+1} + v w\, s_t`,

.. math::

    \frac{\partial L}{\partial v} = \sum_b \sum_{t<k} s_t^\top e_t, \qquad
    \frac{\partial L}{\partial w} = v \sum_b \sum_{t<k} s_t^\top \hat w_t .
"""

from __future__ import annotations

import functools
import threading

import numpy as np
import torch

from companion.params import ParameterError, integer

from .data import Prompts, embed
from .model import _check_params

__all__ = ["teacher_forced_loss_grads", "cot_step_grads", "outcome_loss_grads", "looped_isotropic_grads"]

_WORK = threading.local()  # the work arrays of :func:`_column`, one set per thread


def _np(x: torch.Tensor) -> np.ndarray:
    return x.detach().cpu().numpy()


def _stacked(W: torch.Tensor) -> np.ndarray:
    """(R, D, D) NumPy view of R stacked models, or of one model (R = 1)."""
    a = _np(W)
    return a[None] if a.ndim == 2 else a


def _torch(loss: float, g_KQ: np.ndarray, g_PV: np.ndarray, W: torch.Tensor):
    """``(loss, grad_W_KQ, grad_W_PV)`` as torch tensors shaped like the weights ``W``."""
    if W.dim() == 2:
        g_KQ, g_PV = g_KQ[0], g_PV[0]
    return torch.tensor(loss, dtype=torch.float64), torch.from_numpy(g_KQ), torch.from_numpy(g_PV)


def _gram_xy(S: np.ndarray, w_star: np.ndarray, Sw: np.ndarray) -> np.ndarray:
    r"""The data Gram matrix :math:`G_{xy} = E E^\top / n` of E = (X; y), y = w*^T X, from S = X X^T / n:
    :math:`\begin{pmatrix} S & S w^\star \\ w^{\star\top} S & w^{\star\top} S w^\star \end{pmatrix}`, (B, d+1, d+1)."""
    B, d, _ = S.shape
    G = np.empty((B, d + 1, d + 1))
    G[:, :d, :d] = S
    G[:, :d, d] = Sw
    G[:, d, :d] = Sw
    G[:, d, d] = np.einsum("bi,bi->b", w_star, Sw)
    return G


def _tails(W: np.ndarray) -> np.ndarray:
    """The T parts (w_i, 1) of the tokens of a trajectory W (B, m, d): (B, m, d+1), contiguous."""
    a = np.empty(W.shape[:-1] + (W.shape[-1] + 1,))
    a[..., :-1] = W
    a[..., -1] = 1.0
    return a


def _buf(name: str, shape: tuple) -> np.ndarray:
    """A work array of this thread kept from call to call: the arrays of a training step are a few MB each, and
    allocating them afresh at every step costs as much time in page faults as the products themselves."""
    bufs = _WORK.__dict__.setdefault("bufs", {})
    a = bufs.get(name)
    if a is None or a.shape != shape:
        a = bufs[name] = np.empty(shape)
    return a


def _sumsq(a: np.ndarray) -> float:
    """The sum of the squared entries of ``a``, without BLAS: OpenBLAS runs a dot product of more than a few
    thousand entries on every core, and its threads then spin-wait, so one such call per training step halves the
    speed of two trainings side by side on two cores (two notebooks of a book build, two test processes)."""
    flat = a.reshape(-1)
    return float(np.einsum("i,i->", flat, flat))


@functools.lru_cache(maxsize=32)
def _prefix_mask(k: int, n: int) -> np.ndarray:
    """(k, k): 1/n where j <= i, else 0 (the prefix sums of the tokens' Gram matrices, with their 1/n)."""
    return np.tril(np.ones((k, k))) / n


#: the largest product (multiply-adds m * n * k) OpenBLAS runs on one thread; :func:`_pieces` keeps each stacked
#: product of a training step under it
_ONE_THREAD_MNK = 2**18


def _pieces(per_replicate: int, cost: int) -> int:
    """Into how many pieces (a divisor of ``per_replicate``, the prompts of one replicate) the rows of each replicate
    are cut so that one piece's product, ``cost`` multiply-adds per prompt, stays under :data:`_ONE_THREAD_MNK`:
    OpenBLAS runs such a product on one thread, whereas it threads a larger one over every core, and its spinning
    threads slow a loaded machine (two notebooks on two cores) down several times."""
    for c in range(1, per_replicate + 1):
        if per_replicate % c == 0 and per_replicate // c * cost <= _ONE_THREAD_MNK:
            return c
    return per_replicate


def _column(A: np.ndarray, delta: np.ndarray, G: np.ndarray, K: np.ndarray, V: np.ndarray, n: int):
    r"""Loss :math:`\frac1B \sum_b \sum_i \tfrac12 \|t_i + W_{PV} G_i W_{KQ} t_i - \tau_i\|^2` and its gradients
    (R, D, D), for tokens :math:`t_i = (0, 0, a_i)` and targets :math:`\tau_i = (0, 0, a^{\rm tgt}_i)` given by
    ``A`` (B, k, d+1), the :math:`\mathcal T` parts :math:`a_i`, and ``delta`` (B, k, d+1),
    :math:`a_i - a^{\rm tgt}_i`; the data Gram matrices ``G`` (B, d+1, d+1) and the prefix Gram matrices
    :math:`\frac1n \sum_{j\le i} a_j a_j^\top`; ``K``, ``V``: W_KQ, W_PV as (R, D, D).

    Row i of a prompt's (k, ·) arrays is position i; the products with the weights act on every replicate's
    rows at once (one stacked product per replicate, cut by :func:`_pieces`), those with a prompt's own G and
    tokens on one prompt at a time."""
    B, k, m = A.shape  # m = d + 1: the E rows come first, the T rows after them
    R, D = K.shape[0], 2 * m
    c = _pieces(B // R, k * D * D)

    def rows(a):  # (B, k, p) -> (R, c, rows, p): a replicate's rows, in c pieces
        return a.reshape(R, c, -1, a.shape[-1])

    At, mask = A.transpose(0, 2, 1), _prefix_mask(k, n)  # mask: j <= i, with the 1/n of the prefix Gram matrix
    U, H, P = _buf("U", (B, k, D)), _buf("H", (B, k, D)), _buf("P", (B, k, k))
    np.matmul(rows(A), K[:, None, :, m:].swapaxes(-1, -2), out=rows(U))  # u_i = W_KQ t_i (t_i^E = 0)
    np.matmul(U[..., :m], G, out=H[..., :m])  # h_i = G_i u_i: G_xy u_i^E ...
    np.matmul(U[..., m:], At, out=P)  # ... and sum_{j<=i} a_j (a_j^T u_i^T) / n
    P *= mask
    np.matmul(P, A, out=H[..., m:])
    r = _buf("r", (B, k, D))  # r_i = W_PV h_i + t_i - tau_i
    np.matmul(rows(H), V[:, None].swapaxes(-1, -2), out=rows(r))
    r[..., m:] += delta
    loss = 0.5 * _sumsq(r) / B
    g, q = U, _buf("q", (B, k, D))  # g_i = W_PV^T r_i, in the array of u_i; q_i = G_i g_i
    np.matmul(rows(r), V[:, None], out=rows(g))
    np.matmul(g[..., :m], G, out=q[..., :m])
    np.matmul(g[..., m:], At, out=P)
    P *= mask
    np.matmul(P, A, out=q[..., m:])
    g_PV = np.matmul(rows(r).swapaxes(-1, -2), rows(H)).sum(1)  # sum_i r_i h_i^T over each replicate's prompts
    g_PV /= B
    g_KQ = np.zeros_like(K)
    g_KQ[:, :, m:] = np.matmul(rows(q).swapaxes(-1, -2), rows(A)).sum(1)  # sum_i q_i t_i^T
    g_KQ /= B
    return loss, g_KQ, g_PV


def teacher_forced_loss_grads(prompts: Prompts, W_traj: torch.Tensor, W_KQ: torch.Tensor, W_PV: torch.Tensor,
                              k: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""The CoT teacher-forced loss (6) of :func:`~companion.cot.model.teacher_forced_loss` and its gradients
    (module docstring):

    .. math::

        \nabla_{W_{PV}} L = \frac1B \sum_b \sum_{i<k} r_i h_i^\top, \qquad
        \nabla_{W_{KQ}} L = \frac1B \sum_b \sum_{i<k} G_i W_{PV}^\top r_i\, t_i^\top .

    Parameters
    ----------
    prompts : Prompts
        B prompts (replicate-major when the weights are stacked).
    W_traj : torch.Tensor
        The GD trajectory :math:`w_0, \dots, w_K` (B, K+1, d), K >= k.
    W_KQ, W_PV : torch.Tensor
        One model (D, D) or R replicate models (R, D, D).
    k : int, optional
        Teacher-forced positions 0..k-1 (default: K).

    Returns
    -------
    tuple of torch.Tensor
        ``(loss, grad_W_KQ, grad_W_PV)``: the scalar loss and gradients shaped like the weights.
    """
    B, d, n = prompts.X.shape
    _check_params(W_KQ, W_PV, d, B)
    if k is None:
        k = W_traj.shape[1] - 1
    k = integer("k", k, min=1, max=W_traj.shape[1] - 1)
    X, w_star = _np(prompts.X), _np(prompts.w_star)
    S = X @ X.transpose(0, 2, 1) / n
    a = _tails(_np(W_traj[:, : k + 1]))
    G = _gram_xy(S, w_star, np.einsum("bij,bj->bi", S, w_star))
    A = np.ascontiguousarray(a[:, :k])
    return _torch(*_column(A, A - a[:, 1:], G, _stacked(W_KQ), _stacked(W_PV), n), W_KQ)


def cot_step_grads(prompts: Prompts, eta: float, k: int, W_KQ: torch.Tensor,
                   W_PV: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r""":func:`teacher_forced_loss_grads` on the GD trajectory of the prompts,
    :math:`w_{i+1} = w_i - \eta (S w_i - S w^\star)` from :math:`w_0 = 0` (that of
    :func:`~companion.cot.data.gd_trajectory`, computed here on the same NumPy arrays): one training step's
    loss and gradients. Returns ``(loss, grad_W_KQ, grad_W_PV)``."""
    B, d, n = prompts.X.shape
    _check_params(W_KQ, W_PV, d, B)
    X, w_star = _np(prompts.X), _np(prompts.w_star)
    S = X @ X.transpose(0, 2, 1) / n
    # the errors e_i = w_i - w* (e_0 = -w*, e_{i+1} = e_i - eta S e_i): the tokens' T parts are a_i = (w* + e_i, 1)
    # and the teacher-forcing differences a_i - a_{i+1} = (eta S e_i, 0), the GD steps themselves
    A, delta = _buf("A", (B, k, d + 1)), _buf("delta", (B, k, d + 1))
    e, step = -w_star, np.empty_like(w_star)
    for i in range(k):
        np.add(w_star, e, out=A[:, i, :d])
        np.multiply(np.einsum("bij,bj->bi", S, e), eta, out=step)
        delta[:, i, :d] = step
        e = e - step
    A[..., d] = 1.0
    delta[..., d] = 0.0
    G = _gram_xy(S, w_star, np.einsum("bij,bj->bi", S, w_star))
    return _torch(*_column(A, delta, G, _stacked(W_KQ), _stacked(W_PV), n), W_KQ)


def outcome_loss_grads(prompts: Prompts, W_KQ: torch.Tensor, W_PV: torch.Tensor, k: int,
                       objective: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""The outcome-supervised loss of :func:`~companion.cot.model.outcome_loss`,
    :math:`\frac1B \sum_b \tfrac12 \|{\rm final\ column} - (0, 0, w^\star, 1)\|^2`, and its gradients: the
    one-layer no-CoT model (``objective="no_cot"``, k ignored) in closed form, the looped model (``"looped"``, f
    applied k times, every column attending to every column) by backpropagation written out (module docstring).

    Returns
    -------
    tuple of torch.Tensor
        ``(loss, grad_W_KQ, grad_W_PV)``.
    """
    if objective not in ("no_cot", "looped"):
        raise ParameterError("objective", f"must be 'no_cot' or 'looped'; got {objective!r}")
    B, d, n = prompts.X.shape
    _check_params(W_KQ, W_PV, d, B)
    w_star = _np(prompts.w_star)
    a_tgt = _tails(w_star[:, None, :])  # (w*, 1)
    K, V = _stacked(W_KQ), _stacked(W_PV)
    if objective == "no_cot":
        X = _np(prompts.X)
        E = np.empty((B, d + 1, n))  # the data rows (X; y), y = w*^T X
        E[:, :d] = X
        np.matmul(w_star[:, None, :], X, out=E[:, d:])
        return _torch(*_no_cot(E, w_star, K, V, n), W_KQ)
    k = integer("k", k, min=1)
    X = np.ascontiguousarray(_np(embed(prompts)).transpose(0, 2, 1))  # the columns of Z0 as rows
    return _torch(*_looped(X, a_tgt[:, 0], K, V, k, n), W_KQ)


def _no_cot(E: np.ndarray, w_star: np.ndarray, K: np.ndarray, V: np.ndarray, n: int):
    r""":func:`_column` for the no-CoT loss, with its one token :math:`t_0 = e_D` written in: :math:`u = W_{KQ} e_D`
    is the last column of W_KQ for every prompt, :math:`h = (G_{xy} u^{\mathcal E}, (W_{KQ})_{DD}\, e / n)` (e: the
    last T coordinate), :math:`q = G_0 g = (G_{xy} g^{\mathcal E}, g_D\, e / n)`, and only the last column of
    :math:`\nabla_{W_{KQ}} = \frac1B \sum_b q\, t_0^\top` is non-zero. :math:`G_{xy}` is applied as
    :math:`G_{xy} v = E (E^\top v) / n` from the data rows ``E`` = (X; y) (B, d+1, n), without forming it;
    ``w_star`` (B, d); ``K``, ``V`` (R, D, D)."""
    B, m, _ = E.shape
    R, D = K.shape[0], 2 * m
    Er = E.reshape(R, -1, m, n)
    h = np.empty((R, B // R, D))
    z = np.matmul(K[:, None, None, :m, D - 1], Er)  # E^T u^E  (R, B/R, 1, n)
    h[..., :m] = np.matmul(Er, z.swapaxes(-1, -2))[..., 0] / n  # G_xy u^E
    h[..., m:] = 0.0
    h[..., D - 1] = (K[:, D - 1, D - 1] / n)[:, None]  # sum_j a_j (a_j^T u^T) / n with a_0 = e
    r = h @ V.swapaxes(-1, -2)  # r = W_PV h + t_0 - tau,  t_0 - tau = (0, 0, -w*, 0)
    r[..., m : D - 1] -= w_star.reshape(R, -1, m - 1)
    loss = 0.5 * _sumsq(r) / B
    g = r @ V  # g = W_PV^T r
    g_PV = r.swapaxes(-1, -2) @ h / B
    g_KQ = np.zeros_like(K)
    z = np.matmul(g[:, :, None, :m], Er)  # E^T g^E
    g_KQ[:, :m, D - 1] = np.matmul(Er, z.swapaxes(-1, -2))[..., 0].sum(1) / (n * B)  # sum_b G_xy g^E
    g_KQ[:, D - 1, D - 1] = g[..., D - 1].sum(1) / (n * B)  # sum_b g_D / n
    return loss, g_KQ, g_PV


def _looped(X: np.ndarray, a_tgt: np.ndarray, K: np.ndarray, V: np.ndarray, k: int, n: int):
    r"""Loss and gradients (R, D, D) of the looped model, by the backpropagation of the module docstring, on the
    prompts' columns as rows, ``X`` = :math:`Z^{(0)\top}` (B, N, D) (so :math:`Z^\top W^\top` is one stacked
    product with the weights, and the (N x N) matrices A, C are per prompt).

    Only the last column of :math:`Z^{(k)}` enters the loss, so the last layer is computed for that column alone,
    and its backward step has :math:`\bar Y = \bar y\, e_N^\top`: then :math:`M = \mu e_N^\top` with
    :math:`\mu = W_{PV}^\top \bar y`, :math:`C = c\, e_N^\top` with :math:`c = Z^\top \mu`, and

    .. math::

        \frac{\partial L}{\partial W_{PV}} \mathrel{+}= \frac1n \bar y\, (Z A e_N)^\top, \qquad
        \frac{\partial L}{\partial W_{KQ}} \mathrel{+}= \frac1n (Z c)\, z_N^\top, \qquad
        \bar Z = \bar y\, e_N^\top + \frac1n \left(\mu\, (A e_N)^\top + u_N c^\top
        + W_{KQ}^\top Z c\, e_N^\top\right),

    with :math:`u_N = W_{KQ} z_N` and :math:`A e_N = Z^\top u_N`."""
    B, N, D = X.shape
    R = K.shape[0]
    c = _pieces(B // R, N * D * D)

    def rows(a):  # (B, p, q) -> (R, c, rows, q): a replicate's rows, in c pieces
        return a.reshape(R, c, -1, a.shape[-1])

    def times(a, W):  # every row of a times W (R, D, D) of its replicate: (B, p, D)
        return np.matmul(rows(a), W[:, None]).reshape(a.shape)

    def summed(a, b):  # sum over each replicate's rows of a_j b_j^T: (R, D, D)
        return np.matmul(rows(a).swapaxes(-1, -2), rows(b)).sum(1)

    return _looped_backprop(X, a_tgt, K, V, k, n, times, summed, _sumsq)


def _looped_backprop(X, a_tgt, K, V, k: int, n: int, times, summed, sumsq):
    """The forward pass and the backpropagation of :func:`_looped` on arrays of either library (NumPy here, torch
    in :mod:`companion.cot.grads_torch`): ``times(a, W)`` multiplies every row of ``a`` (B, p, D) by its replicate's
    W (R, D, D), ``summed(a, b)`` sums :math:`a_j b_j^\top` over each replicate's rows, ``sumsq(r)`` is the sum of
    the squared entries of r."""
    B, N, D = X.shape
    Kt, Vt = K.swapaxes(-1, -2), V.swapaxes(-1, -2)
    saved = []
    for _ in range(k - 1):
        U = times(X, Kt)  # rows u_j = W_KQ z_j
        A = X @ U.swapaxes(1, 2)  # A = Z^T W_KQ Z
        ZAt = A.swapaxes(1, 2) @ X  # (Z A)^T
        saved.append((X, U, A, ZAt))
        X = X + times(ZAt, Vt) / n
    uN = times(X[:, -1:], Kt)  # the last layer, for the last column: u_N, A e_N, (Z A e_N)^T
    aN = X @ uN.swapaxes(1, 2)
    s = aN.swapaxes(1, 2) @ X
    r = X[:, -1] + times(s, Vt)[:, 0] / n  # final column - (0, 0, w*, 1)
    r[:, D - a_tgt.shape[-1] :] -= a_tgt
    loss = 0.5 * sumsq(r) / B
    ybar = (r / B)[:, None]  # (B, 1, D)
    mu = times(ybar, V)  # mu^T = ybar^T W_PV
    cv = X @ mu.swapaxes(1, 2)  # c = Z^T mu  (B, N, 1)
    Zc = cv.swapaxes(1, 2) @ X  # (Z c)^T
    g_PV = summed(ybar, s) / n
    g_KQ = summed(Zc, X[:, -1:]) / n
    Xbar = (cv * uN + aN * mu) / n
    Xbar[:, -1:] += ybar + times(Zc, K) / n
    for X, U, A, ZAt in reversed(saved):
        Mt = times(Xbar, V)  # M^T = Ybar^T W_PV
        C = X @ Mt.swapaxes(1, 2)  # C = Z^T M
        g_PV += summed(Xbar, ZAt) / n  # Ybar (Z A)^T / n
        g_KQ += summed(X, C @ X) / n  # Z C Z^T / n
        Xbar = Xbar + (A @ Mt + C @ U + C.swapaxes(1, 2) @ times(X, K)) / n
    return loss, g_KQ, g_PV


def looped_isotropic_grads(S: torch.Tensor, w_star: torch.Tensor, v: torch.Tensor, w: torch.Tensor,
                           k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""The loss of the isotropic looped model, summed over R replicates, and its gradients in (v, w):

    .. math::

        L = \sum_r \frac1B \sum_b \tfrac12 \|\hat w_k - w^\star\|^2, \quad
        \hat w_{t+1} = \hat w_t + v S (w \hat w_t - w^\star), \quad \hat w_0 = 0,

    by the adjoint recursion of the module docstring.

    Parameters
    ----------
    S : torch.Tensor
        (R, B, d, d) symmetric :math:`S = X X^\top / n` of every replicate's prompts.
    w_star : torch.Tensor
        (R, B, d).
    v, w : torch.Tensor
        (R,) the replicates' parameters.
    k : int
        Loops, >= 1.

    Returns
    -------
    tuple of torch.Tensor
        ``(loss, grad_v, grad_w)``, the gradients of shape (R,).
    """
    k = integer("k", k, min=1)
    S, ws, vn, wn = _np(S), _np(w_star), _np(v), _np(w)
    B = ws.shape[1]
    vv, ww = vn[:, None, None], wn[:, None, None]
    w_hat = np.zeros_like(ws)
    traj = []
    for _ in range(k):
        e = ww * w_hat - ws
        traj.append((w_hat, e))
        w_hat = w_hat + vv * np.einsum("rbij,rbj->rbi", S, e)
    lam = w_hat - ws
    loss = 0.5 * _sumsq(lam) / B
    lam = lam / B
    g_v, g_w = np.zeros_like(vn), np.zeros_like(wn)
    for w_t, e in reversed(traj):
        s = np.einsum("rbij,rbj->rbi", S, lam)  # S lambda_{t+1}
        g_v += (s * e).sum((1, 2))
        g_w += vn * (s * w_t).sum((1, 2))
        lam = lam + vv * ww * s
    return torch.tensor(loss, dtype=torch.float64), torch.from_numpy(g_v), torch.from_numpy(g_w)
