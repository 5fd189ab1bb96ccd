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
* :func:`welch` — the same, with the Welch–Satterthwaite degrees of freedom of the sum.
* :func:`level` — the level of every band from the book's one error budget (:data:`Z_LEVEL`).
* :func:`critical` — the critical value of a standard error with few degrees of freedom.
* :func:`wider` — of two valid standard errors of one estimate, the one with the wider band.
* :func:`false_alarm` — the two-sided probability of a band of z standard errors with few degrees of freedom.
* :func:`richardson` — replicate means at m and m/4 extrapolated to m → ∞ for a 1/m bias, with SE and dof.
* :func:`controlled_mean` — a replicate mean with control variates of exactly known mean (regression estimator).
* :func:`controlled_richardson` — :func:`richardson` on the controlled means of the two sizes.

**One error budget.** Were every theorem right, one whole build should fail with probability at most
:data:`BUILD_FALSE_FAIL`. A build decides at most :data:`BUILD_CLAIMS` claims against a band of standard errors,
so each gets the two-sided level :math:`\\alpha` = ``BUILD_FALSE_FAIL / BUILD_CLAIMS`` (Bonferroni: the chance that
any of them fails is at most the sum), i.e. :data:`Z_LEVEL` normal standard errors (:func:`level`), the default
``z`` of every statistical claim. The committed calibration measures how far each claim's real false-fail rate is
from :math:`\\alpha` (:mod:`companion.calibration`).

**Degrees of freedom.** A standard error estimated from R replicates rests on R − 1 degrees of freedom; its
ratio to the true one is a chi variable, so ``z`` such standard errors do not cover the normal level
(``P(|t_2| > 4)`` = 5.7 %, against 6.3e-5 for a normal). A verdict with ``dof`` given uses the Student-t quantile
at the *same two-sided level* as z normal standard errors (:func:`critical`; at z = 4: 17.4 at 4 degrees of
freedom, 6.6 at 10, 4.3 at 60), so every statistical claim of the book has the same false-alarm rate whatever the
source of its standard error.

All functions take array-likes and return Python floats (or float arrays where stated), so a verdict
record never holds a numpy scalar.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

__all__ = ["mean_se", "median_se", "jackknife_se", "replicate_se", "batch_means_se", "combine", "welch", "critical",
           "level", "BUILD_FALSE_FAIL", "BUILD_CLAIMS", "Z_LEVEL", "level_words",
           "detectable", "POWER", "wider", "false_alarm", "richardson", "controlled_mean", "controlled_richardson", "band_words", "MANY_DOF", "ROUNDOFF"]

#: Relative round-off of a float64 computation that accumulates over ~1e4 terms (a stated floor, not a
#: tuned allowance): sqrt(1e4) * 2.2e-16 ~ 2e-14, rounded up.
ROUNDOFF = 1e-13

#: The book's one error budget: the chance that a whole build at any accepted seed fails a claim, were every
#: theorem right (a target; the Calibration page measures the real rate).
BUILD_FALSE_FAIL = 0.01
#: The claims one build decides against a band of standard errors, that the budget is split over: statistical
#: claims, bounds with a standard error and orderings with a margin in standard errors. A design number, an upper
#: bound fixed before any run: the book's build at its parameters decides fewer (its "Every claim" page counts
#: them and says so), and tests count them at the smoke and domain points.
BUILD_CLAIMS = 120


def level(budget: float = BUILD_FALSE_FAIL, claims: int = BUILD_CLAIMS) -> float:
    r"""The number of normal standard errors whose two-sided level shares ``budget`` equally among ``claims``:

    .. math:: z = \Phi^{-1}\big(1 - \tfrac{\alpha}{2}\big),\qquad \alpha = \text{budget}/\text{claims},

    so that ``claims`` correct claims, each judged at z, fail together with probability at most ``budget``
    (Bonferroni: whatever the dependence between the claims). 3.93 for 1 % over 120 claims."""
    if not (0 < budget < 1 and claims >= 1):
        raise ValueError(f"need 0 < budget < 1 and claims >= 1; got budget={budget!r}, claims={claims!r}")
    return NormalDist().inv_cdf(1 - budget / (2 * claims))


#: the level of every band of the book in normal standard errors (:func:`level` of the budget): the default ``z``
#: of :meth:`companion.verdict.Verdict.statistical` and of every estimator that sizes a band
Z_LEVEL = level()


def level_words() -> str:
    """The level in words, for a claim's reason: "3.93 SE" (:data:`Z_LEVEL`, three digits)."""
    return f"{Z_LEVEL:.3g} SE"


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
    """Independent standard errors added in quadrature: sqrt(sum se_i^2) (by ``math.hypot``, so huge standard
    errors, e.g. of medians that reach diverging prompts, give a large or infinite result, never an overflow)."""
    return float(math.hypot(*(float(s) for s in ses)))


def welch(*terms) -> tuple[float, float]:
    r"""Independent standard errors added in quadrature, with the Welch–Satterthwaite degrees of freedom.

    Each term is ``(se_i, dof_i)`` (``dof_i = math.inf`` for a standard error known to many degrees of
    freedom, e.g. the mean of 1e4 i.i.d. draws):

    .. math:: \mathrm{se}^2=\sum_i \mathrm{se}_i^2,\qquad
              \nu=\frac{\mathrm{se}^4}{\sum_i \mathrm{se}_i^4/\nu_i}.

    Returns ``(se, dof)``; ``dof`` is ``math.inf`` when every term has infinitely many.
    """
    terms = [(abs(float(se_i)), float(dof_i)) for se_i, dof_i in terms]
    if any(not dof_i > 0 for _, dof_i in terms):
        raise ValueError(f"degrees of freedom must be > 0; got {[dof_i for _, dof_i in terms]!r}")
    scale = max((se_i for se_i, _ in terms), default=0.0)
    if scale == 0.0 or not math.isfinite(scale):  # all exact, or an infinite (or NaN) term: nothing to weigh
        return (combine(*(se_i for se_i, _ in terms)), math.inf)
    se2 = den = 0.0  # in units of the largest term: no overflow of the squares
    for se_i, dof_i in terms:
        v = (se_i / scale) ** 2
        se2 += v
        den += v * v / dof_i
    return scale * math.sqrt(se2), (se2 * se2 / den if den > 0 else math.inf)


#: Degrees of freedom above which a standard error counts as known ("many"): the Student-t quantile at the level
#: of z = 4 differs from 4 by less than 1e-5 relative (a verdict stores no dof then, and its band is z).
MANY_DOF = 1e6


def band_words(dof: float | None) -> str:
    """The band of a standard error in words, for a verdict's reason: "Student-t on 7.3 degrees of freedom", or
    "normal (many degrees of freedom)" when ``dof`` is None, infinite or above :data:`MANY_DOF` (a Welch
    combination dominated by a test-set mean has ~1e14)."""
    if dof is None or not dof <= MANY_DOF:
        return "normal (many degrees of freedom)"
    return f"Student-t on {float(dof):.3g} degrees of freedom"


def critical(z: float, dof: float | None = None) -> float:
    r"""The number of (estimated) standard errors with the two-sided level of ``z`` normal standard errors.

    .. math:: c = t_\nu^{-1}\big(\Phi(z)\big),

    the Student-t quantile with ``dof`` = :math:`\nu` degrees of freedom; ``z`` itself when ``dof`` is None or
    infinite. At z = 4: 125.6 (2 dof), 17.4 (4), 6.6 (10), 5.0 (20), 4.3 (60).
    """
    if dof is None or math.isinf(dof):
        return float(z)
    if not dof > 0:
        raise ValueError(f"degrees of freedom must be > 0; got {dof!r}")
    from scipy import stats as st

    return float(st.t.isf(st.norm.sf(z), dof))


#: the power at which :func:`detectable` states the smallest deviation a statistical claim finds
POWER = 0.99


def detectable(crit: float, se: float, floor: float = 0.0, dof: float | None = None, power: float = POWER) -> float:
    r"""The smallest deviation :math:`\delta` of the truth from the prediction that a band of ``crit`` standard
    errors plus ``floor`` detects with probability ``power``:

    .. math:: \delta = (c + q_{\text{power}})\,\mathrm{se} + \text{floor},

    with :math:`q` the normal quantile, or the Student-t one with ``dof`` degrees of freedom (the measurement is
    then :math:`\delta` plus ``se`` times a t variable; the chance of leaving the band on the far side only adds
    to the power and is left out). A falsifier nearer to the prediction than this can
    pass unrejected in more than one run in a hundred even when it is the truth."""
    from scipy import stats as st

    q = st.norm.ppf(power) if dof is None or math.isinf(dof) else st.t.ppf(power, dof)
    return float((crit + q) * se + floor)


def wider(z: float, *candidates) -> tuple[float, float]:
    r"""Of several standard errors of the *same* estimate, each valid on its own (``(se_i, dof_i)``), the one
    whose band :math:`c(z, \nu_i)\,\mathrm{se}_i` (:func:`critical`) is widest.

    Used where a replicate spread (few degrees of freedom, but it covers every source of noise) meets a
    within-replicate standard error (many degrees of freedom, a lower bound on the true one): each test alone
    keeps the level of z normal standard errors, and the wider band can only alarm less often.
    Returns ``(se, dof)`` of the chosen candidate.
    """
    if not candidates:
        raise ValueError("wider needs at least one (se, dof) candidate")
    return max(((float(se), float(dof)) for se, dof in candidates), key=lambda c: critical(z, c[1]) * c[0])


def false_alarm(z: float, dof: float | None = None) -> float:
    r"""Two-sided probability that a correct prediction lies more than ``z`` estimated standard errors from the
    measurement, :math:`P(|t_\nu|>z)` (the normal :math:`P(|N|>z)` when ``dof`` is None or infinite)."""
    from scipy import stats as st

    if dof is None or math.isinf(dof):
        return float(2 * st.norm.sf(z))
    return float(2 * st.t.sf(z, dof))


def richardson(big, small):
    r"""Replicates of a scalar statistic at m (``big``, R values) and at m/4 (``small``, R' values), extrapolated to
    m → ∞ for a finite-m bias :math:`B/m` (a smooth statistic of sample moments, or a second-order effect of
    O(m^{-1/2}) fluctuations, has such a bias):

    .. math:: \hat\theta_\infty=\tfrac13\big(4\,\bar x(m)-\bar x(m/4)\big),\qquad
              \mathrm{se}^2=\tfrac19\big(16\,\mathrm{se}^2(m)+\mathrm{se}^2(m/4)\big),

    each standard error the replicate spread (:func:`replicate_se`, R - 1 and R' - 1 degrees of freedom), the
    degrees of freedom of the combination by :func:`welch`.

    Returns ``dict(measured, se, dof, mean_big, mean_small)``.
    """
    big = np.asarray(big, dtype=float).ravel()
    small = np.asarray(small, dtype=float).ravel()
    mb, sb = replicate_se(big)
    ms, ss = replicate_se(small)
    se, dof = welch((4 * sb / 3, len(big) - 1), (ss / 3, len(small) - 1))
    return dict(measured=(4 * mb - ms) / 3, se=se, dof=dof, mean_big=mb, mean_small=ms)


def controlled_mean(y, controls=None, min_dof: int = 9, coef=None) -> tuple[float, float, float, int]:
    r"""The mean of replicates ``y`` (R values) with control variates: ``controls`` (R, k) are statistics of each
    replicate whose expectation is **exactly 0** (e.g. a sample moment minus the law's moment). The regression
    (control-variate) estimator is the intercept of the least-squares fit of y on :math:`[1, X]`,

    .. math:: \hat\mu=\bar y-\hat\gamma^\top\bar X,\qquad
              \mathrm{se}^2=s^2\,\big[(A^\top A)^{-1}\big]_{00},\quad A=[1,X],\quad
              s^2=\frac{\lVert y-A\hat\theta\rVert^2}{R-1-k},

    on R - 1 - k degrees of freedom. Since :math:`E X=0`, :math:`\hat\mu` estimates :math:`E y` whatever the
    coefficients (up to an O(1/R) term of the estimated :math:`\hat\gamma`); the controls only remove the part of
    the spread that they explain. With fewer than ``min_dof`` residual degrees of freedom (R - 1 - k < min_dof),
    or no controls (a control without spread is dropped), it is the plain replicate mean (:func:`replicate_se`,
    R - 1 degrees of freedom).

    With fixed coefficients ``coef`` (k values chosen without these replicates) it is the mean of
    :math:`y-X\,\mathrm{coef}`, exactly unbiased for :math:`E y` whatever the coefficients, on R - 1 degrees of
    freedom. (The regression estimator's :math:`\hat\gamma` correlates with :math:`\bar X` when the controls are
    skewed, e.g. sample sixth moments of a Gaussian: its O(1/R) bias can then be comparable to its standard error.)

    Returns ``(mean, se, dof, k)``, k the number of controls used (0 for the plain mean).
    """
    y = np.asarray(y, dtype=float).ravel()
    n = len(y)
    if coef is not None and controls is not None:
        adj = y - np.asarray(controls, dtype=float).reshape(n, -1) @ np.asarray(coef, dtype=float).ravel()
        mu, se = replicate_se(adj)
        return float(mu), float(se), float(n - 1), len(np.atleast_1d(coef))
    X = np.zeros((n, 0)) if controls is None else np.asarray(controls, dtype=float).reshape(n, -1)
    X = X[:, np.ptp(X, axis=0) > 0]  # a control without spread (e.g. exactly 0 for every replicate) explains nothing
    k = X.shape[1]
    if k == 0 or n - 1 - k < min_dof:
        mu, se = replicate_se(y)
        return float(mu), float(se), float(n - 1), 0
    A = np.column_stack([np.ones(n), X])
    theta, *_ = np.linalg.lstsq(A, y, rcond=None)
    resid = y - A @ theta
    dof = n - 1 - k
    s2 = float(resid @ resid) / dof
    cov = s2 * np.linalg.inv(A.T @ A)
    return float(theta[0]), float(math.sqrt(cov[0, 0])), float(dof), k


def controlled_richardson(big, small, controls_big=None, controls_small=None, min_dof: int = 9, coef=None) -> dict:
    r""":func:`richardson` with each size's mean replaced by its control-variate mean (:func:`controlled_mean`,
    controls of exactly known mean 0, each size on its own fit): for replicates at m (``big``) and m/4 (``small``)

    .. math:: \hat\theta_\infty=\tfrac13\big(4\,\hat\mu(m)-\hat\mu(m/4)\big),\qquad
              \mathrm{se}^2=\tfrac19\big(16\,\mathrm{se}^2(m)+\mathrm{se}^2(m/4)\big),

    with the Welch degrees of freedom of the two residual spreads (:func:`welch`); ``coef``: fixed coefficients
    for both sizes (see :func:`controlled_mean`). Returns
    ``dict(measured, se, dof, mean_big, mean_small, se_big, se_small, k_big, k_small)``.
    """
    mb, sb, db, kb = controlled_mean(big, controls_big, min_dof, coef)
    ms, ss, ds, ks = controlled_mean(small, controls_small, min_dof, coef)
    se, dof = welch((4 * sb / 3, db), (ss / 3, ds))
    return dict(measured=(4 * mb - ms) / 3, se=se, dof=dof, mean_big=mb, mean_small=ms, se_big=sb, se_small=ss,
                k_big=kb, k_small=ks)
