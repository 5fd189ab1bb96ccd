r"""The error of k gradient-descent steps on one prompt, written once, and the estimates built from it.

k GD steps of size :math:`\eta` from :math:`w_0 = 0` on a prompt with sample covariance S leave
:math:`w_k - w^\star = -(I-\eta S)^k w^\star`. With :math:`w^\star \sim N(0, I)` and :math:`\lambda_j` the
eigenvalues of S, the error averaged over :math:`w^\star`, and the error of one :math:`w^\star` with coordinates
:math:`z` in the eigenbasis of S, are

.. math:: \E_{w^\star}\|w_k - w^\star\|^2 = \tr(I-\eta S)^{2k} = \sum_j (1-\eta\lambda_j)^{2k},\qquad
          \|w_k - w^\star\|^2 = \sum_j (1-\eta\lambda_j)^{2k} z_j^2 .

:func:`gd_trace` is that sum (on the residual factors of :func:`residual_power`), and every result composes it:
its expectation :math:`L_k(\eta) = \E\tr(I-\eta S)^{2k}` exactly (:func:`gd_error_wishart`, :prf:ref:`cot-thm-3-2`)
and by Monte Carlo (:func:`gd_error_mc`), the law of the per-prompt error (:func:`gd_error_samples`), the out-of-
distribution rows of :prf:ref:`cot-thm-4-2`, the looped optimum of :prf:ref:`cot-prop-looped`
(:mod:`companion.cot.theory.loops`, with the derivatives of :func:`gd_trace_derivatives` and the delta-method
standard error of an argmin, :func:`argmin_se`) and the Marchenko--Pastur limit
(:func:`companion.cot.theory.mp.gd_error_mp`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import comb

import numpy as np

from companion.params import integer, real
from companion.stats import mean_se

from .wishart import check_dims, wishart_trace_moments

__all__ = ["residual_power", "gd_trace", "gd_trace_derivatives", "argmin_se", "gd_error_wishart", "MCEstimate",
           "gd_error_mc", "gd_error_samples", "divergence_step"]


def residual_power(c, eigs, p: int) -> np.ndarray:
    r"""The residual factor of p GD steps of size c on an eigenvalue :math:`\lambda` of S,

    .. math:: (1 - c\lambda)^p,

    by repeated squaring: several times faster than ``np.power`` on float arrays, and the same products for every
    caller. Beyond the stability boundary (:math:`|1 - c\lambda| > 1`, large p) the factor overflows to
    :math:`\pm\infty`, which is what it is: no warning.

    Parameters
    ----------
    c : float or array_like
        The step; an array of steps gives one result per step, its axes first.
    eigs : array_like
        Eigenvalues, any shape (spectra in the rows: (N, d)).
    p : int
        The power, at least 0.

    Returns
    -------
    numpy.ndarray
        Shape ``np.shape(c) + np.shape(eigs)``.
    """
    c = np.asarray(c, dtype=float)
    e = np.asarray(eigs, dtype=float)
    base = 1.0 - c.reshape(c.shape + (1,) * e.ndim) * e
    result = np.ones_like(base)
    with np.errstate(over="ignore"):
        while p:
            if p & 1:
                result = result * base
            p >>= 1
            if p:
                base = base * base
    return result


def gd_trace(c, eigs, k: int, z=None) -> np.ndarray:
    r"""The error of k GD steps of size c on each prompt, from its spectrum (the rows of ``eigs``),

    .. math:: \tr(I-cS)^{2k} = \sum_j (1-c\lambda_j)^{2k}
              \qquad\text{or, given } z,\qquad \sum_j (1-c\lambda_j)^{2k} z_j^2,

    the error averaged over :math:`w^\star \sim N(0, I)`, or the error of the one :math:`w^\star` whose coordinates
    in the eigenbasis of S are :math:`z` (the rows of ``z``).

    Parameters
    ----------
    c : float or array_like
        The step (an array: one result per step, its axes first).
    eigs : array_like
        Spectra, shape (..., d).
    k : int
        GD steps, at least 0.
    z : array_like, optional
        Coordinates of :math:`w^\star`, the shape of ``eigs``.

    Returns
    -------
    numpy.ndarray
        Shape ``np.shape(c) + eigs.shape[:-1]``; :math:`+\infty` where the error overflows.
    """
    r = residual_power(c, eigs, 2 * k)
    if z is not None:
        r = r * np.asarray(z) ** 2
    return np.sum(r, axis=-1)


def gd_trace_derivatives(c: float, eigs, k: int) -> tuple[np.ndarray, np.ndarray]:
    r"""The first two derivatives in the step c of :func:`gd_trace` on each prompt,

    .. math:: F'(c) = \sum_j -2k\lambda_j(1-c\lambda_j)^{2k-1},\qquad
              F''(c) = \sum_j 2k(2k-1)\lambda_j^2(1-c\lambda_j)^{2k-2}.

    Parameters
    ----------
    c : float
        The step.
    eigs : array_like
        Spectra, shape (N, d).
    k : int
        GD steps, at least 1.

    Returns
    -------
    tuple of numpy.ndarray
        ``(first, second)``, each of shape (N,).
    """
    e = np.asarray(eigs, dtype=float)
    first = np.sum(-2 * k * e * residual_power(c, e, 2 * k - 1), axis=-1)
    second = np.sum(2 * k * (2 * k - 1) * e**2 * residual_power(c, e, 2 * k - 2), axis=-1)
    return first, second


def argmin_se(first, second, mean_and_se=mean_se) -> float:
    r"""Delta-method standard error of the minimiser :math:`\hat c` of a Monte-Carlo mean
    :math:`\hat F(c) = \frac1N\sum_i f_i(c)`.

    To first order :math:`\hat c - c^\star = -\hat F'(c^\star)/F''(c^\star)`, so

    .. math:: \mathrm{SE}(\hat c) = \frac{\mathrm{SE}\bigl(\hat F'(\hat c)\bigr)}{\hat F''(\hat c)},

    from the per-sample derivatives at :math:`\hat c` (importance-weighted where the mean is:
    :func:`companion.cot.theory.loops.looped_is_optimum`). The ratio of means
    :math:`\hat\eta = \overline{\tr S}/\overline{\tr S^2}`, the argmin of :math:`\E\tr(I-\eta S)^2`
    (:func:`companion.cot.results.thm3_1.eta_argmin_mc`), is the case :math:`k = 1`.

    Parameters
    ----------
    first, second : array_like
        :math:`f_i'(\hat c)` and :math:`f_i''(\hat c)`, one per sample.
    mean_and_se : callable, optional
        ``(mean, se)`` of a sample's values: :func:`companion.stats.mean_se` (i.i.d. samples, the default), or the
        estimator of the sample's design (:func:`companion.cot.theory.loops.is_mean_se`, a stratified
        importance-weighted sample, whose ``first`` and ``second`` then carry the weights).

    Returns
    -------
    float
        :math:`\mathrm{SE}(\hat c)`.
    """
    return mean_and_se(first)[1] / np.mean(second)


def gd_error_wishart(k: int, eta: float, d: int, n: int) -> float:
    r"""Exact error of k GD steps (:prf:ref:`cot-thm-3-2`) for every k,

    .. math:: L_k(\eta) = \E\tr(I-\eta S)^{2k} = \sum_{p=0}^{2k}\binom{2k}{p}(-\eta)^p\,\frac{\E\tr W^p}{n^p},

    with the exact moments of :func:`companion.cot.theory.wishart.wishart_trace_moments`, summed in rational
    arithmetic (the alternating sum cancels many digits; ``eta`` enters as the exact binary fraction of the float).
    For :math:`k = 1`, :math:`L_1(\eta) = d(1 - 2\eta + \eta^2 (n+d+1)/n)`, minimal at :math:`\eta^\star`
    (:prf:ref:`cot-thm-3-1`).

    Parameters
    ----------
    k : int
        GD steps, 0..30.
    eta : float
        The step, >= 0.
    d, n : int
        Dimension and examples per prompt.

    Returns
    -------
    float
        :math:`L_k(\eta)`.
    """
    k = integer("k", k, min=0, max=30)
    eta = real("eta", eta, min=0)
    d, n = check_dims(d, n)
    m = wishart_trace_moments(2 * k, d, n)
    e = Fraction(eta)
    return float(sum(comb(2 * k, p) * (-e) ** p * Fraction(m[p], n**p) for p in range(2 * k + 1)))


@dataclass(frozen=True)
class MCEstimate:
    """A Monte-Carlo estimate of a mean over prompts: the mean, its standard error, the median and the number of
    prompts; ``mean, se = estimate`` unpacks the first two."""

    mean: float
    se: float
    median: float
    num: int

    def __iter__(self):
        yield self.mean
        yield self.se


def gd_error_mc(k: int, eta: float, eigs: np.ndarray) -> MCEstimate:
    r"""Monte-Carlo :math:`L_k(\eta) = \E\tr(I-\eta S)^{2k}` (:prf:ref:`cot-thm-3-2`): :func:`gd_trace` averaged over
    the prompts whose spectra are the rows of ``eigs``.

    Parameters
    ----------
    k : int
        GD steps, at least 0.
    eta : float
        The step, >= 0.
    eigs : numpy.ndarray
        Spectra, shape (N, d).

    Returns
    -------
    MCEstimate
        The mean with its standard error over the prompts (:func:`companion.stats.mean_se`) and the median.
    """
    k = integer("k", k, min=0)
    eta = real("eta", eta, min=0)
    per = gd_trace(eta, eigs, k)
    mean, se = mean_se(per)
    return MCEstimate(mean, se, float(np.median(per)), per.shape[0])


def gd_error_samples(k: int, eta: float, eigs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    r"""Per-prompt errors of k GD steps with a fresh :math:`w^\star \sim N(0, I)` per prompt: by rotation invariance
    :math:`\|(I-\eta S)^k w^\star\|^2 = \sum_j (1-\eta\lambda_j)^{2k} z_j^2` with :math:`z \sim N(0, I)`
    (:func:`gd_trace`), a sample of the law of the per-prompt error (for medians, :prf:ref:`cot-thm-3-2`).

    Parameters
    ----------
    k : int
        GD steps, at least 0.
    eta : float
        The step, >= 0.
    eigs : numpy.ndarray
        Spectra, shape (N, d).
    rng : numpy.random.Generator
        The source of z.

    Returns
    -------
    numpy.ndarray
        Shape (N,).
    """
    k = integer("k", k, min=0)
    eta = real("eta", eta, min=0)
    eigs = np.asarray(eigs)
    return gd_trace(eta, eigs, k, z=rng.standard_normal(eigs.shape))


def divergence_step(eigs: np.ndarray, p: float = 1e-3) -> tuple[float, float]:
    r"""The GD step from which a fraction ``p`` of the prompts diverge.

    GD on a prompt diverges iff :math:`\eta\lambda_{\max}(S) > 2`, so the step is :math:`2/q` with :math:`q` the
    :math:`1-p` quantile of :math:`\lambda_{\max}(S)` over the spectra.

    Parameters
    ----------
    eigs : numpy.ndarray
        Spectra, shape (N, d), each row ascending (as :func:`companion.cot.theory.wishart.sample_S_eigs` gives them).
    p : float
        The fraction of prompts that diverge.

    Returns
    -------
    tuple of float
        ``(step, q)``.
    """
    q = float(np.quantile(np.asarray(eigs)[:, -1], 1.0 - p))
    return 2.0 / q, q
