r"""Out of distribution (:prf:ref:`cot-thm-4-2`): prompts :math:`x_i \sim N(0, \Sigma)` for a model trained at
:math:`\Sigma = I`. The exact error of a one-step predictor :math:`\hat w = -VS w^\star` and its
:math:`\Sigma`-aware optimum; the spectral sufficient condition for k-step GD to converge and its rate.
"""

from __future__ import annotations

import numpy as np

from companion.params import integer

from .mp import mp_edges
from .wishart import check_covariance

__all__ = ["one_step_ood_error", "one_step_optimal_V", "spectral_condition"]


def one_step_ood_error(V, Sigma, n: int, factor: float = 1.0) -> float:
    r"""The error of the one-step predictor :math:`\hat w = -VS\wstar`, :math:`x \sim N(0, \Sigma)`,
    :math:`\wstar \sim N(0, I)` (:prf:ref:`cot-thm-4-2`, eq. ``cot-ood-one-step``),

    .. math:: \E\|\hat w-\wstar\|^2 = \|I+V\Sigma\|_F^2
              + \tfrac{c}{n}\bigl[\tr(V\Sigma^2V^\T)+\tr(V\Sigma V^\T)\tr\Sigma\bigr],

    with :math:`c = 1`; :math:`c = 2` is the printed form of Javanmard et al., Lemma A.1, kept as the falsifier of
    the page.

    Parameters
    ----------
    V : array_like
        The d x d matrix of the predictor.
    Sigma : array_like
        The test covariance (:func:`companion.cot.theory.wishart.check_covariance`).
    n : int
        Examples per prompt.
    factor : float
        The factor :math:`c`.

    Returns
    -------
    float
        The error (no 1/2, summed over the d coordinates).
    """
    V = np.asarray(V, dtype=float)
    d = V.shape[0]
    Sigma = check_covariance(Sigma, d)
    n = integer("n", n, min=1)
    I = np.eye(d)
    return float(
        np.sum((I + V @ Sigma) ** 2)
        + factor * (np.trace(V @ Sigma @ Sigma @ V.T) + np.trace(V @ Sigma @ V.T) * np.trace(Sigma)) / n
    )


def one_step_optimal_V(Sigma, n: int) -> np.ndarray:
    r"""The :math:`\Sigma`-aware optimal one-step predictor :math:`\hat w = -VS\wstar`, the minimiser of
    :func:`one_step_ood_error`,

    .. math:: V = -\Gamma^{-1},\qquad \Gamma = \frac{n+1}{n}\Sigma + \frac{\tr\Sigma}{n} I .

    Parameters
    ----------
    Sigma : array_like
        The test covariance.
    n : int
        Examples per prompt.

    Returns
    -------
    numpy.ndarray
        V, shape (d, d); :math:`-\eta^\star I` at :math:`\Sigma = I`.
    """
    Sigma = np.asarray(Sigma, dtype=float)
    d = Sigma.shape[0]
    Sigma = check_covariance(Sigma, d)
    n = integer("n", n, min=1)
    Gamma = (n + 1) / n * Sigma + np.trace(Sigma) / n * np.eye(d)
    return -np.linalg.inv(Gamma)


def spectral_condition(eta: float, Sigma, n: int) -> tuple[float, float]:
    r"""The spectral sufficient condition of :prf:ref:`cot-thm-4-2` and its rate.

    The eigenvalues of :math:`S_\Sigma` lie, to leading order, in
    :math:`[\lambda_{\min}(\Sigma)\lambda_-, \lambda_{\max}(\Sigma)\lambda_+]` with the Marchenko--Pastur edges
    :math:`\lambda_\pm = (1\pm\sqrt{d/n})^2` (:func:`companion.cot.theory.mp.mp_edges`). GD with step :math:`\eta`
    contracts there when

    .. math:: \eta\lambda_{\max}(\Sigma)(1+\sqrt{d/n})^2 < 2,

    at the rate :math:`\rho_\Sigma = \max(|1-\eta\lambda_{\min}(\Sigma)\lambda_-|,
    |1-\eta\lambda_{\max}(\Sigma)\lambda_+|)`, so that the k-step error is at most :math:`d\rho_\Sigma^{2k}`.

    Parameters
    ----------
    eta : float
        The GD step.
    Sigma : numpy.ndarray
        The test covariance, d x d.
    n : int
        Examples per prompt, at least d.

    Returns
    -------
    tuple of float
        ``(cond, rho)``: the left-hand side of the condition (it holds when below 2) and :math:`\rho_\Sigma`.
    """
    lo, hi = np.linalg.eigvalsh(Sigma)[[0, -1]]
    edge_lo, edge_hi = mp_edges(Sigma.shape[0] / n)
    return float(eta * hi * edge_hi), float(max(abs(1 - eta * lo * edge_lo), abs(1 - eta * hi * edge_hi)))
