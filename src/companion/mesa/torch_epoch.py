r"""The mesa training epoch (AR loss and its gradients) in torch without autograd, on any device.

The same computation as the fused CPU kernel (:func:`companion.mesa.model.loss_grad_fast`,
:mod:`companion.mesa.lanes.host`), written as batched torch products over sequences and positions, so that it
runs on a GPU (``device="cuda"``) as well as on the CPU. The mathematics is that of
:mod:`companion.mesa.lanes` (notation there): the prefix sum :math:`S_t = \sum_{i \le t} e_i e_i^H` of the
embedded tokens is geometric in t and drops out in closed form, so no position loop and no cumulative sum
remain. With the per-sequence maps

.. math::

    N = A_{11} + A_{12}\bar\Lambda, \quad M = N + \Lambda (A_{21} + A_{22}\bar\Lambda), \quad
    R = P_1 + P_2\bar\Lambda, \quad M_a = \operatorname{diag}(\bar z) M,

.. math::

    C = \bigl[\, M_a^T \;\big|\; (K M_a)^T \;\big|\; M_a^T \mathbf 1 \;\big|\; N^T \bar z \,\bigr], \qquad
    R_v = \begin{bmatrix} (R \operatorname{diag} z)^T \\ (P_1 z)^T \end{bmatrix},

every position of every sequence (a tensor of shape (sequences, positions, .)) is

.. math::

    (a_t, K a_t, s_t, s'_t) = C^T x_t, \qquad
    w_t = t\, D a_t + \lambda^t \circ K(\bar\lambda^t \circ a_t) - K a_t - s_t \mathbf 1, \qquad
    \hat y_t = \frac{1}{t-1} R_v^T (w_t, s'_t), \qquad r_t = \hat y_t - x_{t+1},

with :math:`D = I` unless two phases of a sequence coincide (then :math:`D_{jk} = 1` for every coinciding
pair and :math:`K_{jk} = 0` there, since :math:`\sum_{r<t} (\lambda_j \bar\lambda_k)^r = t`; the CPU kernel
leaves such data to the torch path of :mod:`companion.mesa.model`, this module takes them too). The loss is
:math:`L = \sum_n w_n \ell_n`, :math:`\ell_n = \frac12 \sum_t |r_t|^2`, with the weights :math:`w_n`
normalised to sum 1. The backward pass (PyTorch's complex convention, :math:`g_t = w_n r_t / (t-1)`) is

.. math::

    \nabla R_v = \sum_t \overline{(w_t, s'_t)}\, g_t^T, \qquad
    (\gamma_t, \gamma'_t) = \bar R_v\, g_t, \qquad
    \nabla C = \sum_t \bar x_t \bigl(t\, D\gamma_t + \lambda^t \circ K^H(\bar\lambda^t \circ \gamma_t),\;
    -\gamma_t,\; -\mathbf 1^T\gamma_t,\; \gamma'_t\bigr)^T,

a sum over positions that is one batched product :math:`X^H \nabla F` per sequence; the lift to the weights,

.. math::

    \nabla M = \operatorname{diag}(z) \bigl( (\nabla C_{\cdot,a})^T + K^H (\nabla C_{\cdot,Ka})^T
    + \mathbf 1 (\nabla C_{\cdot,s})^T \bigr), \qquad \nabla N = \nabla M + z\,(\nabla C_{\cdot,s'})^T,

.. math::

    \nabla A_{11} = \sum_n \nabla N, \quad \nabla A_{12} = \sum_n \nabla N \Lambda, \quad
    \nabla A_{21} = \sum_n \bar\Lambda \nabla M, \quad \nabla A_{22} = \sum_n \bar\Lambda \nabla M \Lambda,

.. math::

    \nabla R = (\nabla R_{v,1:d})^T \operatorname{diag}(\bar z), \quad
    \nabla P_1 = \sum_n \bigl(\nabla R + (\nabla R_{v,d+1})^T z^H\bigr), \quad
    \nabla P_2 = \sum_n \nabla R \Lambda,

is done in complex128 whatever the dtype (as the kernel sums its lanes in float64), and so are the
per-sequence losses.

:class:`Epoch` computes the data tables (:math:`x_t`, :math:`\lambda^t`, :math:`x_{t+1}` from the float64
phases, :math:`K`) once on the device, in chunks of sequences so that the intermediates of one call stay
bounded (of the order of 0.2 MB per sequence at T = 100, d = 5, complex128); :func:`loss_grad` is the drop-in
replacement of :func:`companion.mesa.model.loss_grad_fast` for a data set (same arguments and returns, plus
``device``). The module imports only torch, NumPy and :mod:`companion.params`, so that a GPU benchmark can
load it without the rest of the package.
"""

from __future__ import annotations

import numpy as np
import torch

from companion import params
from companion.devices import check_device

__all__ = ["DEFAULT_CHUNK", "check_device", "Epoch", "loss_grad"]

#: sequences per batched product (memory only; the results do not depend on it beyond round-off)
DEFAULT_CHUNK = 4096


def _normalised(weights, m: int) -> np.ndarray:
    """The sequences' weights as float64 summing to 1 (uniform when None)."""
    if weights is None:
        return np.full(m, 1.0 / m)
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().numpy()
    try:
        w = np.asarray(weights, dtype=float)
    except (TypeError, ValueError):
        raise params.ParameterError("weights", f"must be {m} real numbers; got {type(weights).__name__}") from None
    params.require(w.shape == (m,), "weights", f"must have shape ({m},), one per sequence; got {w.shape}")
    params.require(bool(np.isfinite(w).all() and (w >= 0).all() and w.sum() > 0), "weights",
              "must be finite and >= 0 with a positive sum")
    return w / w.sum()


def _chunk_tables(theta: torch.Tensor, x1: torch.Tensor, t: torch.Tensor, cdt: torch.dtype) -> dict:
    """Data-only tensors of one chunk of sequences (phases float64 (c, d), x_1 complex128 (c, d), positions
    float64 (N,)), computed in float64 on the device and stored in ``cdt``."""
    ph = theta[:, None, :] * t[None, :, None]  # theta t, (c, N, d)
    lamt = torch.polar(torch.ones_like(ph), ph)
    x = torch.polar(torch.ones_like(ph), ph - theta[:, None, :]) * x1[:, None, :]  # x_t = lam^(t-1) z
    diff = theta[:, :, None] - theta[:, None, :]
    deg = torch.sin(diff / 2).abs() < 1e-12  # coinciding phases (diagonal included)
    om1 = 2j * torch.sin(diff / 2) * torch.polar(torch.ones_like(diff), diff / 2)  # exp(i diff) - 1, no cancellation
    K64 = torch.where(deg, torch.zeros_like(om1), 1 / torch.where(deg, torch.ones_like(om1), om1))
    eye = torch.eye(theta.shape[1], dtype=torch.bool, device=theta.device)
    Dg = deg.to(cdt) if bool((deg & ~eye).any()) else None
    return dict(z=x1.to(cdt), lam=torch.polar(torch.ones_like(theta), theta).to(cdt), x=x.to(cdt),
                lamt=lamt.to(cdt), y=(lamt * x1[:, None, :]).to(cdt), K=K64.to(cdt), K64=K64,
                z64=x1, lam64=torch.polar(torch.ones_like(theta), theta), Dg=Dg)


class Epoch:
    r"""The loss and gradients of one epoch over a fixed data set, its tables held on a device.

    Parameters
    ----------
    theta : (m, d) array
        The phases of the sequences (:math:`\lambda = e^{i\theta}`), float64.
    x1 : (m, d) complex array
        The first tokens :math:`z = x_1`.
    positions : sequence of int
        The prediction positions t (each >= 2; for sequences of length T, 2..T-1 is the whole AR loss).
    dtype : torch.dtype
        ``torch.complex64`` or ``torch.complex128``: the dtype of the tables and of the products (the
        tables are computed in float64 first; per-sequence losses and the sums over sequences are float64).
    device : str or torch.device
        Where the tables live and the products run (:func:`check_device`).
    chunk : int
        Sequences per batched product (bounds the memory of the intermediates).
    """

    def __init__(self, theta, x1, positions, dtype: torch.dtype = torch.complex128, device="cpu",
                 chunk: int = DEFAULT_CHUNK):
        if dtype not in (torch.complex64, torch.complex128):
            raise params.ParameterError("dtype", f"must be torch.complex64 or torch.complex128; got {dtype}")
        self.device = check_device(device)
        self.dtype = dtype
        chunk = params.integer("chunk", chunk, min=1)
        theta = np.asarray(theta, dtype=float)
        x1 = np.asarray(x1.numpy() if isinstance(x1, torch.Tensor) else x1, dtype=complex)
        params.require(theta.ndim == 2 and x1.shape == theta.shape, "x1",
                  f"must have the shape of theta {theta.shape}; got {x1.shape}")
        pos = np.atleast_1d(np.asarray(positions, dtype=np.int64))
        params.require(pos.ndim == 1 and pos.size > 0 and int(pos.min()) >= 2, "positions",
                  f"must be prediction positions t >= 2; got {pos.tolist()}")
        self.m, self.d = theta.shape
        self.positions = pos
        dev = self.device
        t = torch.as_tensor(pos, dtype=torch.float64, device=dev)
        rdt = torch.float32 if dtype == torch.complex64 else torch.float64
        self.tt = t.to(rdt)[None, :, None]
        self.inv_rho = (1 / (t - 1)).to(rdt)[None, :, None]
        th = torch.as_tensor(theta, device=dev)
        z = torch.as_tensor(x1, device=dev)
        self.chunks = [(i, _chunk_tables(th[i : i + chunk], z[i : i + chunk], t, dtype))
                       for i in range(0, self.m, chunk)]

    def __call__(self, W_KQ, W_PV, weights=None):
        r"""Loss and gradients at the weights.

        Parameters
        ----------
        W_KQ, W_PV : (2d, 2d) and (d, 2d) complex tensors or arrays
            The weights (cast to the epoch's dtype and moved to its device).
        weights : (m,) array, optional
            The sequences' weights in the loss (normalised here to sum 1; uniform when None).

        Returns
        -------
        loss : 0-dim float64 tensor
            :math:`L = \sum_n w_n \ell_n`.
        gA, gP : complex tensors of the epoch's dtype
            :math:`\nabla W^{KQ}`, :math:`\nabla W^{PV}` in PyTorch's complex convention.
        per_seq : (m,) float64 tensor
            :math:`\ell_n` (unweighted). All on the epoch's device.
        """
        d, dev, cdt = self.d, self.device, self.dtype
        W_KQ = torch.as_tensor(W_KQ).to(device=dev, dtype=cdt)
        W_PV = torch.as_tensor(W_PV).to(device=dev, dtype=cdt)
        if tuple(W_KQ.shape) != (2 * d, 2 * d):
            raise params.ParameterError("W_KQ", f"must have shape ({2 * d}, {2 * d}); got {tuple(W_KQ.shape)}")
        if tuple(W_PV.shape) != (d, 2 * d):
            raise params.ParameterError("W_PV", f"must have shape ({d}, {2 * d}); got {tuple(W_PV.shape)}")
        wn = torch.as_tensor(_normalised(weights, self.m), device=dev)
        per_seq = torch.empty(self.m, dtype=torch.float64, device=dev)
        gA = torch.zeros(2 * d, 2 * d, dtype=torch.complex128, device=dev)
        gP = torch.zeros(d, 2 * d, dtype=torch.complex128, device=dev)
        for i, tab in self.chunks:
            c = tab["z"].shape[0]
            ls, gC, gRv = self._sweep(tab, W_KQ, W_PV, wn[i : i + c])
            per_seq[i : i + c] = ls
            self._lift(tab, gC, gRv, gA, gP)
        return (per_seq * wn).sum(), gA.to(cdt), gP.to(cdt), per_seq

    def _sweep(self, tab: dict, W_KQ, W_PV, wn):
        """Forward and backward over all positions of one chunk: (per-sequence loss, dL/dC, dL/dRv)."""
        d = self.d
        z, lam, K, Dg, x, lamt = tab["z"], tab["lam"], tab["K"], tab["Dg"], tab["x"], tab["lamt"]
        zc, lc = z.conj(), lam.conj()
        N = W_KQ[:d, :d] + W_KQ[:d, d:] * lc[:, None, :]
        M = N + lam[:, :, None] * (W_KQ[d:, :d] + W_KQ[d:, d:] * lc[:, None, :])
        R = W_PV[:, :d] + W_PV[:, d:] * lc[:, None, :]
        MaT = M.transpose(1, 2) * zc[:, None, :]
        C = torch.cat([MaT, MaT @ K.transpose(1, 2), MaT.sum(-1, keepdim=True),
                       N.transpose(1, 2) @ zc[:, :, None]], dim=-1)  # (c, d, 2d+2)
        Rv = torch.cat([(R * z[:, None, :]).transpose(1, 2), (W_PV[:, :d] @ z[:, :, None]).transpose(1, 2)], 1)
        F = x @ C  # (c, N, 2d+2): a, K a, s, s'
        a, Ka, s, sp = F[..., :d], F[..., d : 2 * d], F[..., 2 * d : 2 * d + 1], F[..., 2 * d + 1 :]
        lamtc = lamt.conj()
        ta = self.tt * (a if Dg is None else a @ Dg.transpose(1, 2))
        w = ta + lamt * ((lamtc * a) @ K.transpose(1, 2)) - Ka - s  # (c, N, d); omega_t = (w_t, s'_t)
        Rw, Rs = Rv[:, :d, :], Rv[:, d:, :]
        r = (w @ Rw + sp @ Rs) * self.inv_rho - tab["y"]
        per_seq = 0.5 * torch.view_as_real(r).square().sum(dim=(1, 2, 3), dtype=torch.float64)
        g = r * (self.inv_rho * wn.to(self.inv_rho.dtype)[:, None, None])
        gRv = torch.cat([w.conj().transpose(1, 2) @ g, sp.conj().transpose(1, 2) @ g], dim=1)  # (c, d+1, d)
        gam = g @ Rw.conj().transpose(1, 2)  # gamma_t, (c, N, d)
        gsp = g @ Rs.conj().transpose(1, 2)  # gamma'_t, (c, N, 1)
        tg = self.tt * gam if Dg is None else (self.tt * gam) @ Dg
        ga = tg + lamt * ((lamtc * gam) @ K.conj())  # K^H = conj(K)^T: (v @ conj(K)) = (K^H v^T)^T
        xh = x.conj().transpose(1, 2)
        Q = xh @ gam  # the columns of -gamma and -1^T gamma summed over positions from one product
        gC = torch.cat([xh @ ga, -Q, -Q.sum(-1, keepdim=True), xh @ gsp], dim=-1)  # (c, d, 2d+2)
        return per_seq, gC, gRv

    def _lift(self, tab: dict, gC, gRv, gA, gP) -> None:
        """Add the chunk's gradients with respect to the weights to gA, gP (complex128)."""
        d = self.d
        gC, gRv = gC.to(torch.complex128), gRv.to(torch.complex128)
        z, lam, K = tab["z64"], tab["lam64"], tab["K64"]
        gMaT = gC[..., :d] + gC[..., d : 2 * d] @ K.conj() + gC[..., 2 * d : 2 * d + 1]
        gM = (gMaT * z[:, None, :]).transpose(1, 2)
        gN = gM + z[:, :, None] * gC[:, None, :, 2 * d + 1]
        gA[:d, :d] += gN.sum(0)
        gA[:d, d:] += (gN * lam[:, None, :]).sum(0)
        lgM = lam.conj()[:, :, None] * gM
        gA[d:, :d] += lgM.sum(0)
        gA[d:, d:] += (lgM * lam[:, None, :]).sum(0)
        gR = gRv[:, :d, :].transpose(1, 2) * z.conj()[:, None, :]
        gP[:, :d] += gR.sum(0) + (gRv[:, d, :, None] * z.conj()[:, None, :]).sum(0)
        gP[:, d:] += (gR * lam[:, None, :]).sum(0)


def loss_grad(data, W_KQ, W_PV, weights=None, positions=None, device="cpu", chunk: int = DEFAULT_CHUNK):
    r"""Loss and closed-form gradients of one epoch on ``device``: the drop-in replacement of
    :func:`companion.mesa.model.loss_grad_fast`.

    Parameters
    ----------
    data : companion.mesa.data.ARData
        The sequences (its phases ``theta``, first tokens ``x1``, length ``T`` and dtype are read; the
        device tables are cached in the data set, keyed by device, positions and chunk).
    W_KQ, W_PV : complex tensors
        The weights, (2d, 2d) and (d, 2d).
    weights : (m,) array, optional
        The sequences' weights in the loss (normalised to sum 1; uniform when None).
    positions : sequence of int, optional
        The prediction positions, each in 2..T-1 (default all of them).
    device : str
        ``"cpu"`` or ``"cuda"`` (:func:`check_device`).
    chunk : int
        Sequences per batched product.

    Returns
    -------
    loss : 0-dim float64 tensor
    gA, gP : complex tensors in the data's dtype
        As :func:`companion.mesa.model.loss_grad_fast` returns them, on the CPU.
    """
    dev = check_device(device)
    T = data.T
    pos = np.arange(2, T) if positions is None else np.atleast_1d(np.asarray(positions, dtype=np.int64))
    if pos.size == 0 or int(pos.min()) < 2 or int(pos.max()) > T - 1:
        raise params.ParameterError("positions", f"prediction positions must lie in [2, {T - 1}]; got {pos.tolist()}")
    key = ("torch_epoch", str(dev), tuple(int(t) for t in pos), int(chunk))
    ep = data._tables.get(key)
    if ep is None:
        ep = data._tables[key] = Epoch(data.theta, data.x1, pos, data.dtype, dev, chunk)
    L, gA, gP, _ = ep(W_KQ.detach(), W_PV.detach(), weights)
    return L.cpu(), gA.cpu(), gP.cpu()
