"""Exact and reduced theory for Huang, Wang & Lee (ICLR 2025): closed forms, Monte Carlo with standard
errors, the Marchenko--Pastur limit, the reduced (v, w) gradient-flow ODE and the looped optimum.

Conventions (fixed by this book, see ``notebooks/cot/setup.md``):

* errors are sums over the d coordinates with **no** 1/2:  L^Eval = E ||w_hat_k - w*||^2;
* the CoT training loss carries the 1/2 and sums the positions i = 0..k-1;
* S = X X^T / n with x_i ~ N(0, Sigma) (Sigma = I unless stated), w* ~ N(0, I).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from math import comb

import numpy as np
from scipy import integrate, optimize

from companion.params import ParameterError, integer, real, require
from companion.stats import mean_se

__all__ = [
    "eta_star",
    "divergence_step",
    "no_cot_floor",
    "no_cot_floor_mp",
    "wishart_trace_moments",
    "gd_error_wishart",
    "MCEstimate",
    "sample_S",
    "sample_S_eigs",
    "gd_error_mc",
    "gd_error_mp",
    "gd_error_samples",
    "mp_edges",
    "mp_density",
    "mp_integral",
    "mp_moment",
    "mp_rate",
    "one_step_ood_error",
    "one_step_optimal_V",
    "fixed_point_rate",
    "reduced_flow_converged",
    "v_curvature",
    "slow_manifold_time",
    "wishart_is_sample",
    "IS_TAU",
    "looped_is_loss",
    "looped_is_optimum",
    "assumption41_init",
    "restricted_loss_grad",
    "restricted_flow",
    "symmetrised_S_sample",
    "stage1_v",
    "reduced_loss",
    "reduced_grad",
    "solve_reduced_flow",
    "looped_loss",
    "looped_optimum",
    "looped_optimum_exact_k2",
    "looped_optimum_se",
    "looped_two_param_loss",
    "looped_two_param_optimum",
]


def _dn(d, n, *, n_ge_d: bool = False):
    d = integer("d", d, min=1)
    n = integer("n", n, min=1)
    if n_ge_d:
        require(n >= d, "n", f"must be >= d = {d} (S = X X^T/n must be invertible); got {n}")
    return d, n


# ----------------------------------------------------------------------------- closed forms
def eta_star(d: int, n: int) -> float:
    r"""Optimal one-step size of :prf:ref:`cot-thm-3-1`.

    .. math:: \eta^\star = \frac{n}{n+d+1} = \arg\min_\eta \E\tr(I-\eta S)^2 .

    Args:
        d: dimension (>= 1).  n: examples per prompt (>= 1).
    Returns:
        :math:`\eta^\star` (float).
    """
    d, n = _dn(d, n)
    return n / (n + d + 1)


def no_cot_floor(d: int, n: int) -> float:
    r"""No-CoT error floor of :prf:ref:`cot-cor-3-1`, the minimum of :math:`\E\|\hat w - w^\star\|^2` over one-layer LSAs:

    .. math:: d - d\eta^\star = \frac{d(d+1)}{n+d+1}.

    Args:
        d: dimension.  n: examples per prompt.
    Returns:
        The floor (float; no 1/2, summed over the d coordinates).
    """
    d, n = _dn(d, n)
    return d * (d + 1) / (n + d + 1)


def no_cot_floor_mp(d: int, n: int) -> float:
    r"""The no-CoT floor in the proportional (Marchenko--Pastur) limit, :math:`d, n \to \infty` with
    :math:`\gamma = d/n` fixed, scaled by d: the best one-step error :math:`d\min_\eta(1 - 2\eta + \eta^2(1+\gamma))`
    with the limiting moments :math:`\int\lambda\,d\mathrm{MP}_\gamma = 1`, :math:`\int\lambda^2\,d\mathrm{MP}_\gamma
    = 1 + \gamma`,

    .. math:: \frac{d\gamma}{1+\gamma} = \frac{d^2}{n+d},

    the floor of :prf:ref:`cot-cor-3-1` without its finite-size corrections (the competitor of a trained no-CoT
    model's error, :math:`d(d+1)/(n+d+1)` exactly).

    Args:
        d: dimension.  n: examples per prompt.
    Returns:
        :math:`d^2/(n+d)` (float; no 1/2, summed over the d coordinates).
    """
    d, n = _dn(d, n)
    return d * d / (n + d)


def wishart_trace_moments(pmax: int, d: int, n: int) -> list[int]:
    r"""Exact trace moments :math:`\E\tr W^p`, :math:`p = 0..` ``pmax``, of the real Wishart matrix :math:`W = XX^\T`
    (:math:`X \in \R^{d\times n}` with i.i.d. :math:`N(0, 1)` entries), as integers; :math:`m_p = \E\tr S^p` is
    :math:`\E\tr W^p / n^p` (:prf:ref:`cot-thm-3-2`).

    Gaussian integration by parts, :math:`\E[X_{ij}F] = \E[\partial F/\partial X_{ij}]`, applied to
    :math:`\tr W^a = \sum_{ij} X_{ij}(X^\T W^{a-1})_{ji}` inside a product :math:`R` of further traces gives the
    loop (Schwinger--Dyson) equations of the real Wishart law,

    .. math::
        \E[\tr W^a\,R] = (n + a - 1)\,\E[\tr W^{a-1}R] + \sum_{j=1}^{a-1}\E[\tr W^j\,\tr W^{a-1-j}\,R]
                         + \sum_{\tr W^b \in R} 2b\,\E\bigl[\tr W^{a+b-1}\,R/\tr W^b\bigr],

    with :math:`\tr W^0 = d`; each term has total degree one less, down to :math:`\E[1] = 1`. The recursion runs over
    the multisets of powers (partitions) of total degree at most ``pmax``, so its cost grows like their number
    (about 1 s at ``pmax`` = 30). Its first cases are the closed forms :math:`m_1 = d`,
    :math:`m_2 = d(n+d+1)/n`, ... (:math:`p \le 4`; ``tests/cot/test_theory.py`` checks them).

    Parameters
    ----------
    pmax : int
        The largest power, 0..60.
    d, n : int
        Dimension and examples per prompt.

    Returns
    -------
    list of int
        ``[E tr W^0, ..., E tr W^pmax]``.
    """
    pmax = integer("pmax", pmax, min=0, max=60)
    d, n = _dn(d, n)

    @lru_cache(maxsize=None)
    def moment(parts: tuple) -> int:  # E prod_{a in parts} tr W^a, parts sorted, all >= 1
        if not parts:
            return 1
        a, rest = parts[-1], parts[:-1]

        def term(*powers):
            factor, ps = 1, list(rest)
            for q in powers:
                if q == 0:
                    factor *= d
                else:
                    ps.append(q)
            return factor * moment(tuple(sorted(ps)))

        total = (n + a - 1) * term(a - 1) + sum(term(j, a - 1 - j) for j in range(1, a))
        for i, b in enumerate(rest):
            total += 2 * b * moment(tuple(sorted(rest[:i] + rest[i + 1 :] + (a + b - 1,))))
        return total

    return [d] + [moment((p,)) for p in range(1, pmax + 1)]


def gd_error_wishart(k: int, eta: float, d: int, n: int) -> float:
    r"""Exact error of k GD steps (:prf:ref:`cot-thm-3-2`) for every k,

    .. math:: L_k(\eta) = \E\tr(I-\eta S)^{2k} = \sum_{p=0}^{2k}\binom{2k}{p}(-\eta)^p\,\frac{\E\tr W^p}{n^p},

    with the exact moments of :func:`wishart_trace_moments`, summed in rational arithmetic (the alternating sum
    cancels many digits; ``eta`` enters as the exact binary fraction of the float). For :math:`k = 1`,
    :math:`L_1(\eta) = d(1 - 2\eta + \eta^2 (n+d+1)/n)`, minimal at :math:`\eta^\star` (:prf:ref:`cot-thm-3-1`).

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
    d, n = _dn(d, n)
    m = wishart_trace_moments(2 * k, d, n)
    e = Fraction(eta)
    return float(sum(comb(2 * k, p) * (-e) ** p * Fraction(m[p], n**p) for p in range(2 * k + 1)))


# ----------------------------------------------------------------------------- Monte Carlo
@dataclass(frozen=True)
class MCEstimate:
    """Monte-Carlo estimate of a mean over prompts, with its standard error and the median."""

    mean: float
    se: float
    median: float
    num: int

    def __iter__(self):  # allows  mean, se = est  style unpacking of the first two fields
        yield self.mean
        yield self.se


def _check_sigma(Sigma, d):
    if Sigma is None:
        return None
    Sigma = np.asarray(Sigma, dtype=float)
    if Sigma.shape != (d, d):
        raise ParameterError("Sigma", f"must be a {d}x{d} matrix; got shape {Sigma.shape}")
    if not np.allclose(Sigma, Sigma.T, atol=1e-12) or not np.all(np.isfinite(Sigma)):
        raise ParameterError("Sigma", "must be a finite symmetric matrix")
    lo = np.linalg.eigvalsh(Sigma).min()
    if lo <= 0:
        raise ParameterError("Sigma", f"must be positive definite; smallest eigenvalue {lo:.3g}")
    return Sigma


def sample_S(d: int, n: int, num: int, rng: np.random.Generator, Sigma=None, chunk: int = 4096) -> np.ndarray:
    """``num`` independent matrices S = X X^T / n, x_i ~ N(0, Sigma), shape (num, d, d).

    For n >= d the Wishart matrix X X^T is drawn with the Bartlett decomposition (L L^T with L lower
    triangular, L_ii ~ sqrt(chi^2_{n-i+1}), L_ij ~ N(0, 1) for i > j), which has exactly the law of X X^T
    and costs O(d^3) instead of O(d^2 n) per prompt; otherwise X itself is sampled."""
    d, n = _dn(d, n)
    num = integer("num", num, min=1)
    Sigma = _check_sigma(Sigma, d)
    C = None if Sigma is None else np.linalg.cholesky(Sigma)
    out = np.empty((num, d, d))
    il = np.tril_indices(d, -1)
    for s in range(0, num, chunk):
        m = min(chunk, num - s)
        if n >= d:
            L = np.zeros((m, d, d))
            L[:, il[0], il[1]] = rng.standard_normal((m, len(il[0])))
            L[:, np.arange(d), np.arange(d)] = np.sqrt(rng.chisquare(n - np.arange(d), size=(m, d)))
            if C is not None:
                L = C @ L
            out[s : s + m] = L @ L.transpose(0, 2, 1) / n
        else:
            X = rng.standard_normal((m, d, n))
            if C is not None:
                X = C @ X
            out[s : s + m] = X @ X.transpose(0, 2, 1) / n
    return out


def sample_S_eigs(d: int, n: int, num: int, rng: np.random.Generator, Sigma=None) -> np.ndarray:
    """Eigenvalues of ``num`` independent S matrices, shape (num, d)."""
    return np.linalg.eigvalsh(sample_S(d, n, num, rng, Sigma))


def divergence_step(eigs: np.ndarray, p: float = 1e-3) -> tuple[float, float]:
    r"""The GD step from which a fraction ``p`` of the prompts diverge: GD on a prompt diverges iff
    :math:`\eta\lambda_{\max}(S) > 2`, so the step is :math:`2/q` with :math:`q` the :math:`1-p` quantile of
    :math:`\lambda_{\max}(S)` over the spectra ``eigs`` (rows, ascending as :func:`sample_S_eigs` gives them).
    Returns ``(step, q)``."""
    q = float(np.quantile(np.asarray(eigs)[:, -1], 1.0 - p))
    return 2.0 / q, q


def gd_error_mc(k: int, eta: float, eigs: np.ndarray) -> MCEstimate:
    r"""Monte-Carlo :math:`L_k(\eta)` (:prf:ref:`cot-thm-3-2`): the per-prompt error
    :math:`\tr(I-\eta S)^{2k} = \E_{w^\star}\|w_k - w^\star\|^2` averaged over the prompts whose spectra are the rows
    of ``eigs``.

    Returns:
        :class:`MCEstimate` (mean, standard error over the prompts from :func:`companion.stats.mean_se`, median).
    """
    k = integer("k", k, min=0)
    eta = real("eta", eta, min=0)
    with np.errstate(over="ignore"):
        per = np.sum((1.0 - eta * np.asarray(eigs)) ** (2 * k), axis=-1)
    mean, se = mean_se(per)
    return MCEstimate(mean, se, float(np.median(per)), per.shape[0])


def gd_error_samples(k: int, eta: float, eigs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per-prompt k-step GD errors ||(I - eta S)^k w*||^2 with a fresh w* ~ N(0, I) per prompt: by rotation
    invariance this is sum_j (1 - eta lambda_j)^{2k} z_j^2 with z ~ N(0, I) (the law of the per-prompt error,
    e.g. for medians)."""
    k = integer("k", k, min=0)
    eta = real("eta", eta, min=0)
    eigs = np.asarray(eigs)
    z = rng.standard_normal(eigs.shape)
    with np.errstate(over="ignore"):
        return np.sum((1.0 - eta * eigs) ** (2 * k) * z**2, axis=-1)


# ----------------------------------------------------------------------------- Marchenko--Pastur
def mp_edges(gamma: float) -> tuple[float, float]:
    r"""Edges :math:`\lambda_\pm = (1 \pm \sqrt\gamma)^2` of the Marchenko--Pastur law, :math:`0 < \gamma \le 1`
    (:math:`\gamma = 1`, i.e. n = d, has :math:`\lambda_- = 0`)."""
    gamma = real("gamma", gamma, min=0, max=1, min_open=True)
    return (1 - np.sqrt(gamma)) ** 2, (1 + np.sqrt(gamma)) ** 2


def mp_density(lam, gamma: float):
    r"""Marchenko--Pastur density :math:`\sqrt{(\lambda_+-\lambda)(\lambda-\lambda_-)}/(2\pi\gamma\lambda)` on
    :math:`[\lambda_-, \lambda_+]` (zero outside), :math:`0 < \gamma \le 1`."""
    lo, hi = mp_edges(gamma)
    lam = np.asarray(lam, dtype=float)
    inside = (lam > lo) & (lam < hi)
    out = np.zeros_like(lam)
    out[inside] = np.sqrt((hi - lam[inside]) * (lam[inside] - lo)) / (2 * np.pi * gamma * lam[inside])
    return out


def mp_integral(f, gamma: float) -> float:
    r"""Integral of ``f`` against the Marchenko--Pastur law MP(:math:`\gamma`), :math:`0 < \gamma \le 1`.

    With :math:`\lambda = m + r\cos\theta` (:math:`m, r` the centre and half-width of the support) the density
    times :math:`d\lambda` becomes :math:`r^2\sin^2\theta/(2\pi\gamma\lambda)\,d\theta`, which is smooth on
    :math:`[0, \pi]` also at :math:`\gamma = 1` (n = d), where :math:`\lambda_- = 0` and the density itself has
    a :math:`\lambda^{-1/2}` singularity. Gauss--Kronrod quadrature (epsrel 1e-12)."""
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
    r"""Moment :math:`\int\lambda^p\,d\mathrm{MP}_\gamma = \sum_{r=0}^{p-1}\frac{\gamma^r}{r+1}\binom pr\binom{p-1}r`
    (Narayana polynomials; 1 for p = 0), the limit of :math:`m_p/d` (:prf:ref:`cot-thm-3-2`)."""
    p = integer("p", p, min=0)
    gamma = real("gamma", gamma, min=0, max=1, min_open=True)
    if p == 0:
        return 1.0
    return float(sum(gamma**r / (r + 1) * comb(p, r) * comb(p - 1, r) for r in range(p)))


def gd_error_mp(k: int, eta: float, gamma: float) -> float:
    r"""Large-d limit of :math:`L_k(\eta)/d` (:prf:ref:`cot-thm-3-2`):

    .. math:: \lim_{d\to\infty,\ d/n\to\gamma} \tfrac1d\,\E\tr(I-\eta S)^{2k} = \int (1-\eta\lambda)^{2k}\,d\mathrm{MP}_\gamma(\lambda),
              \qquad 0 < \gamma \le 1 .

    Args:
        k: GD steps, >= 0.  eta: step, >= 0.  gamma: d/n in (0, 1] (gamma = 1 is n = d).
    Returns:
        The integral (float).
    """
    k = integer("k", k, min=0)
    eta = real("eta", eta, min=0)
    return mp_integral(lambda x: (1 - eta * x) ** (2 * k), gamma)


def mp_rate(eta: float, gamma: float) -> float:
    r"""Geometric rate :math:`\rho = \max(|1-\eta\lambda_-|, |1-\eta\lambda_+|)` of k-step GD on a spectrum inside
    the Marchenko--Pastur support, so that :math:`\tr(I-\eta S)^{2k} \le d\rho^{2k}` there."""
    lo, hi = mp_edges(gamma)
    return float(max(abs(1 - eta * lo), abs(1 - eta * hi)))


# ----------------------------------------------------------------------------- OOD, one-step predictors
def one_step_ood_error(V, Sigma, n: int, factor: float = 1.0) -> float:
    r"""Error of the one-step predictor :math:`\hat w = -VS\wstar`, :math:`x \sim N(0, \Sigma)`, :math:`\wstar \sim N(0, I)`
    (:prf:ref:`cot-thm-4-2`, eq. ``cot-ood-one-step``):

    .. math:: \E\|\hat w-\wstar\|^2 = \|I+V\Sigma\|_F^2 + \tfrac{c}{n}\bigl[\tr(V\Sigma^2V^\T)+\tr(V\Sigma V^\T)\tr\Sigma\bigr],

    with :math:`c = 1` (``factor``); :math:`c = 2` is the printed form of Javanmard et al., Lemma A.1, kept as the
    falsifier of the page.
    """
    V = np.asarray(V, dtype=float)
    d = V.shape[0]
    Sigma = _check_sigma(Sigma, d)
    n = integer("n", n, min=1)
    I = np.eye(d)
    return float(
        np.sum((I + V @ Sigma) ** 2)
        + factor * (np.trace(V @ Sigma @ Sigma @ V.T) + np.trace(V @ Sigma @ V.T) * np.trace(Sigma)) / n
    )


# ----------------------------------------------------------------------------- reduced (v, w) flow
def _a(lam, eta, k):
    """a_i(lambda) = 1 - (1 - eta lambda)^i for i = 0..k-1, shape (k, *lam.shape)."""
    i = np.arange(k).reshape((k,) + (1,) * np.ndim(lam))
    return 1.0 - (1.0 - eta * np.asarray(lam)) ** i


def reduced_loss(v: float, w: float, eta: float, k: int, lam=1.0) -> float:
    """l(v, w) = 1/2 sum_{i<k} E_lambda[lambda^2 q_i^2], q_i = (v w + eta) a_i - (v + eta): the CoT loss (6)
    per coordinate on V31 = v I, W13 = w I, W24 = -1. ``lam``: eigenvalue sample (1.0 = the n -> infinity limit)."""
    lam = np.asarray(lam, dtype=float)
    a = _a(lam, eta, k)
    q = (v * w + eta) * a - (v + eta)
    return float(0.5 * np.sum(np.mean(lam**2 * q**2, axis=tuple(range(1, q.ndim))) if q.ndim > 1 else lam**2 * q**2))


def reduced_grad(v: float, w: float, eta: float, k: int, lam=1.0) -> tuple[float, float]:
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
    """The stage-1 quasi-equilibrium of v at a frozen w: the root of dl/dv = 0 (l is quadratic in v)."""
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
    """Gradient flow d(v, w)/dt = -grad l from v(0) = w(0) = sigma; returns (t, v, w, loss) arrays."""
    eta = real("eta", eta, min=0, min_open=True)
    k = integer("k", k, min=2)
    sigma = real("sigma", sigma, min=0, min_open=True)
    T = real("T", T, min=0, min_open=True)
    lam = np.asarray(lam, dtype=float)

    def rhs(_t, y):
        gv, gw = reduced_grad(y[0], y[1], eta, k, lam)
        return [-gv, -gw]

    t = np.linspace(0.0, T, num_t)
    sol = integrate.solve_ivp(rhs, (0.0, T), [sigma, sigma], method="LSODA", t_eval=t, rtol=rtol, atol=atol)
    if not sol.success or not np.all(np.isfinite(sol.y)):
        raise ParameterError("eta", f"the reduced flow failed ({sol.message}); try a smaller eta or T")
    v, w = sol.y
    loss = np.array([reduced_loss(a, b, eta, k, lam) for a, b in zip(v, w)])
    return t, v, w, loss


# ----------------------------------------------------------------------------- looped transformer
def _ipow(x: np.ndarray, p: int) -> np.ndarray:
    """x**p for an integer p >= 0 by repeated squaring (much faster than np.power on float arrays)."""
    result = np.ones_like(x)
    base = np.array(x, dtype=float, copy=True)
    while p:
        if p & 1:
            result = result * base
        p >>= 1
        if p:
            base = base * base
    return result


def looped_loss(c, k: int, eigs: np.ndarray) -> np.ndarray:
    """Monte-Carlo E tr (I - c S)^{2k} over the eigenvalue sample, for a scalar or an array of c."""
    c = np.asarray(c, dtype=float)
    e = np.asarray(eigs, dtype=float)
    return np.mean(np.sum(_ipow(1.0 - c[..., None, None] * e, 2 * k), axis=-1), axis=-1)


def looped_optimum(k: int, eigs: np.ndarray, bracket=(1e-3, 1.5)) -> tuple[float, float]:
    """c_k = argmin_c E tr (I - c S)^{2k} on an eigenvalue sample (bounded scalar minimisation)."""
    k = integer("k", k, min=1)
    c = _grid_then_refine(lambda c: float(looped_loss(c, k, eigs)), bracket, fv=lambda g: looped_loss(g, k, eigs))
    return c, float(looped_loss(c, k, eigs))


def looped_optimum_exact_k2(d: int, n: int) -> tuple[float, float]:
    """Exact c_2 = argmin_c E tr (I - c S)^4 (a quartic in c with Wishart moments) and the loss there."""
    d, n = _dn(d, n)
    m = [Fraction(w, n**p) for p, w in enumerate(wishart_trace_moments(4, d, n))]
    coef = [float(comb(4, p) * (-1) ** p * m[p]) for p in range(5)]  # sum coef[p] c^p
    dcoef = [p * coef[p] for p in range(1, 5)]  # derivative, ascending powers
    roots = np.roots(dcoef[::-1])
    roots = roots[np.abs(roots.imag) < 1e-9].real
    vals = [sum(coef[p] * r**p for p in range(5)) for r in roots]
    j = int(np.argmin(vals))
    return float(roots[j]), float(vals[j])


def looped_optimum_se(c: float, k: int, eigs: np.ndarray) -> float:
    """Delta-method standard error of the Monte-Carlo argmin c_k of F(c) = E tr (I - c S)^{2k}:
    SE(c_hat) ~ SE(F'_hat(c)) / F''(c), with per-prompt derivatives."""
    e = np.asarray(eigs, dtype=float)
    base = 1.0 - c * e
    d1 = np.sum(-2 * k * e * base ** (2 * k - 1), axis=-1)
    d2 = np.sum(2 * k * (2 * k - 1) * e**2 * base ** (2 * k - 2), axis=-1)
    return float(d1.std(ddof=1) / np.sqrt(len(d1)) / d2.mean())


def looped_two_param_loss(c, k: int, eigs: np.ndarray):
    """Looped model with V31 = v I, W13 = w I, W24 = -1: w_hat_k = b (I - (I - c S)^k) w* with c = -v w, b = 1/w.
    For a given c the best b is b* = E sum h / E sum h^2 (h = 1 - (1 - c lambda)^k), with loss
    d - (E sum h)^2 / E sum h^2. Returns (loss, b*) (arrays if ``c`` is an array)."""
    e = np.asarray(eigs, dtype=float)
    c = np.asarray(c, dtype=float)
    h = 1.0 - _ipow(1.0 - c[..., None, None] * e, k)
    m1 = np.mean(np.sum(h, axis=-1), axis=-1)
    m2 = np.mean(np.sum(h**2, axis=-1), axis=-1)
    loss, b = e.shape[-1] - m1**2 / m2, m1 / m2
    if loss.ndim == 0:
        return float(loss), float(b)
    return loss, b


def looped_two_param_optimum(k: int, eigs: np.ndarray, bracket=(1e-3, 1.5)) -> tuple[float, float, float]:
    """Jointly optimal (c, b) of the isotropic looped model with a trainable W13 scale; returns (c, b, loss)."""
    k = integer("k", k, min=1)
    c = _grid_then_refine(lambda c: looped_two_param_loss(c, k, eigs)[0], bracket,
                          fv=lambda g: looped_two_param_loss(g, k, eigs)[0])
    loss, b = looped_two_param_loss(c, k, eigs)
    return c, b, loss


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


def one_step_optimal_V(Sigma, n: int) -> np.ndarray:
    """The Sigma-aware optimal one-step predictor w_hat = -V S w*: V = -Gamma^{-1} with
    Gamma = ((n+1)/n) Sigma + (tr Sigma / n) I (minimiser of :func:`one_step_ood_error`)."""
    Sigma = np.asarray(Sigma, dtype=float)
    d = Sigma.shape[0]
    Sigma = _check_sigma(Sigma, d)
    n = integer("n", n, min=1)
    Gamma = (n + 1) / n * Sigma + np.trace(Sigma) / n * np.eye(d)
    return -np.linalg.inv(Gamma)


# ----------------------------------------------------------------------------- restricted matrix flow (Theorem 4.1)
def assumption41_init(d: int, sigma: float, rng: np.random.Generator, spread: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    """Assumption 4.1 (as reconstructed in this book): V31(0) = W13(0) = U diag(s) U^T with a random
    orthogonal U and eigenvalues s_j uniform in [sigma, spread * sigma]."""
    d = integer("d", d, min=1)
    sigma = real("sigma", sigma, min=0, min_open=True)
    spread = real("spread", spread, min=1)
    Q, R = np.linalg.qr(rng.standard_normal((d, d)))
    U = Q * np.sign(np.diag(R))
    s = rng.uniform(sigma, spread * sigma, size=d)
    M = (U * s) @ U.T
    return M.copy(), M.copy()


def _A(S: np.ndarray, eta: float, k: int) -> np.ndarray:
    """A_i(S) = I - (I - eta S)^i for i = 0..k-1, shape (k, N, d, d)."""
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
    """Loss (6) on the sparse manifold (W24 = -1) estimated on the S sample, and its gradients:
    L = 1/2 sum_i mean_S ||(V S W + eta S) A_i - (V + eta I) S||_F^2."""
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


def restricted_flow(V0: np.ndarray, W0: np.ndarray, S: np.ndarray, eta: float, k: int, T: float,
                    num_t: int = 201, rtol: float = 1e-8, atol: float = 1e-10, method: str = "LSODA"):
    """Gradient flow d(V, W)/dt = -grad L on the fixed S sample from (V0, W0); returns t, V(t), W(t), L(t)."""
    eta = real("eta", eta, min=0, min_open=True)
    k = integer("k", k, min=2)
    T = real("T", T, min=0, min_open=True)
    d = V0.shape[0]
    require(S.ndim == 3 and S.shape[1:] == (d, d), "S", f"must have shape (N, {d}, {d}); got {S.shape}")
    A = _A(S, eta, k)

    def rhs(_t, y):
        V, W = y[: d * d].reshape(d, d), y[d * d :].reshape(d, d)
        _, gV, gW = restricted_loss_grad(V, W, S, A, eta)
        return -np.concatenate([gV.ravel(), gW.ravel()])

    t = np.linspace(0.0, T, num_t)
    sol = integrate.solve_ivp(rhs, (0.0, T), np.concatenate([V0.ravel(), W0.ravel()]), method=method,
                              t_eval=t, rtol=rtol, atol=atol)
    if not sol.success or not np.all(np.isfinite(sol.y)):
        raise ParameterError("eta", f"the restricted flow failed ({sol.message})")
    Vt = sol.y[: d * d].T.reshape(-1, d, d)
    Wt = sol.y[d * d :].T.reshape(-1, d, d)
    L = np.array([restricted_loss_grad(V, W, S, A, eta)[0] for V, W in zip(Vt, Wt)])
    return t, Vt, Wt, L


def symmetrised_S_sample(S: np.ndarray, U: np.ndarray) -> np.ndarray:
    """Augment an S sample by the sign flips S -> (U J U^T) S (U J U^T), J = diag(h) for the rows h of a
    Hadamard matrix (size the next power of two >= d, first d columns). The law of S is invariant under these
    maps, and averaging over them makes every off-diagonal entry (in the basis U) of a product of S's with
    U-diagonal matrices vanish exactly, so the restricted flow keeps V, W diagonal in U exactly, not only
    in expectation."""
    from scipy.linalg import hadamard

    d = U.shape[0]
    m = 1
    while m < d:
        m *= 2
    H = hadamard(m)[:, :d].astype(float)
    Sp = np.einsum("ji,bjk,kl->bil", U, S, U)
    Ss = np.concatenate([h[:, None] * Sp * h[None, :] for h in H])
    return np.einsum("ij,bjk,lk->bil", U, Ss, U)


# ----------------------------------------------------------------------------- rates and stage times (Theorem 4.1)
def fixed_point_rate(eta: float, k: int, lam=1.0) -> float:
    r"""Slowest local rate :math:`\mu` of the reduced flow at its zero :math:`(v, w) = (-\eta, 1)`
    (:prf:ref:`cot-thm-4-1`): the smallest eigenvalue of the Hessian

    .. math:: H = \sum_{i<k}\E_\lambda\bigl[\lambda^2\,g_i g_i^\T\bigr],\qquad g_i = (a_i - 1,\ -\eta a_i),

    (:math:`q_i = 0` there, so only the Gauss--Newton term remains). Near the zero the distance decays like
    :math:`e^{-\mu t}` in the Euclidean norm (H is symmetric).
    """
    lam = np.asarray(lam, dtype=float)
    a = _a(lam, eta, k)
    g = np.stack([a - 1.0, -eta * a])  # (2, k, ...)
    w = (lam**2 * np.ones_like(a)).reshape(k, -1)
    g = g.reshape(2, k, -1)
    H = np.einsum("pim,qim,im->pq", g, g, w) / w.shape[1]
    return float(np.linalg.eigvalsh(H)[0])


def reduced_flow_converged(eta: float, k: int, sigma: float, tol: float, lam=1.0, enter: float = 1e-3,
                           margin: float = 100.0, num_t: int = 801):
    r"""The reduced flow integrated to a horizon that follows from its rate (:prf:ref:`cot-thm-4-1`).

    The flow is integrated until its distance to :math:`(-\eta, 1)` falls below ``enter`` (time :math:`t_2`, the
    end of stage 2's approach), then for :math:`\log(\mathrm{enter}\cdot\mathrm{margin}/\mathrm{tol})/\mu` more, with
    :math:`\mu` from :func:`fixed_point_rate`: the linearised flow then predicts a distance ``tol / margin``.

    Returns:
        ``dict(t, v, w, loss, T, t2, mu)``.
    """
    mu = fixed_point_rate(eta, k, lam)
    A0, A1, A2 = _reduced_moments(eta, k, lam)

    def rhs(_t, y):
        v, w = y
        P, Q = v * w + eta, v + eta
        return [-float(np.sum(P * w * A2 - (w * Q + P) * A1 + Q * A0)), -float(np.sum(v * (P * A2 - Q * A1)))]

    def near(_t, y):
        return max(abs(y[0] + eta), abs(y[1] - 1)) - enter

    near.terminal, near.direction = True, -1
    T_cap = 1e3 / mu + 1e3 / max(sigma, 1e-6)
    sol = integrate.solve_ivp(rhs, (0.0, T_cap), [sigma, sigma], method="LSODA", events=near, rtol=1e-10, atol=1e-13)
    if not sol.t_events[0].size:
        raise ParameterError("sigma", f"the reduced flow did not reach the construction by t = {T_cap:.3g}")
    t2 = float(sol.t_events[0][0])
    T = t2 + np.log(enter * margin / tol) / mu
    t = np.linspace(0.0, T, num_t)
    sol = integrate.solve_ivp(rhs, (0.0, T), [sigma, sigma], method="LSODA", t_eval=t, rtol=1e-11, atol=1e-14)
    v, w = sol.y
    P, Q = (v * w + eta)[:, None], (v + eta)[:, None]
    loss = 0.5 * np.sum(P**2 * A2 - 2 * P * Q * A1 + Q**2 * A0, axis=1)
    return dict(t=t, v=v, w=w, loss=loss, T=float(T), t2=t2, mu=mu)


def _reduced_moments(eta: float, k: int, lam=1.0):
    r"""The eigenvalue averages that the reduced loss needs, once: :math:`A_0 = \E\lambda^2`,
    :math:`A_1^{(i)} = \E[\lambda^2 a_i]`, :math:`A_2^{(i)} = \E[\lambda^2 a_i^2]` (:math:`i < k`), so that
    :math:`\ell = \tfrac12\sum_i [P^2A_2^{(i)} - 2PQA_1^{(i)} + Q^2A_0]` with :math:`P = vw+\eta`, :math:`Q = v+\eta`
    costs O(k) per evaluation instead of O(k x sample)."""
    lam = np.asarray(lam, dtype=float)
    a = _a(lam, eta, k).reshape(k, -1)
    l2 = (lam**2 * np.ones(lam.shape)).reshape(-1)
    return float(l2.mean()), (l2 * a).mean(axis=1), (l2 * a**2).mean(axis=1)


def v_curvature(w: float, eta: float, k: int, lam=1.0) -> float:
    r"""Curvature :math:`\kappa(w) = \partial_v^2\ell = \sum_i\E[\lambda^2 (w a_i - 1)^2]` of the reduced loss in
    :math:`v`: the fast relaxation rate of stage 1."""
    lam = np.asarray(lam, dtype=float)
    c = w * _a(lam, eta, k) - 1.0
    val = lam**2 * c**2
    return float(np.sum(val.mean(axis=tuple(range(1, val.ndim))) if val.ndim > 1 else val))


def slow_manifold_time(eta: float, k: int, sigma: float, w_target: float = 0.5, lam=1.0) -> float:
    r"""Stage-1 time predicted by the slow-manifold reduction: with :math:`v = v_{\rm eq}(w)` (stage-1
    quasi-equilibrium, :func:`stage1_v`), :math:`\dot w = -\partial_w\ell(v_{\rm eq}(w), w)`; the time for w to
    go from :math:`\sigma` to ``w_target``, :math:`\int_\sigma^{w_{\rm target}} dw / |\dot w|`."""

    def rate(w):
        return -reduced_grad(stage1_v(w, eta, k, lam), w, eta, k, lam)[1]

    val, _ = integrate.quad(lambda w: 1.0 / rate(w), sigma, w_target, epsrel=1e-10, limit=200)
    return float(val)


# ----------------------------------------------------------------------------- heavy-tail-aware looped optimum
#: the covariance scale :math:`\tau` of the wide component of :func:`wishart_is_sample`'s defensive mixture
IS_TAU = 1.6


def wishart_is_sample(d: int, n: int, num: int, rng: np.random.Generator, tau: float = IS_TAU):
    r"""Spectra of S drawn from the defensive mixture :math:`q = \tfrac12 W(I) + \tfrac12 W(\tau I)` with the
    exact importance weights :math:`p/q` of the target Wishart law :math:`p = W(I)` (``num`` draws).

    The density ratio of the two Wishart laws of :math:`nS` is
    :math:`p_\tau/p_1 = \tau^{-nd/2}\exp\bigl(\tfrac n2(1-\tau^{-1})\tr S\bigr)`, so
    :math:`p/q = 2/(1 + p_\tau/p_1)` is bounded by 2 (a defensive mixture: the variance never exceeds twice
    plain Monte Carlo's) while the large-eigenvalue tail, which dominates :math:`\E\tr(I-cS)^{2k}` at large
    k, is sampled :math:`\tau` times wider.

    Returns:
        ``(eigs, weights)``: shapes (num, d) and (num,), ``weights.mean()`` ~ 1.
    """
    half = num // 2
    e1 = sample_S_eigs(d, n, num - half, rng)
    e2 = tau * sample_S_eigs(d, n, half, rng)
    eigs = np.concatenate([e1, e2])
    tr = eigs.sum(axis=1)
    log_ratio = -0.5 * n * d * np.log(tau) + 0.5 * n * (1 - 1 / tau) * tr
    weights = 2.0 / (1.0 + np.exp(np.minimum(log_ratio, 700.0)))
    return eigs, weights


def looped_is_loss(c, k: int, eigs: np.ndarray, weights: np.ndarray):
    """Importance-weighted E tr(I - cS)^{2k} and its standard error (scalar c)."""
    per = weights * np.sum(_ipow(1.0 - float(c) * eigs, 2 * k), axis=-1)
    return mean_se(per)


def looped_is_optimum(k: int, eigs: np.ndarray, weights: np.ndarray, bracket=(1e-3, 1.5)):
    r"""Heavy-tail-aware looped optimum :math:`c_k = \arg\min_c \E\tr(I-cS)^{2k}` (:prf:ref:`cot-prop-looped`) on an
    importance-weighted spectrum sample (:func:`wishart_is_sample`), with the delta-method standard error
    :math:`\mathrm{SE}(\hat c) = \mathrm{SE}(\hat F'(c))/\hat F''(c)` from the weighted per-sample derivatives.

    Returns:
        ``(c, c_se, loss, loss_se)``.
    """
    k = integer("k", k, min=1)
    e = np.asarray(eigs, dtype=float)
    wts = np.asarray(weights, dtype=float)

    def F(c):
        return np.mean(wts * np.sum(_ipow(1.0 - np.asarray(c, dtype=float)[..., None, None] * e, 2 * k),
                                             axis=-1), axis=-1)

    c = _grid_then_refine(lambda x: float(F(x)), bracket, fv=F)
    base = 1.0 - c * e
    d1 = wts * np.sum(-2 * k * e * _ipow(base, 2 * k - 1), axis=-1)
    d2 = wts * np.sum(2 * k * (2 * k - 1) * e**2 * _ipow(base, 2 * k - 2), axis=-1)
    c_se = mean_se(d1)[1] / d2.mean()
    loss, loss_se = looped_is_loss(c, k, e, wts)
    return float(c), float(c_se), loss, loss_se
