"""Exact and reduced theory for Huang, Wang & Lee (ICLR 2025): closed forms, Monte Carlo with standard
errors, the Marchenko--Pastur limit, the reduced (v, w) gradient-flow ODE and the looped optimum.

Conventions (fixed by this book, see ``notebooks/cot/setup.md``):

* errors are sums over the d coordinates with **no** 1/2:  L^Eval = E ||w_hat_k - w*||^2;
* the CoT training loss carries the 1/2 and sums the positions i = 0..k-1;
* S = X X^T / n with x_i ~ N(0, Sigma) (Sigma = I unless stated), w* ~ N(0, I).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

import numpy as np
from scipy import integrate, optimize

from companion.params import ParameterError, integer, real, require

__all__ = [
    "eta_star",
    "no_cot_floor",
    "wishart_trace_moment",
    "gd_error_exact",
    "MCEstimate",
    "sample_S",
    "sample_S_eigs",
    "gd_error_mc",
    "gd_error_mp",
    "gd_error_samples",
    "median_se",
    "mp_edges",
    "mp_density",
    "one_step_ood_error",
    "one_step_optimal_V",
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
    """Optimal one-step size eta* = n / (n + d + 1) (Theorem 3.1)."""
    d, n = _dn(d, n)
    return n / (n + d + 1)


def no_cot_floor(d: int, n: int) -> float:
    """No-CoT error floor d(d+1)/(n+d+1) = min E||w_hat - w*||^2 over one-layer LSAs (Corollary 3.1)."""
    d, n = _dn(d, n)
    return d * (d + 1) / (n + d + 1)


def wishart_trace_moment(p: int, d: int, n: int) -> float:
    """m_p = E tr S^p for S = X X^T/n, x ~ N(0, I_d), p in {0, ..., 4} (exact)."""
    p = integer("p", p, min=0, max=4)
    d, n = _dn(d, n)
    if p == 0:
        return float(d)
    if p == 1:
        return float(d)
    if p == 2:
        return d * (n + d + 1) / n
    if p == 3:
        return d * (n**2 + d**2 + 3 * n * d + 3 * n + 3 * d + 4) / n**2
    return d * (n**3 + d**3 + 6 * n**2 * d + 6 * n * d**2 + 6 * n**2 + 6 * d**2 + 17 * n * d + 21 * n + 21 * d + 20) / n**3


def gd_error_exact(k: int, eta: float, d: int, n: int) -> float:
    """E tr (I - eta S)^{2k} = sum_p C(2k, p) (-eta)^p m_p, exact for k <= 2 (moments up to 4)."""
    k = integer("k", k, min=0, max=2)
    eta = real("eta", eta, min=0)
    return float(sum(comb(2 * k, p) * (-eta) ** p * wishart_trace_moment(p, d, n) for p in range(2 * k + 1)))


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


def gd_error_mc(k: int, eta: float, eigs: np.ndarray) -> MCEstimate:
    """Per-prompt k-step GD error tr (I - eta S)^{2k} = E_w* ||w_k - w*||^2, averaged over the prompts
    whose eigenvalues are the rows of ``eigs``; returns mean, standard error and median."""
    k = integer("k", k, min=0)
    eta = real("eta", eta, min=0)
    with np.errstate(over="ignore"):
        per = np.sum((1.0 - eta * np.asarray(eigs)) ** (2 * k), axis=-1)
    num = per.shape[0]
    return MCEstimate(float(per.mean()), float(per.std(ddof=1) / np.sqrt(num)), float(np.median(per)), num)


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


def median_se(x: np.ndarray) -> float:
    """Standard error of the sample median from order statistics (distribution-free): the median's rank has
    binomial standard deviation sqrt(N)/2, so SE ~ (q(1/2 + 1/(2 sqrt N)) - q(1/2 - 1/(2 sqrt N))) / 2.
    Infinite entries (divergent prompts) are allowed."""
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    N = len(x)
    h = 0.5 / np.sqrt(N)
    lo, hi = np.quantile(x, [0.5 - h, 0.5 + h], method="inverted_cdf")
    return float((hi - lo) / 2)


# ----------------------------------------------------------------------------- Marchenko--Pastur
def mp_edges(gamma: float) -> tuple[float, float]:
    gamma = real("gamma", gamma, min=0, max=1, min_open=True, max_open=True)
    return (1 - np.sqrt(gamma)) ** 2, (1 + np.sqrt(gamma)) ** 2


def mp_density(lam, gamma: float):
    lo, hi = mp_edges(gamma)
    lam = np.asarray(lam, dtype=float)
    inside = (lam > lo) & (lam < hi)
    out = np.zeros_like(lam)
    out[inside] = np.sqrt((hi - lam[inside]) * (lam[inside] - lo)) / (2 * np.pi * gamma * lam[inside])
    return out


def gd_error_mp(k: int, eta: float, gamma: float) -> float:
    """Large-d limit of L_k(eta)/d: the integral of (1 - eta lambda)^{2k} against MP(gamma), gamma = d/n < 1."""
    k = integer("k", k, min=0)
    eta = real("eta", eta, min=0)
    lo, hi = mp_edges(gamma)
    val, _ = integrate.quad(lambda x: (1 - eta * x) ** (2 * k) * mp_density(np.array([x]), gamma)[0], lo, hi,
                            epsabs=1e-13, epsrel=1e-11, limit=200)
    return float(val)


# ----------------------------------------------------------------------------- OOD, one-step predictors
def one_step_ood_error(V, Sigma, n: int) -> float:
    """E||w_hat - w*||^2 for w_hat = -V S w*, S = X X^T/n, x ~ N(0, Sigma), w* ~ N(0, I):
    ||I + V Sigma||_F^2 + (tr(V Sigma^2 V^T) + tr(V Sigma V^T) tr Sigma) / n."""
    V = np.asarray(V, dtype=float)
    d = V.shape[0]
    Sigma = _check_sigma(Sigma, d)
    n = integer("n", n, min=1)
    I = np.eye(d)
    return float(
        np.sum((I + V @ Sigma) ** 2) + (np.trace(V @ Sigma @ Sigma @ V.T) + np.trace(V @ Sigma @ V.T) * np.trace(Sigma)) / n
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
    m = [wishart_trace_moment(p, d, n) for p in range(5)]
    coef = [comb(4, p) * (-1) ** p * m[p] for p in range(5)]  # sum coef[p] c^p
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


def _grid_then_refine(f, bracket, num: int = 60, fv=None) -> float:
    """Global search on a grid (vectorised through ``fv`` if given), then a bounded scalar refinement between
    the neighbouring grid points (the objectives are polynomials of high degree with far-away spurious regions)."""
    grid = np.linspace(bracket[0], bracket[1], num)
    with np.errstate(over="ignore", invalid="ignore"):
        vals = np.asarray(fv(grid), dtype=float) if fv is not None else np.array([f(c) for c in grid])
    vals[~np.isfinite(vals)] = np.inf
    j = int(np.argmin(vals))
    lo, hi = grid[max(j - 1, 0)], grid[min(j + 1, num - 1)]
    res = optimize.minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-12})
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
