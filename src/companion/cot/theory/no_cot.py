r"""Without CoT: the optimal one-step size of :prf:ref:`cot-thm-3-1` and the error floor of :prf:ref:`cot-cor-3-1`,
exact and in the proportional (Marchenko--Pastur) limit.

The best one-layer LSA predicts :math:`\hat w = \eta S w^\star`, with error
:math:`L_1(\eta) = \E\tr(I-\eta S)^2 = d(1 - 2\eta + \eta^2 m_2/d)`, :math:`m_2 = \E\tr S^2 = d(n+d+1)/n`.
"""

from __future__ import annotations

from .wishart import check_dims

__all__ = ["eta_star", "no_cot_floor", "no_cot_floor_mp"]


def eta_star(d: int, n: int) -> float:
    r"""The optimal one-step size of :prf:ref:`cot-thm-3-1`,

    .. math:: \eta^\star = \frac{n}{n+d+1} = \arg\min_\eta \E\tr(I-\eta S)^2 .

    Parameters
    ----------
    d, n : int
        Dimension and examples per prompt (each at least 1).

    Returns
    -------
    float
        :math:`\eta^\star`.
    """
    d, n = check_dims(d, n)
    return n / (n + d + 1)


def no_cot_floor(d: int, n: int) -> float:
    r"""The no-CoT error floor of :prf:ref:`cot-cor-3-1`, the minimum of :math:`\E\|\hat w - w^\star\|^2` over
    one-layer LSAs,

    .. math:: d - d\eta^\star = \frac{d(d+1)}{n+d+1}.

    Parameters
    ----------
    d, n : int
        Dimension and examples per prompt.

    Returns
    -------
    float
        The floor (no 1/2, summed over the d coordinates).
    """
    d, n = check_dims(d, n)
    return d * (d + 1) / (n + d + 1)


def no_cot_floor_mp(d: int, n: int) -> float:
    r"""The no-CoT floor in the proportional (Marchenko--Pastur) limit: the best one-step error
    :math:`d\min_\eta(1 - 2\eta + \eta^2(1+\gamma))`, :math:`\gamma = d/n`, with the limiting moments
    :math:`\int\lambda\,d\mathrm{MP}_\gamma = 1` and :math:`\int\lambda^2\,d\mathrm{MP}_\gamma = 1 + \gamma`
    in place of the exact :math:`m_2/d = (n+d+1)/n`,

    .. math:: \frac{d\gamma}{1+\gamma} = \frac{d^2}{n+d},\qquad
              1 - \frac{d^2/(n+d)}{d(d+1)/(n+d+1)} = \frac{n}{(d+1)(n+d)}:

    the floor of :prf:ref:`cot-cor-3-1` without its finite-size corrections, what the leading-order
    :math:`\Theta(d^2/n)` analysis gives (the falsifier of the no-CoT claims of :prf:ref:`cot-cor-3-1` and
    :prf:ref:`cot-prop-experiments`).

    Parameters
    ----------
    d, n : int
        Dimension and examples per prompt.

    Returns
    -------
    float
        :math:`d^2/(n+d)` (no 1/2, summed over the d coordinates).
    """
    d, n = check_dims(d, n)
    return d * d / (n + d)
