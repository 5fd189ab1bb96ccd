r"""The law of the sample covariance :math:`S = XX^\T/n` of one prompt (:math:`x_i \sim N(0, \Sigma)`, i.i.d.),
which every result of the cot paper averages over: samples of S and of its spectrum (Bartlett decomposition), the
exact trace moments :math:`\E\tr S^p` (loop equations), and a sampler that reaches the heavy large-eigenvalue tail
with exact importance weights (:prf:ref:`cot-prop-looped`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from companion.params import ParameterError, integer

__all__ = ["check_dims", "check_covariance", "sample_S", "sample_S_eigs", "wishart_trace_moments", "IS_TAU",
           "wishart_is_sample"]

#: the covariance scale :math:`\tau` of the wide component of :func:`wishart_is_sample`'s defensive mixture
IS_TAU = 1.6


def check_dims(d, n) -> tuple[int, int]:
    """The dimension and the number of examples per prompt, validated.

    Parameters
    ----------
    d, n : int
        Dimension and examples per prompt, each at least 1.

    Returns
    -------
    tuple of int
        ``(d, n)``.

    Raises
    ------
    companion.params.ParameterError
        Naming ``d`` or ``n`` when it is not an integer of at least 1.
    """
    return integer("d", d, min=1), integer("n", n, min=1)


def check_covariance(Sigma, d: int):
    r"""A test covariance :math:`\Sigma`, validated: a finite symmetric positive-definite d x d matrix.

    Parameters
    ----------
    Sigma : array_like or None
        The covariance; None stands for :math:`\Sigma = I`.
    d : int
        The dimension.

    Returns
    -------
    numpy.ndarray or None
        ``Sigma`` as a float array (None for None).

    Raises
    ------
    companion.params.ParameterError
        Naming ``Sigma`` when its shape is not (d, d), it is not finite and symmetric, or not positive definite.
    """
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
    r"""``num`` independent matrices :math:`S = XX^\T/n`, :math:`x_i \sim N(0, \Sigma)`.

    For :math:`n \ge d` the Wishart matrix :math:`XX^\T` is drawn by the Bartlett decomposition,
    :math:`XX^\T = C LL^\T C^\T` with :math:`\Sigma = CC^\T` and L lower triangular,

    .. math:: L_{ii} \sim \sqrt{\chi^2_{n-i+1}},\qquad L_{ij} \sim N(0, 1)\quad (i > j),

    which has exactly the law of :math:`XX^\T` and costs :math:`O(d^3)` instead of :math:`O(d^2 n)` per prompt;
    for :math:`n < d`, X itself is sampled.

    Parameters
    ----------
    d, n : int
        Dimension and examples per prompt.
    num : int
        Number of prompts, at least 1.
    rng : numpy.random.Generator
        The source of randomness.
    Sigma : array_like, optional
        The covariance of the :math:`x_i` (:func:`check_covariance`); None for :math:`\Sigma = I`.
    chunk : int
        Prompts drawn at a time (memory only: the draws do not depend on it).

    Returns
    -------
    numpy.ndarray
        Shape (num, d, d).
    """
    d, n = check_dims(d, n)
    num = integer("num", num, min=1)
    Sigma = check_covariance(Sigma, d)
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
    r"""The spectra of ``num`` independent matrices S (:func:`sample_S`).

    Parameters
    ----------
    d, n, num, rng, Sigma
        As for :func:`sample_S`.

    Returns
    -------
    numpy.ndarray
        Shape (num, d), each row ascending.
    """
    return np.linalg.eigvalsh(sample_S(d, n, num, rng, Sigma))


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
    :math:`m_2 = d(n+d+1)/n`, ... (:math:`p \le 4`; ``tests/cot/test_wishart.py`` checks them).

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
    d, n = check_dims(d, n)

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


def wishart_is_sample(d: int, n: int, num: int, rng: np.random.Generator, tau: float = IS_TAU):
    r"""Spectra of S drawn from the defensive mixture :math:`q = \tfrac12 W(I) + \tfrac12 W(\tau I)`, with the
    exact importance weights :math:`p/q` of the target Wishart law :math:`p = W(I)`.

    The density ratio of the two Wishart laws of :math:`nS` is

    .. math:: \frac{p_\tau}{p_1} = \tau^{-nd/2}\exp\Bigl(\tfrac n2(1-\tau^{-1})\tr S\Bigr),

    so :math:`p/q = 2/(1 + p_\tau/p_1)` is bounded by 2 (a defensive mixture: the variance never exceeds twice
    plain Monte Carlo's) while the large-eigenvalue tail, which dominates :math:`\E\tr(I-cS)^{2k}` at large
    k, is sampled :math:`\tau` times wider.

    Parameters
    ----------
    d, n : int
        Dimension and examples per prompt.
    num : int
        Number of spectra: the first ``num - num // 2`` from :math:`W(I)`, the other ``num // 2`` from the wide
        component (a stratified sample: :func:`companion.cot.theory.loops.is_mean_se` gives its standard errors).
    rng : numpy.random.Generator
        The source of randomness.
    tau : float
        The covariance scale of the wide component (:data:`IS_TAU`).

    Returns
    -------
    tuple of numpy.ndarray
        ``(eigs, weights)`` of shapes (num, d) and (num,); ``weights.mean()`` is about 1.
    """
    half = num // 2
    e1 = sample_S_eigs(d, n, num - half, rng)
    e2 = tau * sample_S_eigs(d, n, half, rng)
    eigs = np.concatenate([e1, e2])
    tr = eigs.sum(axis=1)
    log_ratio = -0.5 * n * d * np.log(tau) + 0.5 * n * (1 - 1 / tau) * tr
    weights = 2.0 / (1.0 + np.exp(np.minimum(log_ratio, 700.0)))
    return eigs, weights
