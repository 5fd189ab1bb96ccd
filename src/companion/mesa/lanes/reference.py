r"""A plain NumPy interpreter of the lane kernel's equations, for checking the compiled code by reading.

:func:`sweep` evaluates, in float64, one sequence and one position at a time, exactly the recurrences of
the package docstring (:mod:`companion.mesa.lanes`): the per-sequence maps C and :math:`R_v`, the forward
pass at each position, the running sums :math:`\nabla C` and :math:`\nabla R_v` over the positions, and
the lift back to :math:`W^{KQ}` and :math:`W^{PV}`. Each function below is one group of equations, with the
names of the docstring. Nothing is batched over sequences or positions: it is slow (milliseconds per
sequence) and meant to be read next to the maths.

:func:`definition` evaluates the model as defined instead: the prefix sum
:math:`S_t = S_{t-1} + e_t e_t^H` of the embedded tokens, built position by position, and the gradients
:math:`\nabla W^{PV} = \sum w_n g_t (S_t W^{KQ} e_t)^H`, :math:`\nabla W^{KQ} = \sum w_n S_t (W^{PV})^H g_t e_t^H`
with :math:`g_t = r_t/\rho_t`. The two agree to round-off exactly when the closed form of the prefix sum
(and the rest of the derivation) is right; the tests check both against the compiled kernel.
"""

from __future__ import annotations

import numpy as np

__all__ = ["cauchy", "maps", "forward", "backward", "lift", "sweep", "definition"]


def cauchy(lam: np.ndarray) -> np.ndarray:
    r"""The Cauchy-like matrix of one sequence,

    .. math::

        K_{jk} = \frac{1}{\lambda_j \bar\lambda_k - 1} \quad (j \ne k), \qquad K_{jj} = 0 .
    """
    d = lam.shape[0]
    K = np.zeros((d, d), complex)
    for j in range(d):
        for k in range(d):
            if j != k:
                K[j, k] = 1.0 / (lam[j] * np.conj(lam[k]) - 1.0)
    return K


def maps(W_KQ: np.ndarray, W_PV: np.ndarray, z: np.ndarray, lam: np.ndarray, K: np.ndarray) -> dict:
    r"""The per-sequence maps:

    .. math::

        N = A_{11} + A_{12}\bar\Lambda, \quad M = N + \Lambda (A_{21} + A_{22}\bar\Lambda), \quad
        M_a = \operatorname{diag}(\bar z) M, \quad R = P_1 + P_2 \bar\Lambda,

        C = [M_a^T \,|\, (K M_a)^T \,|\, M_a^T \mathbf 1 \,|\, N^T \bar z], \qquad
        R_v = [(R \operatorname{diag} z)^T ; (P_1 z)^T].

    Returns a dict with ``N``, ``M``, ``C`` (d x (2d+2)) and ``Rv`` ((d+1) x d).
    """
    d = z.shape[0]
    A11, A12, A21, A22 = W_KQ[:d, :d], W_KQ[:d, d:], W_KQ[d:, :d], W_KQ[d:, d:]
    P1, P2 = W_PV[:, :d], W_PV[:, d:]
    Lam, Lamc = np.diag(lam), np.diag(np.conj(lam))
    N = A11 + A12 @ Lamc
    M = N + Lam @ (A21 + A22 @ Lamc)
    Ma = np.diag(np.conj(z)) @ M
    R = P1 + P2 @ Lamc
    C = np.zeros((d, 2 * d + 2), complex)
    C[:, :d] = Ma.T
    C[:, d:2 * d] = (K @ Ma).T
    C[:, 2 * d] = Ma.T @ np.ones(d)
    C[:, 2 * d + 1] = N.T @ np.conj(z)
    Rv = np.zeros((d + 1, d), complex)
    Rv[:d] = (R @ np.diag(z)).T
    Rv[d] = P1 @ z
    return {"N": N, "M": M, "C": C, "Rv": Rv}


def forward(C: np.ndarray, Rv: np.ndarray, K: np.ndarray, x: np.ndarray, lamt: np.ndarray, t: int,
            y: np.ndarray) -> dict:
    r"""One position t of the forward pass:

    .. math::

        F_t = C^T x_t = (a_t, K a_t, s_t, s'_t), \qquad
        w_t = t a_t + \lambda^t \circ K(\bar\lambda^t \circ a_t) - K a_t - s_t \mathbf 1,

        \hat y_t = R_v^T \omega_t / \rho_t, \quad \omega_t = (w_t, s'_t), \qquad r_t = \hat y_t - y_t .

    ``x`` is :math:`x_t`, ``lamt`` :math:`\lambda^t`, ``y`` the target :math:`x_{t+1}`. Returns a dict with
    ``omega``, ``yhat``, ``r`` and the loss term ``loss`` :math:`= \frac12 |r_t|^2`.
    """
    d = x.shape[0]
    F = C.T @ x
    a, Ka, s, sp = F[:d], F[d:2 * d], F[2 * d], F[2 * d + 1]
    w = t * a + lamt * (K @ (np.conj(lamt) * a)) - Ka - s * np.ones(d)
    omega = np.concatenate([w, [sp]])
    yhat = Rv.T @ omega / (t - 1)
    r = yhat - y
    return {"omega": omega, "yhat": yhat, "r": r, "loss": 0.5 * float(np.sum(np.abs(r) ** 2))}


def backward(Rv: np.ndarray, K: np.ndarray, x: np.ndarray, lamt: np.ndarray, t: int, omega: np.ndarray,
             r: np.ndarray, wn: float, gC: np.ndarray, gRv: np.ndarray) -> None:
    r"""One position t of the backward pass: adds the position's terms to the running sums ``gC``
    (:math:`\nabla C`) and ``gRv`` (:math:`\nabla R_v`) in place.

    .. math::

        g_t = w_n r_t / \rho_t, \qquad \nabla R_v \mathrel{+}= \bar\omega_t g_t^T, \qquad
        (\gamma_t, \gamma'_t) = \bar R_v g_t,

        \nabla F_t = \bigl(t \gamma_t + \lambda^t \circ K^H(\bar\lambda^t \circ \gamma_t),\;
        -\gamma_t,\; -\mathbf 1^T \gamma_t,\; \gamma'_t\bigr), \qquad
        \nabla C \mathrel{+}= \bar x_t (\nabla F_t)^T .
    """
    d = x.shape[0]
    g = wn * r / (t - 1)
    gRv += np.outer(np.conj(omega), g)
    gomega = np.conj(Rv) @ g
    gamma, gamma_p = gomega[:d], gomega[d]
    ga = t * gamma + lamt * (K.conj().T @ (np.conj(lamt) * gamma))
    gF = np.concatenate([ga, -gamma, [-np.sum(gamma)], [gamma_p]])
    gC += np.outer(np.conj(x), gF)


def lift(gC: np.ndarray, gRv: np.ndarray, z: np.ndarray, lam: np.ndarray, K: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""The gradients of one sequence's weights from the running sums :math:`\nabla C`, :math:`\nabla R_v`:

    .. math::

        \nabla M_a = (\nabla C_{\cdot,a})^T + K^H (\nabla C_{\cdot,Ka})^T + \mathbf 1 (\nabla C_{\cdot,s})^T,
        \quad \nabla M = \operatorname{diag}(z) \nabla M_a, \quad
        \nabla N = \nabla M + z (\nabla C_{\cdot,s'})^T,

        \nabla A_{11} = \nabla N, \quad \nabla A_{12} = \nabla N \Lambda, \quad
        \nabla A_{21} = \bar\Lambda \nabla M, \quad \nabla A_{22} = \bar\Lambda \nabla M \Lambda,

        \nabla R = (\nabla R_{v,1:d})^T \operatorname{diag}(\bar z), \quad
        \nabla P_1 = \nabla R + (\nabla R_{v,d+1})^T z^H, \quad \nabla P_2 = \nabla R \Lambda .

    Returns (dL/dW_KQ (2d x 2d), dL/dW_PV (d x 2d)).
    """
    d = z.shape[0]
    Lam, Lamc = np.diag(lam), np.diag(np.conj(lam))
    gC_a, gC_Ka, gC_s, gC_sp = gC[:, :d], gC[:, d:2 * d], gC[:, 2 * d], gC[:, 2 * d + 1]
    gMa = gC_a.T + K.conj().T @ gC_Ka.T + np.outer(np.ones(d), gC_s)
    gM = np.diag(z) @ gMa
    gN = gM + np.outer(z, gC_sp)
    gA = np.zeros((2 * d, 2 * d), complex)
    gA[:d, :d] = gN
    gA[:d, d:] = gN @ Lam
    gA[d:, :d] = Lamc @ gM
    gA[d:, d:] = Lamc @ gM @ Lam
    gR = gRv[:d].T @ np.diag(np.conj(z))
    gP = np.zeros((d, 2 * d), complex)
    gP[:, :d] = gR + np.outer(gRv[d], np.conj(z))
    gP[:, d:] = gR @ Lam
    return gA, gP


def _inputs(theta, x1, positions, W_KQ, W_PV, wn):
    theta = np.asarray(theta, dtype=float)
    return (theta, np.asarray(x1, dtype=complex), [int(t) for t in positions], np.asarray(W_KQ, dtype=complex),
            np.asarray(W_PV, dtype=complex), np.asarray(wn, dtype=float))


def sweep(theta, x1, positions, W_KQ, W_PV, wn) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    r"""The lane kernel's computation, one sequence and one position at a time (float64).

    Parameters
    ----------
    theta, x1 : (m, d) arrays
        The phases (:math:`\lambda = e^{i\theta}`) and the first tokens :math:`z = x_1` of the sequences.
    positions : sequence of int
        The prediction positions t (each in 2..T-1), in the order the kernel visits them.
    W_KQ, W_PV : (2d, 2d) and (d, 2d) complex arrays
        The weights.
    wn : (m,) array
        The sequences' weights in the loss (normalised by the caller, as for
        :func:`companion.mesa.lanes.host.sweep`).

    Returns
    -------
    loss : (m,) array
        :math:`\ell_n = \frac12 \sum_t |r_t|^2` per sequence (unweighted).
    gA, gP : complex arrays
        :math:`\nabla W^{KQ}`, :math:`\nabla W^{PV}` of :math:`L = \sum_n w_n \ell_n` (PyTorch's convention).
    yhat : (m, len(positions), d) complex array
        The predictions.
    """
    theta, x1, positions, W_KQ, W_PV, wn = _inputs(theta, x1, positions, W_KQ, W_PV, wn)
    m, d = x1.shape
    loss = np.zeros(m)
    gA = np.zeros((2 * d, 2 * d), complex)
    gP = np.zeros((d, 2 * d), complex)
    yhat = np.zeros((m, len(positions), d), complex)
    for n in range(m):
        z, lam = x1[n], np.exp(1j * theta[n])
        K = cauchy(lam)
        mp = maps(W_KQ, W_PV, z, lam, K)
        gC = np.zeros((d, 2 * d + 2), complex)  # the running sums start at 0
        gRv = np.zeros((d + 1, d), complex)
        for p, t in enumerate(positions):
            lamt = np.exp(1j * theta[n] * t)
            x = np.exp(1j * theta[n] * (t - 1)) * z  # x_t = lam^(t-1) z
            y = lamt * z  # x_{t+1}
            fw = forward(mp["C"], mp["Rv"], K, x, lamt, t, y)
            loss[n] += fw["loss"]
            yhat[n, p] = fw["yhat"]
            backward(mp["Rv"], K, x, lamt, t, fw["omega"], fw["r"], wn[n], gC, gRv)
        gA_n, gP_n = lift(gC, gRv, z, lam, K)
        gA += gA_n
        gP += gP_n
    return loss, gA, gP, yhat


def definition(theta, x1, positions, W_KQ, W_PV, wn) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    r"""The same quantities as :func:`sweep` from the model's definition, with the prefix sum of the
    embedded tokens built position by position (float64):

    .. math::

        x_{t} = \Lambda x_{t-1}, \quad e_t = (x_t, x_{t-1}), \quad S_t = S_{t-1} + e_t e_t^H
        \quad (x_0 = 0,\ S_0 = 0), \qquad
        \hat y_t = W^{PV} S_t W^{KQ} e_t / \rho_t,

        \nabla W^{PV} \mathrel{+}= w_n \frac{r_t}{\rho_t} (S_t W^{KQ} e_t)^H, \qquad
        \nabla W^{KQ} \mathrel{+}= w_n S_t (W^{PV})^H \frac{r_t}{\rho_t} e_t^H .

    Same parameters and returns as :func:`sweep`.
    """
    theta, x1, positions, W_KQ, W_PV, wn = _inputs(theta, x1, positions, W_KQ, W_PV, wn)
    m, d = x1.shape
    want = set(positions)
    loss = np.zeros(m)
    gA = np.zeros((2 * d, 2 * d), complex)
    gP = np.zeros((d, 2 * d), complex)
    yhat = np.zeros((m, len(positions), d), complex)
    for n in range(m):
        lam = np.exp(1j * theta[n])
        S = np.zeros((2 * d, 2 * d), complex)
        x_prev, x = np.zeros(d, complex), x1[n]
        at: dict[int, tuple] = {}
        for t in range(1, max(positions) + 1):
            e = np.concatenate([x, x_prev])
            S = S + np.outer(e, np.conj(e))
            if t in want:
                u = S @ W_KQ @ e
                yh = W_PV @ u / (t - 1)
                r = yh - lam * x  # target x_{t+1} = Lambda x_t
                at[t] = (yh, r, S, e, u)
            x_prev, x = x, lam * x
        for p, t in enumerate(positions):
            yh, r, S, e, u = at[t]
            loss[n] += 0.5 * float(np.sum(np.abs(r) ** 2))
            yhat[n, p] = yh
            g = wn[n] * r / (t - 1)
            gP += np.outer(g, np.conj(u))
            gA += np.outer(S @ W_PV.conj().T @ g, np.conj(e))
    return loss, gA, gP, yhat
