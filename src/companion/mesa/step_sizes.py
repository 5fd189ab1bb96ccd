r"""Step sizes against every run a page trains: the curvature of each run's *own* training set at its limit.

Why the population bound is not enough. GD with step size :math:`\eta` on a training set converges to the
limit :math:`(a_\infty I, b_\infty I)` only if :math:`\eta < 2/\lambda_{\max}`, with :math:`\lambda_{\max}` the
largest Hessian eigenvalue of *that set's* empirical loss there. Its stiffest direction is not the reduced
(a, b) one: it lives on a single coordinate j, in the six entries of that coordinate in the four blocks of
:math:`W^{KQ}` and the two of :math:`W^{PV}`, and its curvature is proportional to the sample sixth moment
:math:`\frac1m\sum_n |x_{1j}^{(n)}|^6` of *one* coordinate. That moment is heavy-tailed (its variance involves
:math:`E x^{12}=10395\sigma^{12}` for the Gaussian), so the small replicate sets of a page scatter widely:
at d = 8, T = 60, sigma = 1, from (0.5, 1.5), sixteen sets of m = 500 have :math:`\lambda_{\max}` from 5.3e3 to
2.0e4 at the limit. With :math:`\eta = 2\cdot10^{-4}` the two sets above 1.9e4 (:math:`\eta\lambda\approx4`)
diverge at epochs 4 and 6 (the failure reported in issue 27) while the figure runs at m = 2000 train.
The curvature at the *initialisation* does not decide: a run from (2, 2) passes through a point where
:math:`\eta\lambda>2` for one step and recovers, because :math:`b^2` falls twenty-fold on the way to the limit;
a run whose :math:`b` hardly moves (from (0.5, 1.5), :math:`b_\infty = 1.42`) stays unstable for good.

The bound used here (:func:`limit_curvature`): the Gauss–Newton curvature at the limit, per coordinate j, of
the 6×6 complex block :math:`M_j=\frac1m\sum_n\sum_t J_{nt}^{*}J_{nt}` of the perturbations of the prediction
of coordinate j (coherent part: :math:`|x_{1j}|^6` times the phase vector
:math:`(b\lambda_j^{-1}, b\lambda_j^{-2}, b, b\lambda_j^{-1}, a, a\lambda_j^{-1})` with the exact counts
:math:`t/(t-1)` of each position) plus the incoherent part through the other coordinates (weights
:math:`H\,|x_{1j}|^4\sum_{k\ne j}|x_{1k}|^2` and :math:`H\,|x_{1j}|^2\sum_{k\ne j}|x_{1k}|^4`), from the set's
own :math:`x_1` and phases; the largest eigenvalue over j. Against the power iteration on the full empirical
Hessian (:func:`companion.mesa.stability.hessian_max_eig`) at d = 8, T = 60 it is within −3 % … +22 %
(typically 3–10 % below) on 13 sets at m = 500 and 2000 and two inits. The residual term of the Hessian
vanishes at the limit in population and is not included. It costs a draw of each training set's
:math:`x_1` and phases (no position tables): milliseconds per set at the book's sizes.

The threshold is not :math:`2/\lambda_{\max}`. Between :math:`2/\lambda` and about :math:`4/\lambda` a run
*catapults*: the stiff mode grows, pulls :math:`b` down (:math:`b_\infty` 1.42 → 1.23) until the curvature is
below :math:`2/\eta`, and then converges (the catapult phase of Lewkowycz et al., 2020, whose two-layer linear
model has exactly this product structure and diverges above :math:`4/\lambda`). Measured with the estimate
below at :math:`\eta\lambda = 2.07, 2.44, 2.88, 3.0, 3.3, 3.6` (d = 5 and 8): all eleven runs train 200 epochs
(the page's defaults include one at 2.88, m = 625); at 3.84 and 4.02 (the two sets above) they diverge by
epoch 6. A step size is therefore refused when :math:`\eta \ge 4/(\kappa_{\rm est}\lambda_{\rm est})`, with
:data:`ESTIMATE_LOW` :math:`=\kappa_{\rm est}` the estimate's measured shortfall against the power iteration
(:func:`largest_stable_lr`), before any training (:func:`check_runs`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np

from companion import params as P
from companion import replicate_seed
from companion.mesa import theory as th
from companion.mesa.data import sample_x1

__all__ = ["ESTIMATE_LOW", "limit_curvature", "largest_stable_lr", "thm4_1_runs", "check_runs"]

#: how far :func:`limit_curvature` may fall short of the power iteration (measured: 0.97-1.22 times it, median
#: about 1.06, on 13 training sets at d = 8, T = 60, m = 500 and 2000, inits (0.5, 1.5) and (0.1, 0.1))
ESTIMATE_LOW = 1.1


@lru_cache(maxsize=64)
def _blocks(law: str, m: int, d: int, T: int, seed: tuple) -> tuple:
    r"""The per-coordinate curvature blocks of a training set at scale 1 (a and b factored out): the coherent
    6×6 Gram pieces ``U`` (4×4, the b·b part), ``X`` (4×2, a·b), ``W`` (2×2, a·a) and the incoherent 4×4 and 2×2
    pieces, for every coordinate. The set is the one :func:`companion.mesa.train.run` trains on: the phases and
    x_1 of :func:`companion.mesa.data.generate` from ``np.random.default_rng(list(seed))``."""
    rng = np.random.default_rng(list(seed))
    theta = rng.uniform(0.0, 2 * np.pi, size=(m, d))
    x2 = np.abs(sample_x1(law, m, d, 1.0, rng)) ** 2
    lam = np.exp(1j * theta)
    t = np.arange(2, T, dtype=float)
    ct = t / (t - 1.0)
    h_inc = float(np.sum(t / (t - 1.0) ** 2))
    full = np.array([1, 1, 0, 0, 1, 0], dtype=bool)  # sums over i = 1..t (count t) or i = 2..t (count t - 1)
    s2 = np.array([[np.sum(np.where(p, ct, 1.0) * np.where(q, ct, 1.0)) for q in full] for p in full])
    out = []
    for j in range(d):
        lj, one = lam[:, j], np.ones(m)
        ph = np.stack([1 / lj, 1 / lj**2, one, 1 / lj, one, 1 / lj], 1)  # A11, A12, A21, A22 (x b); B1, B2 (x a)
        G = np.einsum("n,np,nq->pq", x2[:, j] ** 3, ph, ph.conj()) / m * s2
        others = np.delete(x2, j, 1)
        psi_a, psi_b = np.stack([one, 1 / lj, lj, one], 1), np.stack([one, 1 / lj], 1)
        inc_a = np.einsum("n,np,nq->pq", h_inc * x2[:, j] ** 2 * others.sum(1), psi_a, psi_a.conj()) / m
        inc_b = np.einsum("n,np,nq->pq", h_inc * x2[:, j] * (others**2).sum(1), psi_b, psi_b.conj()) / m
        out.append((G[:4, :4] + inc_a, G[:4, 4:], G[4:, 4:] + inc_b))
    return tuple(out)


def limit_curvature(law: str, scale: float, d: int, T: int, m: int, seed: tuple, a: float, b: float) -> float:
    r"""The largest Gauss–Newton curvature of the training set ``(law, m, d, T, seed)`` at scale ``scale`` at the
    diagonal point (a I, b I): the largest eigenvalue over coordinates j of the 6×6 block :math:`M_j` (module
    docstring). Every term is of degree 6 in x_1, so the scale enters as ``scale**6``."""
    worst = 0.0
    for U, X, W in _blocks(law, int(m), int(d), int(T), tuple(int(s) for s in seed)):
        M = np.block([[b * b * U, a * b * X], [a * b * X.conj().T, a * a * W]])
        worst = max(worst, float(np.linalg.eigvalsh(M)[-1]))
    return scale**6 * worst


def largest_stable_lr(law: str, scale: float, d: int, T: int, m: int, seed: tuple, a0: float, b0: float) -> float:
    r"""The largest step size with which the run from (a0, b0) on its own training set does not diverge:
    :math:`4/(\kappa_{\rm est}\lambda)`, the catapult bound (module docstring) with :math:`\lambda` the larger
    of :func:`limit_curvature` at the limit :math:`(a_\infty, b_\infty)` and the reduced
    :math:`\alpha(a_\infty^2+b_\infty^2)`, and :math:`\kappa_{\rm est}` = :data:`ESTIMATE_LOW`."""
    al, be = th.alpha_beta(law, scale, d, T)
    a, b = th.limits(a0, b0, be / al)
    lam = max(limit_curvature(law, scale, d, T, m, seed, a, b), al * (a * a + b * b))
    return 4.0 / (ESTIMATE_LOW * lam)


def thm4_1_runs(sigmas: Sequence[float], lrs_gauss: Sequence[float], cs: Sequence[float],
                lrs_sparse: Sequence[float], inits, d: int, T: int, m: int, m_rep: int, n_rep: int, n_rep_dev: int,
                seed: int, m_rep_sparse: int | None = None, n_rep_sparse: int | None = None) -> list[dict]:
    """Every training run of ``mesa/thm4_1_emergence``, as the page trains them
    (:func:`companion.mesa.results.thm4_1.figure_runs` and :func:`~companion.mesa.results.thm4_1.replicates`):
    each (law, scale) from every init on the set of seed (seed, 0) at m, and the replicate sets of the middle
    init (:func:`companion.mesa.evidence.replicate_kwargs`: seeds ``replicate_seed(seed, 1 + k)`` at m_rep and
    ``replicate_seed(seed, 17 + k)`` at m_rep // 4; ``n_rep_dev`` of each for the Gaussian middle scale, and
    ``n_rep_sparse`` at ``m_rep_sparse`` and ``m_rep_sparse // 4`` for the sparse scales when given)."""

    a_mid, b_mid = inits[len(inits) // 2]
    s_mid = sigmas[len(sigmas) // 2] if len(sigmas) else None
    runs = []
    for law, scales, lrs, param in (("gaussian", sigmas, lrs_gauss, "lrs_gauss"), ("sparse", cs, lrs_sparse, "lrs_sparse")):
        for s, lr in zip(scales, lrs):
            base = dict(law=law, scale=s, lr=lr, param=param)
            runs += [dict(base, a0=a0, b0=b0, m=m, seed=(seed, 0), what="figure run") for a0, b0 in inits]
            sparse = law == "sparse" and n_rep_sparse is not None
            k_rep = n_rep_sparse if sparse else n_rep_dev if (law, s) == ("gaussian", s_mid) else n_rep
            m_r = m_rep_sparse if sparse and m_rep_sparse is not None else m_rep
            runs += [dict(base, a0=a_mid, b0=b_mid, m=m_r, seed=(replicate_seed(seed, 1 + k), 0),
                          what=f"replicate {k + 1} of {k_rep}") for k in range(k_rep)]
            runs += [dict(base, a0=a_mid, b0=b_mid, m=max(1, m_r // 4), seed=(replicate_seed(seed, 17 + k), 0),
                          what=f"replicate {k + 1} of {k_rep}") for k in range(k_rep)]
    return runs


def check_runs(runs: Iterable[dict], d: int, T: int) -> dict:
    r"""Refuse, in one line naming the step-size parameter, the run and its largest stable value
    (:class:`companion.params.ParameterError`), a step size at or above :func:`largest_stable_lr` of any run
    (dicts with law, scale, lr, param, a0, b0, m, seed, what; :func:`thm4_1_runs`). Returns the smallest
    margin ``lr_max / lr`` and its run."""
    worst = None
    for r in runs:
        lr_max = largest_stable_lr(r["law"], r["scale"], d, T, r["m"], r["seed"], r["a0"], r["b0"])
        margin = lr_max / r["lr"]
        if worst is None or margin < worst["margin"]:
            worst = dict(r, lr_max=lr_max, margin=margin)
    if worst is not None and not worst["margin"] > 1:
        w = worst
        raise P.ParameterError(
            w["param"], f"{w['lr']:g} is unstable for the {w['law']} law at scale {w['scale']:g}: the {w['what']} "
                        f"(m = {w['m']}, init ({w['a0']:g}, {w['b0']:g}), data seed {w['seed'][0]}) diverges above "
                        f"{w['lr_max']:.3g} (4/lambda_max of its training set at its limit); use a step size below "
                        f"{w['lr_max']:.3g} (or [] for kappa × the stability bound)")
    return worst or {}
