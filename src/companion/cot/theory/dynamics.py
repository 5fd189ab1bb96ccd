r"""The training dynamics of :prf:ref:`cot-thm-4-1`: gradient flow on the CoT loss (6) learns the construction, in
two stages.

* The reduced flow: on :math:`V_{31} = vI`, :math:`W_{13} = wI`, :math:`W_{24} = -1` the loss per coordinate is

  .. math:: \ell(v, w) = \tfrac12\sum_{i<k}\E_\lambda\bigl[\lambda^2 q_i^2\bigr],\qquad
            q_i = (vw+\eta)\,a_i - (v+\eta),\qquad a_i(\lambda) = 1 - (1-\eta\lambda)^i,

  with its zero at the construction :math:`(v, w) = (-\eta, 1)` (:func:`reduced_loss`, :func:`reduced_grad`,
  :func:`solve_reduced_flow`); stage 1 relaxes v to its quasi-equilibrium :math:`v_{\rm eq}(w)` at the rate
  :math:`\kappa(w)` (:func:`stage1_v`, :func:`v_curvature`, :func:`slow_manifold_time`), stage 2 approaches the zero
  at the rate :math:`\mu` (:func:`fixed_point_rate`, :func:`reduced_flow_converged`). :math:`\lambda` is a sample
  of eigenvalues of S (1.0: the limit :math:`n \to \infty`).
* The restricted matrix flow of :math:`(V_{31}, W_{13})` from Assumption 4.1 on a fixed sample of S
  (:func:`assumption41_init`, :func:`restricted_loss_grad`, :func:`restricted_flow`, :func:`symmetrised_S_sample`).
"""

from __future__ import annotations

import numpy as np
from scipy import integrate
from scipy.linalg import hadamard

from companion.params import ParameterError, integer, real, require

__all__ = ["reduced_loss", "reduced_grad", "stage1_v", "solve_reduced_flow", "fixed_point_rate",
           "reduced_flow_converged", "convergence_budget", "v_curvature", "slow_manifold_time", "assumption41_init", "gd_iterate_maps",
           "restricted_loss_grad", "restricted_flow_rhs", "restricted_flow", "symmetrised_S_sample"]


# ----------------------------------------------------------------------------- the reduced (v, w) flow
def _a(lam, eta, k):
    r""":math:`a_i(\lambda) = 1 - (1 - \eta\lambda)^i` for :math:`i = 0..k-1`, shape ``(k, *lam.shape)``."""
    i = np.arange(k).reshape((k,) + (1,) * np.ndim(lam))
    return 1.0 - (1.0 - eta * np.asarray(lam)) ** i


def reduced_loss(v: float, w: float, eta: float, k: int, lam=1.0) -> float:
    r"""The CoT loss (6) per coordinate on :math:`V_{31} = vI`, :math:`W_{13} = wI`, :math:`W_{24} = -1`,

    .. math:: \ell(v, w) = \tfrac12\sum_{i<k}\E_\lambda\bigl[\lambda^2 q_i^2\bigr],\qquad
              q_i = (vw+\eta)\,a_i - (v+\eta).

    Parameters
    ----------
    v, w : float
        The reduced parameters.
    eta : float
        The GD step of the data.
    k : int
        CoT steps of the training loss.
    lam : float or array_like
        Eigenvalue sample of S (1.0: the limit :math:`n \to \infty`).

    Returns
    -------
    float
        :math:`\ell(v, w)`.
    """
    lam = np.asarray(lam, dtype=float)
    a = _a(lam, eta, k)
    q = (v * w + eta) * a - (v + eta)
    return float(0.5 * np.sum(np.mean(lam**2 * q**2, axis=tuple(range(1, q.ndim))) if q.ndim > 1 else lam**2 * q**2))


def reduced_grad(v: float, w: float, eta: float, k: int, lam=1.0) -> tuple[float, float]:
    r"""The gradient of :func:`reduced_loss`,

    .. math:: \partial_v\ell = \sum_{i<k}\E\bigl[\lambda^2 q_i(wa_i - 1)\bigr],\qquad
              \partial_w\ell = \sum_{i<k}\E\bigl[\lambda^2 q_i\,v a_i\bigr].

    Parameters
    ----------
    v, w, eta, k, lam
        As for :func:`reduced_loss`.

    Returns
    -------
    tuple of float
        :math:`(\partial_v\ell, \partial_w\ell)`.
    """
    lam = np.asarray(lam, dtype=float)
    a = _a(lam, eta, k)
    q = (v * w + eta) * a - (v + eta)
    gv = lam**2 * q * (w * a - 1.0)
    gw = lam**2 * q * v * a
    if a.ndim > 1:
        ax = tuple(range(1, a.ndim))
        gv, gw = gv.mean(axis=ax), gw.mean(axis=ax)
    return float(np.sum(gv)), float(np.sum(gw))


def stage1_v(w: float, eta: float, k: int, lam=1.0) -> float:
    r"""The stage-1 quasi-equilibrium :math:`v_{\rm eq}(w)` of v at a frozen w: the root of
    :math:`\partial_v\ell = 0` (:math:`\ell` is quadratic in v; with :math:`c_i = wa_i - 1`,
    :math:`q_i = vc_i + \eta(a_i - 1)`),

    .. math:: v_{\rm eq}(w) = -\frac{\sum_i\E[\lambda^2 c_i\,\eta(a_i-1)]}{\sum_i\E[\lambda^2 c_i^2]} .

    Parameters
    ----------
    w : float
        The frozen w.
    eta, k, lam
        As for :func:`reduced_loss`.

    Returns
    -------
    float
        :math:`v_{\rm eq}(w)`.
    """
    lam = np.asarray(lam, dtype=float)
    a = _a(lam, eta, k)
    c = w * a - 1.0  # q = v c + eta (a - 1)
    num = lam**2 * c * eta * (a - 1.0)
    den = lam**2 * c**2
    if a.ndim > 1:
        ax = tuple(range(1, a.ndim))
        num, den = num.mean(axis=ax), den.mean(axis=ax)
    return float(-np.sum(num) / np.sum(den))


def solve_reduced_flow(eta: float, k: int, sigma: float, T: float, lam=1.0, num_t: int = 801,
                       rtol: float = 1e-10, atol: float = 1e-12):
    r"""The gradient flow :math:`\frac{d}{dt}(v, w) = -\nabla\ell` from :math:`v(0) = w(0) = \sigma` to time T.

    Parameters
    ----------
    eta : float
        The GD step of the data, > 0.
    k : int
        CoT steps, at least 2.
    sigma : float
        The initial scale, > 0.
    T : float
        The horizon, > 0.
    lam : float or array_like
        Eigenvalue sample of S (1.0: the limit :math:`n \to \infty`).
    num_t : int
        Output times, evenly spaced on [0, T].
    rtol, atol : float
        The integrator's tolerances (LSODA).

    Returns
    -------
    tuple of numpy.ndarray
        ``(t, v, w, loss)``, each of length ``num_t``.

    Raises
    ------
    companion.params.ParameterError
        Naming ``eta`` when the integration fails or leaves the finite numbers.
    """
    eta = real("eta", eta, min=0, min_open=True)
    k = integer("k", k, min=2)
    sigma = real("sigma", sigma, min=0, min_open=True)
    T = real("T", T, min=0, min_open=True)
    lam = np.asarray(lam, dtype=float)

    moments = _reduced_moments(eta, k, lam)

    def rhs(_t, y):
        v, w = y
        return _moment_flow(v * w + eta, v + eta, v, w, moments)

    t = np.linspace(0.0, T, num_t)
    sol = integrate.solve_ivp(rhs, (0.0, T), [sigma, sigma], method="LSODA", t_eval=t, rtol=rtol, atol=atol)
    if not sol.success or not np.all(np.isfinite(sol.y)):
        raise ParameterError("eta", f"the reduced flow failed ({sol.message}); try a smaller eta or T")
    v, w = sol.y
    return t, v, w, _moment_loss(v * w + eta, v + eta, moments)


def fixed_point_rate(eta: float, k: int, lam=1.0) -> float:
    r"""The slowest local rate :math:`\mu` of the reduced flow at its zero :math:`(v, w) = (-\eta, 1)`: the smallest
    eigenvalue of the Hessian

    .. math:: H = \sum_{i<k}\E_\lambda\bigl[\lambda^2\,g_i g_i^\T\bigr],\qquad g_i = (a_i - 1,\ -\eta a_i)

    (:math:`q_i = 0` there, so only the Gauss--Newton term remains). Near the zero the distance decays like
    :math:`e^{-\mu t}` in the Euclidean norm (H is symmetric).

    Parameters
    ----------
    eta, k, lam
        As for :func:`reduced_loss`.

    Returns
    -------
    float
        :math:`\mu`.
    """
    lam = np.asarray(lam, dtype=float)
    a = _a(lam, eta, k)
    g = np.stack([a - 1.0, -eta * a])  # (2, k, ...)
    w = (lam**2 * np.ones_like(a)).reshape(k, -1)
    g = g.reshape(2, k, -1)
    H = np.einsum("pim,qim,im->pq", g, g, w) / w.shape[1]
    return float(np.linalg.eigvalsh(H)[0])


def _reduced_moments(eta: float, k: int, lam=1.0):
    r"""The eigenvalue averages the reduced loss needs, once: :math:`A_0 = \E\lambda^2`,
    :math:`A_1^{(i)} = \E[\lambda^2 a_i]`, :math:`A_2^{(i)} = \E[\lambda^2 a_i^2]` (:math:`i < k`), so that
    :math:`\ell = \tfrac12\sum_i [P^2A_2^{(i)} - 2PQA_1^{(i)} + Q^2A_0]` with :math:`P = vw+\eta`, :math:`Q = v+\eta`
    costs O(k) per evaluation instead of O(k x sample)."""
    lam = np.asarray(lam, dtype=float)
    a = _a(lam, eta, k).reshape(k, -1)
    l2 = (lam**2 * np.ones(lam.shape)).reshape(-1)
    return float(l2.mean()), (l2 * a).mean(axis=1), (l2 * a**2).mean(axis=1)


def _moment_flow(P, Q, v, w, moments) -> list[float]:
    r"""The reduced flow :math:`-\nabla\ell` on the moments of :func:`_reduced_moments`, given :math:`P = vw + \eta`
    and :math:`Q = v + \eta` (each caller forms them in its own coordinates):
    :math:`\partial_v\ell = \sum_i[PwA_2^{(i)} - (wQ + P)A_1^{(i)} + QA_0]`,
    :math:`\partial_w\ell = v\sum_i[PA_2^{(i)} - QA_1^{(i)}]`."""
    A0, A1, A2 = moments
    return [-float(np.sum(P * w * A2 - (w * Q + P) * A1 + Q * A0)), -float(np.sum(v * (P * A2 - Q * A1)))]


def _moment_loss(P, Q, moments) -> np.ndarray:
    r""":math:`\ell = \tfrac12\sum_i[P^2A_2^{(i)} - 2PQA_1^{(i)} + Q^2A_0]` along a path (``P``, ``Q`` arrays)."""
    A0, A1, A2 = moments
    P, Q = np.asarray(P)[:, None], np.asarray(Q)[:, None]
    return 0.5 * np.sum(P**2 * A2 - 2 * P * Q * A1 + Q**2 * A0, axis=1)


def convergence_budget(mu: float, sigma: float) -> float:
    r"""The time :func:`reduced_flow_converged` allows the reduced flow to come near the construction,
    :math:`10^3/\mu + 10^3/\sigma`: a thousand time constants of stage 2 plus a thousand of the growth of w from
    :math:`\sigma` (:math:`\sigma` floored at :math:`10^{-6}`)."""
    return 1e3 / mu + 1e3 / max(sigma, 1e-6)


def reduced_flow_converged(eta: float, k: int, sigma: float, target: float, lam=1.0, enter: float = 1e-3,
                           num_t: int = 801, rtol: float = 1e-11, atol: float = 1e-14):
    r"""The reduced flow integrated to a horizon that follows from its rate (:prf:ref:`cot-thm-4-1`).

    The flow is integrated until its distance :math:`D = \max(|v + \eta|, |w - 1|)` to :math:`(-\eta, 1)` falls
    below ``enter`` (time :math:`t_2`, the end of stage 2's approach), then for :math:`\ln(\mathrm{enter} /
    \mathrm{target})/\mu` more, with :math:`\mu` from :func:`fixed_point_rate`: the linearised flow then predicts
    the distance ``target``. The loss and its gradient are evaluated on the eigenvalue averages of
    ``_reduced_moments``, computed once. The integrator's state is the deviation :math:`(v + \eta, w - 1)` from the
    construction, so that its relative tolerance applies to the distance itself, down to ``target``.

    Parameters
    ----------
    eta, k, lam
        As for :func:`reduced_loss`.
    sigma : float
        The initial scale :math:`v(0) = w(0)`.
    target : float
        The distance the linearised flow predicts at the horizon.
    enter : float
        The distance that ends the approach.
    num_t : int
        Output times.
    rtol, atol : float
        The integrator's tolerances (LSODA) on ``[0, T]``.

    Returns
    -------
    dict
        ``dict(t, v, w, loss, T, t2, mu, decades, final)``; ``final`` is :math:`D(T)`, ``decades`` holds :math:`D` at
        :math:`t_2 + j\ln(10)/\mu`,
        :math:`j = 0, 1, 2` (the integrator's dense output): where the linearised flow has come one and two
        decades closer.

    Raises
    ------
    companion.params.ParameterError
        Naming ``sigma`` when the flow does not come within ``enter`` of the construction by
        :math:`10^3/\mu + 10^3/\sigma`.
    """
    mu = fixed_point_rate(eta, k, lam)
    moments = _reduced_moments(eta, k, lam)

    def rhs(_t, x):  # x = (v + eta, w - 1): P = vw + eta = x0 (x1 + 1) - eta x1, Q = v + eta = x0
        Q, w = x[0], x[1] + 1.0
        return _moment_flow(Q * w - eta * x[1], Q, Q - eta, w, moments)

    def near(_t, x):
        return max(abs(x[0]), abs(x[1])) - enter

    near.terminal, near.direction = True, -1
    T_cap = convergence_budget(mu, sigma)
    x0 = [sigma + eta, sigma - 1.0]
    sol = integrate.solve_ivp(rhs, (0.0, T_cap), x0, method="LSODA", events=near, rtol=1e-10, atol=1e-13)
    if not sol.t_events[0].size:
        raise ParameterError("sigma", f"the reduced flow did not reach the construction by t = {T_cap:.3g}")
    t2 = float(sol.t_events[0][0])
    T = t2 + np.log(enter / target) / mu
    t = np.linspace(0.0, T, num_t)
    sol = integrate.solve_ivp(rhs, (0.0, T), x0, method="LSODA", t_eval=t, rtol=rtol, atol=atol, dense_output=True)
    Q, x1 = sol.y
    v, w = Q - eta, x1 + 1.0
    loss = _moment_loss(Q * w - eta * x1, Q, moments)
    xa = sol.sol(t2 + np.arange(3) * np.log(10.0) / mu)  # (2, 3)
    decades = np.abs(xa).max(axis=0)
    return dict(t=t, v=v, w=w, loss=loss, T=float(T), t2=t2, mu=mu, decades=decades, final=float(np.abs(sol.y[:, -1]).max()))


def v_curvature(w: float, eta: float, k: int, lam=1.0) -> float:
    r"""The curvature of the reduced loss in v, the fast relaxation rate of stage 1,

    .. math:: \kappa(w) = \partial_v^2\ell = \sum_{i<k}\E\bigl[\lambda^2 (wa_i - 1)^2\bigr].

    Parameters
    ----------
    w : float
        The frozen w.
    eta, k, lam
        As for :func:`reduced_loss`.

    Returns
    -------
    float
        :math:`\kappa(w)`.
    """
    lam = np.asarray(lam, dtype=float)
    c = w * _a(lam, eta, k) - 1.0
    val = lam**2 * c**2
    return float(np.sum(val.mean(axis=tuple(range(1, val.ndim))) if val.ndim > 1 else val))


def slow_manifold_time(eta: float, k: int, sigma: float, w_target: float = 0.5, lam=1.0) -> float:
    r"""The stage-1 time predicted by the slow-manifold reduction: with :math:`v = v_{\rm eq}(w)`
    (:func:`stage1_v`), :math:`\dot w = -\partial_w\ell(v_{\rm eq}(w), w)`, and w goes from :math:`\sigma` to
    ``w_target`` in

    .. math:: \int_\sigma^{w_{\rm target}} \frac{dw}{|\dot w|} .

    Parameters
    ----------
    eta, k, lam
        As for :func:`reduced_loss`.
    sigma : float
        The starting w.
    w_target : float
        The w reached.

    Returns
    -------
    float
        The time.
    """

    def rate(w):
        return -reduced_grad(stage1_v(w, eta, k, lam), w, eta, k, lam)[1]

    val, _ = integrate.quad(lambda w: 1.0 / rate(w), sigma, w_target, epsrel=1e-10, limit=200)
    return float(val)


# ----------------------------------------------------------------------------- the restricted matrix flow
def assumption41_init(d: int, sigma: float, rng: np.random.Generator, spread: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    r"""The initialisation of Assumption 4.1 (as reconstructed in this book): :math:`V_{31}(0) = W_{13}(0) =
    U\operatorname{diag}(s)U^\T` with a random orthogonal U and eigenvalues :math:`s_j` uniform in
    :math:`[\sigma, \mathrm{spread}\cdot\sigma]`.

    Parameters
    ----------
    d : int
        Dimension.
    sigma : float
        The smallest eigenvalue scale, > 0.
    rng : numpy.random.Generator
        The source of U and s.
    spread : float
        The ratio of the largest to the smallest scale, at least 1.

    Returns
    -------
    tuple of numpy.ndarray
        ``(V0, W0)``, two equal d x d matrices.
    """
    d = integer("d", d, min=1)
    sigma = real("sigma", sigma, min=0, min_open=True)
    spread = real("spread", spread, min=1)
    Q, R = np.linalg.qr(rng.standard_normal((d, d)))
    U = Q * np.sign(np.diag(R))
    s = rng.uniform(sigma, spread * sigma, size=d)
    M = (U * s) @ U.T
    return M.copy(), M.copy()


def gd_iterate_maps(S: np.ndarray, eta: float, k: int) -> np.ndarray:
    r"""The maps :math:`A_i(S) = I - (I - \eta S)^i`, :math:`i = 0..k-1`, that take :math:`w^\star` to the i-th GD
    iterate :math:`w_i = A_i w^\star` (the CoT targets of the loss (6)).

    Parameters
    ----------
    S : numpy.ndarray
        Sample of S, shape (N, d, d).
    eta : float
        The GD step.
    k : int
        CoT steps.

    Returns
    -------
    numpy.ndarray
        Shape (k, N, d, d).
    """
    N, d, _ = S.shape
    I = np.eye(d)
    M = I - eta * S
    out = np.empty((k, N, d, d))
    P = np.broadcast_to(I, S.shape).copy()
    for i in range(k):
        out[i] = I - P
        P = P @ M
    return out


def restricted_loss_grad(V: np.ndarray, W: np.ndarray, S: np.ndarray, A: np.ndarray, eta: float):
    r"""The loss (6) on the sparse manifold (:math:`W_{24} = -1`) estimated on a sample of S, and its gradients,

    .. math:: L(V, W) = \tfrac12\sum_{i<k}\overline{\|(VSW + \eta S)A_i - (V + \eta I)S\|_F^2},

    :math:`V = V_{31}`, :math:`W = W_{13}`, the bar the mean over the sample.

    Parameters
    ----------
    V, W : numpy.ndarray
        The d x d blocks.
    S : numpy.ndarray
        Sample of S, shape (N, d, d).
    A : numpy.ndarray
        :func:`gd_iterate_maps` of the sample, shape (k, N, d, d).
    eta : float
        The GD step.

    Returns
    -------
    tuple
        ``(L, dL/dV, dL/dW)``.
    """
    d = V.shape[0]
    VS = V @ S  # (N, d, d)
    B = VS @ W + eta * S  # (N, d, d)
    M = B @ A - (VS + eta * S)  # (k, N, d, d)
    N = S.shape[0]
    loss = 0.5 * np.sum(M**2) / N
    # dL/dV = mean sum_i M_i (S W A_i - S)^T ;  dL/dW = mean sum_i (V S)^T M_i A_i^T
    C = S @ W @ A - S  # (k, N, d, d)
    gV = M.transpose(2, 0, 1, 3).reshape(d, -1) @ C.transpose(2, 0, 1, 3).reshape(d, -1).T / N
    MA = np.sum(M @ A.transpose(0, 1, 3, 2), axis=0)  # (N, d, d)
    gW = VS.reshape(-1, d).T @ MA.reshape(-1, d) / N
    return loss, gV, gW


def restricted_flow_rhs(S: np.ndarray, A: np.ndarray, eta: float):
    r"""The right-hand side :math:`-\nabla L` of the restricted flow on the stacked state :math:`y = (\mathrm{vec}\,V,
    \mathrm{vec}\,W)` (:func:`restricted_loss_grad`), as ``solve_ivp`` takes it.

    Parameters
    ----------
    S, A, eta
        As for :func:`restricted_loss_grad`.

    Returns
    -------
    callable
        ``rhs(t, y)``.
    """
    d = S.shape[-1]

    def rhs(_t, y):
        V, W = y[: d * d].reshape(d, d), y[d * d :].reshape(d, d)
        _, gV, gW = restricted_loss_grad(V, W, S, A, eta)
        return -np.concatenate([gV.ravel(), gW.ravel()])

    return rhs


def restricted_flow(V0: np.ndarray, W0: np.ndarray, S: np.ndarray, eta: float, k: int, T: float,
                    num_t: int = 201, rtol: float = 1e-8, atol: float = 1e-10, method: str = "LSODA"):
    r"""The gradient flow :math:`\frac{d}{dt}(V, W) = -\nabla L` on a fixed sample of S from :math:`(V_0, W_0)`
    (:func:`restricted_loss_grad`).

    Parameters
    ----------
    V0, W0 : numpy.ndarray
        The initial d x d blocks (:func:`assumption41_init`).
    S : numpy.ndarray
        Sample of S, shape (N, d, d).
    eta : float
        The GD step, > 0.
    k : int
        CoT steps, at least 2.
    T : float
        The horizon, > 0.
    num_t : int
        Output times, evenly spaced on [0, T].
    rtol, atol : float
        The integrator's tolerances.
    method : str
        The ``solve_ivp`` method.

    Returns
    -------
    tuple of numpy.ndarray
        ``(t, V(t), W(t), L(t))``.

    Raises
    ------
    companion.params.ParameterError
        Naming ``eta`` when the integration fails or leaves the finite numbers.
    """
    eta = real("eta", eta, min=0, min_open=True)
    k = integer("k", k, min=2)
    T = real("T", T, min=0, min_open=True)
    d = V0.shape[0]
    require(S.ndim == 3 and S.shape[1:] == (d, d), "S", f"must have shape (N, {d}, {d}); got {S.shape}")
    A = gd_iterate_maps(S, eta, k)
    t = np.linspace(0.0, T, num_t)
    sol = integrate.solve_ivp(restricted_flow_rhs(S, A, eta), (0.0, T), np.concatenate([V0.ravel(), W0.ravel()]),
                              method=method, t_eval=t, rtol=rtol, atol=atol)
    if not sol.success or not np.all(np.isfinite(sol.y)):
        raise ParameterError("eta", f"the restricted flow failed ({sol.message})")
    Vt = sol.y[: d * d].T.reshape(-1, d, d)
    Wt = sol.y[d * d :].T.reshape(-1, d, d)
    L = np.array([restricted_loss_grad(V, W, S, A, eta)[0] for V, W in zip(Vt, Wt)])
    return t, Vt, Wt, L


def symmetrised_S_sample(S: np.ndarray, U: np.ndarray) -> np.ndarray:
    r"""A sample of S augmented by the sign flips :math:`S \mapsto (UJU^\T)S(UJU^\T)`, :math:`J = \operatorname{diag}(h)`
    for the rows h of a Hadamard matrix (size the next power of two at least d, first d columns).

    The law of S is invariant under these maps, and averaging over them makes every off-diagonal entry (in the
    basis U) of a product of S's with U-diagonal matrices vanish exactly, so the restricted flow keeps V, W diagonal
    in U exactly, not only in expectation.

    Parameters
    ----------
    S : numpy.ndarray
        Sample of S, shape (N, d, d).
    U : numpy.ndarray
        Orthogonal d x d basis.

    Returns
    -------
    numpy.ndarray
        Shape (m N, d, d), m the Hadamard size.
    """
    d = U.shape[0]
    m = 1
    while m < d:
        m *= 2
    H = hadamard(m)[:, :d].astype(float)
    Sp = np.einsum("ji,bjk,kl->bil", U, S, U)
    Ss = np.concatenate([h[:, None] * Sp * h[None, :] for h in H])
    return np.einsum("ij,bjk,lk->bil", U, Ss, U)
