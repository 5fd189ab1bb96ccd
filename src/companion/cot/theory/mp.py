r"""The proportional limit :math:`d, n \to \infty`, :math:`d/n \to \gamma`: the Marchenko--Pastur law of the
eigenvalues of S, its moments, the limit of the k-step GD error (:prf:ref:`cot-thm-3-2`) and the geometric rate of
GD on its support (:prf:ref:`cot-thm-3-2`, the regime of :prf:ref:`cot-thm-4-1`).
"""

from __future__ import annotations

from math import comb

import numpy as np
from scipy import integrate

from companion.params import integer, real

from .gd import residual_power

__all__ = ["mp_edges", "mp_density", "mp_integral", "mp_moment", "gd_error_mp", "mp_rate"]


def mp_edges(gamma: float) -> tuple[float, float]:
    r"""The edges of the Marchenko--Pastur law,

    .. math:: \lambda_\pm = (1 \pm \sqrt\gamma)^2 .

    Parameters
    ----------
    gamma : float
        :math:`d/n`, in (0, 1] (:math:`\gamma = 1`, i.e. n = d, has :math:`\lambda_- = 0`).

    Returns
    -------
    tuple of float
        :math:`(\lambda_-, \lambda_+)`.
    """
    gamma = real("gamma", gamma, min=0, max=1, min_open=True)
    return (1 - np.sqrt(gamma)) ** 2, (1 + np.sqrt(gamma)) ** 2


def mp_density(lam, gamma: float):
    r"""The Marchenko--Pastur density,

    .. math:: \frac{\sqrt{(\lambda_+-\lambda)(\lambda-\lambda_-)}}{2\pi\gamma\lambda}
              \quad\text{on } [\lambda_-, \lambda_+],\ \text{zero outside}.

    Parameters
    ----------
    lam : array_like
        Where to evaluate it.
    gamma : float
        :math:`d/n`, in (0, 1].

    Returns
    -------
    numpy.ndarray
        The density, the shape of ``lam``.
    """
    lo, hi = mp_edges(gamma)
    lam = np.asarray(lam, dtype=float)
    inside = (lam > lo) & (lam < hi)
    out = np.zeros_like(lam)
    out[inside] = np.sqrt((hi - lam[inside]) * (lam[inside] - lo)) / (2 * np.pi * gamma * lam[inside])
    return out


def mp_integral(f, gamma: float) -> float:
    r"""The integral of ``f`` against the Marchenko--Pastur law :math:`\mathrm{MP}_\gamma`.

    With :math:`\lambda = m + r\cos\theta` (:math:`m, r` the centre and half-width of the support) the density
    times :math:`d\lambda` becomes

    .. math:: \frac{r^2\sin^2\theta}{2\pi\gamma\lambda}\,d\theta,

    which is smooth on :math:`[0, \pi]` also at :math:`\gamma = 1` (n = d), where :math:`\lambda_- = 0` and the
    density itself has a :math:`\lambda^{-1/2}` singularity. Gauss--Kronrod quadrature (relative tolerance
    :math:`10^{-12}`).

    Parameters
    ----------
    f : callable
        A function of one float.
    gamma : float
        :math:`d/n`, in (0, 1].

    Returns
    -------
    float
        :math:`\int f\,d\mathrm{MP}_\gamma`.
    """
    lo, hi = mp_edges(gamma)
    m, r = (hi + lo) / 2, (hi - lo) / 2

    def g(theta):
        lam = m + r * np.cos(theta)
        if lam <= 0:  # gamma = 1, theta = pi: the integrand's limit is (1 - cos theta)/pi * f(0) = 2 f(0)/pi
            return 2.0 * float(f(0.0)) / np.pi
        return r**2 * np.sin(theta) ** 2 / (2 * np.pi * gamma * lam) * float(f(lam))

    val, _ = integrate.quad(g, 0.0, np.pi, epsabs=1e-14, epsrel=1e-12, limit=400)
    return float(val)


def mp_moment(p: int, gamma: float) -> float:
    r"""The moments of the Marchenko--Pastur law (Narayana polynomials), the limits of :math:`m_p/d`
    (:prf:ref:`cot-thm-3-2`),

    .. math:: \int\lambda^p\,d\mathrm{MP}_\gamma = \sum_{r=0}^{p-1}\frac{\gamma^r}{r+1}\binom pr\binom{p-1}r
              \quad (p \ge 1),\qquad 1\quad (p = 0).

    Parameters
    ----------
    p : int
        The power, at least 0.
    gamma : float
        :math:`d/n`, in (0, 1].

    Returns
    -------
    float
        The moment.
    """
    p = integer("p", p, min=0)
    gamma = real("gamma", gamma, min=0, max=1, min_open=True)
    if p == 0:
        return 1.0
    return float(sum(gamma**r / (r + 1) * comb(p, r) * comb(p - 1, r) for r in range(p)))


def gd_error_mp(k: int, eta: float, gamma: float) -> float:
    r"""The large-d limit of :math:`L_k(\eta)/d` (:prf:ref:`cot-thm-3-2`),

    .. math:: \lim_{d\to\infty,\ d/n\to\gamma} \tfrac1d\,\E\tr(I-\eta S)^{2k}
              = \int (1-\eta\lambda)^{2k}\,d\mathrm{MP}_\gamma(\lambda),

    the residual factor of :func:`companion.cot.theory.gd.residual_power` integrated by :func:`mp_integral`.

    Parameters
    ----------
    k : int
        GD steps, at least 0.
    eta : float
        The step, >= 0.
    gamma : float
        :math:`d/n`, in (0, 1] (1 is n = d).

    Returns
    -------
    float
        The integral.
    """
    k = integer("k", k, min=0)
    eta = real("eta", eta, min=0)
    return mp_integral(lambda x: residual_power(eta, x, 2 * k), gamma)


def mp_rate(eta: float, gamma: float) -> float:
    r"""The geometric rate of k-step GD on a spectrum inside the Marchenko--Pastur support,

    .. math:: \rho_{\rm MP} = \max(|1-\eta\lambda_-|, |1-\eta\lambda_+|),

    so that :math:`\tr(I-\eta S)^{2k} \le d\rho_{\rm MP}^{2k}` there.

    Parameters
    ----------
    eta : float
        The step.
    gamma : float
        :math:`d/n`, in (0, 1].

    Returns
    -------
    float
        :math:`\rho_{\rm MP}`.
    """
    lo, hi = mp_edges(gamma)
    return float(max(abs(1 - eta * lo), abs(1 - eta * hi)))
