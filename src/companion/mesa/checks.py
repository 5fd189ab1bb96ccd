"""The per-theorem checks of the mesa notebooks: each function runs one analysis and returns the numbers a
verdict needs (measured value, independent prediction, standard error from the data, falsifier).

Noise models (stated on the pages that use them):

* **Trained ab at the notebook's m** (:func:`ab_evidence`): the sampling standard error of ab at the last
  epoch is the delete-one-batch jackknife (:func:`companion.stats.jackknife_se`) of GD restricted to the
  diagonal red-block manifold on the *same* training set (:mod:`companion.mesa.empirical`). The trained
  full-parameter model fluctuates like it to first order: the off-manifold parameters have zero population
  gradient (:prf:ref:`mesa-thm-4-1`), so their feedback on ab is of second order in the sampling noise.
* **Trained ab extrapolated in m** (:func:`extrapolated_ab`): replicate training sets (independent seeds) at
  two sizes m and m/4; the finite-m bias of the full model (about +1.4 % at m = 1e4 for T = 10 to 100,
  scaling like 1/m) is removed by the Richardson combination (4 ab(m) - ab(m/4))/3, whose
  standard error comes from the replicate spread (:func:`companion.stats.replicate_se`), with its
  Welch–Satterthwaite degrees of freedom (:func:`companion.stats.welch`): the verdict's critical value is the
  Student-t quantile at the level of z normal standard errors (:func:`companion.stats.critical`).
* **Test losses** (:func:`loss_evidence`): i.i.d. per-sequence losses of an independent test set
  (:func:`companion.stats.mean_se`), combined in quadrature with the change of the population loss for one
  standard error of ab.

Falsifiers (:func:`falsifier_alpha`): the finite-T constant c* = beta/alpha against the T -> infinity constant
m4/m6 (= 1/(5 sigma^2) for the Gaussian) when m24 > 0; against "independent coordinates" (m24 replaced by
m2 m4) when m24 = 0 (the sparse law), the answer of a reader who forgets that x_1 has one active coordinate.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from companion import params as P
from companion import stats as S
from companion.cache import cached
from companion.mesa import theory as th
from companion.mesa.data import generate

__all__ = [
    "falsifier_alpha",
    "population_ab",
    "stability_bound",
    "stable_lr",
    "hessian_max_eig",
    "flow_limit_error",
    "training_stats",
    "ab_evidence",
    "extrapolated_ab",
    "replicate_kwargs",
    "sweep_replicates",
    "equivariant_moments",
    "masking_gap",
    "reduced_stability",
    "table1_stability",
    "divergence_check",
    "extrapolated_gap",
    "first_step_kwargs",
    "loss_evidence",
    "invariance",
    "one_step_deviation",
    "ROUNDOFF32",
]

#: relative round-off of a complex64 training run (the stated floor of trained-model claims)
ROUNDOFF32 = 1e-5


def falsifier_alpha(law, scale: float, d: int, T: int) -> tuple[str, float]:
    r"""The falsifier's alpha (beta is the same): the plausible wrong theory a sceptic would use.

    .. math:: \\alpha_f = N m_6 \\;(m_{24}>0,\\ T\\to\\infty),\\qquad
              \\alpha_f = N m_6 + (d-1) H_{T-2}\\, m_2 m_4 \\;(m_{24}=0,\\ \\text{independent coordinates}).

    Returns:
        ``(name, alpha_f)``.
    r"""
    mo = th.moments(law, scale, d) if isinstance(law, str) else law
    N = T - 2
    if mo.m24 > 0:
        return "T -> infinity constant m4/m6 (1/(5 sigma^2) for the Gaussian)", N * mo.m6
    return "independent coordinates (m24 = m2 m4)", N * mo.m6 + (d - 1) * th.harmonic(N) * mo.m2 * mo.m4


def population_ab(law, scale: float, d: int, T: int, a0, b0, lr: float, epochs: int, falsifier: bool = False):
    r"""Population GD (forward Euler on the reduced system) of ab, per coordinate when a0, b0 are vectors;
    with ``falsifier=True`` the same GD with the falsifier's alpha. Returns mean_j a_j b_j per epoch."""
    al, be = th.alpha_beta(law, scale, d, T)
    if falsifier:
        al = falsifier_alpha(law, scale, d, T)[1]
    a0v, b0v = np.atleast_1d(np.asarray(a0, float)), np.atleast_1d(np.asarray(b0, float))
    out = [th.reduced_gd(x, y, lr, epochs, al, be)[2] for x, y in zip(a0v, b0v)]
    return np.mean(out, axis=0)


def stability_bound(law, scale: float, d: int, T: int, inits, m_h: int = 400, seed: int = 0) -> dict:
    r"""The largest stable step size of *full-parameter* GD over every init of a run.

    GD is locally stable at a point iff lr < 2 / lambda_max, with lambda_max the largest Hessian eigenvalue of
    the loss in all real parameters. On the diagonal manifold the reduced system gives
    :math:`\lambda \ge \alpha(a^2+b^2)`, but the off-manifold directions are stiffer (2-5x at d = 5), so
    lambda_max is computed by power iteration (:func:`hessian_max_eig`) on ``m_h`` independent sequences
    (seed stream ``[seed, 5]``) at every init and at its limit (a_inf, b_inf); the reduced value is kept
    as a lower bound. Returns ``lr_max`` (= 2 / the largest lambda) and the worst point.
    r"""
    from companion.mesa.train import init_diagonal

    al, be = th.alpha_beta(law, scale, d, T)
    data = generate(law, m_h, d, T, scale, np.random.default_rng([seed, 5]), torch.complex128)
    worst, where = 0.0, None
    for a0, b0 in inits:
        for a, b in (a0, b0), th.limits(a0, b0, be / al):
            lam = max(al * (a * a + b * b), hessian_max_eig(data, *init_diagonal(d, a, b, torch.complex128)))
            if lam > worst:
                worst, where = lam, (a, b)
    return dict(lr_max=2.0 / worst, lam=worst, at=where)


def stable_lr(law, scale: float, d: int, T: int, inits, kappa: float = 0.25, seed: int = 0) -> float:
    r"""A step size at the fraction ``kappa`` of the full-parameter stability bound over every init of the run
    (:func:`stability_bound`): :math:`\eta = \kappa\,\min 2/\lambda_{\max}`."""
    kappa = P.real("kappa", kappa, min=0, max=1, min_open=True, max_open=True)
    return kappa * stability_bound(law, scale, d, T, inits, seed=seed)["lr_max"]


def flow_limit_error(law, scale: float, d: int, T: int, inits) -> float:
    r"""Max relative error of the gradient flow after 40 relaxation times of the slowest init against the
    closed-form limits (a_inf, b_inf, c*). The relaxation rate of c is alpha sqrt(Delta^2 + 4 c*^2)."""
    al, be = th.alpha_beta(law, scale, d, T)
    err = 0.0
    for a0, b0 in inits:
        la, lb = th.limits(a0, b0, be / al)
        rate = al * math.sqrt((a0**2 - b0**2) ** 2 + 4 * (be / al) ** 2)
        # from ab = a0 b0 the flow first travels to the neighbourhood of c* at speed >= |alpha ab - beta| * ...
        horizon = 40.0 / rate + 40.0 / be
        a, b, c = th.gradient_flow(a0, b0, [0.0, horizon], al, be)
        err = max(err, abs(a[-1] - la) / abs(la), abs(b[-1] - lb) / abs(lb), abs(c[-1] * al / be - 1))
    return float(err)


def training_stats(law, m: int, d: int, T: int, seed: int, n_batches: int):
    r"""Batch statistics (Q, P) of the diagonal-restricted loss of the training set of seed ``seed`` at scale 1
    (exactly the training set of :func:`companion.mesa.train.run`; other scales are exact rescalings). Cached on
    disk like the runs (:func:`companion.cache.cached`): thm4_2 and the appendix use the same Gaussian set."""
    P.memory("m", 16.0 * m * (T - 2) * d * d * 2 / max(1, n_batches) + 16.0 * min(m, 500) * T * d * d * 4,
             "the batch statistics of the diagonal-restricted loss")
    return _training_stats(law, int(m), int(d), int(T), int(seed), int(n_batches))


@cached
def _training_stats(law: str, m: int, d: int, T: int, seed: int, n_batches: int):
    from companion.mesa.empirical import diagonal_stats

    return diagonal_stats(generate(law, m, d, T, 1.0, np.random.default_rng([seed, 0]), torch.complex128), n_batches)


def ab_evidence(result, stats) -> dict:
    r"""The trained ab at the last epoch against population GD (same step and epochs), with the jackknife
    standard error of the diagonal-restricted GD on the same data and the falsifier's population GD.

    Per-coordinate inits (random init) are followed coordinate by coordinate."""
    from companion.mesa.empirical import sampling_spread

    c = result.config
    law, s, d, T, lr, E = c["law"], c["scale"], c["d"], c["T"], c["lr"], c["epochs"]
    a0 = result.W_KQ0[d:, :d].real.diagonal().copy()
    b0 = result.W_PV0[:, :d].real.diagonal().copy()
    pop = population_ab(law, s, d, T, a0, b0, lr, E)
    fal = population_ab(law, s, d, T, a0, b0, lr, E, falsifier=True)
    _, se = sampling_spread(None, a0, b0, lr, E, scale=s, stats=stats)
    return dict(measured=float(result.ab[-1]), predicted=float(pop[-1]), se=float(se[-1]), dof=len(stats[0]) - 1,
                falsifier=falsifier_alpha(law, s, d, T)[0], falsifier_value=float(fal[-1]),
                floor=ROUNDOFF32 * abs(float(pop[-1])), pop=pop, fal=fal, cstar=th.c_star(law, s, d, T))


def replicate_kwargs(law, scale: float, d: int, T: int, a0: float, b0: float, lr: float, epochs: int, m: int,
                     n_rep: int, seed: int, mask: bool = False) -> list[dict]:
    r"""The replicate runs of :func:`extrapolated_ab` as keyword arguments of :func:`companion.mesa.train.run`:
    ``n_rep`` training sets at m with seeds ``replicate_seed(seed, 1 + k)``, then ``n_rep`` at m/4 with seeds
    ``replicate_seed(seed, 17 + k)`` (k < n_rep <= 16; :func:`companion.replicate_seed`: far apart, so the
    replicates of nearby seeds are independent too). The masked and unmasked sets share their seeds (paired)."""
    from companion import replicate_seed

    if not 1 <= n_rep <= 16:
        raise P.ParameterError("n_rep", f"must be an integer in [1, 16]; got {n_rep!r}")
    kw = dict(law=law, scale=scale, d=d, T=T, m_test=10, a0=a0, b0=b0, lr=lr, epochs=epochs, mask=mask)
    return ([dict(kw, m=m, seed=replicate_seed(seed, 1 + k)) for k in range(n_rep)]
            + [dict(kw, m=max(1, m // 4), seed=replicate_seed(seed, 17 + k)) for k in range(n_rep)])


def sweep_replicates(n_rep: int, Ts) -> dict:
    r"""Replicate training sets per context length of a trained T sweep: ``n_rep`` at the shortest T and
    :math:`n(T)=\max\big(3,\ \mathrm{round}(n_{\rm rep}\sqrt{T_{\min}/T})\big)` at longer ones.

    Why: the gap between :math:`c^*(T)\sigma^2` and the falsifier 1/5 falls like 1/T, a run costs ~T, and the
    standard error of R replicates falls like :math:`1/\sqrt R`, so the power at long T is out of reach at any
    affordable R (the page records ``not_resolvable`` there); the square-root rule spends the replicates where
    the gap is resolvable and keeps three (the fewest with a usable spread) where it is not."""
    Ts = list(Ts)
    t0 = min(Ts)
    return {T: max(3, min(16, round(n_rep * math.sqrt(t0 / T)))) for T in Ts}


def extrapolated_ab(law, scale: float, d: int, T: int, a0: float, b0: float, lr: float, epochs: int, m: int,
                    n_rep: int, seed: int, m_eval: int = 0, mask: bool = False, m_loss: int = 0) -> dict:
    r"""Trained ab extrapolated to m -> infinity from replicate training sets at m and m/4.

    .. math:: \widehat{ab}_\infty = \tfrac13\big(4\,\overline{ab}(m) - \overline{ab}(m/4)\big)

    (:func:`companion.stats.richardson`), exact for a finite-m bias B/m: ab is a smooth function of the sample
    moments and the off-manifold feedback is of second order in the O(m^-1/2) fluctuations, so both give a 1/m
    bias. Measured at d = 5, m = 1e4 and 2500: the bias at m/4 is 4.7-5.1 times that at m for T = 10 and 20 (a
    m^-1/2 law would give 2; the combination 2 ab(m) - ab(m/4) of an earlier version left -4 % at T = 10).
    Seeds: :func:`replicate_kwargs`, all independent training sets. With ``m_eval > 0`` also the one-step-GD
    deviation of every replicate (:func:`one_step_deviation`); with ``m_loss > 0`` also their whole-sequence test
    loss extrapolated in m (:func:`_extrapolated_loss`). Returns the estimate, its standard error and its
    Welch degrees of freedom (``dof``), the replicates and the population/falsifier GD at the last epoch.
    r"""
    from companion.mesa.train import run

    m4 = max(1, m // 4)
    kws = replicate_kwargs(law, scale, d, T, a0, b0, lr, epochs, m, n_rep, seed, mask)
    runs_big = [run(**kw) for kw in kws[:n_rep]]
    runs_small = [run(**kw) for kw in kws[n_rep:]]
    big = np.array([r.ab[-1] for r in runs_big])
    small = np.array([r.ab[-1] for r in runs_small])
    nu = n_rep - 1  # degrees of freedom of each replicate spread
    rich = S.richardson(big, small)
    pop = population_ab(law, scale, d, T, a0, b0, lr, epochs)
    fal = population_ab(law, scale, d, T, a0, b0, lr, epochs, falsifier=True)
    out = dict(rich, big=big, small=small,
               predicted=float(pop[-1]), falsifier=falsifier_alpha(law, scale, d, T)[0], falsifier_value=float(fal[-1]),
               floor=ROUNDOFF32 * abs(float(pop[-1])), cstar=th.c_star(law, scale, d, T), m_small=m4, pop=pop,
               curves_big=np.array([r.ab for r in runs_big]), curves_small=np.array([r.ab for r in runs_small]))
    if m_eval:
        db = np.array([one_step_deviation(r, m_eval)["dev"] for r in runs_big])
        ds = np.array([one_step_deviation(r, m_eval)["dev"] for r in runs_small])
        mdb, sdb = S.replicate_se(db)
        mds, sds = S.replicate_se(ds)
        dse, ddof = S.welch((sdb / mdb / math.log(2), nu), (sds / mds / math.log(2), nu))
        out.update(dev_big=mdb, dev_small=mds, dev_log2=math.log2(mds / mdb), dev_se=dse, dev_dof=ddof)
    if m_loss:
        out["loss"] = _extrapolated_loss(runs_big, runs_small, m_loss, seed)
    off = ~np.eye(d, dtype=bool)
    for key, blk in (("offdiag_kq", lambda r: r.W_KQ[d:, :d]), ("offdiag_pv", lambda r: r.W_PV[:, :d])):
        if d > 1:  # mean off-diagonal red entry, extrapolated like ab (a 1/m bias)
            out[key] = S.richardson([float(blk(r).real[off].mean()) for r in runs_big],
                                    [float(blk(r).real[off].mean()) for r in runs_small])
    return out


def _extrapolated_loss(runs_big, runs_small, m_loss: int, seed: int) -> dict:
    r"""Whole-sequence test loss of the replicates at m and m/4 on one common test set (``m_loss`` sequences,
    seed stream ``[seed, 8]``, independent of every training set), extrapolated to m -> infinity.

    At a stationary point of the population loss (converged diagonal at c*, other parameters 0) the loss
    excess of a finite-m model is quadratic in its parameter errors, which are O(m^-1/2), so the excess is
    O(1/m) and the Richardson combination for a 1/m law removes it:

    .. math:: \hat L_\infty = \tfrac13\big(4\,\bar L(m)-\bar L(m/4)\big),\qquad
              \mathrm{se}^2=\tfrac19\big(16\,\mathrm{se}^2_{\rm rep}(m)+\mathrm{se}^2_{\rm rep}(m/4)\big)
              +\mathrm{se}^2_{\rm test},

    the replicate spread (training sets) and the standard error of the same combination of per-sequence
    losses over the i.i.d. test sequences (the test set is common to all replicates).
    """
    from companion.mesa.analysis import per_sequence_loss, weights

    c = runs_big[0].config
    td = generate(c["law"], m_loss, c["d"], c["T"], c["scale"], np.random.default_rng([seed, 8]), torch.complex128)
    big = np.array([per_sequence_loss(td, *weights(r)) for r in runs_big])
    small = np.array([per_sequence_loss(td, *weights(r)) for r in runs_small])
    mo = th.moments(c["law"], c["scale"], c["d"])
    return dict(_richardson_paired(big, small), zero_loss=c["d"] / 2 * (c["T"] - 2) * mo.m2, big=big, small=small)


def _richardson_paired(big: np.ndarray, small: np.ndarray) -> dict:
    """:func:`companion.stats.richardson` of the replicates' mean test losses (rows: replicates, columns: the
    common test sequences), with the test-set standard error of the same combination added (Welch)."""
    rich = S.richardson(big.mean(1), small.mean(1))
    _, se_test = S.mean_se((4 * big.mean(0) - small.mean(0)) / 3)
    se, dof = S.welch((rich["se"], rich["dof"]), (se_test, math.inf))
    return dict(rich, se=se, dof=dof, se_test=se_test)


def extrapolated_gap(rep_u: dict, rep_m: dict) -> dict:
    r"""Test-loss difference of two sets of replicates trained on the same training sets (e.g. unmasked minus
    masked, same seeds), evaluated on the same test set (``m_loss`` of :func:`extrapolated_ab`), extrapolated in
    m with the 1/m law of :func:`_extrapolated_loss`. Paired twice: per training set (the replicate spread of
    the per-replicate differences) and per test sequence (the test-set SE of the same combination)."""
    u, w = rep_u["loss"], rep_m["loss"]
    return _richardson_paired(u["big"] - w["big"], u["small"] - w["small"])  # (n_rep, m_loss) each


def loss_evidence(result, c_pop: float, se_ab: float, positions=None, m_test: int | None = None,
                  dof_ab: float = math.inf) -> dict:
    r"""Test loss of the full trained model (whole sequence, or ``positions``) against the population loss at
    the population-GD ab ``c_pop`` (never at the learned parameters).

    SE: the test-set mean's standard error combined with |dL/dc| se_ab (one standard error of ab moved
    through the population loss; ``dof_ab`` its degrees of freedom, combined by :func:`companion.stats.welch`).
    Returns measured, predicted, se, dof, and the per-sequence losses."""
    from companion.mesa.analysis import per_sequence_loss, test_data, weights

    c = result.config
    law, s, d, T = c["law"], c["scale"], c["d"], c["T"]
    td = test_data(result, m=m_test)
    losses = per_sequence_loss(td, *weights(result), positions=positions)
    mu, se_test = S.mean_se(losses)
    mo = th.moments(law, s, d)
    if positions is None:
        al, be = th.alpha_beta(law, s, d, T)
        pred = float(th.population_loss(law, s, d, T, c_pop))
        slope = d * (al * c_pop - be)
    else:
        t = np.atleast_1d(positions).astype(float)
        pred = float(np.sum(th.position_loss(law, s, d, t, c_pop)))
        slope = float(np.sum(d * (c_pop * (mo.m6 + (d - 1) * mo.m24 / (t - 1)) - mo.m4)))
    se, dof = S.welch((se_test, math.inf), (abs(slope) * se_ab, dof_ab))
    return dict(measured=mu, predicted=pred, se=se, dof=dof, se_test=se_test,
                losses=losses, zero_loss=d / 2 * (T - 2 if positions is None else len(np.atleast_1d(positions))) * mo.m2)


def invariance(law: str, d: int, T: int, points, gh_nodes: int = 4) -> dict:
    r"""Exact population gradient (phase grid, :func:`companion.mesa.empirical.exact_population`) at diagonal
    points (aI, bI): the largest off-diagonal red and other-block entry relative to the diagonal gradient, and
    the off-diagonal red entries themselves. Returns dict with ``ratio`` (max over points) and ``grads``."""
    from companion.mesa.analysis import gradient_blocks
    from companion.mesa.empirical import exact_population

    data, w = exact_population(law, d, T, gh_nodes=gh_nodes)
    ratio, grads = 0.0, []
    for a, b in points:
        g = gradient_blocks(data, a, b, weights=w)
        diag = np.abs(g["kq_diag"]).max()
        off = max(np.abs(g["pv_off"]).max(), np.abs(g["kq_off"]).max(), np.abs(g["other"]).max())
        ratio = max(ratio, off / diag)
        grads.append(g)
    return dict(ratio=float(ratio), grads=grads, size=data.m)


def one_step_deviation(result, m_eval: int = 300) -> dict:
    r"""Relative deviation of the trained model's predictions from the explicit one-step-GD formula with its
    learned diagonals, on ``m_eval`` fresh sequences (seed stream ``[seed, 3]``, independent of training and
    test sets); and the relative off-manifold weight mass."""
    from companion.mesa.analysis import weights
    from companion.mesa.model import predict

    c = result.config
    d = c["d"]
    ev = generate(c["law"], m_eval, d, c["T"], c["scale"], np.random.default_rng([c["seed"], 3]), torch.complex128)
    y = predict(ev, *weights(result))
    a = np.diag(result.W_KQ[d:, :d].real).copy()
    b = np.diag(result.W_PV[:, :d].real).copy()
    y1 = th.one_step_gd_predict(ev.tokens(), a, b)
    dev = float(torch.linalg.vector_norm(y - y1) / torch.linalg.vector_norm(y1))
    Wk = np.zeros_like(result.W_KQ)
    Wp = np.zeros_like(result.W_PV)
    Wk[d:, :d] = np.diag(a)
    Wp[:, :d] = np.diag(b)
    mass = math.sqrt((np.linalg.norm(result.W_KQ - Wk) ** 2 + np.linalg.norm(result.W_PV - Wp) ** 2)
                     / (np.linalg.norm(a) ** 2 + np.linalg.norm(b) ** 2))
    return dict(dev=dev, mass=mass)


def hessian_max_eig(data, W_KQ, W_PV, iters: int = 30, eps: float = 1e-6, seed: int = 0) -> float:
    r"""Largest eigenvalue of the Hessian of the empirical loss in all real parameters (real and imaginary
    parts of W_KQ and W_PV), by power iteration on forward-difference Hessian-vector products
    :math:`Hv \approx (g(w+\epsilon v)-g(w))/\epsilon` of :func:`companion.mesa.model.loss_grad_fast`
    (complex128). GD with step lr is locally stable iff lr < 2 / lambda_max."""
    from companion.mesa.model import loss_grad_fast

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


def setup_checks(law, scale: float, d: int, T: int, m: int, a: float, b: float, m_direct: int, seed: int) -> dict:
    r"""The implementation tests and Monte-Carlo checks of the setting (``mesa/setup``).

    * fast model vs the literal prefix-sum definition at random full weights (identity);
    * diagonal model vs one GD step on the in-context OLS loss (identity);
    * Monte-Carlo loss at (aI, bI) vs :math:`L(ab)=\\frac d2(\\alpha c^2-2\\beta c+N m_2)`, SE of the mean of
      i.i.d. per-sequence losses (:func:`companion.stats.mean_se`);
    * Monte-Carlo diagonal gradient of W_KQ21 vs :math:`b(\\alpha ab-\\beta)`, SE from independent groups.
    The falsifier replaces alpha by :func:`falsifier_alpha`. Data: seed stream ``[seed, 0]`` (complex128).
    r"""
    from companion.mesa.model import loss_grad_fast, per_sequence_loss, predict, predict_direct
    from companion.mesa.train import init_diagonal

    data = generate(law, m, d, T, scale, np.random.default_rng([seed, 0]), torch.complex128)
    gen = torch.Generator().manual_seed(int(seed))
    W_KQ_r = torch.randn(2 * d, 2 * d, dtype=torch.complex128, generator=gen)
    W_PV_r = torch.randn(d, 2 * d, dtype=torch.complex128, generator=gen)
    small = data.subset(slice(0, m_direct))
    y_def = predict_direct(small, W_KQ_r, W_PV_r)
    err_fast = float((predict(small, W_KQ_r, W_PV_r) - y_def).abs().max() / y_def.abs().max())
    W_KQ, W_PV = init_diagonal(d, a, b, torch.complex128)
    y_gd = th.one_step_gd_predict(small.tokens(), a, b)
    err_gd = float((predict(small, W_KQ, W_PV) - y_gd).abs().max() / max(float(y_gd.abs().max()), 1e-300))
    al, be = th.alpha_beta(law, scale, d, T)
    name, al_f = falsifier_alpha(law, scale, d, T)
    mo = th.moments(law, scale, d)
    N, c = T - 2, a * b
    L_emp, L_se = S.mean_se(per_sequence_loss(data, W_KQ, W_PV))
    groups = np.array_split(np.arange(m), min(100, m // 10))
    g = [float(torch.diagonal(loss_grad_fast(data.subset(ix), W_KQ, W_PV)[1][d:, :d]).real.mean()) for ix in groups]
    g_emp, g_se = S.mean_se(g)  # equal-size groups up to one sequence: the mean of group means
    tok = data.tokens()
    resid = (predict(data, W_KQ, W_PV) - tok[:, 2:]).abs() ** 2
    return dict(
        err_fast=err_fast, err_gd=err_gd, alpha=al, beta=be, falsifier=name,
        L_emp=L_emp, L_se=L_se, L_pop=float(th.population_loss(law, scale, d, T, c)),
        L_fal=d / 2 * (al_f * c * c - 2 * be * c + N * mo.m2),
        L_floor=S.ROUNDOFF * d / 2 * (al * c * c + 2 * be * abs(c) + N * mo.m2),
        g_emp=g_emp, g_se=g_se, g_pop=b * (al * c - be), g_fal=b * (al_f * c - be),
        g_floor=S.ROUNDOFF * abs(b) * (al * abs(c) + be), n_groups=len(groups), g_dof=len(groups) - 1,
        x0=tok[0].numpy(), pos_loss=0.5 * resid.sum(-1).mean(0).numpy(),
        pos_pop=th.position_loss(law, scale, d, np.arange(2, T), c),
    )


def limit_position_losses(law, scale: float, d: int, T: int, positions, m_eval: int, seed: int) -> dict:
    r"""Per-position test loss of the limit model (diagonal, ab = c*(T); not a learned model) at test
    positions ``positions`` (contexts longer than the training T allowed), by Monte Carlo on ``m_eval`` fresh
    sequences (seed stream ``[seed, 4]``), against :math:`\\ell_t(c^*)` (:func:`theory.position_loss`)."""
    from companion.mesa.model import per_sequence_loss
    from companion.mesa.train import init_diagonal

    pos = [int(t) for t in positions]
    cst = th.c_star(law, scale, d, T)
    P.memory("m_test, T", 16.0 * m_eval * d * 12 * len(pos), "the limit-model evaluation")
    data = generate(law, m_eval, d, max(pos) + 1, scale, np.random.default_rng([seed, 4]), torch.complex128)
    W = init_diagonal(d, 1.0, cst, torch.complex128)
    out = [S.mean_se(per_sequence_loss(data, *W, positions=[t])) for t in pos]
    return dict(c=cst, mean=[o[0] for o in out], se=[o[1] for o in out],
                pred=[float(th.position_loss(law, scale, d, t, cst)) for t in pos])


def capability(result, stats, m_test: int | None = None) -> dict:
    r"""Thm 4.2 / Prop 4.1 on the full trained model: its whole-sequence and last-position test losses against
    the population losses at the population-GD ab (:func:`loss_evidence`), each with its falsifier: "does not
    recover" (the population loss of the independent-coordinates theory at its own GD ab) when Assumption 4.2
    holds, "recovers" (0) when it does not. ``stats``: the training-set statistics for the jackknife SE of ab."""
    c = result.config
    law, s, d, T = c["law"], c["scale"], c["d"], c["T"]
    ab = ab_evidence(result, stats)
    holds = th.assumption_4_2(law, s, d)["holds"]
    mo = th.moments(law, s, d)
    al_f = falsifier_alpha(law, s, d, T)[1]
    _, be = th.alpha_beta(law, s, d, T)
    cf = ab["falsifier_value"]
    out = dict(holds=holds, ab=ab)
    for key, pos in (("whole", None), ("last", [T - 1])):
        q = loss_evidence(result, ab["predicted"], ab["se"], positions=pos, m_test=m_test, dof_ab=ab["dof"])
        if holds:
            if pos is None:
                fv = d / 2 * (al_f * cf * cf - 2 * be * cf + (T - 2) * mo.m2)
            else:
                fv = d / 2 * (cf * cf * (mo.m6 + (d - 1) * mo.m2 * mo.m4 / (T - 2)) - 2 * cf * mo.m4 + mo.m2)
            q.update(falsifier="does not recover (independent coordinates: m24 = m2 m4)", falsifier_value=float(fv))
        else:
            q.update(falsifier="recovers the sequence (loss 0)", falsifier_value=0.0)
        # complex64 weights: predictions carry a relative round-off ~1e-7, i.e. 1e-14 of the zero-predictor loss
        q["floor"] = 1e-13 * q["zero_loss"]
        out[key] = q
    return out


def exact_loss_at_cstar(law: str, d: int = 2, T: int = 5) -> tuple[float, float]:
    r"""Exact population loss of the diagonal model at (a, b) = (1, c*) on the phase grid (Gauss-Hermite for
    Gaussian factors), and the closed form :func:`theory.population_loss` at c*: ``(exact, closed_form)``."""
    import itertools

    from companion.mesa.data import ARData
    from companion.mesa.empirical import exact_population
    from companion.mesa.model import loss_grad_fast
    from companion.mesa.train import init_diagonal

    if law == "sparse_gaussian":  # g e_k, g ~ N(0, 1): Gauss-Hermite nodes on the active coordinate
        nodes, wts = np.polynomial.hermite_e.hermegauss(7)
        G = 6 * (T - 2) + 1
        grid = 2 * np.pi * np.arange(G) / G
        th_grid = np.array(list(itertools.product(grid, repeat=d)))
        atoms = np.array([g * np.eye(d)[k] for k in range(d) for g in nodes])
        aw = np.array([wt for k in range(d) for wt in wts])
        th_all = np.repeat(th_grid, len(atoms), axis=0)
        data = ARData(torch.from_numpy(np.tile(atoms, (len(th_grid), 1)).astype(complex)),
                      torch.from_numpy(np.exp(1j * th_all)), T, th_all)
        w = torch.from_numpy(np.tile(aw, len(th_grid)))
    else:
        data, w = exact_population(law, d, T)
    cst = th.c_star(law, 1.0, d, T)
    exact = float(loss_grad_fast(data, *init_diagonal(d, 1.0, cst, torch.complex128), weights=w)[0])
    return exact, float(th.population_loss(law, 1.0, d, T, cst))


def offdiag_exact_error(points, sizes=((2, 6), (3, 5))) -> float:
    r"""Max relative error of the closed-form off-diagonal gradient (:func:`theory.offdiag_gradient`, full-one)
    against the exact population gradient (phase grid) at every diagonal point and size (d, T)."""
    from companion.mesa.analysis import gradient_blocks
    from companion.mesa.empirical import exact_population

    err = 0.0
    for dd, TT in sizes:
        data, w = exact_population("full_one", dd, TT)
        for a, b in points:
            g = gradient_blocks(data, a, b, weights=w)
            f_pv, f_kq = th.offdiag_gradient("full_one", 1.0, dd, TT, a, b)
            err = max(err, np.abs(g["pv_off"].real - f_pv).max() / abs(f_pv), np.abs(g["kq_off"].real - f_kq).max() / abs(f_kq))
    return float(err)


def offdiag_mc(data, a: float, b: float, n_groups: int) -> dict:
    r"""Monte-Carlo off-diagonal red-block gradient at (aI, bI): the mean over all (exchangeable) off-diagonal
    entries, per group of sequences; mean and SE over the groups (:func:`companion.stats.mean_se`)."""
    from companion.mesa.analysis import gradient_blocks

    per = []
    for ix in np.array_split(np.arange(data.m), n_groups):
        g = gradient_blocks(data.subset(ix), a, b)
        per.append((g["pv_off"].real.mean(), g["kq_off"].real.mean()))
    per = np.array(per)
    pv, se_pv = S.mean_se(per[:, 0])
    kq, se_kq = S.mean_se(per[:, 1])
    return dict(pv=pv, se_pv=se_pv, kq=kq, se_kq=se_kq, dof=n_groups - 1)


def first_step_kwargs(law, d: int, T: int, m: int, a0: float, b0: float, lr: float, seed: int) -> dict:
    """The run of :func:`first_step`: one GD epoch from (a0 I, b0 I) at scale 1 (keyword arguments of
    :func:`companion.mesa.train.run`)."""
    return dict(law=law, scale=1.0, d=d, T=T, m=m, m_test=10, a0=a0, b0=b0, lr=lr, epochs=1, seed=seed)


def first_step(law, d: int, T: int, m: int, a0: float, b0: float, lr: float, seed: int, n_groups: int) -> dict:
    r"""Prop 4.2 on the trained transformer: one GD epoch of :func:`companion.mesa.train.run` from (a0 I, b0 I);
    the mean signed off-diagonal entry of each red block after the step against -lr times the population
    gradient, with the SE of the training-set gradient over groups of sequences (the same training set)."""
    from companion.mesa.train import run

    r = run(**first_step_kwargs(law, d, T, m, a0, b0, lr, seed))
    off = ~np.eye(d, dtype=bool)
    meas_pv = float(r.W_PV[:, :d].real[off].mean())
    meas_kq = float(r.W_KQ[d:, :d].real[off].mean())
    data = generate(law, m, d, T, 1.0, np.random.default_rng([seed, 0]), torch.complex128)
    mc = offdiag_mc(data, a0, b0, n_groups)
    f_pv, f_kq = th.offdiag_gradient(law, 1.0, d, T, a0, b0)
    return dict(meas_pv=meas_pv, meas_kq=meas_kq, pred_pv=-lr * f_pv, pred_kq=-lr * f_kq,
                se_pv=lr * mc["se_pv"], se_kq=lr * mc["se_kq"], dof=mc["dof"])


def moment_ratio_rel_se(n: int) -> float:
    r"""Relative standard error of the empirical Gaussian moment ratio :math:`\hat m_4/\hat m_6` from ``n``
    i.i.d. draws (delta method), with :math:`E x^{2k} = (2k-1)!!\,\sigma^{2k}`:

    .. math:: \frac{\mathrm{se}}{m_4/m_6} = \sqrt{\frac1n\Big(\frac{m_8-m_4^2}{m_4^2}+\frac{m_{12}-m_6^2}{m_6^2}
              -2\,\frac{m_{10}-m_4m_6}{m_4m_6}\Big)} .
    """
    from scipy.special import factorial2

    mom = {p: float(factorial2(p - 1)) for p in (4, 6, 8, 10, 12)}
    v = ((mom[8] - mom[4] ** 2) / mom[4] ** 2 + (mom[12] - mom[6] ** 2) / mom[6] ** 2
         - 2 * (mom[10] - mom[4] * mom[6]) / (mom[4] * mom[6]))
    return math.sqrt(v / n)


def equivariant_moments(law: str, d: int, T: int, m: int, seed: int, chunk: int = 1000) -> dict:
    r"""Per-sequence moments of the population loss on the equivariant red blocks (:func:`theory.equivariant_c`):
    :math:`G_n=\mathrm{Re}\sum_t\langle F_{k,t},F_{l,t}\rangle`, :math:`h_n=\mathrm{Re}\sum_t\langle F_{k,t},x_{t+1}\rangle`,
    :math:`y_n=\sum_t\|x_{t+1}\|^2` for ``m`` sequences (seed stream ``[seed, 9]``, independent of every training
    and test set; complex128), so that the loss of sequence n at c is exactly
    :math:`\ell_n(c)=\frac12(c^\top G_nc-2h_n^\top c+y_n)`. Returns G, h, y (per sequence)."""
    from companion.mesa.model import predict_fast

    P.memory("m_mc", 16.0 * min(m, chunk) * (T - 2) * d * 5, "the equivariant moments")
    data = generate(law, m, d, T, 1.0, np.random.default_rng([seed, 9]), torch.complex128)
    eye, off = np.eye(d), np.ones((d, d)) - np.eye(d)
    units = [(A, B) for A in (eye, off) for B in (eye, off)]  # order of theory.equivariant_c
    G, h, y = np.empty((m, 4, 4)), np.empty((m, 4)), np.empty(m)
    for i in range(0, m, chunk):
        sub = data.subset(slice(i, i + chunk))
        F = []
        for A, B in units:
            W_KQ = torch.zeros(2 * d, 2 * d, dtype=torch.complex128)
            W_PV = torch.zeros(d, 2 * d, dtype=torch.complex128)
            W_KQ[d:, :d] = torch.from_numpy(A)
            W_PV[:, :d] = torch.from_numpy(B)
            F.append(predict_fast(sub, W_KQ, W_PV).reshape(sub.m, -1))
        F = torch.stack(F, 1)  # (n, 4, positions * d)
        Y = sub.tables(np.arange(2, T))[2].reshape(sub.m, -1)
        G[i : i + sub.m] = torch.einsum("nkp,nlp->nkl", F.conj(), F).real.numpy()
        h[i : i + sub.m] = torch.einsum("nkp,np->nk", F.conj(), Y).real.numpy()
        y[i : i + sub.m] = (Y.abs() ** 2).sum(1).numpy()
    return dict(G=G, h=h, y=y)


def masking_gap(d: int, T: int, a0: float, b0: float, lr: float, epochs: int, moments: dict) -> dict:
    r"""Thm 4.3 for :math:`x_1=\mathbf 1`: the predicted test-loss difference, unmasked minus masked, of the
    population GD from (a0 I, b0 I) after ``epochs`` steps (:func:`theory.equivariant_gd` with the Monte-Carlo
    moments :func:`equivariant_moments`, masked with the exact reduced system).

    The masked endpoint is :math:`c_m=(ab,0,0,0)` of :func:`population_ab`; the unmasked one :math:`c_u` follows the
    4-parameter population GD. The difference is the mean of the per-sequence differences
    :math:`\ell_n(c_u)-\ell_n(c_m)` (exact per sequence), its standard error the Monte-Carlo SE over the
    sequences (:func:`companion.stats.mean_se`). Also returned: the unmasked endpoint (a, a', b, b') and the
    check of the moments against the closed form, :math:`E G_{11}=d\alpha`, :math:`E h_1=d\beta`."""
    G, h, y = moments["G"], moments["h"], moments["y"]
    path = th.equivariant_gd(a0, b0, lr, epochs, G.mean(0), h.mean(0), d)
    c_u = th.equivariant_c(*path[-1])
    c_m = np.array([population_ab("full_one", 1.0, d, T, a0, b0, lr, epochs)[-1], 0.0, 0.0, 0.0])

    def per_seq(c):
        return 0.5 * (np.einsum("k,nkl,l->n", c, G, c) - 2 * h @ c + y)

    gap, se = S.mean_se(per_seq(c_u) - per_seq(c_m))
    Gm, hm, ym = G.mean(0), h.mean(0), y.mean()
    L_path = [0.5 * (c @ Gm @ c - 2 * hm @ c + ym) for c in (th.equivariant_c(*x) for x in path)]
    back = max(1, epochs // 10)  # population loss change of the unmasked GD over the last tenth of the epochs
    al, be = th.alpha_beta("full_one", 1.0, d, T)
    g11, se11 = S.mean_se(G[:, 0, 0])
    h1, se1 = S.mean_se(h[:, 0])
    # Monte-Carlo SE of the endpoint (a, a', b, b'): delete-a-group jackknife of the moments (20 groups)
    groups = np.array_split(np.arange(len(y)), min(20, len(y)))
    loo = [th.equivariant_gd(a0, b0, lr, epochs, np.delete(G, ix, 0).mean(0), np.delete(h, ix, 0).mean(0), d)[-1]
           for ix in groups]
    return dict(predicted=gap, se=se, path=path, se_end=S.jackknife_se(path[-1], np.array(loo))[1],
                se_end_dof=len(groups) - 1, c_u=c_u, c_m=c_m,
                drift=abs(L_path[-1] - L_path[-1 - back]),
                loss_u=float(per_seq(c_u).mean()),
                loss_m=float(per_seq(c_m).mean()), z_G11=(g11 - d * al) / se11, z_h1=(h1 - d * be) / se1)


def reduced_stability(law, scale: float, d: int, T: int, lr: float, inits) -> dict:
    r"""Stability of population GD (forward Euler on the reduced system) over every init and its limit:
    ``number`` :math:`=\max\eta\,\alpha\,(a^2+b^2)` over the inits and their limits :math:`(a_\infty,b_\infty)`
    (stable iff < 2, :func:`theory.stability_number`), and ``lr_max`` :math:`=2/(\alpha\max(a^2+b^2))`."""
    al, be = th.alpha_beta(law, scale, d, T)
    worst = max(max(a0 * a0 + b0 * b0, sum(x * x for x in th.limits(a0, b0, be / al))) for a0, b0 in inits)
    return dict(number=lr * al * worst, lr_max=2.0 / (al * worst))


def table1_stability(d: int, T: int) -> list[dict]:
    """:func:`reduced_stability` of every Table-1 step size (:data:`companion.mesa.paper.TABLE1`, the paper's
    inits) at (d, T): rows with law, s, lr, number, lr_max."""
    from companion.mesa import paper

    return [dict(law=law, s=s, lr=lr, **reduced_stability(law, s, d, T, lr, paper.INITS))
            for law, rows in paper.TABLE1.items() for s, lr in rows]


def divergence_check(d: int, T: int, m: int, seed: int, a0: float = 1.2, factor: float = 1.5, epochs: int = 60) -> dict:
    """Full-parameter GD (sparse law, c = 1, from (a0 I, a0 I)) at ``factor`` x the largest stable step of the
    reduced system: ``diverged`` (1.0 if training raised TrainingDiverged), ``lr_crit`` and the message."""
    from companion.mesa.train import TrainingDiverged, run

    lr_crit = reduced_stability("sparse", 1.0, d, T, 1.0, [(a0, a0)])["lr_max"]
    try:
        run(law="sparse", scale=1.0, a0=a0, b0=a0, lr=factor * lr_crit, epochs=epochs, d=d, T=T, m=m, m_test=10,
            seed=seed, check_lr=False)
    except TrainingDiverged as err:
        return dict(diverged=1.0, lr_crit=lr_crit, message=str(err))
    return dict(diverged=0.0, lr_crit=lr_crit, message="training did not diverge")
