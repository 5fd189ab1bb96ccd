"""One-layer linear causal self-attention, evaluated at all prediction positions in one pass.

The model (:prf:ref:`mesa-def-data`, :ref:`mesa-setup`) is ``yhat_t = W_PV E_t E_t^H W_KQ e_t / rho_t`` with ``rho_t = t - 1``, for
t = 2..T-1 (targets x_3..x_T). A direct implementation loops over the prefixes E_t; here every
position is evaluated independently in closed form, vectorised over sequences and positions.

Derivation (all per sequence; ``D = diag(lam)`` is the diagonal of W, unit modulus so
``D^{-1} = conj(D)``). For t >= 2, ``e_t = B x_t`` with ``B = [I; conj(D)]``; only e_1 = [x_1; 0]
differs from ``B x_1`` (the x_0 = 0 convention). With ``G_t = sum_{i<=t} x_i x_i^H``,

    E_t E_t^H q = B G_t B^H q - B z (s - s') - [0; conj(D) z] s',   z = x_1,
    s = z^H B^H q,  s' = z^H q_up,

and, because x_i = D^{i-1} z is geometric in i, ``(G_t)_{jk} = z_j conj(z_k) sum_{i<t} (lam_j conj lam_k)^i``:

    G_t p = z * ( t (conj(z) * p) + lam^t * K (conj(lam)^t * conj(z) * p) - K (conj(z) * p) ),
    K_{jk} = 1 / (lam_j conj(lam_k) - 1) for j != k,  K_{jj} = 0

(a t-independent, Hermitian, Cauchy-like matrix per sequence). With q_t = W_KQ e_t this gives

    yhat_t = ( R (y_t - z s_t) + (W_PV1 z) s'_t ) / (t - 1),
    y_t = G_t M x_t,  M = B^H W_KQ B,  R = W_PV1 + W_PV2 conj(D),  s'_t = z^H (W_KQ11 + W_KQ12 conj(D)) x_t,

so every quantity is an (m, positions, d) array and a few batched d x d products: no loop over t or
over sequences. :func:`loss_grad_fast` (used for training) adds the closed-form backward pass of the same
maps; :func:`loss_and_grad` differentiates :func:`predict` with torch autograd. The tests compare
predictions, loss and both gradients with a deliberately naive per-prefix implementation and with exact
population averages.
"""

from __future__ import annotations

import numpy as np
import torch

from companion import params
from companion.mesa.data import ARData, embed
from companion.mesa.lanes import host

__all__ = ["predict", "predict_direct", "loss", "loss_and_grad", "loss_grad_fast", "loss_fast", "predict_fast",
           "per_sequence_loss", "ratio_entries", "red_blocks", "check_weights"]


def check_weights(W_KQ: torch.Tensor, W_PV: torch.Tensor, d: int) -> None:
    if tuple(W_KQ.shape) != (2 * d, 2 * d):
        raise params.ParameterError("W_KQ", f"must have shape ({2 * d}, {2 * d}); got {tuple(W_KQ.shape)}")
    if tuple(W_PV.shape) != (d, 2 * d):
        raise params.ParameterError("W_PV", f"must have shape ({d}, {2 * d}); got {tuple(W_PV.shape)}")


def _positions(T: int, positions) -> np.ndarray:
    if positions is None:
        return np.arange(2, T)
    pos = np.atleast_1d(np.asarray(positions, dtype=int))
    if pos.size == 0 or pos.min() < 2 or pos.max() > T - 1:
        raise params.ParameterError("positions", f"prediction positions must lie in [2, {T - 1}]; got {pos.tolist()}")
    return pos


def predict(data: ARData, W_KQ: torch.Tensor, W_PV: torch.Tensor, positions=None) -> torch.Tensor:
    """Predictions yhat_t for t in ``positions`` (default 2..T-1): shape (m, len(positions), d)."""
    d = data.d
    check_weights(W_KQ, W_PV, d)
    pos = _positions(data.T, positions)
    dt = data.dtype
    W_KQ = W_KQ.to(dt)
    W_PV = W_PV.to(dt)
    z, lam = data.x1, data.lam
    lc = lam.conj()
    A11, A12, A21, A22 = W_KQ[:d, :d], W_KQ[:d, d:], W_KQ[d:, :d], W_KQ[d:, d:]
    P1, P2 = W_PV[:, :d], W_PV[:, d:]
    N = A11 + A12 * lc[:, None, :]  # (m, d, d): q_up = N x_t
    M = N + lam[:, :, None] * (A21 + A22 * lc[:, None, :])  # p = B^H q = M x_t
    R = P1 + P2 * lc[:, None, :]
    K, Dg = _cauchy(data)
    zc = z.conj()
    Ma = zc[:, :, None] * M  # a_t = conj(z) * p_t = Ma x_t
    Mb = K @ Ma  # K a_t = Mb x_t
    x, ph_t, _ = data.tables(pos)  # x_t = lam^(t-1) z and lam^t (from the float64 phases)
    t = torch.from_numpy(pos.astype(float))
    a = x @ Ma.transpose(1, 2)
    Ka = x @ Mb.transpose(1, 2)
    Kb = (ph_t.conj() * a) @ K.transpose(1, 2)
    s = a.sum(-1, keepdim=True)  # z^H p_t
    wp = (N.transpose(1, 2) @ zc.unsqueeze(-1)).squeeze(-1)  # s' = sum_j (N^T conj z)_j x_j
    sp = (x * wp[:, None, :]).sum(-1, keepdim=True)
    tt = t.to(dt)[None, :, None]
    aD = a if Dg is None else a @ Dg.transpose(1, 2)
    y = z[:, None, :] * (tt * aD + ph_t * Kb - Ka)
    inv_rho = (1 / (t - 1)).to(dt)[None, :, None]
    v = (P1 @ z.unsqueeze(-1)).squeeze(-1)  # W_PV1 z
    out = (y - z[:, None, :] * s) @ R.transpose(1, 2) + v[:, None, :] * sp
    return out * inv_rho


def _targets(data: ARData, positions=None) -> torch.Tensor:
    return data.tables(_positions(data.T, positions))[2]  # x_{t+1} = lam^t z


def loss(data: ARData, W_KQ, W_PV, weights: torch.Tensor | None = None, positions=None) -> torch.Tensor:
    """``L = (1/m) sum_n sum_t 1/2 |yhat_t - x_{t+1}|^2`` (or a weighted mean over sequences; for a tilted set its
    importance weights divided by m, as in the fast paths)."""
    r = predict(data, W_KQ, W_PV, positions) - _targets(data, positions)
    per_seq = 0.5 * (r.real**2 + r.imag**2).sum(dim=(1, 2))
    if weights is None and data.w is None:
        return per_seq.mean()
    return (per_seq * _weights_normalised(data, weights).to(per_seq.dtype)).sum()


def loss_and_grad(data: ARData, W_KQ, W_PV, weights=None, positions=None):
    """Loss and its gradients in PyTorch's complex convention (dL/dRe + i dL/dIm)."""
    A = W_KQ.detach().clone().to(data.dtype).requires_grad_(True)
    Pm = W_PV.detach().clone().to(data.dtype).requires_grad_(True)
    L = loss(data, A, Pm, weights, positions)
    gA, gP = torch.autograd.grad(L, (A, Pm))
    return L.detach(), gA, gP


def red_blocks(W_KQ, W_PV):
    """The Assumption-3.1 blocks: (W_KQ rows d+1..2d x cols 1..d, W_PV cols 1..d)."""
    d = W_PV.shape[0]
    return W_KQ[d:, :d], W_PV[:, :d]


def predict_direct(data: ARData, W_KQ: torch.Tensor, W_PV: torch.Tensor) -> torch.Tensor:
    """The definition evaluated literally: prefix sums E_t E_t^H = sum_{i<=t} e_i e_i^H of the embedded
    tokens, then yhat_t = W_PV (E_t E_t^H / (t-1)) W_KQ e_t. Memory O(m T (2d)^2): small data sets only."""

    check_weights(W_KQ, W_PV, data.d)
    e = embed(data.tokens())  # (m, T, 2d)
    pref = torch.cumsum(e[..., :, None] * e[..., None, :].conj(), dim=1)  # (m, T, 2d, 2d)
    t = torch.arange(2, data.T)
    q = e[:, t - 1] @ W_KQ.to(data.dtype).T  # e_t at 0-based index t-1
    u = (pref[:, t - 1] @ q[..., None]).squeeze(-1) / (t - 1).to(data.dtype)[None, :, None]
    return u @ W_PV.to(data.dtype).T


def _seq_mats(data: ARData, W_KQ, W_PV):
    d = data.d
    z, lam = data.x1, data.lam
    lc = lam.conj()
    A11, A12, A21, A22 = W_KQ[:d, :d], W_KQ[:d, d:], W_KQ[d:, :d], W_KQ[d:, d:]
    P1, P2 = W_PV[:, :d], W_PV[:, d:]
    N = A11 + A12 * lc[:, None, :]
    M = N + lam[:, :, None] * (A21 + A22 * lc[:, None, :])
    R = P1 + P2 * lc[:, None, :]
    return z, lam, N, M, R


def _cauchy(data: ARData):
    """Per-sequence K_jk = 1/(lam_j conj(lam_k) - 1) (j != k, non-coinciding phases) and, if some pair of
    phases coincides exactly (possible for grid data; probability 0 for uniform phases), the 0/1 matrix D of
    coinciding pairs (diagonal included), for which sum_{r<t} (lam_j conj lam_k)^r = t. Computed from the
    float64 phases and cached."""
    if "K" not in data._tables:
        d, dt = data.d, data.dtype
        diff = data.theta[:, :, None] - data.theta[:, None, :]
        deg = np.abs(np.sin(diff / 2)) < 1e-12
        om1 = 2j * np.sin(diff / 2) * np.exp(0.5j * diff)  # exp(i diff) - 1 without cancellation
        K = np.where(deg, 0.0, 1.0 / np.where(deg, 1.0, om1))
        D = None
        if (deg & ~np.eye(d, dtype=bool)).any():
            D = torch.from_numpy(deg.astype(float)).to(dt)
        data._tables["K"] = (torch.from_numpy(K).to(dt), D)
    return data._tables["K"]


def _maps(data: ARData, W_KQ, W_PV):
    """The per-sequence maps of the fused form: ``C = [Ma^T | Mb^T | Ma^T 1 | N^T conj(z)]`` (m, d, 2d+2) and
    ``Rv = [(R diag z)^T; (W_PV1 z)^T]`` (m, d+1, d), with K, the coinciding-phase matrix and z, lam."""
    d = data.d
    K, Dg = _cauchy(data)
    z, lam, N, M, R = _seq_mats(data, W_KQ, W_PV)
    zc = z.conj()
    MaT = (zc[:, :, None] * M).transpose(1, 2)  # Ma^T, Ma = diag(conj z) M
    MbT = MaT @ K.transpose(1, 2)  # (K Ma)^T
    wp = N.transpose(1, 2) @ zc.unsqueeze(-1)  # (m, d, 1)
    C = torch.cat([MaT, MbT, MaT.sum(-1, keepdim=True), wp], dim=-1)
    v = (W_PV[:, :d] @ z.unsqueeze(-1)).transpose(1, 2)  # (m, 1, d)
    Rv = torch.cat([(R * z[:, None, :]).transpose(1, 2), v], dim=1)
    return z, lam, K, Dg, C, Rv


def _sweep_torch(data: ARData, pos, K, Dg, C, Rv, wn, backward: bool):
    """The forward/backward sweep with batched torch products (the reference for the fused kernel, and the
    path for data with coinciding phases). Returns (per-sequence loss, dL/dC, dL/dRv, predictions)."""
    d, dt = data.d, data.dtype
    X, ph, tgt = data.tables(pos)
    F = X @ C
    a, Ka, s, sp = F[..., :d], F[..., d : 2 * d], F[..., 2 * d : 2 * d + 1], F[..., 2 * d + 1 :]
    t = torch.from_numpy(pos.astype(float))
    tt = t.to(dt)[None, :, None]
    inv_rho = (1 / (t - 1)).to(dt)[None, :, None]
    phc = ph.conj()
    Kb = (phc * a) @ K.transpose(1, 2)
    w = tt * (a if Dg is None else a @ Dg.transpose(1, 2)) + ph * Kb - Ka - s
    Wx = torch.cat([w, sp], dim=-1)  # (m, N, d+1)
    yhat = (Wx @ Rv) * inv_rho
    r = yhat - tgt
    per_seq = 0.5 * (r.real**2 + r.imag**2).sum(dim=(1, 2))
    if not backward:
        return per_seq, None, None, yhat
    g_out = r * (inv_rho * wn.to(dt)[:, None, None])
    g_Rv = Wx.conj().transpose(1, 2) @ g_out  # (m, d+1, d)
    g_Wx = g_out @ Rv.conj().transpose(1, 2)  # (m, N, d+1)
    g_w, g_sp = g_Wx[..., :d], g_Wx[..., d:]
    g_b = (phc * g_w) @ K.conj()  # adjoint of (. @ K^T)
    g_a = (tt * g_w if Dg is None else (tt * g_w) @ Dg) + ph * g_b
    g_F = torch.cat([g_a, -g_w, -g_w.sum(-1, keepdim=True), g_sp], dim=-1)
    g_C = X.conj().transpose(1, 2) @ g_F  # (m, d, 2d+2)
    return per_seq, g_C, g_Rv, yhat


def _use_fused(data: ARData, backend: str) -> bool:
    backend = params.choice("backend", backend, ["auto", "fused", "torch"])
    if backend == "torch":
        return False
    return _cauchy(data)[1] is None  # coinciding phases (grid data) take the torch path


def _sweep_fused(data: ARData, W_KQ, W_PV, pos, wn, mode: int):
    """The sweep with the fused kernel (:mod:`companion.mesa.lanes.host`): per-sequence maps, positions and the
    lift back to the weights in one pass. Returns (per-sequence loss, grad W_KQ, grad W_PV, yhat)."""

    rdt = np.float32 if data.dtype == torch.complex64 else np.float64
    key = ("lanes", tuple(int(t) for t in pos))
    if key not in data._tables:
        # copies, not views: torch may move a tensor's storage (share_memory_ when the data set is sent to
        # another process), which would leave a cached view pointing at freed memory
        data._tables[key] = host.tables(data.theta, np.array(data.x1.numpy()), np.array(data.lam.numpy()),
                                           np.array(_cauchy(data)[0].numpy()), pos, rdt)
    TB, SQ = data._tables[key]
    m, d, N = data.m, data.d, len(pos)
    nb = TB.shape[0]  # blocks of 16 sequences
    per_seq = np.empty(m)
    gA = np.zeros((nb, 2 * d, 2 * d) if mode == 1 else (nb, 1, 1), np.complex128)
    gP = np.zeros((nb, d, 2 * d) if mode == 1 else (nb, 1, 1), np.complex128)
    pred = np.empty((2, m, d, N) if mode == 2 else (1, 1, 1, 1), rdt)
    host.sweep(TB, SQ, pos, 1.0 / (pos - 1), W_KQ.resolve_conj().numpy(), W_PV.resolve_conj().numpy(),
                  wn.numpy(), mode, per_seq, gA, gP, pred)
    yhat = None
    if mode == 2:
        yhat = torch.complex(torch.from_numpy(pred[0]), torch.from_numpy(pred[1])).transpose(1, 2)
    cdt = np.complex64 if rdt == np.float32 else np.complex128
    return (torch.from_numpy(per_seq), torch.from_numpy(gA.sum(0).astype(cdt)),
            torch.from_numpy(gP.sum(0).astype(cdt)), yhat)


def _weights_normalised(data: ARData, weights) -> torch.Tensor:
    """Weights of the sequences in the loss: ``weights`` normalised to sum 1; when None, 1/m each, or for a tilted
    set (:func:`companion.mesa.data.generate`) its importance weights divided by m (not by their sum: the loss is
    then an unbiased estimate of the population loss)."""
    if data.w is not None:
        if weights is not None:
            raise params.ParameterError("weights", "a tilted data set carries its own importance weights; pass none")
        return data.w.to(torch.float64) / data.m
    if weights is None:
        return torch.full((data.m,), 1.0 / data.m, dtype=torch.float64)
    try:
        w = torch.as_tensor(np.asarray(weights, dtype=float), dtype=torch.float64)
    except (TypeError, ValueError):
        raise params.ParameterError("weights", f"must be {data.m} real numbers; got {type(weights).__name__}") from None
    if tuple(w.shape) != (data.m,):
        raise params.ParameterError("weights", f"must have shape ({data.m},), one per sequence; got {tuple(w.shape)}")
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()) or not float(w.sum()) > 0:
        raise params.ParameterError("weights", "must be finite and >= 0 with a positive sum")
    return w / w.sum()


def _prepare(data: ARData, W_KQ, W_PV, weights, positions):
    """Checked inputs of the fast paths: (positions, W_KQ, W_PV in the data dtype, normalised weights)."""
    check_weights(W_KQ, W_PV, data.d)
    pos = _positions(data.T, positions)
    dt = data.dtype
    return pos, W_KQ.detach().to(dt), W_PV.detach().to(dt), _weights_normalised(data, weights)


def _forward(data: ARData, W_KQ, W_PV, weights, positions, backend: str, mode: int):
    """Forward-only sweep (mode 0: loss, 2: also predictions): (per-sequence loss, normalised weights, yhat)."""
    pos, W_KQ, W_PV, wn = _prepare(data, W_KQ, W_PV, weights, positions)
    if _use_fused(data, backend):
        per_seq, _, _, yhat = _sweep_fused(data, W_KQ, W_PV, pos, wn, mode)
    else:
        _, _, K, Dg, C, Rv = _maps(data, W_KQ, W_PV)
        per_seq, _, _, yhat = _sweep_torch(data, pos, K, Dg, C, Rv, wn, False)
    return per_seq, wn, yhat


def per_sequence_loss(data: ARData, W_KQ, W_PV, positions=None, backend: str = "auto") -> np.ndarray:
    """``sum_t 1/2 |yhat_t - x_{t+1}|^2`` for every sequence (t over ``positions``, default 2..T-1), forward only."""
    return _forward(data, W_KQ, W_PV, None, positions, backend, 0)[0].numpy().astype(float)


def ratio_entries(data: ARData, W_KQ, W_PV, position: int | None = None) -> np.ndarray:
    """Re yhat_{t,j} / (x_{t+1,j} + 1e-5) at position t (default T-1) for every sequence and coordinate (the
    official "ratio of pred/true at T_te" is their mean)."""
    t = data.T - 1 if position is None else position
    y = predict_fast(data, W_KQ, W_PV, positions=[t])[:, 0]
    x_next = data.tables(_positions(data.T, [t]))[2][:, 0]
    return (y / (x_next + 1e-5)).real.numpy().ravel()


def loss_fast(data: ARData, W_KQ, W_PV, weights=None, positions=None, backend: str = "auto") -> float:
    """The loss of :func:`loss` (forward only, no autograd) with the fused kernel."""
    per_seq, wn, _ = _forward(data, W_KQ, W_PV, weights, positions, backend, 0)
    return float((per_seq.double() * wn).sum())


def predict_fast(data: ARData, W_KQ, W_PV, positions=None, backend: str = "auto") -> torch.Tensor:
    """The predictions of :func:`predict` (no autograd) with the fused kernel: (m, len(positions), d)."""
    return _forward(data, W_KQ, W_PV, None, positions, backend, 2)[2]


def loss_grad_fast(data: ARData, W_KQ, W_PV, weights=None, positions=None, backend: str = "auto"):
    """Loss and closed-form gradients (PyTorch convention) in one forward/backward sweep.

    Same mathematics as :func:`predict` (see the module docstring), arranged so that the four
    position-dependent linear maps are fused into batched products:
    ``F = X [Ma^T | Mb^T | Ma^T 1 | N^T conj(z)]`` gives (a, K a, s, s') at once, and
    ``yhat rho = [w | s'] [R'^T; v^T]`` with ``w = t a + lam^t K(conj(lam)^t a) - K a - s``,
    ``R' = R diag(z)``, ``v = W_PV1 z``. The backward pass applies the adjoints of the same maps
    (K is Hermitian). ``backend="auto"`` runs the sweep over positions in the fused kernel
    (:mod:`companion.mesa.lanes.host`), ``"torch"`` with batched torch products (same formulas); data with
    coinciding phases always take the torch path. Returns (loss, grad W_KQ, grad W_PV); the tests compare
    both backends with autograd and with a naive per-prefix implementation.
    """
    d = data.d
    pos, W_KQ, W_PV, wn = _prepare(data, W_KQ, W_PV, weights, positions)
    if _use_fused(data, backend):
        per_seq, gA, gP, _ = _sweep_fused(data, W_KQ, W_PV, pos, wn, 1)
        return (per_seq.double() * wn).sum(), gA, gP
    z, lam, K, Dg, C, Rv = _maps(data, W_KQ, W_PV)
    per_seq, g_C, g_Rv, _ = _sweep_torch(data, pos, K, Dg, C, Rv, wn, True)
    L = (per_seq.double() * wn).sum()
    # ---- from dL/dC, dL/dRv back to the weights
    zc = z.conj()
    g_MaT = g_C[..., :d] + g_C[..., d : 2 * d] @ K.conj() + g_C[..., 2 * d : 2 * d + 1]
    g_wp = g_C[..., 2 * d + 1]  # (m, d)
    g_M = (g_MaT * z[:, None, :]).transpose(1, 2)  # Ma^T = M^T diag(conj z)
    g_N = g_M + z[:, :, None] * g_wp[:, None, :]  # wp = N^T conj(z): dN_ij += z_i g_wp_j
    gA = torch.zeros_like(W_KQ)
    gA[:d, :d] = g_N.sum(0)
    gA[:d, d:] = (g_N * lam[:, None, :]).sum(0)
    lc = lam.conj()
    gA[d:, :d] = (lc[:, :, None] * g_M).sum(0)
    gA[d:, d:] = (lc[:, :, None] * g_M * lam[:, None, :]).sum(0)
    g_Rz = g_Rv[:, :d, :].transpose(1, 2)  # grad of R diag(z)
    g_R = g_Rz * zc[:, None, :]
    g_v = g_Rv[:, d, :]  # (m, d)
    gP = torch.zeros_like(W_PV)
    gP[:, :d] = g_R.sum(0) + (g_v[:, :, None] * zc[:, None, :]).sum(0)
    gP[:, d:] = (g_R * lam[:, None, :]).sum(0)
    return L, gA, gP
