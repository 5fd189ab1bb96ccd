r"""Step sizes: which step size of gradient descent on the mesa loss is stable.

GD with step size :math:`\eta` is locally stable at a point iff :math:`\eta < 2/\lambda_{\max}`, with
:math:`\lambda_{\max}` the largest Hessian eigenvalue of the loss there. Every step size a page trains with passes
through this module, in one of two roles.

**Choosing a step size** (:func:`stable_lr`, the pages' step sizes off the paper's settings):
:math:`\eta = \kappa\,\min 2/\lambda_{\max}` over every init of a run and its limit, with :math:`\lambda_{\max}` of
the loss in all real parameters

* of the population, estimated on 400 independent sequences (:func:`stability_bound`: 30 power iterations,
  :func:`hessian_max_eig`), and
* of each training set the run trains on (:func:`training_set_bound`: Lanczos, :func:`set_max_eig`).

**Refusing a step size a user gives** (:func:`check_runs`), before any training: :math:`\eta \ge
4/(\kappa_{\rm est}\lambda)` on the run's own training set at its limit, with :math:`\lambda` the Gauss–Newton
curvature in closed form (:func:`limit_curvature`; the section below says why 4 and not 2).

Two estimators of a training set's :math:`\lambda_{\max}`, because the two roles differ in what they need. A chosen
step must be stable along the whole path, so its :math:`\lambda` is taken at every init and at the limit, to the
per cent (Lanczos on exact Hessian-vector products: seconds per set, cached; a page chooses from the few sets it
trains). A refusal must look at every run a page trains (122 at the paper's settings of Theorem 4.1) and cost
milliseconds per set, so it reads the closed form at the limit only, and it refuses only beyond the step at which
a run diverges. The population bound keeps its power iteration: the step sizes the pages choose off the paper's
settings are defined by it.

The **reduced** bound (:func:`reduced_stability`): forward Euler on the (a, b) system is stable iff
:math:`\eta\,\alpha\,(a^2+b^2) < 2` (:func:`companion.mesa.theory.stability_number`).

**The curvature of a training set at its limit** (:func:`limit_curvature`). GD on a training set converges to
the limit :math:`(a_\infty I, b_\infty I)` only if :math:`\eta < 2/\lambda_{\max}` of *that set's* empirical loss
there. Its stiffest direction is not the reduced (a, b) one: it lives on a single coordinate j, in the six entries
of that coordinate in the four blocks of :math:`W^{KQ}` and the two of :math:`W^{PV}`, and its curvature is
proportional to the sample sixth moment :math:`\frac1m\sum_n |x_{1j}^{(n)}|^6` of *one* coordinate. That moment
is heavy-tailed (its variance involves :math:`E x^{12}=10395\sigma^{12}` for the Gaussian), so the small replicate
sets of a page scatter widely: at d = 8, T = 60, sigma = 1, from (0.5, 1.5), sixteen sets of m = 500 have
:math:`\lambda_{\max}` from 5.3e3 to 2.0e4 at the limit. With :math:`\eta = 2\cdot10^{-4}` the two sets above
1.9e4 (:math:`\eta\lambda\approx4`) diverge at epochs 4 and 6, while the figure runs at m = 2000 train. The
curvature at the *initialisation* does not decide: a run from (2, 2) passes through a point where
:math:`\eta\lambda>2` for one step and recovers, because :math:`b^2` falls twenty-fold on the way to the limit; a
run whose :math:`b` hardly moves (from (0.5, 1.5), :math:`b_\infty = 1.42`) stays unstable for good.

The estimate: the Gauss–Newton curvature at the limit, per coordinate j, of the 6×6 complex block
:math:`M_j=\frac1m\sum_n\sum_t J_{nt}^{*}J_{nt}` of the perturbations of the prediction of coordinate j (coherent
part: :math:`|x_{1j}|^6` times the phase vector :math:`(b\lambda_j^{-1}, b\lambda_j^{-2}, b, b\lambda_j^{-1}, a,
a\lambda_j^{-1})` with the exact counts :math:`t/(t-1)` of each position) plus the incoherent part through the
other coordinates (weights :math:`H\,|x_{1j}|^4\sum_{k\ne j}|x_{1k}|^2` and :math:`H\,|x_{1j}|^2\sum_{k\ne
j}|x_{1k}|^4`), from the set's own :math:`x_1` and phases; the largest eigenvalue over j. Against the power
iteration on the full empirical Hessian (:func:`hessian_max_eig`) at d = 8, T = 60 it is within −3 % … +22 %
(typically 3–10 % below) on 13 sets at m = 500 and 2000 and two inits. The residual term of the Hessian vanishes
at the limit in population and is not included. It costs a draw of each training set's :math:`x_1` and phases
(no position tables): milliseconds per set at the book's sizes.

The refusal threshold is not :math:`2/\lambda_{\max}`. Between :math:`2/\lambda` and about :math:`4/\lambda` a
run *catapults*: the stiff mode grows, pulls :math:`b` down (:math:`b_\infty` 1.42 → 1.23) until the curvature is
below :math:`2/\eta`, and then converges (the catapult phase of Lewkowycz et al., 2020, whose two-layer linear
model has exactly this product structure and diverges above :math:`4/\lambda`). Measured with the estimate at
:math:`\eta\lambda = 2.07, 2.44, 2.88, 3.0, 3.3, 3.6` (d = 5 and 8): all eleven runs train 200 epochs (the
defaults of Theorem 4.1's page include one at 2.88, m = 625); at 3.84 and 4.02 (the two sets above) they diverge
by epoch 6. A step size is therefore refused when :math:`\eta \ge 4/(\kappa_{\rm est}\lambda_{\rm est})`, with
:data:`ESTIMATE_LOW` :math:`=\kappa_{\rm est}` the estimate's measured shortfall against the power iteration
(:func:`largest_stable_lr`).

A science-layer module: the results read it; the designs of their runs (:mod:`companion.mesa.results`) give it the
runs to check.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from companion import params
from companion.cache import cached
from companion.mesa import paper
from companion.mesa import theory as th
from companion.mesa.data import generate
from companion.mesa.model import loss_grad_fast
from companion.mesa.train import init_diagonal
from companion.seeds import MESA_HESSIAN_DATA, MESA_TRAIN_DATA

__all__ = ["Bound", "ReducedBound", "hessian_max_eig", "set_max_eig", "stability_bound", "training_set_bound",
           "stable_lr", "reduced_stability", "ESTIMATE_LOW", "limit_curvature", "largest_stable_lr", "check_runs"]


def hessian_max_eig(data, W_KQ, W_PV, iters: int = 30, eps: float = 1e-6, seed: int = 0) -> float:
    r"""Largest eigenvalue of the Hessian of the empirical loss in all real parameters (real and imaginary
    parts of W_KQ and W_PV), by power iteration on forward-difference Hessian-vector products
    :math:`Hv \approx (g(w+\epsilon v)-g(w))/\epsilon` of :func:`companion.mesa.model.loss_grad_fast`
    (complex128). GD with step lr is locally stable iff lr < 2 / lambda_max."""
    data = data.to(torch.complex128)
    W_KQ = torch.as_tensor(W_KQ).to(torch.complex128)
    W_PV = torch.as_tensor(W_PV).to(torch.complex128)
    _, gk0, gp0 = loss_grad_fast(data, W_KQ, W_PV)
    g = torch.Generator().manual_seed(seed)
    vk = torch.randn(W_KQ.shape, dtype=torch.complex128, generator=g)
    vp = torch.randn(W_PV.shape, dtype=torch.complex128, generator=g)
    lam = 0.0
    for _ in range(iters):
        nrm = math.sqrt(float((vk.abs() ** 2).sum() + (vp.abs() ** 2).sum()))
        vk, vp = vk / nrm, vp / nrm
        _, gk1, gp1 = loss_grad_fast(data, W_KQ + eps * vk, W_PV + eps * vp)
        hk, hp = (gk1 - gk0) / eps, (gp1 - gp0) / eps
        lam = float((vk.conj() * hk).real.sum() + (vp.conj() * hp).real.sum())
        vk, vp = hk, hp
    return lam


@dataclass(frozen=True)
class Bound:
    """A full-parameter stability bound: the largest stable step ``lr_max`` = 2 / ``lam``, the largest Hessian
    eigenvalue found, and where it was found (``at``: the point (a, b), or for :func:`training_set_bound` the set's
    index and size and the point)."""

    lr_max: float
    lam: float
    at: object


@dataclass(frozen=True)
class ReducedBound:
    r"""The stability of forward Euler on the reduced system (:func:`reduced_stability`): the largest stability
    number :math:`\eta\alpha(a^2+b^2)` over the inits and their limits (``number``, stable iff < 2) and the largest
    stable step ``lr_max``."""

    number: float
    lr_max: float


def stability_bound(law, scale: float, d: int, T: int, inits, m_h: int = 400, seed: int = 0) -> Bound:
    r"""The largest stable step size of *full-parameter* GD over every init of a run.

    GD is locally stable at a point iff lr < 2 / lambda_max, with lambda_max the largest Hessian eigenvalue of
    the loss in all real parameters. On the diagonal manifold the reduced system gives
    :math:`\lambda \ge \alpha(a^2+b^2)`, but the off-manifold directions are stiffer (2-5x at d = 5), so
    lambda_max is computed by power iteration (:func:`hessian_max_eig`) on ``m_h`` independent sequences
    (seed stream :data:`~companion.seeds.MESA_HESSIAN_DATA`, ``[seed, 5]``) at every init and at its limit (a_inf, b_inf); the reduced value is kept
    as a lower bound. Returns the :class:`Bound`: ``lr_max`` (= 2 / the largest lambda) and the worst point.
    """
    al, be = th.alpha_beta(law, scale, d, T)
    data = generate(law, m_h, d, T, scale, MESA_HESSIAN_DATA.rng(seed), torch.complex128)
    worst, where = 0.0, None
    for a0, b0 in inits:
        for a, b in (a0, b0), th.limits(a0, b0, be / al):
            lam = max(al * (a * a + b * b), hessian_max_eig(data, *init_diagonal(d, a, b, torch.complex128)))
            if lam > worst:
                worst, where = lam, (a, b)
    return Bound(lr_max=2.0 / worst, lam=worst, at=where)


def set_max_eig(data, W_KQ, W_PV, v0=None, eps: float = 1e-6, tol: float = 1e-3, ncv: int | None = None,
                dtype=torch.complex128) -> tuple[float, np.ndarray]:
    r"""Largest eigenvalue of the Hessian of the empirical loss of ``data`` in all real parameters at
    (``W_KQ``, ``W_PV``), by Lanczos (``scipy.sparse.linalg.eigsh``) on the forward-difference Hessian-vector
    products of :func:`hessian_max_eig`, started from ``v0`` (a nearby set's top eigenvector; ones when None).
    Lanczos converges from below to the extreme eigenvalue in about 10–20 products where 30 power iterations can
    stop several per cent short (5 % at m = 400, T = 20). Returns ``(lambda_max, its eigenvector)``."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    data = data.to(dtype)
    W_KQ = torch.as_tensor(W_KQ).to(dtype)
    W_PV = torch.as_tensor(W_PV).to(dtype)
    _, gk0, gp0 = loss_grad_fast(data, W_KQ, W_PV)
    nk, n = W_KQ.numel(), W_KQ.numel() + W_PV.numel()

    def split(v):  # real vector of length 2 n -> the two complex perturbations
        z = torch.from_numpy(v[:n] + 1j * v[n:]).to(dtype)
        return z[:nk].reshape(W_KQ.shape), z[nk:].reshape(W_PV.shape)

    def hvp(v):
        v = np.asarray(v, dtype=float).ravel()
        s = float(np.linalg.norm(v)) or 1.0
        vk, vp = split(v / s)
        _, gk1, gp1 = loss_grad_fast(data, W_KQ + eps * vk, W_PV + eps * vp)
        z = torch.cat([((gk1 - gk0) / eps).reshape(-1), ((gp1 - gp0) / eps).reshape(-1)]).to(torch.complex128).numpy()
        return s * np.concatenate([z.real, z.imag])

    op = LinearOperator((2 * n, 2 * n), matvec=hvp, dtype=float)
    start = np.ones(2 * n) if v0 is None else np.asarray(v0, dtype=float)
    val, vec = eigsh(op, k=1, which="LA", tol=tol, v0=start, ncv=ncv)
    return float(val[0]), vec[:, 0]


@cached
def training_set_bound(law, scale: float, d: int, T: int, inits, sets, tol: float = 1e-2, ncv: int = 4,
                       tilt: int = 0) -> Bound:
    r"""The largest stable step size of full-parameter GD *on each training set it runs on*: the largest Hessian
    eigenvalue of each set's own empirical loss (:func:`set_max_eig`) at every init and at its limit, the set drawn as
    :func:`companion.mesa.train.run` draws it (``sets``: pairs ``(m, seed)``, the arguments of the run; the set is
    drawn through :data:`~companion.seeds.MESA_TRAIN_DATA`, tilted by ``tilt`` as the run's is: the loss of a tilted
    set carries its importance weights).

    Why: the curvature is a sixth-moment average of the set's tokens, heavy-tailed for a Gaussian start, so a small
    set can be far stiffer than the population: at d = 5, T = 10, m = 100 (seed 52) one replicate set was 11.8
    times the bound of :func:`stability_bound`'s 400 independent sequences, and GD at a quarter of that bound
    diverged at epoch 4. Returns ``lr_max`` (= 2 / the largest
    lambda), the largest lambda and where (set index and point)."""
    al, be = th.alpha_beta(law, scale, d, T)
    worst, where, v0 = 0.0, None, {}
    for i, (m, seed) in enumerate(sets):
        data = generate(law, int(m), d, T, scale, MESA_TRAIN_DATA.rng(seed), torch.complex64, tilt)
        for a0, b0 in inits:
            for pt, (a, b) in enumerate(((a0, b0), th.limits(a0, b0, be / al))):
                lam, v0[a0, b0, pt] = set_max_eig(data, *init_diagonal(d, a, b, torch.complex64), v0.get((a0, b0, pt)),
                                                   eps=1e-3, tol=tol, ncv=ncv, dtype=torch.complex64)
                if lam > worst:
                    worst, where = lam, dict(set=i, m=int(m), a=a, b=b)
    return Bound(lr_max=2.0 / worst if worst > 0 else math.inf, lam=worst, at=where)


def stable_lr(law, scale: float, d: int, T: int, inits, kappa: float = paper.KAPPA, seed: int = 0, sets=(),
              tilt: int = 0) -> float:
    r"""A step size at the fraction ``kappa`` of the full-parameter stability bound over every init of the run:
    :math:`\eta = \kappa\,\min 2/\lambda_{\max}`, the minimum over :func:`stability_bound` (400 independent
    sequences) and, when ``sets`` are given, over the training sets GD will run on with this step
    (:func:`training_set_bound`, those sets tilted by ``tilt``)."""
    kappa = params.real("kappa", kappa, min=0, max=1, min_open=True, max_open=True)
    lr_max = stability_bound(law, scale, d, T, inits, seed=seed).lr_max
    if len(sets):
        lr_max = min(lr_max, training_set_bound(law, scale, d, T, [tuple(map(float, i)) for i in inits],
                                                 [(int(m), int(seed)) for m, seed in sets], tilt=int(tilt)).lr_max)
    return kappa * lr_max


def reduced_stability(law, scale: float, d: int, T: int, lr: float, inits) -> ReducedBound:
    r"""Stability of population GD (forward Euler on the reduced system) over every init and its limit:
    ``number`` :math:`=\max\eta\,\alpha\,(a^2+b^2)` over the inits and their limits :math:`(a_\infty,b_\infty)`
    (stable iff < 2, :func:`companion.mesa.theory.stability_number`), and ``lr_max`` :math:`=2/(\alpha\max(a^2+b^2))`."""
    al, be = th.alpha_beta(law, scale, d, T)
    worst = max(max(a0 * a0 + b0 * b0, sum(x * x for x in th.limits(a0, b0, be / al))) for a0, b0 in inits)
    return ReducedBound(number=lr * al * worst, lr_max=2.0 / (al * worst))


# ---- refusing a step size: the curvature of a run's own training set at its limit

#: how far :func:`limit_curvature` may fall short of the power iteration (measured: 0.97-1.22 times it, median
#: about 1.06, on 13 training sets at d = 8, T = 60, m = 500 and 2000, inits (0.5, 1.5) and (0.1, 0.1))
ESTIMATE_LOW = 1.1


@lru_cache(maxsize=64)
def _blocks(law: str, m: int, d: int, T: int, seed: int, tilt: int = 0) -> tuple:
    r"""The per-coordinate curvature blocks of a training set at scale 1 (a and b factored out): the coherent
    6×6 Gram pieces ``U`` (4×4, the b·b part), ``X`` (4×2, a·b), ``W`` (2×2, a·a) and the incoherent 4×4 and 2×2
    pieces, for every coordinate. The set is the one :func:`companion.mesa.train.run` with seed ``seed`` trains on
    (:data:`~companion.seeds.MESA_TRAIN_DATA`), at scale 1; for a tilted set (``tilt``) every per-sequence term
    carries the sequence's importance weight, as its loss does."""
    data = generate(law, m, d, T, 1.0, MESA_TRAIN_DATA.rng(seed), torch.complex128, tilt)
    x2 = np.abs(data.x1.numpy()) ** 2
    wn = np.ones(m) if data.w is None else data.w.numpy()
    lam = data.lam.numpy()
    t = np.arange(2, T, dtype=float)
    ct = t / (t - 1.0)
    h_inc = float(np.sum(t / (t - 1.0) ** 2))
    full = np.array([1, 1, 0, 0, 1, 0], dtype=bool)  # sums over i = 1..t (count t) or i = 2..t (count t - 1)
    s2 = np.array([[np.sum(np.where(p, ct, 1.0) * np.where(q, ct, 1.0)) for q in full] for p in full])
    out = []
    for j in range(d):
        lj, one = lam[:, j], np.ones(m)
        ph = np.stack([1 / lj, 1 / lj**2, one, 1 / lj, one, 1 / lj], 1)  # A11, A12, A21, A22 (x b); B1, B2 (x a)
        G = np.einsum("n,np,nq->pq", wn * x2[:, j] ** 3, ph, ph.conj()) / m * s2
        others = np.delete(x2, j, 1)
        psi_a, psi_b = np.stack([one, 1 / lj, lj, one], 1), np.stack([one, 1 / lj], 1)
        inc_a = np.einsum("n,np,nq->pq", wn * h_inc * x2[:, j] ** 2 * others.sum(1), psi_a, psi_a.conj()) / m
        inc_b = np.einsum("n,np,nq->pq", wn * h_inc * x2[:, j] * (others**2).sum(1), psi_b, psi_b.conj()) / m
        out.append((G[:4, :4] + inc_a, G[:4, 4:], G[4:, 4:] + inc_b))
    return tuple(out)


def limit_curvature(law: str, scale: float, d: int, T: int, m: int, seed: int, a: float, b: float,
                    tilt: int = 0) -> float:
    r"""The largest Gauss–Newton curvature of the training set of the run ``(law, m, d, T, seed)`` at scale
    ``scale`` at the diagonal point (a I, b I): the largest eigenvalue over coordinates j of the 6×6 block
    :math:`M_j` (module docstring). Every term is of degree 6 in x_1, so the scale enters as ``scale**6``. ``tilt``:
    the run's tilted training set."""
    worst = 0.0
    for U, X, W in _blocks(law, int(m), int(d), int(T), int(seed), int(tilt)):
        M = np.block([[b * b * U, a * b * X], [a * b * X.conj().T, a * a * W]])
        worst = max(worst, float(np.linalg.eigvalsh(M)[-1]))
    return scale**6 * worst


def largest_stable_lr(law: str, scale: float, d: int, T: int, m: int, seed: int, a0: float, b0: float,
                      tilt: int = 0) -> float:
    r"""The largest step size with which the run from (a0, b0) on its own training set does not diverge:
    :math:`4/(\kappa_{\rm est}\lambda)`, the catapult bound (module docstring) with :math:`\lambda` the larger
    of :func:`limit_curvature` at the limit :math:`(a_\infty, b_\infty)` and the reduced
    :math:`\alpha(a_\infty^2+b_\infty^2)`, and :math:`\kappa_{\rm est}` = :data:`ESTIMATE_LOW`."""
    al, be = th.alpha_beta(law, scale, d, T)
    a, b = th.limits(a0, b0, be / al)
    lam = max(limit_curvature(law, scale, d, T, m, seed, a, b, tilt), al * (a * a + b * b))
    return 4.0 / (ESTIMATE_LOW * lam)


def check_runs(runs: Iterable[dict], d: int, T: int) -> dict:
    r"""Refuse, in one line naming the step-size parameter, the run and its largest stable value
    (:class:`companion.params.ParameterError`), a step size at or above :func:`largest_stable_lr` of any run
    (dicts with the run's law, scale, lr, a0, b0, m, seed and tilt (0 if absent), the step-size parameter ``param`` and the run in words
    ``what``; e.g. ``checked_runs`` of :class:`companion.mesa.results.thm4_1.Design`). Returns the smallest margin
    ``lr_max / lr`` and its run."""
    worst = None
    for r in runs:
        lr_max = largest_stable_lr(r["law"], r["scale"], d, T, r["m"], r["seed"], r["a0"], r["b0"], r.get("tilt", 0))
        margin = lr_max / r["lr"]
        if worst is None or margin < worst["margin"]:
            worst = dict(r, lr_max=lr_max, margin=margin)
    if worst is not None and not worst["margin"] > 1:
        w = worst
        raise params.ParameterError(
            w["param"], f"{w['lr']:g} is unstable for the {w['law']} law at scale {w['scale']:g}: the {w['what']} "
                        f"(m = {w['m']}, init ({w['a0']:g}, {w['b0']:g}), seed {w['seed']}) diverges above "
                        f"{w['lr_max']:.3g} (4/lambda_max of its training set at its limit); use a step size below "
                        f"{w['lr_max']:.3g} (or [] for kappa × the stability bound)")
    return worst or {}
