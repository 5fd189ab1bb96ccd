r"""Step sizes: the stability of gradient descent on the mesa loss.

GD with step size :math:`\eta` is locally stable at a point iff :math:`\eta < 2/\lambda_{\max}`, with
:math:`\lambda_{\max}` the largest Hessian eigenvalue of the loss there. Two bounds are used:

* the **full-parameter** bound (:func:`stability_bound`, :func:`stable_lr`): :math:`\lambda_{\max}` of the
  loss in all real parameters by power iteration (:func:`hessian_max_eig`), at every init of a run and at
  its limit; it sets every step size the notebooks choose off the paper's settings;
* the **reduced** bound (:func:`reduced_stability`): forward Euler on the (a, b) system is stable iff
  :math:`\eta\,\alpha\,(a^2+b^2) < 2` (:func:`companion.mesa.theory.stability_number`).

A science-layer module: the results and the paper's run plan (:mod:`companion.mesa.paper`) read it.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from companion import params as P
from companion.cache import cached
from companion.mesa import theory as th
from companion.mesa.data import generate
from companion.mesa.model import loss_grad_fast
from companion.mesa.train import init_diagonal
from companion.seeds import MESA_HESSIAN_DATA

__all__ = ["hessian_max_eig", "set_max_eig", "stability_bound", "training_set_bound", "stable_lr", "reduced_stability", "RATE_WINDOW", "euler_rate_design"]


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


def stability_bound(law, scale: float, d: int, T: int, inits, m_h: int = 400, seed: int = 0) -> dict:
    r"""The largest stable step size of *full-parameter* GD over every init of a run.

    GD is locally stable at a point iff lr < 2 / lambda_max, with lambda_max the largest Hessian eigenvalue of
    the loss in all real parameters. On the diagonal manifold the reduced system gives
    :math:`\lambda \ge \alpha(a^2+b^2)`, but the off-manifold directions are stiffer (2-5x at d = 5), so
    lambda_max is computed by power iteration (:func:`hessian_max_eig`) on ``m_h`` independent sequences
    (seed stream :data:`~companion.seeds.MESA_HESSIAN_DATA`, ``[seed, 5]``) at every init and at its limit (a_inf, b_inf); the reduced value is kept
    as a lower bound. Returns ``lr_max`` (= 2 / the largest lambda) and the worst point.
    """
    al, be = th.alpha_beta(law, scale, d, T)
    data = generate(law, m_h, d, T, scale, MESA_HESSIAN_DATA.rng(seed), torch.complex128)
    worst, where = 0.0, None
    for a0, b0 in inits:
        for a, b in (a0, b0), th.limits(a0, b0, be / al):
            lam = max(al * (a * a + b * b), hessian_max_eig(data, *init_diagonal(d, a, b, torch.complex128)))
            if lam > worst:
                worst, where = lam, (a, b)
    return dict(lr_max=2.0 / worst, lam=worst, at=where)


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
def training_set_bound(law, scale: float, d: int, T: int, inits, sets, tol: float = 1e-2, ncv: int = 4) -> dict:
    r"""The largest stable step size of full-parameter GD *on each training set it runs on*: the largest Hessian
    eigenvalue of each set's own empirical loss (:func:`set_max_eig`) at every init and at its limit, the set drawn as
    :func:`companion.mesa.train.run` draws it (``sets``: pairs ``(m, data_seed)``, the seed a NumPy entropy tuple,
    :meth:`companion.seeds.SpawnKey.entropy` of :data:`~companion.seeds.MESA_TRAIN_DATA`).

    Why: the curvature is a sixth-moment average of the set's tokens, heavy-tailed for a Gaussian start, so a small
    set can be far stiffer than the population: at the smoke point of ``mesa/prop4_1_gaussian`` (seed 52, d = 5,
    T = 10, m = 100) one replicate set was 11.8 times the bound of :func:`stability_bound`'s 400 independent
    sequences, and GD at a quarter of that bound diverged at epoch 4. Returns ``lr_max`` (= 2 / the largest
    lambda), the largest lambda and where (set index and point)."""
    al, be = th.alpha_beta(law, scale, d, T)
    worst, where, v0 = 0.0, None, {}
    for i, (m, seed) in enumerate(sets):
        data = generate(law, int(m), d, T, scale, np.random.default_rng(list(seed)), torch.complex64)
        for a0, b0 in inits:
            for pt, (a, b) in enumerate(((a0, b0), th.limits(a0, b0, be / al))):
                lam, v0[a0, b0, pt] = set_max_eig(data, *init_diagonal(d, a, b, torch.complex64), v0.get((a0, b0, pt)),
                                                   eps=1e-3, tol=tol, ncv=ncv, dtype=torch.complex64)
                if lam > worst:
                    worst, where = lam, dict(set=i, m=int(m), a=a, b=b)
    return dict(lr_max=2.0 / worst if worst > 0 else math.inf, lam=worst, at=where)


def stable_lr(law, scale: float, d: int, T: int, inits, kappa: float = 0.25, seed: int = 0, sets=()) -> float:
    r"""A step size at the fraction ``kappa`` of the full-parameter stability bound over every init of the run:
    :math:`\eta = \kappa\,\min 2/\lambda_{\max}`, the minimum over :func:`stability_bound` (400 independent
    sequences) and, when ``sets`` are given, over the training sets GD will run on with this step
    (:func:`training_set_bound`)."""
    kappa = P.real("kappa", kappa, min=0, max=1, min_open=True, max_open=True)
    lr_max = stability_bound(law, scale, d, T, inits, seed=seed)["lr_max"]
    if len(sets):
        lr_max = min(lr_max, training_set_bound(law, scale, d, T, [tuple(map(float, i)) for i in inits],
                                                 [(int(m), tuple(map(int, e))) for m, e in sets])["lr_max"])
    return kappa * lr_max


def reduced_stability(law, scale: float, d: int, T: int, lr: float, inits) -> dict:
    r"""Stability of population GD (forward Euler on the reduced system) over every init and its limit:
    ``number`` :math:`=\max\eta\,\alpha\,(a^2+b^2)` over the inits and their limits :math:`(a_\infty,b_\infty)`
    (stable iff < 2, :func:`companion.mesa.theory.stability_number`), and ``lr_max`` :math:`=2/(\alpha\max(a^2+b^2))`."""
    al, be = th.alpha_beta(law, scale, d, T)
    worst = max(max(a0 * a0 + b0 * b0, sum(x * x for x in th.limits(a0, b0, be / al))) for a0, b0 in inits)
    return dict(number=lr * al * worst, lr_max=2.0 / (al * worst))


#: the contraction-rate experiment (:func:`euler_rate_design`): the window of deviations from c* in which the
#: multiplier is read, relative to c* (below the upper end the linear regime holds to about 1 %; above the lower
#: end the deviation is 1e3 times the complex64 round-off of ab)
RATE_WINDOW = (1e-4, 1e-2)


def _window(dev, lo: float, hi: float) -> tuple[int, int]:
    """The first epoch with ``dev <= hi`` and the last epoch before ``dev < lo`` (``(k1, k2)``; ``k2 <= k1`` when
    the window holds fewer than two epochs)."""
    inside, below = dev <= hi, dev < lo
    if not inside.any() or not below.any():
        return 0, -1
    return int(inside.argmax()), int(below.argmax()) - 1


def euler_rate_design(law, scale: float, d: int, T: int, kappa: float, a0: float = 1.2,
                      window: tuple[float, float] = RATE_WINDOW) -> dict:
    r"""The contraction-rate experiment of the stability proposition (:prf:ref:`mesa-prop-stability`): GD from the
    diagonal init :math:`(a_0 I, a_0 I)` at the step :math:`\eta=\kappa\,\eta_{\max}` (``kappa`` times the largest
    stable step of the reduced system, :func:`reduced_stability`), near the limit :math:`(a_\infty, b_\infty)`.

    Linearised at the limit, the deviation :math:`e_k=a_kb_k-c^*` of forward Euler contracts by
    :math:`\lambda=1-x` per epoch, :math:`x=\eta\,\alpha\,(a_\infty^2+b_\infty^2)`; gradient flow run for the same time
    contracts by :math:`e^{-x}`. The multiplier is read as :math:`|e_{k_2}/e_{k_1}|^{1/(k_2-k_1)}` over the epochs
    whose population deviation lies in ``window`` (relative to :math:`c^*`, :data:`RATE_WINDOW`), on the population GD
    (``predicted``, nonlinear terms included) and on the gradient flow sampled at :math:`\tau=\eta k` over its own
    window (``falsifier_value``). ``epochs`` = :math:`2k_2+2`, so a run ends with its deviation squared below
    the window (its own limit). Returns lr, x, the windows, epochs, predicted and falsifier_value (NaN when a window
    holds fewer than two epochs)."""
    al, be = th.alpha_beta(law, scale, d, T)
    cst = be / al
    lr = P.real("kappa", kappa, min=0, max=1, min_open=True, max_open=True) * reduced_stability(
        law, scale, d, T, 1.0, [(a0, a0)])["lr_max"]
    a_inf, b_inf = th.limits(a0, a0, cst)
    x = lr * al * (a_inf**2 + b_inf**2)
    lo, hi = window
    K = int(min(10**5, 10 + 3 * math.log(lo * cst / max(abs(a0 * a0 - cst), 1e-300)) / math.log(max(abs(1 - x), math.exp(-x)))))
    _, _, pc = th.reduced_gd(a0, a0, lr, max(K, 10), al, be)
    k1, k2 = _window(abs(pc - cst) / cst, lo, hi)
    tau = lr * np.arange(max(K, 10) + 1)
    _, _, fc = th.gradient_flow(a0, a0, tau, al, be)
    f1, f2 = _window(abs(fc - cst) / cst, lo, hi)
    dev, fdev = abs(pc - cst), abs(fc - cst)
    pred = float((dev[k2] / dev[k1]) ** (1 / (k2 - k1))) if k2 > k1 else math.nan
    fal = float((fdev[f2] / fdev[f1]) ** (1 / (f2 - f1))) if f2 > f1 else math.nan
    return dict(lr=lr, x=x, cstar=cst, a0=a0, k1=k1, k2=k2, f1=f1, f2=f2, epochs=2 * max(k2, 1) + 2, predicted=pred,
                falsifier_value=fal, euler=1 - x, flow=math.exp(-x))
