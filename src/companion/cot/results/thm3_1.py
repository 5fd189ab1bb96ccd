r"""Theorem 3.1 (:prf:ref:`cot-thm-3-1`, notebook ``cot/thm3_1_no_cot``): without CoT, the best one-layer LSA is one
GD step with :math:`\eta^\star = n/(n+d+1)`.

The headline claim: the effective step :math:`\eta_{\rm eff} = \tr(A)/d` (:func:`no_cot_eta_eff`) of R
independently seeded full no-CoT LSAs trained from random weights in one batch (:func:`trained_eta_eff`), their
mean with the standard error from the spread of the seeds, against :math:`\eta^\star`. Its falsifier is the
proportional-limit (Marchenko–Pastur) step :math:`n/(n+d)` (:func:`eta_proportional`), a relative distance
:math:`1/(n+d)` from :math:`\eta^\star`. A numerics check: the Monte-Carlo argmin of
:math:`L_1(\eta) = \E\tr(I-\eta S)^2` (:func:`eta_argmin_mc`). The training horizon follows from Adam's path
length (:func:`adam_horizon`); what the run still moves over its last quarter is measured and enters the
tolerance as the optimisation error.
"""

from __future__ import annotations

import math

import numpy as np

from companion.claims import ClaimSpec, ResultSpec
from companion.params import integer, real
from companion.plotting import legend_outside, new_figure
from companion.stats import ROUNDOFF, Z_LEVEL, band_words, critical, replicate_se

from ...text import tex_number
from ..model import no_cot_effective_matrix
from ..stats import MAX_DOUBLINGS, RULE_PROMPTS
from ..theory import gd, no_cot
from ..train import cached_train_full

__all__ = ["CLAIMS", "RESULT", "PROPORTIONAL_STEP", "CONVERGED", "MAX_DOUBLINGS", "RULE_PROMPTS", "eta_proportional", "adam_horizon",
           "last_quarter_drift", "train_until_converged", "eta_argmin_mc", "trained_eta_eff", "no_cot_eta_eff",
           "record_trained", "record_argmin", "figure", "manifest"]

PROPORTIONAL_STEP = "the proportional-limit (Marchenko–Pastur) step $n/(n+d)$"
#: the stopping rule: a replicate has converged when its evaluation loss fell over the last quarter of the
#: horizon by at most this fraction of the floor (:func:`train_until_converged`)
CONVERGED = 0.01

CLAIMS = (
    ClaimSpec("cot31_eta_eff", "statistical", "trained", headline=True, prediction="companion.cot.theory.no_cot.eta_star",
              falsifier=PROPORTIONAL_STEP),
    ClaimSpec("cot31_eta_mc", "statistical", "monte_carlo", prediction="companion.cot.theory.no_cot.eta_star",
              falsifier=PROPORTIONAL_STEP),
)

RESULT = ResultSpec(paper="cot", number="Theorem 3.1", title="without CoT, the best one-layer LSA is one GD step",
                    label="cot-thm-3-1", notebook="cot/thm3_1_no_cot", module=__name__, claims=CLAIMS,
                    figures=("fig_cot_thm31",), sweep="")


def manifest() -> list[str]:
    """The claim ids the notebook records (none depends on the parameters)."""
    return [c.id for c in CLAIMS]


def eta_proportional(d: int, n: int) -> float:
    r"""The sceptic's step (:prf:ref:`cot-thm-3-1`): the minimiser of :math:`d(1 - 2\eta + \eta^2(1 + d/n))`, the
    one-step error with the proportional-limit (Marchenko–Pastur) moment :math:`\E\tr S^2/d \to 1 + d/n` in
    place of the exact :math:`(n+d+1)/n`:

    .. math:: \eta_{\rm MP} = \frac{n}{n+d},\qquad \frac{\eta_{\rm MP} - \eta^\star}{\eta^\star} = \frac{1}{n+d}.
    """
    d, n = integer("d", d, min=1), integer("n", n, min=1)
    return n / (n + d)


def adam_horizon(lr: float, lr_final: float, path: float) -> int:
    r"""The smallest number of Adam steps T whose learning rates :math:`\alpha_s = \alpha\gamma^s`,
    :math:`\gamma = \rho^{1/T}` (:math:`\rho` = ``lr_final``, the decay of :func:`companion.cot.train.train_full`),
    add up to ``path``:

    .. math:: \sum_{s=0}^{T-1}\alpha\gamma^s = \frac{\alpha(1-\rho)}{1-\rho^{1/T}} \ge P
        \iff T \ge \frac{\ln(1/\rho)}{-\ln\bigl(1 - \alpha(1-\rho)/P\bigr)}\quad(\rho < 1),\qquad
        T = \lceil P/\alpha\rceil\quad(\rho = 1).

    Adam moves every weight by at most about :math:`\alpha_s` per step (:math:`|\hat m_s|/\sqrt{\hat v_s} \le 1`
    up to the bias corrections), so :math:`\sum_s\alpha_s` bounds how far a weight can travel: a horizon with a
    smaller sum cannot reach a minimiser that far away.
    """
    lr = real("lr", lr, min=0, min_open=True)
    lr_final = real("lr_final", lr_final, min=0, max=1, min_open=True)
    path = real("path", path, min=0, min_open=True)
    if lr_final == 1.0:
        return max(1, math.ceil(path / lr - 1e-12))
    step = lr * (1 - lr_final) / path
    if step >= 1:
        return 1
    return max(1, math.ceil(math.log(1 / lr_final) / -math.log1p(-step) - 1e-9))


def last_quarter_drift(steps: np.ndarray, values: np.ndarray) -> np.ndarray:
    r"""What a training run still moved over its last quarter: ``values[-1] - values[i]`` with ``i`` the recorded
    step nearest to :math:`3T/4` (``values`` of shape (len(steps), ...), e.g. one column per replicate; the result
    has the shape of ``values[0]``). With the learning rate still decaying, a monotone approach moves less after
    T than over the last quarter, so its absolute value estimates the optimisation error left (the stopping rule
    of :prf:ref:`cot-thm-3-1` and :prf:ref:`cot-cor-3-1`)."""
    steps = np.asarray(steps)
    v = np.asarray(values, dtype=float)
    i = int(np.argmin(np.abs(steps - 0.75 * steps[-1])))
    return v[-1] - v[i]


def train_until_converged(d: int, n: int, *, lr: float, lr_final: float, path: float, replicates: int, seed: int,
                          batch: int = 64, also=None):
    r"""The stopping rule of :prf:ref:`cot-thm-3-1` and :prf:ref:`cot-cor-3-1`: train ``replicates`` full no-CoT
    LSAs in one batch (through the run cache) for :func:`adam_horizon` (lr, lr_final, path) steps; a replicate has
    converged when its evaluation loss (on the run's fixed evaluation prompts) fell over the last quarter by at
    most :data:`CONVERGED` times the floor. While one has not, train again from the same seeds with twice the
    path, at most :data:`~companion.cot.stats.MAX_DOUBLINGS` times. (A seed that sits on a saddle of the bilinear parametrisation,
    a rank-one A, still loses loss steadily; one at the minimum only jitters.) ``also``: a further test of a
    claim's own, ``also(res) -> bool``, that the run must meet too (Cor 3.1's on the even part of the predictor,
    :func:`companion.cot.results.cor3_1.even_part_met`).

    Returns
    -------
    tuple
        ``(res, steps, path, converged)``: the last :class:`companion.cot.train.TrainResult`, its horizon, its path
        and whether every replicate met the rule.
    """
    for j in range(MAX_DOUBLINGS + 1):
        p = path * 2**j
        steps = adam_horizon(lr, lr_final, p)
        res = cached_train_full("no_cot", d, n, 1, steps=steps, lr=lr, lr_final=lr_final, batch=batch, seed=seed,
                                eval_every=max(1, steps // 20), eval_batch=RULE_PROMPTS, replicates=replicates)
        fall = -last_quarter_drift(res.steps, res.eval_loss)
        converged = bool(np.all(fall <= CONVERGED * no_cot.no_cot_floor(d, n))) and (also is None or bool(also(res)))
        if converged:
            break
    return res, steps, p, converged


def eta_argmin_mc(S: np.ndarray) -> tuple[float, float]:
    r"""Monte-Carlo argmin of :math:`L_1(\eta) = \E\tr(I-\eta S)^2` (:prf:ref:`cot-thm-3-1`),

    .. math:: \hat\eta = \overline{\tr S}\,/\,\overline{\tr S^2},

    with its delta-method standard error over the S sample (:func:`companion.cot.theory.gd.argmin_se`, from the
    per-prompt derivatives :math:`-2(\tr S - \hat\eta\tr S^2)` and :math:`2\tr S^2`).

    Parameters
    ----------
    S : numpy.ndarray
        The sample of S, shape (N, d, d).

    Returns
    -------
    tuple
        ``(eta_hat, se)``.
    """
    a = np.trace(S, axis1=1, axis2=2)
    b = np.einsum("bij,bji->b", S, S)
    eta = float(a.mean() / b.mean())
    return eta, float(gd.argmin_se(-2 * (a - eta * b), 2 * b))


def no_cot_eta_eff(W_KQ, W_PV, d: int) -> float:
    r"""Effective one-step coefficient of a no-CoT model:

    .. math:: \eta_{\rm eff} = \tr(A)/d,\qquad A = W_{24}V_{31} + V_{32}W_{14}^\top .
    """
    return float(np.trace(no_cot_effective_matrix(W_KQ, W_PV, d)) / d)


def trained_eta_eff(d: int, n: int, *, lr: float, lr_final: float, path: float, replicates: int, seed: int,
                    batch: int = 64) -> dict:
    r"""``replicates`` full no-CoT LSAs trained from random weights in one batch under the stopping rule
    (:func:`train_until_converged`), and their effective steps :math:`\eta_{\rm eff}` (:prf:ref:`cot-thm-3-1`).

    Returns
    -------
    dict
        ``etas`` (one per replicate), ``mean`` and ``se`` over the replicates (:func:`companion.stats.replicate_se`,
        ``dof`` = R - 1), ``traj`` (the replicates' :math:`\eta_{\rm eff}` at the recorded steps, shape
        (len(steps), R)), ``drift`` (:func:`last_quarter_drift` of their mean), ``steps``, ``path`` and
        ``converged`` (of the stopping rule) and ``res`` (the :class:`companion.cot.train.TrainResult`).
    """
    res, steps, p, converged = train_until_converged(d, n, lr=lr, lr_final=lr_final, path=path, replicates=replicates,
                                                     seed=seed, batch=batch)
    R = res.replicates
    traj = np.array([[no_cot_eta_eff(kq[r] if R > 1 else kq, pv[r] if R > 1 else pv, d) for r in range(R)]
                     for kq, pv in res.snapshots])
    etas = traj[-1]
    mean, se = replicate_se(etas) if R > 1 else (float(etas[0]), math.inf)
    return dict(etas=etas, mean=float(mean), se=float(se), dof=R - 1, traj=traj,
                drift=float(last_quarter_drift(res.steps, traj.mean(axis=1))), steps=steps, path=p,
                converged=converged, res=res)





def record_trained(v, model: dict, eta_s: float, eta_mp: float, d: int, n: int) -> None:
    r"""Record the headline claim ``cot31_eta_eff`` on the verdict ``v``: the mean effective step
    :math:`\eta_{\rm eff} = \tr(A)/d` of the trained full no-CoT LSAs (``model``: :func:`trained_eta_eff`) against
    :math:`\eta^\star = n/(n+d+1)` at ``Z_LEVEL`` SE (Student-t on the seed spread) plus the last-quarter drift and
    round-off; the falsifier is the proportional-limit step :math:`n/(n+d)` (``eta_mp``)."""
    R, dof = len(model["etas"]), model["dof"]
    drift = abs(model["drift"])
    rule = (f"met after {model['steps']} Adam steps (path {model['path']:g})" if model["converged"] else
            f"not met after {MAX_DOUBLINGS} doublings of the path; the last run had {model['steps']} Adam steps "
            f"(path {model['path']:g})")
    v.statistical("cot31_eta_eff",
                  quantity=rf"{R} trained full no-CoT LSAs: mean effective step $\tr(A)/d$ against $\eta^\star$",
                  predicted=eta_s, measured=model["mean"], se=model["se"], dof=dof,
                  floor=ROUNDOFF + drift, falsifier=PROPORTIONAL_STEP, falsifier_value=eta_mp,
                  reason=rf"mean $\eta_{{\rm eff}}$ of {R} training seeds against $\eta^\star = n/(n+d+1)$; band: "
                         f"{Z_LEVEL:.3g} SE of the seed spread (Student-t), plus what the mean still moved over the last "
                         "quarter of training",
                  detail=rf"Standard error {tex_number(model['se'])} of the mean of the {R} seeds' "
                         rf"$\eta_{{\rm eff}} = \tr(A)/d$, $A = W_{{24}}V_{{31}} + V_{{32}}W_{{14}}^\T$ "
                         f"(`replicate_se`, {band_words(dof)}: critical value "
                         rf"${tex_number(critical(Z_LEVEL, dof))}$ for the level of {Z_LEVEL:.3g} normal SE). Floor: the last-quarter drift "
                         rf"of the seeds' mean $\eta_{{\rm eff}}$, ${tex_number(drift)}$ (the optimisation error left), "
                         rf"plus round-off ${tex_number(ROUNDOFF)}$. Training: full no-CoT LSAs from random weights in "
                         f"one batch (Adam, fresh prompts, float64); the stopping rule (each seed's evaluation "
                         f"loss falls over the last quarter by at most {100 * CONVERGED:g} % of the no-CoT floor "
                         rf"$d(d+1)/(n+d+1)$) was "
                         f"{rule}. Falsifier $n/(n+d) = {eta_mp:.6g}$ at $d = {d}$, $n = {n}$, a relative "
                         rf"distance $1/(n+d)$ from $\eta^\star = {eta_s:.6g}$.",
                  headline=True)


def record_argmin(v, eta_mc: float, eta_mc_se: float, eta_s: float, eta_mp: float, num_mc: int) -> None:
    r"""Record ``cot31_eta_mc`` on the verdict ``v``: the Monte-Carlo argmin
    :math:`\hat\eta = \overline{\tr S}/\overline{\tr S^2}` of :math:`L_1(\eta) = \E\tr(I-\eta S)^2`
    (:func:`eta_argmin_mc` on ``num_mc`` sampled S) against :math:`\eta^\star`, at ``Z_LEVEL`` delta-method SE plus
    round-off; the falsifier is :math:`n/(n+d)` (``eta_mp``)."""
    v.statistical("cot31_eta_mc", quantity=r"Monte-Carlo argmin of $\E\tr(I - \eta S)^2$", predicted=eta_s,
                  measured=eta_mc, se=eta_mc_se, floor=ROUNDOFF, falsifier=PROPORTIONAL_STEP,
                  falsifier_value=eta_mp,
                  reason=rf"the argmin $\overline{{\tr S}}/\overline{{\tr S^2}}$ over {num_mc} sampled $S$ against "
                         rf"$\eta^\star$; band: {Z_LEVEL:.3g} SE of the ratio (linearised) over the $S$ sample, plus round-off",
                  detail=rf"{num_mc} independent $S = XX^\T/n$ (Bartlett decomposition, `sample_S`). Standard "
                         rf"error {tex_number(eta_mc_se)} of the ratio of the two sample means, linearised to first order "
                         f"in the means (`argmin_se`), normal critical value {Z_LEVEL:.3g} (many degrees of "
                         "freedom); floor round-off "
                         rf"${tex_number(ROUNDOFF)}$. Falsifier $n/(n+d) = {eta_mp:.6g}$ against "
                         rf"$\eta^\star = {eta_s:.6g}$.")


def figure(S, model: dict, eta_star: float, eta_mp: float, d: int, n: int):
    """``fig_cot_thm31``: (a) the one-step error against the step: exact, Monte Carlo on ``S`` and the trained
    LSAs (their mean effective step and final evaluation error); (b) the replicates' effective steps during
    training (``model`` from :func:`trained_eta_eff`)."""
    etas, etas_mc = np.linspace(0.0, 1.2, 121), np.linspace(0.1, 1.1, 11)
    L1_mc = np.mean(gd.gd_trace(etas_mc, np.linalg.eigvalsh(S[:5000]), 1), axis=-1)
    res = model["res"]
    fig, (ax0, ax1) = new_figure(ncols=2, width=3.5, height=3.0)
    ax0.plot(etas, [gd.gd_error_wishart(1, e, d, n) for e in etas], label=r"exact $d(1-2\eta+\eta^2\frac{n+d+1}{n})$")
    ax0.plot(etas_mc, L1_mc, "o", ms=4, mfc="none", label="Monte Carlo")
    ax0.axvline(eta_star, color="k", lw=0.8, ls="--")
    ax0.plot([model["mean"]], [float(np.mean(res.eval_loss[-1]))], "*", ms=11, color="C1", label="trained LSAs (mean)")
    ax0.set_xlabel(r"step $\eta$")
    ax0.set_ylabel(r"$E\,\|\hat w - w^\star\|^2$")
    ax0.set_title("(a) one GD step: error vs step")
    ax1.plot(res.steps, model["traj"], "-", color="C0", lw=0.7, alpha=0.6)
    ax1.plot([], [], "-", color="C0", label=r"trained $\eta_{\rm eff} = \mathrm{tr}A/d$ (each seed)")
    ax1.axhline(eta_star, color="k", ls="--", lw=0.8, label=r"$\eta^\star = n/(n+d+1)$")
    ax1.axhline(eta_mp, color="C3", ls=":", lw=1.0, label=r"falsifier $n/(n+d)$")
    ax1.set_xlabel("Adam step")
    ax1.set_ylabel("effective coefficient")
    lo = min(0.0, float(model["traj"].min()))
    ax1.set_ylim(lo - 0.05, max(1.0, float(model["traj"].max())) + 0.05)
    ax1.set_title("(b) training the full LSA")
    inset = ax1.inset_axes([0.45, 0.12, 0.5, 0.4])
    tail = res.steps >= 0.5 * res.steps[-1]
    inset.plot(res.steps[tail], model["traj"][tail], "-", color="C0", lw=0.7, alpha=0.6)
    inset.axhline(eta_star, color="k", ls="--", lw=0.8)
    inset.axhline(eta_mp, color="C3", ls=":", lw=1.0)
    inset.tick_params(labelsize=6)
    legend_outside(ax0, "below", ncol=1)
    legend_outside(ax1, "below", ncol=1)
    return fig
