r"""The looped transformer (:prf:ref:`cot-prop-looped`): one LSA layer applied k times.

On the sparse manifold with :math:`V_{31} = vI`, :math:`W_{13} = wI`, :math:`W_{24} = -1` the looped model
estimates :math:`\hat w_k = b\,(I - (I - cS)^k)\,w^\star` with :math:`c = -vw`, :math:`b = 1/w`. Part (a),
:math:`W_{13} = I` (:math:`b = 1`): its error is :func:`companion.cot.theory.gd.gd_trace`, the k-step GD error at
step c, and the optimal loop step is

.. math:: c_k = \arg\min_c \E\tr(I-cS)^{2k}

(:func:`looped_optimum`; on an importance-weighted sample, :func:`looped_is_optimum`; exactly at :math:`k = 2`,
:func:`looped_optimum_exact_k2`). Part (b), a trained :math:`W_{13}` scale: the joint optimum of (c, b)
(:func:`looped_two_param_optimum`).
"""

from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
from scipy import optimize

from companion.params import integer

from .gd import argmin_se, gd_trace, gd_trace_derivatives, residual_power
from .wishart import check_dims, wishart_trace_moments

__all__ = ["looped_loss", "looped_optimum", "looped_optimum_exact_k2", "looped_optimum_se", "looped_is_loss",
           "looped_is_optimum", "looped_two_param_errors", "looped_two_param_loss", "looped_two_param_optimum",
           "is_mean_se", "rotation_basis", "looped_sparse_errors", "looped_rotation_optimum",
           "rotation_aligned"]


def is_mean_se(values) -> tuple[float, float]:
    r"""The mean of per-spectrum values on an importance-weighted sample of
    :func:`companion.cot.theory.wishart.wishart_is_sample` (weights applied), and its standard error as the sample
    was drawn: stratified, the first :math:`N_1 = N - \lfloor N/2\rfloor` spectra from :math:`W(I)` and the other
    :math:`N_2` from :math:`W(\tau I)`, so that

    .. math:: \mathrm{SE}^2 = \sum_{h=1,2}\Bigl(\frac{N_h}{N}\Bigr)^2\frac{s_h^2}{N_h},

    with :math:`s_h` the spread within stratum h (a fixed half-and-half draw has no spread between the two
    components' means, which the i.i.d. formula would add)."""
    v = np.asarray(values, dtype=float)
    N = v.shape[-1]
    n1 = N - N // 2
    parts = (v[..., :n1], v[..., n1:])
    var = sum((p.shape[-1] / N) ** 2 * np.var(p, axis=-1, ddof=1) / p.shape[-1] for p in parts)
    return float(np.mean(v, axis=-1)), float(np.sqrt(var))


def looped_loss(c, k: int, eigs: np.ndarray, weights=None) -> np.ndarray:
    r"""Monte-Carlo :math:`F(c) = \E\tr(I-cS)^{2k}`, the error of the looped model with :math:`W_{13} = I`: the mean
    of :func:`companion.cot.theory.gd.gd_trace` over the spectra, importance-weighted when ``weights`` are given.

    Parameters
    ----------
    c : float or array_like
        The loop step (an array: one value per step).
    k : int
        Loops.
    eigs : numpy.ndarray
        Spectra, shape (N, d).
    weights : numpy.ndarray, optional
        Importance weights, shape (N,) (:func:`companion.cot.theory.wishart.wishart_is_sample`).

    Returns
    -------
    numpy.ndarray
        :math:`F(c)`, the shape of ``c``.
    """
    per = gd_trace(c, eigs, k)
    return np.mean(per if weights is None else weights * per, axis=-1)


def _grid_then_refine(f, bracket, num: int = 40, fv=None) -> float:
    """Global search on a grid (vectorised through ``fv`` if given), then a bounded scalar refinement between
    the neighbouring grid points (the objectives are polynomials of high degree with far-away spurious regions)."""
    grid = np.linspace(bracket[0], bracket[1], num)
    with np.errstate(over="ignore", invalid="ignore"):
        vals = np.asarray(fv(grid), dtype=float) if fv is not None else np.array([f(c) for c in grid])
    vals[~np.isfinite(vals)] = np.inf
    j = int(np.argmin(vals))
    lo, hi = grid[max(j - 1, 0)], grid[min(j + 1, num - 1)]
    res = optimize.minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
    return float(res.x)


def looped_optimum(k: int, eigs: np.ndarray, bracket=(1e-3, 1.5)) -> tuple[float, float]:
    r"""The optimal loop step :math:`c_k = \arg\min_c \E\tr(I-cS)^{2k}` on a sample of spectra: a grid search, then a
    bounded scalar minimisation.

    Parameters
    ----------
    k : int
        Loops, at least 1.
    eigs : numpy.ndarray
        Spectra, shape (N, d).
    bracket : tuple of float
        The interval searched.

    Returns
    -------
    tuple of float
        ``(c_k, F(c_k))`` (:func:`looped_loss`).
    """
    k = integer("k", k, min=1)
    c = _grid_then_refine(lambda c: float(looped_loss(c, k, eigs)), bracket, fv=lambda g: looped_loss(g, k, eigs))
    return c, float(looped_loss(c, k, eigs))


def looped_optimum_exact_k2(d: int, n: int) -> tuple[float, float]:
    r"""The exact optimal step of two loops, :math:`c_2 = \arg\min_c \E\tr(I-cS)^4`: the real root of the derivative
    of the quartic

    .. math:: \E\tr(I-cS)^4 = \sum_{p=0}^4\binom4p(-c)^p m_p

    with the exact Wishart moments :math:`m_p` (:func:`companion.cot.theory.wishart.wishart_trace_moments`) at which
    it is smallest.

    Parameters
    ----------
    d, n : int
        Dimension and examples per prompt.

    Returns
    -------
    tuple of float
        ``(c_2, E tr(I - c_2 S)^4)``.
    """
    d, n = check_dims(d, n)
    m = [Fraction(w, n**p) for p, w in enumerate(wishart_trace_moments(4, d, n))]
    coef = [float(comb(4, p) * (-1) ** p * m[p]) for p in range(5)]  # sum coef[p] c^p
    dcoef = [p * coef[p] for p in range(1, 5)]  # derivative, ascending powers
    roots = np.roots(dcoef[::-1])
    roots = roots[np.abs(roots.imag) < 1e-9].real
    vals = [sum(coef[p] * r**p for p in range(5)) for r in roots]
    j = int(np.argmin(vals))
    return float(roots[j]), float(vals[j])


def looped_optimum_se(c: float, k: int, eigs: np.ndarray, weights=None) -> float:
    r"""The delta-method standard error of the Monte-Carlo optimum :math:`\hat c_k` of :func:`looped_loss`,
    :math:`\mathrm{SE}(\hat F'(c))/\hat F''(c)` (:func:`companion.cot.theory.gd.argmin_se`) from the per-sample
    derivatives of :func:`companion.cot.theory.gd.gd_trace_derivatives`, importance-weighted when ``weights`` are
    given (then with the standard error of the stratified sample, :func:`is_mean_se`).

    Parameters
    ----------
    c : float
        The optimum found.
    k : int
        Loops, at least 1.
    eigs : numpy.ndarray
        Spectra, shape (N, d).
    weights : numpy.ndarray, optional
        Importance weights, shape (N,).

    Returns
    -------
    float
        :math:`\mathrm{SE}(\hat c_k)`.
    """
    first, second = gd_trace_derivatives(c, eigs, k)
    if weights is None:
        return argmin_se(first, second)
    # the importance-weighted sample is stratified (is_mean_se): the standard error of the mean derivative is too
    return float(argmin_se(weights * first, weights * second, is_mean_se))


def looped_is_loss(c, k: int, eigs: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
    r"""The importance-weighted :math:`\E\tr(I-cS)^{2k}` at one step c, with its standard error.

    Parameters
    ----------
    c : float
        The loop step.
    k : int
        Loops.
    eigs, weights : numpy.ndarray
        The importance-weighted sample (:func:`companion.cot.theory.wishart.wishart_is_sample`).

    Returns
    -------
    tuple of float
        ``(mean, se)`` (:func:`is_mean_se`: the standard error of the stratified sample).
    """
    return is_mean_se(weights * gd_trace(float(c), eigs, k))


def looped_is_optimum(k: int, eigs: np.ndarray, weights: np.ndarray, bracket=(1e-3, 1.5)):
    r"""The heavy-tail-aware looped optimum :math:`c_k = \arg\min_c \E\tr(I-cS)^{2k}` (:prf:ref:`cot-prop-looped`) on an
    importance-weighted sample of spectra (:func:`companion.cot.theory.wishart.wishart_is_sample`), with the
    delta-method standard error of :func:`looped_optimum_se` from the weighted per-sample derivatives.

    Parameters
    ----------
    k : int
        Loops, at least 1.
    eigs, weights : numpy.ndarray
        The importance-weighted sample.
    bracket : tuple of float
        The interval searched.

    Returns
    -------
    tuple of float
        ``(c, c_se, loss, loss_se)``.
    """
    k = integer("k", k, min=1)
    e = np.asarray(eigs, dtype=float)
    wts = np.asarray(weights, dtype=float)
    c = _grid_then_refine(lambda x: float(looped_loss(x, k, e, wts)), bracket, fv=lambda g: looped_loss(g, k, e, wts))
    loss, loss_se = looped_is_loss(c, k, e, wts)
    return float(c), float(looped_optimum_se(c, k, e, wts)), loss, loss_se


def looped_two_param_errors(c: float, b: float, k: int, eigs: np.ndarray) -> np.ndarray:
    r"""The error of the looped model with :math:`W_{13} = I/b` and loop step c on each prompt, averaged over
    :math:`w^\star`,

    .. math:: \sum_j (1 - b\,h_j)^2,\qquad h_j = 1 - (1 - c\lambda_j)^k .

    Parameters
    ----------
    c, b : float
        The loop step and the scale.
    k : int
        Loops.
    eigs : numpy.ndarray
        Spectra, shape (N, d).

    Returns
    -------
    numpy.ndarray
        Shape (N,).
    """
    return np.sum((1 - b * (1.0 - residual_power(c, eigs, k))) ** 2, axis=-1)


def looped_two_param_loss(c, k: int, eigs: np.ndarray):
    r"""The looped model with :math:`V_{31} = vI`, :math:`W_{13} = wI`, :math:`W_{24} = -1`,
    :math:`\hat w_k = b\,(I - (I - cS)^k)\,w^\star` with :math:`c = -vw`, :math:`b = 1/w`, at its best b for a given c,

    .. math:: b^\star = \frac{\E\sum_j h_j}{\E\sum_j h_j^2},\qquad
              \text{loss } d - \frac{(\E\sum_j h_j)^2}{\E\sum_j h_j^2},\qquad h_j = 1 - (1 - c\lambda_j)^k .

    Parameters
    ----------
    c : float or array_like
        The loop step (an array: one value per step).
    k : int
        Loops.
    eigs : numpy.ndarray
        Spectra, shape (N, d).

    Returns
    -------
    tuple
        ``(loss, b*)``: floats for a scalar c, arrays for an array.
    """
    e = np.asarray(eigs, dtype=float)
    h = 1.0 - residual_power(c, e, k)
    m1 = np.mean(np.sum(h, axis=-1), axis=-1)
    m2 = np.mean(np.sum(h**2, axis=-1), axis=-1)
    loss, b = e.shape[-1] - m1**2 / m2, m1 / m2
    if loss.ndim == 0:
        return float(loss), float(b)
    return loss, b


def looped_two_param_optimum(k: int, eigs: np.ndarray, bracket=(1e-3, 1.5)) -> tuple[float, float, float]:
    r"""The jointly optimal :math:`(c, b)` of the isotropic looped model with a trainable :math:`W_{13}` scale (part (b)
    of :prf:ref:`cot-prop-looped`): :func:`looped_two_param_loss` minimised over c.

    Parameters
    ----------
    k : int
        Loops, at least 1.
    eigs : numpy.ndarray
        Spectra, shape (N, d).
    bracket : tuple of float
        The interval of c searched.

    Returns
    -------
    tuple of float
        ``(c, b, loss)``.
    """
    k = integer("k", k, min=1)
    c = _grid_then_refine(lambda c: looped_two_param_loss(c, k, eigs)[0], bracket,
                          fv=lambda g: looped_two_param_loss(g, k, eigs)[0])
    loss, b = looped_two_param_loss(c, k, eigs)
    return c, b, loss


def rotation_basis(d: int) -> tuple[np.ndarray, ...]:
    r"""The commuting matrices that span the sparse blocks with a rotation: :math:`J`, the quarter turn in the
    coordinate pairs (1, 2), (3, 4), ..., and :math:`P = -J^2`, the projection on the rotated coordinates; for an odd d
    also :math:`E = I - P`, the last coordinate, which no pair rotates. :math:`PJ = JP = J`, :math:`J^2 = -P`,
    :math:`EJ = EP = 0`: the span is closed under products (for an even d it is the complex numbers :math:`x + iy`
    acting on :math:`\mathbb{C}^{d/2}`).

    Returns
    -------
    tuple of numpy.ndarray
        ``(P, J)`` for an even d, ``(P, J, E)`` for an odd d; each (d, d). For d = 1, ``(E,)``: nothing rotates.
    """
    d = integer("d", d, min=1)
    J = np.zeros((d, d))
    for i in range(0, d - 1, 2):
        J[i, i + 1], J[i + 1, i] = 1.0, -1.0
    P = -J @ J
    if d % 2 == 0:
        return P, J
    E = np.eye(d) - P
    return (E,) if d == 1 else (P, J, E)


def _loop_residuals(Q: np.ndarray, k: int, S: np.ndarray) -> np.ndarray:
    """:math:`D = (I + QS)^k - I` for every matrix S of the sample; shape (N, d, d)."""
    M = np.eye(S.shape[-1]) + Q @ S
    D = M
    for _ in range(k - 1):
        D = D @ M
    return D - np.eye(S.shape[-1])


def _in_basis(coef, basis) -> np.ndarray:
    """:math:`\\sum_i c_i B_i`: the matrix with coefficients ``coef`` on ``basis`` (:func:`rotation_basis`)."""
    return sum(ci * B for ci, B in zip(coef, basis))


def _rotation_q(p, basis) -> np.ndarray:
    """:math:`Q = -(aP + \\beta J [+ a'E])` from ``p = (a, beta[, a'])``."""
    return -_in_basis(p, basis)


def _best_scale(D: np.ndarray, basis) -> tuple[np.ndarray, float]:
    r"""The best :math:`A = \sum_i x_i B_i` for the residuals D: the least squares
    :math:`\min_x \E\|I + AD\|_F^2`, :math:`x = -G^{-1}h` with :math:`G_{ij} = \E\langle B_iD, B_jD\rangle`,
    :math:`h_i = \E\tr B_iD`; returns ``(x, loss)``, loss :math:`d + h^\top x`."""
    BD = [B @ D for B in basis]
    G = np.array([[np.mean(np.sum(Bi * Bj, axis=(-2, -1))) for Bj in BD] for Bi in BD])
    h = np.array([np.mean(np.trace(Bi, axis1=-2, axis2=-1)) for Bi in BD])
    x = np.linalg.solve(G, -h)
    return x, float(D.shape[-1] + h @ x)


def looped_sparse_errors(Q: np.ndarray, A: np.ndarray, k: int, S: np.ndarray) -> np.ndarray:
    r"""The error of the sparse looped model with blocks :math:`W_{13} = A^{-1}`, :math:`V_{31} = AQ`,
    :math:`W_{24} = -1` on each matrix S of a sample, averaged over :math:`w^\star`.

    k loops move the estimate by :math:`V_{31}SW_{13}` times the remaining residual; summing the geometric series
    (:math:`\sum_{i<k}M^i(M - I) = M^k - I`, :math:`M = I + QS`, :math:`Q = W_{13}V_{31}`) leaves the error
    :math:`\hat w_k - \wstar = -Y\wstar` with

    .. math:: Y = W_{13}^{-1}\bigl[(W_{13} - I) + (I + QS)^k\bigr] = I + A\bigl[(I + QS)^k - I\bigr],

    so that the error averaged over :math:`\wstar \sim N(0, I)` is :math:`\|Y\|_F^2`. On the isotropic blocks
    (:math:`A = bI`, :math:`Q = -cI`) it is :func:`looped_two_param_errors`.

    Parameters
    ----------
    Q, A : numpy.ndarray
        (d, d).
    k : int
        Loops.
    S : numpy.ndarray
        The matrices :math:`S = XX^\T/n`, shape (N, d, d).

    Returns
    -------
    numpy.ndarray
        Shape (N,).
    """
    Y = np.eye(S.shape[-1]) + A @ _loop_residuals(np.asarray(Q, float), int(k), S)
    return np.sum(Y * Y, axis=(-2, -1))


def looped_rotation_optimum(k: int, S: np.ndarray, start: tuple[float, float]) -> dict:
    r"""The optimum of the sparse looped model over the blocks with a rotation: :math:`Q = W_{13}V_{31}` and
    :math:`A = W_{13}^{-1}` in the span of :func:`rotation_basis`,

    .. math:: Q = -(aP + \beta J + a'E),\qquad A = xP + yJ + x'E

    (no E for an even d), minimising the mean of :func:`looped_sparse_errors` over the sample ``S``. For a given Q the
    best A is a least-squares problem; Nelder-Mead searches Q from ``start`` = :math:`(c, b)`, the isotropic optimum
    (:func:`looped_two_param_optimum`; :math:`\beta = 0`, :math:`a = a' = c` is that optimum), with :math:`\beta` started
    at a quarter of c (the loss is even in :math:`\beta`: a reflection of one coordinate of every pair turns J into
    -J, so one sign suffices).

    The isotropic blocks are not the optimum of the sparse blocks in general: at k = 3 a rotation lowers the loss
    (why odd k gains and even k does not is not derived here). The optimiser over all d x d blocks (Adam, from the
    isotropic optimum plus noise; ``tools/looped_skew_probe.py``) lands on Q with eigenvalues :math:`-a \pm i\beta`
    and the loss of this family.

    Returns
    -------
    dict
        ``Q``, ``A`` (d x d), ``a``, ``beta``, ``x``, ``y`` (the coefficients), ``loss`` (the sample mean at the
        optimum) and ``se`` (its standard error over the sample).
    """
    k = integer("k", k, min=1)
    S = np.asarray(S, dtype=float)
    d = S.shape[-1]
    basis = rotation_basis(d)
    c, b = (float(v) for v in start)

    def loss(p):
        return _best_scale(_loop_residuals(_rotation_q(p, basis), k, S), basis)[1]

    if d == 1:
        p = np.array([c])
    else:
        p = optimize.minimize(loss, [c, c / 4] + ([c] if d % 2 else []), method="Nelder-Mead",
                              options=dict(xatol=1e-7, fatol=1e-12, maxiter=4000)).x
    Q = _rotation_q(p, basis)
    x, _ = _best_scale(_loop_residuals(Q, k, S), basis)
    A = _in_basis(x, basis)
    e = looped_sparse_errors(Q, A, k, S)
    coef = dict(a=float(p[0]), beta=float(p[1]) if d > 1 else 0.0, x=float(x[0]), y=float(x[1]) if d > 1 else 0.0)
    return dict(Q=Q, A=A, p=np.asarray(p, float), xs=np.asarray(x, float), **coef, loss=float(e.mean()),
                se=float(e.std(ddof=1) / np.sqrt(len(e))))


def rotation_aligned(opt: dict, Q_like: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""The rotation optimum ``opt`` (:func:`looped_rotation_optimum`) turned to the planes of another matrix
    ``Q_like``: returns :math:`(Q', A') = (UQ_0U^\T, UA_0U^\T)` with U orthogonal.

    The loss is the same at every :math:`(UQU^\T, UAU^\T)`, U orthogonal (the law of the prompts is invariant under
    rotations and reflections of x and :math:`\wstar`), so the optimum is a whole orbit, and any U gives a model with the
    optimum's expected error. U here comes from the real Schur form :math:`Q_{\rm like} = UTU^\T`: each 2 x 2 block of
    T is a plane turned by J with the sign of the block's own rotation :math:`(T_{i+1,i} - T_{i,i+1})/2`; pairs of
    1 x 1 blocks (real eigenvalues) are planes in the order of T, and for an odd d the one left over takes the last
    coordinate's own step and scale. Run on the same prompts as a model near ``Q_like``, this orbit point's errors
    follow that model's prompt by prompt, which a fixed orientation's do not.
    """
    from scipy.linalg import schur

    T, U = schur(np.asarray(Q_like, float), output="real")
    d = T.shape[0]
    P, J, E = np.zeros((d, d)), np.zeros((d, d)), np.zeros((d, d))
    i, singles = 0, []
    while i < d:
        if i + 1 < d and abs(T[i + 1, i]) > 0:
            planes = [(i, i + 1, (T[i + 1, i] - T[i, i + 1]) / 2)]
            i += 2
        else:
            singles.append(i)
            i += 1
            planes = []
            if len(singles) == 2:
                planes, singles = [(singles[0], singles[1], 1.0)], []
        for u, v, rho in planes:
            s = 1.0 if rho * opt["beta"] >= 0 else -1.0
            J[u, v], J[v, u], P[u, u], P[v, v] = s, -s, 1.0, 1.0
    for j in singles:
        E[j, j] = 1.0
    basis = (P, J, E) if d % 2 else (P, J)
    if d == 1:
        basis = (E,)
    Q0, A0 = _rotation_q(opt["p"], basis), _in_basis(opt["xs"], basis)
    return U @ Q0 @ U.T, U @ A0 @ U.T
