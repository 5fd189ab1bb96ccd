"""Standard errors measured from the data: the one home of the noise model behind every statistical claim.

Every statistical verdict of the book compares a simulated quantity with an independent prediction at a
tolerance of ``z`` standard errors plus a round-off floor (:meth:`companion.verdict.Verdict.statistical`).
The standard errors come from here:

* :func:`mean_se` — the sample mean and its standard error :math:`s/\\sqrt N` (i.i.d. draws).
* :func:`median_se` — the sample median and a distribution-free standard error from order statistics.
* :func:`jackknife_se` — the delete-one-group jackknife of a (possibly nonlinear) statistic.
* :func:`replicate_se` — the spread of independent replicates (seeds) of a whole experiment.
* :func:`batch_means_se` — the standard error of a mean from the means of contiguous batches.
* :func:`combine` — independent standard errors added in quadrature.

All functions take array-likes and return Python floats (or float arrays where stated), so a verdict
record never holds a numpy scalar.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["mean_se", "median_se", "jackknife_se", "replicate_se", "batch_means_se", "combine", "ROUNDOFF"]

#: Relative round-off of a float64 computation that accumulates over ~1e4 terms (a stated floor, not a
#: tuned allowance): sqrt(1e4) * 2.2e-16 ~ 2e-14, rounded up.
ROUNDOFF = 1e-13


def mean_se(x, axis: int | None = None):
    r"""Sample mean and its standard error.

    .. math:: \bar x = \frac1N\sum_i x_i,\qquad \mathrm{se} = \frac{s}{\sqrt N},\quad
              s^2 = \frac1{N-1}\sum_i (x_i-\bar x)^2 .

    Args:
        x: draws (i.i.d. along ``axis``; flattened when ``axis`` is None). Needs at least two draws.
        axis: the axis of the draws.
    Returns:
        ``(mean, se)``: floats, or arrays when ``axis`` is given for a multi-dimensional ``x``.
    """
    x = np.asarray(x, dtype=float)
    if axis is None:
        x = x.ravel()
        axis = 0
    n = x.shape[axis]
    if n < 2:
        raise ValueError(f"mean_se needs at least 2 draws; got {n}")
    mu = x.mean(axis=axis)
    se = x.std(axis=axis, ddof=1) / math.sqrt(n)
    if np.ndim(mu) == 0:
        return float(mu), float(se)
    return mu, se


def median_se(x) -> tuple[float, float]:
    r"""Sample median and a distribution-free standard error from order statistics.

    The rank of the sample median is binomial with standard deviation :math:`\sqrt N/2`, so
    :math:`\mathrm{se}\approx\tfrac12\big(q(\tfrac12+\tfrac1{2\sqrt N})-q(\tfrac12-\tfrac1{2\sqrt N})\big)`
    with :math:`q` the empirical quantile function. Infinite entries (e.g. divergent prompts) are allowed;
    NaN entries are dropped.

    Returns:
        ``(median, se)`` as floats.
    """
    x = np.asarray(x, dtype=float).ravel()
    x = x[~np.isnan(x)]
    n = len(x)
    if n < 2:
        raise ValueError(f"median_se needs at least 2 draws; got {n}")
    h = 0.5 / math.sqrt(n)
    lo, med, hi = np.quantile(x, [0.5 - h, 0.5, 0.5 + h], method="inverted_cdf")
    return float(med), float((hi - lo) / 2)


def jackknife_se(full, leave_one_out, axis: int = 0):
    r"""Delete-one-group jackknife standard error.

    With :math:`\hat\theta_{(-g)}` the statistic recomputed without group :math:`g` (:math:`g=1..G`),

    .. math:: \mathrm{se}^2=\frac{G-1}{G}\sum_{g}\big(\hat\theta_{(-g)}-\bar\theta_{(\cdot)}\big)^2 .

    Args:
        full: the statistic on all the data (returned unchanged as the estimate).
        leave_one_out: the G leave-one-group-out values, stacked along ``axis``.
    Returns:
        ``(full, se)`` (floats for scalar statistics, arrays otherwise).
    """
    loo = np.asarray(leave_one_out, dtype=float)
    G = loo.shape[axis]
    if G < 2:
        raise ValueError(f"jackknife_se needs at least 2 groups; got {G}")
    dev = loo - loo.mean(axis=axis, keepdims=True)
    se = np.sqrt((G - 1) / G * (dev**2).sum(axis=axis))
    if np.ndim(se) == 0:
        return float(np.asarray(full, dtype=float)), float(se)
    return np.asarray(full, dtype=float), se


def replicate_se(values, axis: int = 0):
    """Mean over independent replicates (e.g. training seeds) and its standard error: :func:`mean_se`
    along ``axis``; the replicates must be independent runs of the whole experiment."""
    return mean_se(values, axis=axis)


def batch_means_se(x, n_batches: int) -> tuple[float, float]:
    r"""Mean of ``x`` and its standard error from ``n_batches`` contiguous batch means.

    .. math:: \mathrm{se} = \frac{s_B}{\sqrt B},\quad s_B^2=\frac1{B-1}\sum_b(\bar x_b-\bar x)^2 .

    Useful when the draws are weakly dependent within a batch. For heavy-tailed draws with few batches the
    estimate is itself noisy; prefer :func:`mean_se` on i.i.d. draws.
    """
    x = np.asarray(x, dtype=float).ravel()
    if not 2 <= n_batches <= len(x):
        raise ValueError(f"n_batches must be in [2, {len(x)}]; got {n_batches}")
    means = np.array([b.mean() for b in np.array_split(x, n_batches)])
    return float(x.mean()), float(means.std(ddof=1) / math.sqrt(n_batches))


def combine(*ses) -> float:
    """Independent standard errors added in quadrature: sqrt(sum se_i^2)."""
    return float(math.sqrt(sum(float(s) ** 2 for s in ses)))
