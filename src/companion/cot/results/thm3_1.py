r"""Theorem 3.1 ({prf:ref}`cot-thm-3-1`, notebook ``cot/thm3_1_no_cot``): without CoT, the best one-layer LSA is one
GD step with :math:`\eta^\star = n/(n+d+1)`.

Two claims: the Monte-Carlo argmin of :math:`L_1(\eta) = \E\tr(I-\eta S)^2` against :math:`\eta^\star`
(:func:`eta_argmin_mc`), and a full no-CoT LSA trained from random weights against the floor
:math:`d - d\eta^\star` (:func:`trained_no_cot`, shared with {prf:ref}`cot-cor-3-1`). Both reject the full step
:math:`\eta = 1`.
"""

from __future__ import annotations

import numpy as np

from companion.claims import ClaimSpec, ResultSpec
from companion.plotting import legend_outside, new_figure
from companion.seeds import COT_EVAL

from .. import theory as th
from ..data import make_generator, sample_prompts
from ..model import no_cot_effective_matrix
from ..stats import model_errors, trained_vs_prediction
from ..train import cached_train_full

__all__ = ["CLAIMS", "RESULT", "eta_argmin_mc", "trained_no_cot", "no_cot_eta_eff", "figure", "manifest"]

FULL_STEP = "one full GD step (eta = 1): d(d+1)/n"

CLAIMS = (
    ClaimSpec("cot31_eta_mc", "statistical", "monte_carlo", headline=True, prediction="companion.cot.theory.eta_star",
              falsifier="the full GD step eta = 1"),
    ClaimSpec("cot31_trained_loss", "statistical", "trained", prediction="companion.cot.theory.no_cot_floor",
              falsifier=FULL_STEP),
)

RESULT = ResultSpec(paper="cot", number="Theorem 3.1", title="without CoT, the best one-layer LSA is one GD step",
                    label="cot-thm-3-1", notebook="cot/thm3_1_no_cot", module=__name__, claims=CLAIMS,
                    figures=("fig_cot_thm31",), sweep="")


def manifest() -> list[str]:
    """The claim ids the notebook records (none depends on the parameters)."""
    return [c.id for c in CLAIMS]


def eta_argmin_mc(S: np.ndarray) -> tuple[float, float]:
    r"""Monte-Carlo argmin of :math:`L_1(\eta) = \E\tr(I-\eta S)^2` ({prf:ref}`cot-thm-3-1`), with its delta-method
    standard error over the S sample:

    .. math:: \hat\eta = \overline{\tr S}\,/\,\overline{\tr S^2}.

    Returns
    -------
    tuple
        ``(eta_hat, se)``.
    """
    a = np.trace(S, axis1=1, axis2=2)
    b = np.einsum("bij,bji->b", S, S)
    grad = np.array([1 / b.mean(), -a.mean() / b.mean() ** 2])
    return float(a.mean() / b.mean()), float(np.sqrt(grad @ np.cov(a, b) @ grad / len(a)))


def trained_no_cot(d: int, n: int, *, steps: int, lr: float, lr_final: float, eval_batch: int, seed: int,
                   batch: int = 64) -> dict:
    """A full no-CoT LSA trained from random initialisation (through the run cache) and its per-prompt errors on
    ``eval_batch`` fresh prompts against the floor of {prf:ref}`cot-cor-3-1`: :func:`companion.cot.stats.trained_vs_prediction`
    with the training result under ``"res"``."""
    res = cached_train_full("no_cot", d, n, 1, steps=steps, lr=lr, lr_final=lr_final, batch=batch, seed=seed,
                            eval_every=max(1, steps // 30), eval_batch=2000)
    err = model_errors("no_cot", res, sample_prompts(eval_batch, d, n, make_generator(COT_EVAL(seed))), 1)
    return dict(trained_vs_prediction(err, th.no_cot_floor(d, n)), res=res)


def no_cot_eta_eff(W_KQ, W_PV, d: int) -> float:
    r"""Effective one-step coefficient of a no-CoT model:

    .. math:: \eta_{\rm eff} = \tr(A)/d,\qquad A = W_{24}V_{31} + V_{32}W_{14}^\top .
    """
    return float(np.trace(no_cot_effective_matrix(W_KQ, W_PV, d)) / d)


def figure(S, res, eta_star: float, eta_eff: float, error: float, d: int, n: int):
    """``fig_cot_thm31``: (a) the one-step error against the step: exact, Monte Carlo on ``S`` and the trained
    LSA; (b) the trained no-CoT model's effective coefficient during training (``res``: a
    :class:`companion.cot.train.TrainResult`)."""
    etas, etas_mc = np.linspace(0.0, 1.2, 121), np.linspace(0.1, 1.1, 11)
    L1_mc = [np.mean(np.sum((np.eye(d) - e * S[:5000]) ** 2, axis=(1, 2))) for e in etas_mc]
    eta_traj = [no_cot_eta_eff(kq, pv, d) for kq, pv in res.snapshots]
    fig, (ax0, ax1) = new_figure(ncols=2, width=3.5, height=3.0)
    ax0.plot(etas, [th.gd_error_exact(1, e, d, n) for e in etas], label=r"exact $d(1-2\eta+\eta^2\frac{n+d+1}{n})$")
    ax0.plot(etas_mc, L1_mc, "o", ms=4, mfc="none", label="Monte Carlo")
    ax0.axvline(eta_star, color="k", lw=0.8, ls="--")
    ax0.plot([eta_eff], [error], "*", ms=11, color="C1", label="trained LSA")
    ax0.set_xlabel(r"step $\eta$")
    ax0.set_ylabel(r"$E\,\|\hat w - w^\star\|^2$")
    ax0.set_title("(a) one GD step: error vs step")
    ax1.plot(res.steps, eta_traj, "-", label=r"trained $\eta_{\rm eff} = \mathrm{tr}A/d$")
    ax1.axhline(eta_star, color="k", ls="--", lw=0.8, label=r"$\eta^\star = n/(n+d+1)$")
    ax1.set_xlabel("Adam step")
    ax1.set_ylabel("effective coefficient")
    ax1.set_ylim(min(0, min(eta_traj)) - 0.05, max(1.0, max(eta_traj) + 0.05))
    ax1.set_title("(b) training the full LSA")
    legend_outside(ax0, "below", ncol=1)
    legend_outside(ax1, "below", ncol=1)
    return fig
