"""Exact population theory of the mesa paper, as formulated and verified in this book
(:prf:ref:`mesa-thm-4-1`, :prf:ref:`mesa-thm-4-2`, :prf:ref:`mesa-prop-4-1`, :prf:ref:`mesa-prop-4-2`,
:prf:ref:`mesa-thm-4-3`).

Notation: N = T - 2 prediction positions, H = H_{T-2} = sum_{s<=T-2} 1/s, per-coordinate moments
m2 = E x_j^2, m4 = E x_j^4, m6 = E x_j^6, m24 = E x_j^2 x_k^4 (j != k) of the initial token, and

    alpha = N m6 + (d-1) H m24,   beta = N m4,   c* = beta / alpha.

On the diagonal red-block manifold (W_KQ21 = a I, W_PV11 = b I) the population loss is
L(a, b) = (d/2) (alpha c^2 - 2 beta c + N m2) with c = ab, and gradient flow / GD move every diagonal
entry by -b (alpha ab - beta) resp. -a (alpha ab - beta).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from companion import params
from companion.mesa.data import check_law, sample_x1

__all__ = [
    "harmonic",
    "Moments",
    "moments",
    "moments_mc",
    "alpha_beta",
    "c_star",
    "limits",
    "reduced_gd",
    "gradient_flow",
    "population_loss",
    "position_loss",
    "last_position_loss",
    "ratio_prediction",
    "stability_number",
    "check_stability",
    "offdiag_gradient",
    "assumption_4_2",
    "one_step_gd_predict",
    "masked_full_one_c_star",
    "equivariant_c",
    "equivariant_gd",
]


EXACT_LAWS = ("gaussian", "sparse", "full_one", "rademacher", "sparse_gaussian")


def harmonic(n: int, order: int = 1) -> float:
    """H^{(order)}_n = sum_{s=1}^n s^-order (0 for n = 0)."""
    n = params.integer("n", n, min=0)
    return float(math.fsum(1.0 / s**order for s in range(1, n + 1)))


@dataclass(frozen=True)
class Moments:
    """Moments of one coordinate of x_1 (and the odd cross moments entering Prop 4.2)."""

    m2: float
    m4: float
    m6: float
    m24: float  # E x_j^2 x_k^4, j != k
    # odd cross moments (j, k, n distinct): E x_j^3 x_k^3, E x_j x_k^5, E x_j x_k^3 x_n^2, E x_j x_k^3
    c33: float = 0.0
    c15: float = 0.0
    c132: float = 0.0
    c13: float = 0.0


def moments(law: str, scale: float = 1.0, d: int = 5) -> Moments:
    """Exact moments of the built-in laws (the table of :ref:`mesa-thm4-1`).

    Args:
        law: one of ``EXACT_LAWS``; scale: sigma or c; d: dimension.
    Returns:
        :class:`Moments` with m2, m4, m6, m24 and the odd cross moments of :prf:ref:`mesa-prop-4-2`.
    """
    law = params.choice("law", law, list(EXACT_LAWS))
    s = params.real("scale", scale, min=0, min_open=True)
    d = params.integer("d", d, min=1)
    if law == "gaussian":
        return Moments(s**2, 3 * s**4, 15 * s**6, 3 * s**6)
    if law == "sparse":
        return Moments(s**2 / d, s**4 / d, s**6 / d, 0.0)
    if law == "rademacher":
        return Moments(s**2, s**4, s**6, s**6)
    if law == "sparse_gaussian":
        return Moments(s**2 / d, 3 * s**4 / d, 15 * s**6 / d, 0.0)
    # full_one: every moment, odd ones included, is a power of the scale
    return Moments(s**2, s**4, s**6, s**6, c33=s**6, c15=s**6, c132=s**6, c13=s**4)


def moments_mc(law, scale: float, d: int, n: int = 200_000, rng: np.random.Generator | int = 0) -> Moments:
    """Monte-Carlo moments of any law (e.g. a plugged-in sampler); coordinates 0, 1, 2 stand for j, k, n."""
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    x = sample_x1(law, n, d, scale, rng)
    j = x[:, 0]
    k = x[:, 1] if d > 1 else np.zeros(n)
    q = x[:, 2] if d > 2 else np.zeros(n)
    mean = lambda v: float(np.mean(v))  # noqa: E731
    return Moments(
        m2=mean(x**2),
        m4=mean(x**4),
        m6=mean(x**6),
        m24=mean(j**2 * k**4),
        c33=mean(j**3 * k**3),
        c15=mean(j * k**5),
        c132=mean(j * k**3 * q**2),
        c13=mean(j * k**3),
    )


def _mom(law_or_moments, scale, d) -> Moments:
    if isinstance(law_or_moments, Moments):
        return law_or_moments
    law = check_law(law_or_moments)
    if callable(law) or law not in EXACT_LAWS:
        return moments_mc(law, scale, d)
    return moments(law, scale, d)


def alpha_beta(law, scale: float, d: int, T: int) -> tuple[float, float]:
    r"""The coefficients of the reduced loss (:prf:ref:`mesa-thm-4-1`).

    .. math:: \alpha = N m_6 + (d-1) H_{T-2}\, m_{24},\qquad \beta = N m_4,\qquad N = T-2 .

    Returns:
        ``(alpha, beta)``.
    """
    d = params.integer("d", d, min=1)
    T = params.integer("T", T, min=3)
    mo = _mom(law, scale, d)
    N = T - 2
    return N * mo.m6 + (d - 1) * harmonic(N) * mo.m24, N * mo.m4


def c_star(law, scale: float, d: int, T: int) -> float:
    r"""The limit of ab (:prf:ref:`mesa-thm-4-1`).

    .. math:: c^* = \frac{\beta}{\alpha} = \frac{m_4}{m_6 + (d-1) H_{T-2} m_{24}/(T-2)} .
    """
    al, be = alpha_beta(law, scale, d, T)
    return be / al


def masked_full_one_c_star(d: int, T: int) -> float:
    r"""The masked limit for :math:`x_1=\mathbf 1` (:prf:ref:`mesa-thm-4-3`).

    .. math:: c^* = \frac{T-2}{(T-2) + (d-1) H_{T-2}} .
    """
    N = params.integer("T", T, min=3) - 2
    return N / (N + (params.integer("d", d, min=1) - 1) * harmonic(N))


def limits(a0: float, b0: float, c: float) -> tuple[float, float]:
    """(a_inf, b_inf) from the conserved a^2 - b^2 and a_inf b_inf = c > 0.

    The factor of larger modulus never crosses zero, so it keeps its sign; the other one ends with
    the same sign (c > 0). Excluded: a0^2 = b0^2 with a0 b0 <= 0 (the flow stays on a^2 = b^2, ab <= 0).
    """
    a0 = params.real("a0", a0)
    b0 = params.real("b0", b0)
    c = params.real("c", c, min=0, min_open=True)
    delta = a0**2 - b0**2
    if delta == 0 and a0 * b0 <= 0:
        raise params.ParameterError("a0", f"a0^2 = b0^2 with a0*b0 <= 0 never reaches ab = c*; got a0={a0}, b0={b0}")
    root = math.sqrt(delta**2 + 4 * c**2)
    a_abs = math.sqrt((root + delta) / 2)
    b_abs = math.sqrt((root - delta) / 2)
    sign = math.copysign(1.0, a0 if abs(a0) >= abs(b0) else b0)
    return sign * a_abs, sign * b_abs


def reduced_gd(a0: float, b0: float, lr: float, epochs: int, alpha: float, beta: float):
    """Forward Euler on the reduced system = population GD with the same lr: arrays a, b, ab (epochs+1)."""
    lr = params.real("lr", lr, min=0, min_open=True)
    epochs = params.integer("epochs", epochs, min=0)
    a = np.empty(epochs + 1)
    b = np.empty(epochs + 1)
    a[0], b[0] = a0, b0
    for k in range(epochs):
        g = alpha * a[k] * b[k] - beta
        a[k + 1] = a[k] - lr * b[k] * g
        b[k + 1] = b[k] - lr * a[k] * g
    return a, b, a * b


def gradient_flow(a0: float, b0: float, tau, alpha: float, beta: float, rtol: float = 1e-11, atol: float = 1e-13):
    """Gradient flow (a, b)(tau) of the reduced system by scipy's solve_ivp (DOP853)."""
    from scipy.integrate import solve_ivp

    tau = np.asarray(tau, dtype=float)

    def rhs(_, y):
        g = alpha * y[0] * y[1] - beta
        return [-y[1] * g, -y[0] * g]

    sol = solve_ivp(rhs, (0.0, float(tau.max())), [a0, b0], t_eval=tau, method="DOP853", rtol=rtol, atol=atol)
    if not sol.success:  # pragma: no cover
        raise RuntimeError(sol.message)
    return sol.y[0], sol.y[1], sol.y[0] * sol.y[1]


def population_loss(law, scale: float, d: int, T: int, c) -> np.ndarray:
    r"""The population AR loss on the diagonal manifold at ab = c, summed over t = 2..T-1
    (:prf:ref:`mesa-thm-4-1`).

    .. math:: L(c) = \frac d2\big(\alpha c^2 - 2\beta c + N m_2\big) .
    """
    al, be = alpha_beta(law, scale, d, T)
    mo = _mom(law, scale, d)
    c = np.asarray(c, dtype=float)
    return d / 2 * (al * c**2 - 2 * be * c + (T - 2) * mo.m2)


def position_loss(law, scale: float, d: int, t, c) -> np.ndarray:
    r"""Population loss at prediction position t (context x_1..x_t, :prf:ref:`mesa-prop-4-1`).

    .. math:: \ell_t(c) = \frac d2\Big[c^2\Big(m_6 + \frac{(d-1)m_{24}}{t-1}\Big) - 2c\,m_4 + m_2\Big] .

    Args:
        t: prediction position(s), t >= 2 (the context has t - 1 pairs).
        c: the product ab.
    """
    mo = _mom(law, scale, d)
    t = np.asarray(t, dtype=float)
    return d / 2 * (c**2 * (mo.m6 + (d - 1) * mo.m24 / (t - 1)) - 2 * c * mo.m4 + mo.m2)


def last_position_loss(law, scale: float, d: int, T: int, c) -> float:
    return float(position_loss(law, scale, d, T - 1, c))


def ratio_prediction(law, scale: float, d: int, c: float) -> float:
    """E[yhat_{t,j} / x_{t+1,j}] = c m2 (any t >= 2) on the diagonal manifold with ab = c."""
    return c * _mom(law, scale, d).m2


def stability_number(lr: float, alpha: float, a: float, b: float) -> float:
    """lr * alpha * (a^2 + b^2): Euler on the reduced system is locally stable iff this is < 2."""
    return lr * alpha * (a**2 + b**2)


def check_stability(lr: float, alpha: float, beta: float, a0: float, b0: float) -> None:
    """Raise ParameterError('lr') if the Euler iteration is unstable at the start or at the limit."""
    pts = [(a0, b0)]
    if not (a0**2 == b0**2 and a0 * b0 <= 0):
        pts.append(limits(a0, b0, beta / alpha))
    for a, b in pts:
        s = stability_number(lr, alpha, a, b)
        if not s < 2:
            bound = 2 / (alpha * (a**2 + b**2))
            raise params.ParameterError(
                "lr",
                f"lr = {lr:g} violates the stability bound lr*alpha*(a^2+b^2) < 2 at (a, b) = ({a:.4g}, {b:.4g}) "
                f"(alpha = {alpha:.6g}); GD would diverge. Use lr < {bound:.3g}.",
            )


def offdiag_gradient(law, scale: float, d: int, T: int, a: float, b: float) -> tuple[float, float]:
    r"""Population gradient on an off-diagonal red-block entry (j != k) at the diagonal point (aI, bI).

    :prf:ref:`mesa-prop-4-2`:

    .. math:: \partial L/\partial W^{PV}_{jk} = a^2 b H\,E[x_j^3x_k^3],\qquad
              \partial L/\partial (W^{KQ}_{21})_{jk} = ab^2\big(H(E[x_j^3x_k^3]+E[x_jx_k^5])
              + H^{(2)}(d-2)E[x_jx_k^3x_n^2]\big) - bH\,E[x_jx_k^3] .

    Returns:
        ``(dL/dW_PV[j, k], dL/dW_KQ[d+j, k])``.
    """
    d = params.integer("d", d, min=2)
    mo = _mom(law, scale, d)
    N = params.integer("T", T, min=3) - 2
    H, H2 = harmonic(N), harmonic(N, 2)
    g_pv = a**2 * b * H * mo.c33
    g_kq = a * b**2 * (H * (mo.c33 + mo.c15) + H2 * (d - 2) * mo.c132) - b * H * mo.c13
    return g_pv, g_kq


def assumption_4_2(law, scale: float = 1.0, d: int = 5, rtol: float = 1e-12) -> dict:
    """The two parts of the recovery condition: (i) m24 = 0, (ii) m4^2 = m2 m6 (constant squared modulus)."""
    mo = _mom(law, scale, d)
    part_i = abs(mo.m24) <= rtol * mo.m6 if d > 1 else True
    part_ii = abs(mo.m4**2 - mo.m2 * mo.m6) <= rtol * mo.m2 * mo.m6
    return {"i_m24_zero": bool(part_i), "ii_cauchy_schwarz_equality": bool(part_ii), "holds": bool(part_i and part_ii),
            "m24": mo.m24, "m4^2 - m2 m6": mo.m4**2 - mo.m2 * mo.m6}


def one_step_gd_predict(x, a, b, positions=None):
    """One GD step from 0 on the in-context OLS loss, with step ab/(t-1) (diag(b), diag(a) allowed):

        yhat_t = diag(b) [ sum_{i=1}^{t-1} x_{i+1} x_i^H ] diag(a) x_t / (t-1).

    ``x``: (m, T, d) tokens (torch). Direct O(T d^2) prefix sums (use moderate m). Returns (m, len(positions), d).
    """
    import torch

    m, T, d = x.shape
    pos = np.arange(2, T) if positions is None else np.atleast_1d(np.asarray(positions))
    a = torch.as_tensor(np.broadcast_to(np.asarray(a, dtype=float), (d,)).copy()).to(x.dtype)
    b = torch.as_tensor(np.broadcast_to(np.asarray(b, dtype=float), (d,)).copy()).to(x.dtype)
    outer = x[:, 1:, :, None] * x[:, :-1, None, :].conj()  # x_{i+1} x_i^H, i = 1..T-1
    csum = torch.cumsum(outer, dim=1)  # index i-1 -> sum up to i
    idx = torch.as_tensor(pos - 2)  # sum_{i=1}^{t-1}: index t-2
    What = csum[:, idx]  # (m, P, d, d)
    xt = x[:, torch.as_tensor(pos - 1)]
    rho = torch.as_tensor(pos - 1, dtype=torch.float64).to(x.dtype)[None, :, None]
    return b * (What @ (a * xt)[..., None]).squeeze(-1) / rho


def equivariant_c(a, ap, b, bp) -> np.ndarray:
    r"""The coefficients of the prediction on the permutation-equivariant red blocks
    :math:`W^{KQ}_{21}=aI+a'(J-I)`, :math:`W^{PV}_{11}=bI+b'(J-I)` (all other blocks 0): the model is bilinear, so
    :math:`\hat y = \sum_k c_k F_k` with :math:`c=(ab,\,ab',\,a'b,\,a'b')` and the predictions :math:`F_k` at the
    four unit configurations ((I, I), (I, J-I), (J-I, I), (J-I, J-I) for (KQ, PV))."""
    return np.array([a * b, a * bp, ap * b, ap * bp])


def equivariant_gd(a0: float, b0: float, lr: float, epochs: int, G, h, d: int, masked: bool = False):
    r"""Population GD of the full model from the diagonal init (a0 I, b0 I) when x_1 is exchangeable (e.g.
    :math:`x_1=\mathbf 1`, :prf:ref:`mesa-thm-4-3`): it stays on the equivariant red blocks of
    :func:`equivariant_c` (the law is invariant under permuting coordinates, so the gradient at an equivariant
    point is equivariant, and every other block has zero population gradient by the degree argument of
    :prf:ref:`mesa-thm-4-1`). With :math:`L(c)=\frac12(c^\top Gc-2h^\top c+E\|Y\|^2)`, GD on the d diagonal and
    d(d-1) off-diagonal entries moves

    .. math:: a \leftarrow a-\frac{\eta}{d}\,\partial_a L,\qquad a'\leftarrow a'-\frac{\eta}{d(d-1)}\,\partial_{a'}L
              \quad(\text{same for } b, b'),

    :math:`\partial_a L = g\cdot(b, b', 0, 0)`, :math:`\partial_{a'}L = g\cdot(0, 0, b, b')`,
    :math:`\partial_b L = g\cdot(a, 0, a', 0)`, :math:`\partial_{b'}L = g\cdot(0, a, 0, a')`, :math:`g = Gc-h`.
    ``masked=True`` keeps a' = b' = 0 (the clip option); with :math:`G_{11}=d\alpha`, :math:`h_1=d\beta` this is
    :func:`reduced_gd`. Args: G (4, 4) and h (4,) the real moments of the loss. Returns (epochs+1, 4) rows
    (a, a', b, b')."""
    lr = params.real("lr", lr, min=0, min_open=True)
    epochs = params.integer("epochs", epochs, min=0)
    d = params.integer("d", d, min=2)
    G, h = np.asarray(G, float), np.asarray(h, float)
    x = np.empty((epochs + 1, 4))
    x[0] = a0, 0.0, b0, 0.0
    off = 0.0 if masked else lr / (d * (d - 1))
    for k in range(epochs):
        a, ap, b, bp = x[k]
        g = G @ equivariant_c(a, ap, b, bp) - h
        x[k + 1] = (a - lr / d * (g[0] * b + g[1] * bp), ap - off * (g[2] * b + g[3] * bp),
                    b - lr / d * (g[0] * a + g[2] * ap), bp - off * (g[1] * a + g[3] * ap))
    return x
