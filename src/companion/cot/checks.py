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

from companion.stats import combine, mean_se, median_se  # noqa: F401  (median_se re-exported for the notebooks)

from . import theory as th
from .data import cot_tokens, embed, gd_trajectory, make_generator, sample_prompts
from .model import (
    construction,
    cot_inference,
    looped_predict,
    no_cot_effective_matrix,
    no_cot_predict,
    per_prompt_error,
    teacher_forced_loss,
    teacher_forced_loss_direct,
)

__all__ = [
    "EPS", "roundoff_bound", "setup_identities", "eta_argmin_mc", "floor_mc", "model_errors",
    "trained_vs_prediction", "threads1", "no_cot_eta_eff", "median_pair",
]

EPS = float(np.finfo(np.float64).eps)


class threads1:
    """Context manager: torch on one thread (tiny matrices; fair on a shared machine)."""

    def __enter__(self):
        self.n = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc):
        torch.set_num_threads(self.n)


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


def trained_vs_prediction(errors: np.ndarray, pred_mean: float, pred_se: float = 0.0) -> dict:
    """Mean of a trained model's per-prompt errors, its standard error over the prompts, and the combined
    standard error against an (independent) prediction with its own Monte-Carlo error."""
    m, se = mean_se(errors)
    return dict(mean=m, se_prompts=se, se=combine(se, pred_se), pred=pred_mean, pred_se=pred_se)


def no_cot_eta_eff(W_KQ, W_PV, d: int) -> float:
    """Effective one-step coefficient tr(A)/d of a no-CoT model (A = W24 V31 + V32 W14^T)."""
    return float(np.trace(no_cot_effective_matrix(W_KQ, W_PV, d)) / d)


def median_pair(a, b) -> tuple[float, float, float]:
    """Medians of two independent samples and the combined order-statistic standard error."""
    ma, sa = median_se(a)
    mb, sb = median_se(b)
    return ma, mb, combine(sa, sb)


# ----------------------------------------------------------------------------- Theorem 3.2
def construction_errors(d: int, n: int, eta: float, K: int, num: int, seed: int) -> np.ndarray:
    """Per-prompt squared errors of CoT inference with the construction of {prf:ref}`cot-thm-3-2` after
    0..K steps on ``num`` fresh prompts, shape (num, K+1)."""
    with threads1(), torch.no_grad():
        prompts = sample_prompts(num, d, n, make_generator(seed))
        W_KQ, W_PV = construction(d, eta)
        w_hat = cot_inference(prompts, W_KQ, W_PV, K)
        return ((w_hat - prompts.w_star[:, None, :]) ** 2).sum(-1).numpy()


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
      :math:`x \sim N(0, \Sigma)` (medians with order-statistic standard errors);
    * an *independent* sample of ``num_mc`` spectra of :math:`S_\Sigma`: the median of the k-step GD law
      :math:`\sum_j(1-\eta\lambda_j)^{2k}z_j^2`, of the stated bound :math:`d\max_j|1-\eta\lambda_j|^{2k}`, and the fraction
      of prompts beyond the stability boundary :math:`\eta\lambda_{\max}(S_\Sigma) > 2`;
    * the one-step formula at :math:`V = -\eta^\star I` against Monte Carlo on the same S sample;
    * the spectral sufficient condition :math:`\eta\lambda_{\max}(\Sigma)(1+\sqrt{d/n})^2 < 2` and its rate
      :math:`\rho_\Sigma = \max(|1-\eta\lambda_{\min}(\Sigma)(1-\sqrt{d/n})^2|, |1-\eta\lambda_{\max}(\Sigma)(1+\sqrt{d/n})^2|)`.
    """
    d = Sigma.shape[0]
    K = max(k_list)
    with threads1(), torch.no_grad():
        p = sample_prompts(num_eval, d, n, make_generator(seed), Sigma=Sigma)
        w_m = cot_inference(p, res.W_KQ, res.W_PV, K)
        with np.errstate(over="ignore", invalid="ignore"):
            em = np.nan_to_num(((w_m - p.w_star[:, None, :]) ** 2).sum(-1).numpy(), nan=np.inf)
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
            out["ks"][k] = dict(model=median_se(em[:, k]), law=median_se(law), bound=median_se(bnd))
    return out


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
