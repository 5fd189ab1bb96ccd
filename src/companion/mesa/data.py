r"""Data model of the mesa paper: x_{t+1} = W x_t with W = diag(exp(i theta_j)), theta_j ~ U[0, 2 pi).

A data set is stored compactly as the initial tokens ``x1`` (m, d) and the diagonals ``lam`` (m, d)
of the W's: every token is ``x_t = lam**(t-1) * x1`` (element-wise). :meth:`ARData.tokens` and
:func:`embed` materialise the sequence ``x_1..x_T`` and the embedding ``e_t = [x_t; x_{t-1}]``
(with ``x_0 = 0``).

Laws of x_1 (real-valued, stored in a complex dtype):

* ``"gaussian"``   -- N(0, scale^2 I_d)                    (official code: ``--isotropic 1``)
* ``"sparse"``     -- Example 4.1: s * scale * e_k, k ~ U{1..d}, s ~ U{-1,+1} (``--isotropic 2``)
* ``"full_one"``   -- the all-ones vector times scale        (``--isotropic 0``, scale 1)
* ``"rademacher"`` -- i.i.d. coordinates +-scale               (a further law used in this book)
* ``"sparse_gaussian"`` -- g * e_k, k ~ U{1..d}, g ~ N(0, scale^2) (a further law used in this book)

Another law is plugged in with :func:`register_law` (a sampler ``(rng, m, d) -> (m, d)`` real array
at scale 1) or by passing such a callable as ``law``.

*Tilted training sets* (``tilt`` = k > 0 in :func:`generate`, for the laws of :data:`RADIAL_DOF`): an importance
sample of a law whose start is a radius times an independent direction, :math:`x_1 = r u` with
:math:`r^2\sim\chi^2_q` (the Gaussian: q = d, u uniform on the sphere; the sparse Gaussian :math:`g\,e_J`: q = 1,
:math:`u=\pm e_J` uniform). The radius is drawn from the law tilted by :math:`r^k` (:math:`r^2\sim\chi^2_{q+k}`, u
unchanged) and each sequence carries the weight

.. math:: w_n = \frac{E_p[r^k]}{r_n^k},\qquad E_p[r^k] = 2^{k/2}\,\frac{\Gamma((q+k)/2)}{\Gamma(q/2)},

so that :math:`\frac1m\sum_n w_n f(x^{(n)})` is an unbiased estimate of :math:`E_p f` for every f (weights divided
by m, not by their sum: the self-normalised mean has infinite variance for k >= q, as :math:`E_p[r^{-k}]` does).
The loss of the model (:mod:`companion.mesa.model`) and the statistics of the diagonal-restricted loss
(:func:`companion.mesa.empirical.diagonal_stats`) read these weights. With k = 6 the per-sequence loss, of degree
six in :math:`x_1`, has its leading part weighted evenly (:math:`w_n r_n^6` is constant), which is what makes the
finite-m expansion of the trained model hold from small m (``tools/offmanifold_scaling.py --tilt``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.special import gammaln

from companion import params

__all__ = ["LAWS", "register_law", "law_names", "sample_x1", "ARData", "generate", "tilt_log_mean", "embed",
           "check_law", "RADIAL_DOF", "check_tilt"]

Sampler = Callable[[np.random.Generator, int, int], np.ndarray]


def _gaussian(rng: np.random.Generator, m: int, d: int) -> np.ndarray:
    return rng.standard_normal((m, d))


def _sparse(rng: np.random.Generator, m: int, d: int) -> np.ndarray:
    k = rng.integers(0, d, size=m)
    s = rng.choice(np.array([-1.0, 1.0]), size=m)
    x = np.zeros((m, d))
    x[np.arange(m), k] = s
    return x


def _sparse_gaussian(rng: np.random.Generator, m: int, d: int) -> np.ndarray:
    k = rng.integers(0, d, size=m)
    x = np.zeros((m, d))
    x[np.arange(m), k] = rng.standard_normal(m)
    return x


def _full_one(rng: np.random.Generator, m: int, d: int) -> np.ndarray:
    return np.ones((m, d))


def _rademacher(rng: np.random.Generator, m: int, d: int) -> np.ndarray:
    return rng.choice(np.array([-1.0, 1.0]), size=(m, d))


LAWS: dict[str, Sampler] = {
    "gaussian": _gaussian,
    "sparse": _sparse,
    "full_one": _full_one,
    "rademacher": _rademacher,
    "sparse_gaussian": _sparse_gaussian,
}


def _sphere(rng: np.random.Generator, m: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    g = rng.standard_normal((m, d))
    return g, np.linalg.norm(g, axis=1)


def _signed_axis(rng: np.random.Generator, m: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    # a uniform axis with a uniform sign, as the sparse law's draw but with the signs drawn first (the right side of
    # the assignment is evaluated first): the sets that the seeds of the tilted sparse-Gaussian runs give
    x = np.zeros((m, d))
    x[np.arange(m), rng.integers(0, d, size=m)] = rng.choice(np.array([-1.0, 1.0]), size=m)
    return x, np.ones(m)


#: the laws whose start is :math:`x_1 = r u` with :math:`r^2\sim\chi^2_q` independent of the direction u: q as a
#: function of d (u's sampler, returning v and its norm, u being v over its norm, is in ``_DIRECTION``). Their
#: training sets can be tilted (:func:`generate`) and their test-set losses integrate the radius exactly
#: (:func:`companion.mesa.analysis.radial_losses`).
RADIAL_DOF: dict[str, Callable[[int], int]] = {"gaussian": lambda d: d, "sparse_gaussian": lambda d: 1}
_DIRECTION: dict[str, Callable[[np.random.Generator, int, int], tuple[np.ndarray, np.ndarray]]] = {
    "gaussian": _sphere, "sparse_gaussian": _signed_axis}


def check_tilt(law, tilt) -> int:
    """Validate a training set's ``tilt`` (an integer >= 0; > 0 only for a law of :data:`RADIAL_DOF`)."""
    tilt = params.integer("tilt", tilt, min=0)
    if tilt and law not in RADIAL_DOF:
        raise params.ParameterError("tilt", f"a tilted set needs a law with a radius independent of its direction "
                                            f"({', '.join(RADIAL_DOF)}); got law {law!r}")
    return tilt


def register_law(name: str, sampler: Sampler) -> None:
    """Add a law of x_1: ``sampler(rng, m, d)`` returns an (m, d) real array at scale 1."""
    if not callable(sampler):
        raise params.ParameterError("sampler", f"must be callable; got {sampler!r}")
    LAWS[params.text("name", name)] = sampler


def law_names() -> list[str]:
    return list(LAWS)


def check_law(law) -> str | Sampler:
    """Validate ``law`` (a registered name, with did-you-mean, or a sampler callable)."""
    if callable(law):
        return law
    return params.choice("law", law, law_names())


def sample_x1(law, m: int, d: int, scale: float, rng: np.random.Generator) -> np.ndarray:
    """Draw m initial tokens x_1 (real, shape (m, d)); the draw at scale s is s times the draw at scale 1."""
    law = check_law(law)
    m = params.integer("m", m, min=1)
    d = params.integer("d", d, min=1)
    scale = params.real("scale", scale, min=0, min_open=True)
    sampler = law if callable(law) else LAWS[law]
    x = np.asarray(sampler(rng, m, d), dtype=float)
    if x.shape != (m, d) or not np.all(np.isfinite(x)):
        raise params.ParameterError("law", f"the sampler must return a finite ({m}, {d}) array; got shape {x.shape}")
    return scale * x


@dataclass
class ARData:
    """m sequences of length T: x_t = lam**(t-1) * x1.  ``x1``, ``lam``: (m, d) complex tensors."""

    x1: torch.Tensor
    lam: torch.Tensor
    T: int
    theta: np.ndarray  # (m, d) phases, float64 (for exact powers)
    w: torch.Tensor | None = None  # (m,) float64 importance weights of a tilted set (module docstring); None: plain
    _tables: dict = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self) -> dict:
        """Pickled without the cached tables (rebuilt on demand, and never worth sending). Sending a data set
        through a multiprocessing pipe moves its tensors to shared memory; cached numpy views of them would then
        point into freed storage, and both ends would compute garbage (NaN in a spawned child, 1e11 in the
        parent). The fused path caches copies (:func:`companion.mesa.model._sweep_fused`)."""
        return {**self.__dict__, "_tables": {}}

    @property
    def m(self) -> int:
        return self.x1.shape[0]

    @property
    def d(self) -> int:
        return self.x1.shape[1]

    @property
    def dtype(self) -> torch.dtype:
        return self.x1.dtype

    def powers(self, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """lam**k for k = start..stop-1, shape (m, K, d), computed in float64 from the phases."""
        stop = self.T if stop is None else stop
        k = np.arange(start, stop, dtype=float)
        ph = np.exp(1j * self.theta[:, None, :] * k[None, :, None])
        return torch.from_numpy(ph).to(self.dtype)

    def tables(self, positions: np.ndarray):
        """Data-only arrays at the prediction positions t (cached): x_t, lam^t and the targets x_{t+1}."""
        key = tuple(int(t) for t in positions)
        if key not in self._tables:
            t = np.asarray(positions, dtype=float)
            ph_t = torch.from_numpy(np.exp(1j * self.theta[:, None, :] * t[None, :, None])).to(self.dtype)
            ph_prev = ph_t * self.lam.conj()[:, None, :]
            self._tables[key] = (ph_prev * self.x1[:, None, :], ph_t, ph_t * self.x1[:, None, :])
        return self._tables[key]

    def tokens(self) -> torch.Tensor:
        """x_1..x_T, shape (m, T, d)."""
        return self.x1[:, None, :] * self.powers(0, self.T)

    def subset(self, idx) -> ARData:
        return ARData(self.x1[idx], self.lam[idx], self.T, self.theta[idx], None if self.w is None else self.w[idx])

    def scaled(self, s: float) -> ARData:
        return ARData(self.x1 * s, self.lam, self.T, self.theta, self.w)

    def to(self, dtype: torch.dtype) -> ARData:
        return ARData(self.x1.to(dtype), self.lam.to(dtype), self.T, self.theta, self.w)


def generate(
    law,
    m: int,
    d: int,
    T: int,
    scale: float = 1.0,
    rng: np.random.Generator | int = 0,
    dtype: torch.dtype = torch.complex128,
    tilt: int = 0,
) -> ARData:
    r"""Seeded data set of m sequences (phases drawn first, then x_1 at scale 1, then rescaled); ``tilt`` = k > 0:
    the law's importance sample tilted by :math:`r^k` with its weights (a law of :data:`RADIAL_DOF`; module
    docstring)."""
    T = params.integer("T", T, min=3)
    m = params.integer("m", m, min=1)
    d = params.integer("d", d, min=1)
    tilt = check_tilt(law, tilt)
    if dtype not in (torch.complex64, torch.complex128):
        raise params.ParameterError("dtype", f"must be torch.complex64 or torch.complex128; got {dtype}")
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(params.integer("seed", rng, min=0))
    theta = rng.uniform(0.0, 2 * np.pi, size=(m, d))
    w = None
    if tilt:
        scale = params.real("scale", scale, min=0, min_open=True)
        q = RADIAL_DOF[law](d)
        v, norm = _DIRECTION[law](rng, m, d)
        r = np.sqrt(rng.chisquare(q + tilt, size=m))
        x1 = scale * v * (r / norm)[:, None]
        w = torch.from_numpy(np.exp(tilt_log_mean(q, tilt) - tilt * np.log(r)))
    else:
        x1 = sample_x1(law, m, d, scale, rng)
    return ARData(
        x1=torch.from_numpy(x1.astype(complex)).to(dtype),
        lam=torch.from_numpy(np.exp(1j * theta)).to(dtype),
        T=T,
        theta=theta,
        w=w,
    )


def tilt_log_mean(q: int, k: int) -> float:
    r"""log E_p[r^k] for :math:`r^2\sim\chi^2_q` (the radius of a law of :data:`RADIAL_DOF` at scale 1): the log of
    the tilted set's weight numerator (module docstring)."""
    return 0.5 * k * np.log(2.0) + gammaln((q + k) / 2) - gammaln(q / 2)


def embed(x: torch.Tensor) -> torch.Tensor:
    """e_t = [x_t; x_{t-1}] with x_0 = 0: (..., T, d) -> (..., T, 2d)."""
    prev = torch.cat([torch.zeros_like(x[..., :1, :]), x[..., :-1, :]], dim=-2)
    return torch.cat([x, prev], dim=-1)
