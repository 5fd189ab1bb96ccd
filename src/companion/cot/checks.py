"""The per-theorem measurements behind the verdicts of the cot notebooks (one function per check).

Each function runs one simulation and returns the measured numbers *with their standard errors* (from
:mod:`companion.stats`) and the independent predictions they are compared with; the notebooks only narrate,
plot and state the verdict. Predictions never use the measured quantity: they come from closed forms in
:mod:`companion.cot.theory` or from Monte-Carlo samples drawn independently of the simulated prompts.

Noise models (what each standard error covers):

* *prompts*: the per-prompt errors of a model on i.i.d. evaluation prompts (:func:`companion.stats.mean_se`
  or, for heavy-tailed errors, :func:`companion.stats.median_se`);
* *Monte Carlo*: the independent sample behind a prediction, combined in quadrature
  (:func:`companion.stats.combine`);
* *seeds*: independent training runs (:func:`companion.stats.replicate_se`), where a page trains replicates.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from companion.stats import band_words, combine, mean_se, median_se, replicate_se, welch, wider

from . import theory as th
from .data import Prompts, cot_tokens, embed, gd_trajectory, make_generator, sample_prompts
from .model import (
    construction,
    cot_inference,
    looped_predict,
    no_cot_effective_matrix,
    no_cot_predict,
    per_prompt_error,
    sparse_parameters,
    teacher_forced_loss,
    teacher_forced_loss_direct,
)
from .train import cached_train_full, replicate_seed, threads1, train_looped_isotropic

__all__ = [
    "EPS", "roundoff_bound", "setup_identities", "eta_argmin_mc", "floor_mc", "model_errors",
    "replicate_errors", "trained_vs_prediction", "cot_vs_no_cot", "trained_no_cot", "decay_curves", "phase_diagram",
    "looped_optima", "looped_sparse_simulation", "looped_trained_vs_optimum", "threads1", "no_cot_eta_eff", "median_pair",
    "replicate_median",
]

EPS = float(np.finfo(np.float64).eps)


def roundoff_bound(d: int, n: int, k: int) -> float:
    r"""Relative float64 round-off of k CoT steps: each step sums over :math:`D = 2d+2` rows and :math:`n+k`
    columns, so the relative error is at most about :math:`k(n+k)D\epsilon`."""
    return k * (n + k) * (2 * d + 2) * EPS


# ----------------------------------------------------------------------------- setup: implementation identities
def setup_identities(d: int, n: int, k: int, eta: float, batch: int, seed: int) -> dict:
    """The implementation identities of the setting ({prf:ref}`cot-def-losses`): CoT inference with the
    construction against GD and against the closed form :math:`-(I-\\eta S)^k w^*`; the fast teacher-forced loss
    and its gradient against the per-position definition (random weights, 4 prompts); the loss of the
    construction. Returns the measured relative gaps, the round-off bound and the arrays the figure needs."""
    gen = make_generator(seed)
    with threads1():
        prompts = sample_prompts(batch, d, n, gen)
        W_gd = gd_trajectory(prompts, eta, k)
        W_KQ, W_PV = construction(d, eta)
        w_cot = cot_inference(prompts, W_KQ, W_PV, k)
        scale = float(W_gd.abs().max())
        I = torch.eye(d, dtype=prompts.S.dtype)
        closed = -torch.einsum("bij,bj->bi", torch.linalg.matrix_power(I - eta * prompts.S, k), prompts.w_star)
        few = sample_prompts(4, d, n, gen)
        W_few = gd_trajectory(few, eta, k)
        D = 2 * d + 2
        A = (0.3 / math.sqrt(D) * torch.randn(D, D, generator=gen, dtype=torch.float64)).requires_grad_()
        B = (0.3 / math.sqrt(D) * torch.randn(D, D, generator=gen, dtype=torch.float64)).requires_grad_()
        L_fast = teacher_forced_loss(few, W_few, A, B, k)
        g_fast = torch.autograd.grad(L_fast, [A, B])
        L_direct = teacher_forced_loss_direct(few, W_few, A, B, k)
        g_direct = torch.autograd.grad(L_direct, [A, B])
        L_constr = float(teacher_forced_loss(prompts, W_gd, W_KQ, W_PV, k))
    tol = roundoff_bound(d, n, k)
    return dict(
        gd_gap=float((w_cot - W_gd).abs().max()) / scale,
        closed_gap=float((w_cot[:, -1] - prompts.w_star - closed).abs().max()) / scale,
        loss_rel=abs(float(L_fast.detach()) - float(L_direct.detach())) / abs(float(L_direct.detach())),
        grad_rel=max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(g_fast, g_direct)),
        L_constr=L_constr, tol=tol, tol_loss=0.5 * k * D * (tol * scale) ** 2, scale=scale,
        Zk=torch.cat([embed(prompts)[0], cot_tokens(w_cot[:1, 1:])[0].T], dim=1).numpy(),
        err_cot=((w_cot - prompts.w_star[:, None, :]) ** 2).sum(-1).numpy(),
        err_gd=((W_gd - prompts.w_star[:, None, :]) ** 2).sum(-1).numpy(),
    )


# ----------------------------------------------------------------------------- Theorem 3.1 / Corollary 3.1
def eta_argmin_mc(S: np.ndarray) -> tuple[float, float]:
    r"""Monte-Carlo argmin of :math:`L_1(\eta) = \E\tr(I-\eta S)^2`, :math:`\hat\eta = \overline{\tr S}/\overline{\tr S^2}`
    ({prf:ref}`cot-thm-3-1`), with its delta-method standard error over the S sample.

    Returns:
        ``(eta_hat, se)``.
    """
    a = np.trace(S, axis1=1, axis2=2)
    b = np.einsum("bij,bji->b", S, S)
    grad = np.array([1 / b.mean(), -a.mean() / b.mean() ** 2])
    return float(a.mean() / b.mean()), float(np.sqrt(grad @ np.cov(a, b) @ grad / len(a)))


def floor_mc(d: int, n: int, num: int, rng: np.random.Generator, eta: float | None = None) -> tuple[float, float]:
    r"""Monte-Carlo :math:`\E\tr(I-\eta S)^2` (default :math:`\eta = \eta^\star`, i.e. the no-CoT floor of
    {prf:ref}`cot-cor-3-1`) from ``num`` independent S, with its standard error over the sample."""
    eta = th.eta_star(d, n) if eta is None else eta
    S = th.sample_S(d, n, num, rng)
    per = d - 2 * eta * np.trace(S, axis1=1, axis2=2) + eta**2 * np.einsum("bij,bji->b", S, S)
    return mean_se(per)


# ----------------------------------------------------------------------------- trained models
def model_errors(objective: str, res, prompts, k: int) -> np.ndarray:
    """Per-prompt :math:`\\|\\hat w - w^*\\|^2` of a trained model (CoT: k autoregressive steps; no-CoT; looped
    with k loops) on the given prompts; non-finite values (divergent prompts) become +inf."""
    with threads1(), torch.no_grad():
        if objective == "cot":
            w_hat = cot_inference(prompts, res.W_KQ, res.W_PV, k)[:, -1]
        elif objective == "no_cot":
            w_hat = no_cot_predict(prompts, res.W_KQ, res.W_PV)
        else:
            w_hat = looped_predict(prompts, res.W_KQ, res.W_PV, k)
        e = per_prompt_error(w_hat, prompts).numpy()
    return np.nan_to_num(e, nan=np.inf)


def replicate_errors(objective: str, res, k: int, num: int, seed: int) -> np.ndarray:
    """Per-prompt errors of every replicate of a :class:`~companion.cot.train.TrainResult` trained with
    ``replicates=R``, replicate r on its *own* ``num`` fresh prompts (seed ``replicate_seed(seed, r)``), shape
    (R, num): R independent repetitions of the whole experiment, training and evaluation."""
    d, n = res.config["d"], res.config["n"]
    return np.stack([model_errors(objective, res.replicate(r), sample_prompts(num, d, n, make_generator(replicate_seed(seed, r))), k)
                     for r in range(res.replicates)])


def trained_vs_prediction(errors: np.ndarray, pred_mean: float, pred_se: float = 0.0, z: float = 4.0) -> dict:
    r"""Mean of trained models' per-prompt errors with its standard error and degrees of freedom, combined with
    the Monte-Carlo error of an (independent) prediction.

    ``errors`` of shape (N,): one model, the standard error is over the prompts (many degrees of freedom).
    Shape (R, N): R independently seeded training runs, each evaluated on its own prompts; the replicate means
    are i.i.d., so their spread (:func:`companion.stats.replicate_se`) covers the training seeds *and* the
    prompts, on R - 1 degrees of freedom. The prompts-only standard error of all R N errors
    (:func:`companion.stats.mean_se`) is a lower bound of the true one, on many degrees of freedom. Each is a
    valid test at the level of ``z`` normal standard errors on its own; the verdict takes the one with the wider
    band (:func:`companion.stats.wider`): the seed spread at the Student-t critical value, or the prompts at z.
    Returns ``se`` and ``dof`` (``math.inf`` when the prompts decide) to hand to the verdict, and ``se_from``,
    which of the two it is, in words.
    """
    errors = np.asarray(errors, dtype=float)
    m, se = mean_se(errors)
    out = dict(mean=m, se_prompts=se, pred=pred_mean, pred_se=pred_se)
    cand = [welch((se, math.inf), (pred_se, math.inf))]
    if errors.ndim == 2:
        means = errors.mean(axis=1)
        out.update(means=means, se_seeds=replicate_se(means)[1])
        cand.append(welch((out["se_seeds"], len(means) - 1), (pred_se, math.inf)))
    se, dof = wider(z, *cand)
    src = (f"the spread of {errors.shape[0]} training seeds ({band_words(dof)})" if math.isfinite(dof)
           else "the evaluation prompts")
    return dict(out, se=se, dof=dof, se_from=src)


def cot_vs_no_cot(d: int, n: int, eta: float, k: int, *, steps: int, lr: float, lr_final: float, lr_no_cot: float,
                  lr_final_no_cot: float, replicates: int, eval_batch: int, num_mc: int, seed: int,
                  rng: np.random.Generator) -> dict:
    r"""Figure 2 of the paper at one n ({prf:ref}`cot-prop-experiments`): ``replicates`` CoT models (k teacher-forced
    GD steps of size ``eta``) trained side by side and one no-CoT model, all for ``steps`` Adam steps on fresh
    prompts (through the run cache); the ``eval_batch`` evaluation prompts split among the CoT replicates, each on its
    own (:func:`replicate_errors`; the expected number of divergent prompts is that of one set of ``eval_batch``),
    against an independent Monte-Carlo estimate of :math:`\E\tr(I-\eta S)^{2k}` from
    ``num_mc`` spectra, the no-CoT model against the floor :math:`d(d+1)/(n+d+1)`; and, on the same spectra, the
    fraction of prompts with :math:`\eta\lambda_{\max}(S) > 2` and the 99.9 % quantile of :math:`\lambda_{\max}`.

    Returns:
        ``dict(n, eta, cot, noc, pred, floor, m_cot, m_noc, unstable, q999)`` (``m_*``: :func:`trained_vs_prediction`).
    """
    every = max(1, steps // 20)
    cot = cached_train_full("cot", d, n, k, eta, steps=steps, lr=lr, lr_final=lr_final, batch=64, seed=seed,
                            eval_every=every, eval_batch=500, replicates=replicates)
    noc = cached_train_full("no_cot", d, n, 1, steps=steps, lr=lr_no_cot, lr_final=lr_final_no_cot, batch=64,
                            seed=seed, eval_every=every, eval_batch=500)
    eigs = th.sample_S_eigs(d, n, num_mc, rng)
    pred, floor = th.gd_error_mc(k, eta, eigs), th.no_cot_floor(d, n)
    return dict(n=n, eta=eta, cot=cot, noc=noc, pred=pred, floor=floor,
                m_cot=trained_vs_prediction(replicate_errors("cot", cot, k, eval_batch // replicates, seed + 7), pred.mean,
                                            pred.se),
                m_noc=trained_vs_prediction(model_errors("no_cot", noc, sample_prompts(eval_batch, d, n, make_generator(seed + 7)), 1),
                                            floor),
                unstable=float(np.mean(eta * eigs[:, -1] > 2)), q999=float(np.quantile(eigs[:, -1], 0.999)))


def trained_no_cot(d: int, n: int, *, steps: int, lr: float, lr_final: float, eval_batch: int, seed: int,
                   batch: int = 64) -> dict:
    """A full no-CoT LSA trained from random initialisation (through the run cache) and its per-prompt errors on
    ``eval_batch`` fresh prompts against the floor of {prf:ref}`cot-cor-3-1`: :func:`trained_vs_prediction` with the
    training result under ``"res"``."""
    res = cached_train_full("no_cot", d, n, 1, steps=steps, lr=lr, lr_final=lr_final, batch=batch, seed=seed,
                            eval_every=max(1, steps // 30), eval_batch=2000)
    err = model_errors("no_cot", res, sample_prompts(eval_batch, d, n, make_generator(seed + 7)), 1)
    return dict(trained_vs_prediction(err, th.no_cot_floor(d, n)), res=res)


def no_cot_eta_eff(W_KQ, W_PV, d: int) -> float:
    """Effective one-step coefficient tr(A)/d of a no-CoT model (A = W24 V31 + V32 W14^T)."""
    return float(np.trace(no_cot_effective_matrix(W_KQ, W_PV, d)) / d)


def replicate_median(errors: np.ndarray, z: float = 4.0) -> tuple[float, float, float]:
    """The median of R models' per-prompt errors, shape (R, N), each model on its own prompts: the mean of the R
    medians, with the standard error of that mean over the replicates (training seeds and prompts, R - 1
    degrees of freedom) or the order-statistic standard errors of the R medians
    (:func:`companion.stats.median_se`) combined (many degrees of freedom), whichever band is wider at the level
    of ``z`` (:func:`companion.stats.wider`). One model (R = 1 or a 1-d array): its median and order-statistic
    standard error. Returns ``(median, se, dof)``."""
    errors = np.atleast_2d(np.asarray(errors, dtype=float))
    meds = [median_se(e) for e in errors]
    if len(meds) == 1:
        return meds[0][0], meds[0][1], math.inf
    m = np.array([a for a, _ in meds])
    floor = combine(*(b for _, b in meds)) / len(meds)
    if not np.all(np.isfinite(m)):
        return float(np.mean(m)), float("inf"), math.inf
    se, dof = wider(z, (replicate_se(m)[1], len(m) - 1), (floor, math.inf))
    return float(m.mean()), se, dof


def median_pair(a, b) -> tuple[float, float, float]:
    """Medians of two independent samples and the combined order-statistic standard error."""
    ma, sa = median_se(a)
    mb, sb = median_se(b)
    return ma, mb, combine(sa, sb)


# ----------------------------------------------------------------------------- looped transformers
def looped_optima(ks, eigs: np.ndarray, eis: np.ndarray, wis: np.ndarray) -> tuple[dict, dict]:
    """Parts (a) and (b) of {prf:ref}`cot-prop-looped` for every k in ``ks``: (a) on the importance-weighted sample
    (``eis``, ``wis``: :func:`companion.cot.theory.looped_is_optimum`, ``(c_k, se, loss, se)``), (b) on the plain
    sample ``eigs`` (:func:`companion.cot.theory.looped_two_param_optimum`, ``(c, b, loss)``)."""
    return ({int(k): th.looped_is_optimum(int(k), eis, wis) for k in ks},
            {int(k): th.looped_two_param_optimum(int(k), eigs) for k in ks})


def looped_sparse_simulation(d: int, n: int, k: int, c: float, b: float, eigs: np.ndarray, num: int,
                             seed: int) -> tuple[tuple[float, float], tuple[float, float]]:
    r"""The sparse looped LSA at :math:`V_{31} = -cb\,I`, :math:`W_{13} = I/b`, :math:`W_{24} = -1` run directly on ``num``
    fresh prompts, and the prediction :math:`\E\sum_j(1-bh_j)^2`, :math:`h_j = 1-(1-c\lambda_j)^k`, on the spectra
    ``eigs``. Returns ``((mean, se) simulated, (mean, se) predicted)``."""
    W_KQ, W_PV = sparse_parameters(-c * b * np.eye(d), np.eye(d) / b, -1.0)
    with threads1(), torch.no_grad():
        pr = sample_prompts(num, d, n, make_generator(seed))
        sim = mean_se(per_prompt_error(looped_predict(pr, W_KQ, W_PV, k), pr).numpy())
    return sim, mean_se(np.sum((1 - b * (1 - (1 - c * eigs) ** k)) ** 2, axis=1))


def looped_trained_vs_optimum(d: int, n: int, k: int, eigs: np.ndarray, *, steps: int, lr: float, lr_final: float,
                              replicates: int, num: int, seed: int) -> dict:
    r"""The trained looped model against its predicted optimum (part (b) of {prf:ref}`cot-prop-looped`).

    ``replicates`` looped models on the isotropic sparse parameters are trained from random starts
    (:func:`companion.cot.train.train_looped_isotropic`); each is run as a real looped LSA
    (:func:`~companion.cot.model.looped_predict` on :func:`~companion.cot.model.sparse_parameters`) on its own ``num // replicates``
    fresh prompts. The prediction is the optimum :math:`(c^\star, b^\star)` of part (b) computed on ``eigs``, an
    independent sample of spectra, and its loss :math:`\E\sum_j(1-b^\star h_j)^2` with its Monte-Carlo standard error
    over that sample.

    Returns:
        ``dict(c, b, pred, m)``: the trained :math:`c = -vw` and :math:`b = 1/w` per replicate, the optimum
        ``(c, b, loss, loss_se)`` and :func:`trained_vs_prediction` of the replicates' errors against it.
    """
    v, w = train_looped_isotropic(d, n, k, steps=steps, lr=lr, lr_final=lr_final, seed=seed, replicates=replicates)
    errs = []
    with threads1(), torch.no_grad():
        for r in range(replicates):
            pr = sample_prompts(num // replicates, d, n, make_generator(replicate_seed(seed + 5, r)))
            W_KQ, W_PV = sparse_parameters(v[r] * np.eye(d), w[r] * np.eye(d), -1.0)
            errs.append(per_prompt_error(looped_predict(pr, W_KQ, W_PV, k), pr).numpy())
    c, b, _ = th.looped_two_param_optimum(k, eigs)
    loss, loss_se = mean_se(np.sum((1 - b * (1 - (1 - c * eigs) ** k)) ** 2, axis=1))
    return dict(c=-v * w, b=1 / w, pred=(c, b, loss, loss_se), m=trained_vs_prediction(np.stack(errs), loss, loss_se))


# ----------------------------------------------------------------------------- Theorem 3.2
def construction_errors(d: int, n: int, eta: float, K: int, num: int, seed: int) -> np.ndarray:
    """Per-prompt squared errors of CoT inference with the construction of {prf:ref}`cot-thm-3-2` after
    0..K steps on ``num`` fresh prompts, shape (num, K+1)."""
    with threads1(), torch.no_grad():
        prompts = sample_prompts(num, d, n, make_generator(seed))
        W_KQ, W_PV = construction(d, eta)
        w_hat = cot_inference(prompts, W_KQ, W_PV, K)
        return ((w_hat - prompts.w_star[:, None, :]) ** 2).sum(-1).numpy()


def decay_curves(d: int, ratios, eta: float, K: int, num: int, rng: np.random.Generator) -> dict:
    r"""Geometric decay of :math:`\E\tr(I-\eta S)^{2k}` for k = 0..K at :math:`n = \max(d, \mathrm{round}(r d))` for each
    ratio r, from ``num`` Monte-Carlo spectra each: ``{n: (mean over k, median over k)}``."""
    out = {}
    for r in ratios:
        nn = max(d, int(round(r * d)))
        e = th.sample_S_eigs(d, nn, num, rng)
        with np.errstate(over="ignore"):
            per = np.sum((1 - eta * e[:, None, :]) ** (2 * np.arange(K + 1)[None, :, None]), axis=-1)
        out[nn] = (per.mean(0), np.median(per, axis=0))
    return out


def mp_limit_fit(k: int, eta: float, d: int, n: int, levels: int, num: int, rng: np.random.Generator) -> dict:
    r"""Monte-Carlo :math:`\frac1d\E\tr(I-\eta S)^{2k}` at :math:`(2^j d, 2^j n)`, :math:`j < ` ``levels``, from
    ``num / 4^j`` draws (so
    :math:`\gamma = d/n` is exact at every level), and the weighted least-squares fit :math:`a + b/d` (the
    finite-d correction of a real Wishart linear statistic is :math:`O(1/d)`). The intercept :math:`a` estimates
    the Marchenko--Pastur limit of {prf:ref}`cot-thm-3-2`; its standard error propagates the Monte-Carlo errors.

    Returns:
        ``dict(ds, values, ses, a, a_se, b, chi2)``.
    """
    ds, vals, ses = [], [], []
    for j in range(levels):
        dj, nj = d * 2**j, n * 2**j
        # the variance of (1/d) tr f(S) falls like 1/d^2: num / 4^j draws keep the standard error level-independent
        m, se = th.gd_error_mc(k, eta, th.sample_S_eigs(dj, nj, max(200, num // 4**j), rng))
        ds.append(dj)
        vals.append(m / dj)
        ses.append(se / dj)
    ds, vals, ses = np.array(ds, float), np.array(vals), np.array(ses)
    X = np.stack([np.ones_like(ds), 1 / ds], axis=1)
    Wt = 1 / ses**2
    cov = np.linalg.inv(X.T @ (X * Wt[:, None]))
    a, b = cov @ (X.T @ (Wt * vals))
    chi2 = float(np.sum(Wt * (vals - a - b / ds) ** 2))
    return dict(ds=ds, values=vals, ses=ses, a=float(a), a_se=float(np.sqrt(cov[0, 0])), b=float(b), chi2=chi2)


# ----------------------------------------------------------------------------- Theorem 4.2 (OOD)
def parse_spectrum(text: str) -> tuple[float, float]:
    """'lo:hi' -> (lo, hi) (ValueError when malformed)."""
    lo, hi = (float(x) for x in str(text).split(":"))
    return lo, hi


def ood_row(res, Sigma: np.ndarray, eta: float, k_list: list, n: int, num_eval: int, num_mc: int,
            seed: int, rng: np.random.Generator) -> dict:
    r"""Everything {prf:ref}`cot-thm-4-2` says about one test covariance :math:`\Sigma`.

    * the trained model's per-prompt errors after each k in ``k_list`` on ``num_eval`` prompts
      :math:`x \sim N(0, \Sigma)` (medians with order-statistic standard errors); for R replicate models
      (``res`` trained with ``replicates=R``) each on its own ``num_eval // R`` prompts, and the mean of their
      medians (:func:`replicate_median`);
    * an *independent* sample of ``num_mc`` spectra of :math:`S_\Sigma`: the median of the k-step GD law
      :math:`\sum_j(1-\eta\lambda_j)^{2k}z_j^2`, of the stated bound :math:`d\max_j|1-\eta\lambda_j|^{2k}`, and the fraction
      of prompts beyond the stability boundary :math:`\eta\lambda_{\max}(S_\Sigma) > 2`;
    * the one-step formula at :math:`V = -\eta^\star I` against Monte Carlo on the same S sample;
    * the spectral sufficient condition :math:`\eta\lambda_{\max}(\Sigma)(1+\sqrt{d/n})^2 < 2` and its rate
      :math:`\rho_\Sigma = \max(|1-\eta\lambda_{\min}(\Sigma)(1-\sqrt{d/n})^2|, |1-\eta\lambda_{\max}(\Sigma)(1+\sqrt{d/n})^2|)`.
    """
    d = Sigma.shape[0]
    K = max(k_list)
    R = res.W_KQ.shape[0] if res.W_KQ.dim() == 3 else 1
    with threads1(), torch.no_grad():
        parts = [sample_prompts(num_eval // R, d, n, make_generator(replicate_seed(seed, r)), Sigma=Sigma) for r in range(R)]
        p = Prompts(torch.cat([q.X for q in parts]), torch.cat([q.w_star for q in parts]))
        w_m = cot_inference(p, res.W_KQ, res.W_PV, K)  # replicate-major: replicate r meets its own prompts
        with np.errstate(over="ignore", invalid="ignore"):
            em = np.nan_to_num(((w_m - p.w_star[:, None, :]) ** 2).sum(-1).numpy(), nan=np.inf).reshape(R, -1, K + 1)
    S = th.sample_S(d, n, num_mc, rng, Sigma)
    eigs = np.linalg.eigvalsh(S)
    eta1 = th.eta_star(d, n)
    one = np.sum((np.eye(d) - eta1 * S) ** 2, axis=(1, 2))
    lo, hi = np.linalg.eigvalsh(Sigma)[[0, -1]]
    eps = math.sqrt(d / n)
    out = dict(unstable=float(np.mean(eta * eigs[:, -1] > 2)), one_mc=mean_se(one),
               one_pred=th.one_step_ood_error(-eta1 * np.eye(d), Sigma, n),
               one_j26=th.one_step_ood_error(-eta1 * np.eye(d), Sigma, n, factor=2.0),
               cond=float(eta * hi * (1 + eps) ** 2),
               rho=float(max(abs(1 - eta * lo * (1 - eps) ** 2), abs(1 - eta * hi * (1 + eps) ** 2))), ks={})
    with np.errstate(over="ignore", invalid="ignore"):
        for k in k_list:
            law = th.gd_error_samples(k, eta, eigs, rng)
            bnd = d * np.max(np.abs(1 - eta * eigs), axis=1) ** (2 * k)
            out["ks"][k] = dict(model=replicate_median(em[:, :, k]), law=median_se(law), bound=median_se(bnd))
    return out


def phase_diagram(d: int, k: int, grid: int, rng: np.random.Generator, num: int = 400) -> dict:
    r"""The median k-step GD error :math:`\sum_j(1-\eta\lambda_j)^{2k}` (:math:`\Sigma = I`) and the fraction of prompts
    with :math:`\eta\lambda_{\max}(S) > 2` on a ``grid`` x ``grid`` mesh of steps :math:`\eta\in[0.05, 1.6]` and
    ratios :math:`n/d \in [1, 16]`, from ``num`` spectra per ratio; and the Marchenko-Pastur boundary
    :math:`\eta = 2/(1+\sqrt{d/n})^2`. Returns ``dict(etas, ratios, median, unstable, eta_mp)``."""
    etas, ratios = np.linspace(0.05, 1.6, grid), np.geomspace(1.0, 16.0, grid)
    med, frac = np.zeros((grid, grid)), np.zeros((grid, grid))
    for j, r in enumerate(ratios):
        e = th.sample_S_eigs(d, max(d, int(round(r * d))), num, rng)
        with np.errstate(over="ignore"):
            med[:, j] = np.median(np.sum((1 - etas[:, None, None] * e[None]) ** (2 * k), axis=-1), axis=1)
        frac[:, j] = np.mean(etas[:, None] * e[None, :, -1] > 2, axis=1)
    return dict(etas=etas, ratios=ratios, median=med, unstable=frac,
                eta_mp=2 / (1 + np.sqrt(d / np.maximum(d, np.round(ratios * d)))) ** 2)


# ----------------------------------------------------------------------------- Theorem 4.1 (two stages, rates)
def _first_crossing(t, x, level):
    """First time x(t) reaches ``level`` (linear interpolation between grid points); nan if never."""
    i = int(np.argmax(x >= level))
    if x[i] < level:
        return float("nan")
    if i == 0:
        return float(t[0])
    return float(t[i - 1] + (level - x[i - 1]) * (t[i] - t[i - 1]) / (x[i] - x[i - 1]))


def separation_parameter(eta: float, k: int, sigma: float, lam=1.0, num: int = 60) -> float:
    r"""Singular-perturbation parameter of stage 1: :math:`\varepsilon = \max_{w\in[\sigma, 1/2]}\gamma(w)/\kappa(w)`,
    the largest ratio of the slow relative growth rate of w on the slow manifold,
    :math:`\gamma(w) = \dot w / w` with :math:`v = v_{\rm eq}(w)`, to the fast relaxation rate :math:`\kappa(w)` of v.
    Two well-separated stages need :math:`\varepsilon < 1`."""
    ws = np.geomspace(sigma, 0.5, num)
    return float(max(-th.reduced_grad(th.stage1_v(w, eta, k, lam), w, eta, k, lam)[1] / w / th.v_curvature(w, eta, k, lam)
                     for w in ws))


def stage_analysis(eta: float, k: int, sigma: float, lam=1.0, tol: float = 1e-6, stages: bool = True) -> dict:
    r"""The two stages of the reduced flow ({prf:ref}`cot-thm-4-1`) measured on the ODE and predicted.

    * stage 1: the relaxation time of v, :math:`t_1 = \ln(10^3)/\kappa(\sigma)` (v within 0.1 % of
      :math:`v_{\rm eq}`); the ODE's :math:`w(t_1)`; the time :math:`t_{1/2}` at which w reaches 1/2, measured and
      predicted by the slow-manifold reduction started from the ODE's state at :math:`t_1`;
    * stage 2: the late decay rate fitted on distances in :math:`[10^{-8}, 10^{-5}]` and the predicted rate
      :math:`\mu` (:func:`companion.cot.theory.fixed_point_rate`); the distance at the rate-derived horizon.
    """
    r = th.reduced_flow_converged(eta, k, sigma, tol, lam=lam, num_t=4001 if stages else 601)
    t, v, w = r["t"], r["v"], r["w"]
    final = float(max(abs(v[-1] + eta), abs(w[-1] - 1)))
    if not stages:
        return dict(r, final=final)
    kap = th.v_curvature(sigma, eta, k, lam)
    t1 = float(np.log(1e3) / kap)
    w1 = float(np.interp(t1, t, w))
    eps = separation_parameter(eta, k, sigma, lam)
    t_half = _first_crossing(t, w, 0.5)
    t_pred = t1 + th.slow_manifold_time(eta, k, w1, lam=lam) if w1 < 0.5 else float("nan")
    dist = np.hypot(v + eta, w - 1)
    sel = (dist > 1e-8) & (dist < 1e-5)
    rate = float(-np.polyfit(t[sel], np.log(dist[sel]), 1)[0]) if sel.sum() >= 5 else float("nan")
    return dict(r, kappa=kap, t1=t1, w1=w1, eps=eps, t_half=t_half, t_pred=t_pred, rate=rate,
                final=final, veq=np.array([th.stage1_v(x, eta, k, lam) for x in w]))


def matrix_flow(d: int, n: int, num_S: int, eta: float, k: int, sigma: float, rng: np.random.Generator,
                tol: float = 1e-6, enter: float = 1e-3, margin: float = 100.0, num_t: int = 121) -> dict:
    r"""The restricted matrix flow of {prf:ref}`cot-thm-4-1` from the Assumption 4.1 initialisation, on a fixed
    S sample symmetrised by Hadamard sign flips in the initial eigenbasis U, integrated to a horizon that follows
    from its own rate: :math:`\mu` is the smallest eigenvalue of the Hessian of the sample loss at
    :math:`(-\eta I, I)` in the U-diagonal coordinates (central differences of the exact gradient); the flow runs
    until its distance to :math:`(-\eta I, I)` is below ``enter``, then :math:`\log(\mathrm{enter}\cdot
    \mathrm{margin}/\mathrm{tol})/\mu` longer.

    Returns:
        ``dict(t, Vu, Wu, L, mu, T, off, final)`` (Vu, Wu in the basis U; ``off`` the largest off-diagonal entry).
    """
    from scipy import integrate

    V0, W0 = th.assumption41_init(d, sigma, rng)
    U = np.linalg.eigh(V0)[1]
    S = th.symmetrised_S_sample(th.sample_S(d, n, num_S, rng), U)
    A = th._A(S, eta, k)

    def diag_grad(p):
        V, W = (U * p[:d]) @ U.T, (U * p[d:]) @ U.T
        _, gV, gW = th.restricted_loss_grad(V, W, S, A, eta)
        return np.concatenate([np.diag(U.T @ gV @ U), np.diag(U.T @ gW @ U)])

    p0 = np.concatenate([-eta * np.ones(d), np.ones(d)])
    h = 1e-6
    H = np.array([(diag_grad(p0 + h * e) - diag_grad(p0 - h * e)) / (2 * h) for e in np.eye(2 * d)])
    mu = float(np.linalg.eigvalsh((H + H.T) / 2)[0])
    I = np.eye(d)

    def rhs(_t, y):
        V, W = y[: d * d].reshape(d, d), y[d * d:].reshape(d, d)
        _, gV, gW = th.restricted_loss_grad(V, W, S, A, eta)
        return -np.concatenate([gV.ravel(), gW.ravel()])

    def near(_t, y):
        return max(np.abs(y[: d * d].reshape(d, d) + eta * I).max(), np.abs(y[d * d:].reshape(d, d) - I).max()) - enter

    near.terminal, near.direction = True, -1
    y0 = np.concatenate([V0.ravel(), W0.ravel()])
    sol = integrate.solve_ivp(rhs, (0.0, 1e4 / mu), y0, method="LSODA", events=near, rtol=1e-8, atol=1e-11)
    if not sol.t_events[0].size:
        raise ValueError("the matrix flow did not reach the construction")
    T = float(sol.t_events[0][0] + np.log(enter * margin / tol) / mu)
    t = np.linspace(0.0, T, num_t)
    sol = integrate.solve_ivp(rhs, (0.0, T), y0, method="LSODA", t_eval=t, rtol=1e-10, atol=1e-13)
    Vt = sol.y[: d * d].T.reshape(-1, d, d)
    Wt = sol.y[d * d:].T.reshape(-1, d, d)
    Vu = np.einsum("ji,tjk,kl->til", U, Vt, U)
    Wu = np.einsum("ji,tjk,kl->til", U, Wt, U)
    off = max(float(np.abs(M - np.einsum("tii->ti", M)[:, :, None] * I).max()) for M in (Vu, Wu))
    L = np.array([th.restricted_loss_grad(V, W, S, A, eta)[0] for V, W in zip(Vt, Wt)])
    final = float(max(np.abs(Vt[-1] + eta * I).max(), np.abs(Wt[-1] - I).max()))
    return dict(t=t, Vu=Vu, Wu=Wu, L=L, mu=mu, T=T, off=off, final=final)


def regime_errors(d_list, c_n: float, c_k: float, num: int, rng: np.random.Generator) -> list[dict]:
    r"""The regime of {prf:ref}`cot-thm-4-1`, :math:`n = \lceil c_n d\ln d\rceil`, :math:`k = \lceil c_k\ln d\rceil`, with the
    step :math:`\eta = 2/(\lambda_+ + \lambda_-)` that balances the Marchenko--Pastur edges (:math:`\gamma = d/n`):
    per d, the Monte-Carlo per-coordinate k-step GD error :math:`\frac1d\E\tr(I-\eta S)^{2k}` with its standard error,
    and the edge bound :math:`\rho_{\rm MP}^{2k}`."""
    out = []
    for d in d_list:
        n = int(math.ceil(c_n * d * math.log(d)))
        k = int(math.ceil(c_k * math.log(d)))
        lo, hi = th.mp_edges(d / n)
        eta = 2 / (lo + hi)
        m, se = th.gd_error_mc(k, eta, th.sample_S_eigs(d, n, num, rng))
        out.append(dict(d=d, n=n, k=k, eta=eta, err=m / d, se=se / d, bound=th.mp_rate(eta, d / n) ** (2 * k)))
    return out
