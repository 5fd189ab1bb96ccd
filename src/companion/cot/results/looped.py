r"""Looped transformers (:prf:ref:`cot-prop-looped`, notebook ``cot/looped``): the same layer applied k times.

Part (a): the optimal loop step :math:`c_k = \arg\min_c\E\tr(I-cS)^{2k}` with :math:`W_{13} = I`, on an
importance-weighted spectrum sample, against the exact quartic optimum at k = 2. Part (b): the optimum
:math:`(c, b)` with a trained :math:`W_{13}` scale (:func:`looped_optima`), simulated directly
(:func:`looped_sparse_simulation`) and reached by trained isotropic looped models
(:func:`looped_trained_vs_optimum`). A full-parameter looped model trained from random weights beats the
one-layer floor (:func:`full_vs_floor`).
"""

from __future__ import annotations

import numpy as np
import torch

from companion.claims import ClaimSpec, ResultSpec
from companion.plotting import legend_outside, new_figure
from companion.seeds import COT_EVAL, COT_ISO_EVAL
from companion.stats import mean_se

from .. import theory as th
from ..data import make_generator, sample_prompts
from ..model import looped_predict, per_prompt_error, sparse_parameters
from ..stats import model_errors, trained_vs_prediction
from ..train import threads1, train_looped_isotropic

__all__ = ["CLAIMS", "RESULT", "loop_counts", "best_polynomial_loss", "looped_optima", "looped_sparse_simulation", "looped_trained_vs_optimum",
           "full_vs_floor", "figure", "manifest"]

W13_FIXED = "W13 = I is as good: the loss at c_k"
CLAIMS = (
    ClaimSpec("cotloop_c2", "statistical", "monte_carlo", prediction="companion.cot.theory.looped_optimum_exact_k2",
              falsifier="the one-layer step eta* is also optimal for two loops"),
    ClaimSpec("cotloop_L2", "statistical", "monte_carlo", prediction="companion.cot.theory.looped_optimum_exact_k2",
              falsifier="looping buys nothing: the one-layer floor"),
    ClaimSpec("cotloop_two_param_sim", "statistical", "monte_carlo",
              prediction="companion.cot.theory.looped_two_param_optimum", falsifier=W13_FIXED),
    ClaimSpec("cotloop_trained_optimum", "statistical", "reduced", headline=True,
              prediction="companion.cot.theory.looped_two_param_optimum", falsifier=W13_FIXED),
    ClaimSpec("cotloop_trained", "bound", "trained", prediction="companion.cot.theory.no_cot_floor",
              falsifier="looping does not help: the floor"),
)

RESULT = ResultSpec(paper="cot", number="Looped transformers (number uncertain)",
                    title="looping vs one layer vs CoT", label="cot-prop-looped", notebook="cot/looped",
                    module=__name__, claims=CLAIMS, figures=("fig_cot_looped",), sweep="")


def manifest() -> list[str]:
    """The claim ids the notebook records (none depends on the parameters)."""
    return [c.id for c in CLAIMS]


def loop_counts(k_check: int, k_max: int) -> np.ndarray:
    """The loop counts k shown and optimised: 1, 2, ``k_check``, ``k_max`` and ten geometrically spaced in between."""
    return np.unique(np.concatenate([[1, 2, k_check, k_max], np.round(np.geomspace(1, k_max, 10))])).astype(int)


def best_polynomial_loss(k: int, d: int, n: int) -> float:
    r"""The smallest error of any estimate :math:`\hat w = (I - q(S))\wstar` with q a polynomial of degree at most k,
    :math:`q(0) = 1` (:prf:ref:`cot-prop-looped`): :math:`\min_q \E\tr q(S)^2`, a quadratic in the coefficients of q
    whose matrix :math:`M_{ij} = \E\tr S^{i+j}` holds the exact moments of
    :func:`companion.cot.theory.wishart_trace_moments`.

    k GD steps with any step sizes, and every looped model of parts (a) and (b) (whose
    :math:`\hat w_k = b(I - (I - cS)^k)\wstar`), are such estimates, so none has a smaller error; a looped model below it
    runs another algorithm (it moves the data columns)."""
    m = th.wishart_trace_moments(2 * k, d, n)
    mu = [m[p] / n**p for p in range(2 * k + 1)]
    M = np.array([[mu[i + j] for j in range(1, k + 1)] for i in range(1, k + 1)])
    v = np.array(mu[1 : k + 1])
    c = np.linalg.solve(M, -v)
    return float(mu[0] + v @ c)


def looped_optima(ks, eigs: np.ndarray, eis: np.ndarray, wis: np.ndarray) -> tuple[dict, dict]:
    """Parts (a) and (b) of :prf:ref:`cot-prop-looped` for every k in ``ks``: (a) on the importance-weighted sample
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
    r"""The trained looped model against its predicted optimum (part (b) of :prf:ref:`cot-prop-looped`).

    ``replicates`` looped models on the isotropic sparse parameters are trained from random starts
    (:func:`companion.cot.train.train_looped_isotropic`); each is run as a real looped LSA
    (:func:`~companion.cot.model.looped_predict` on :func:`~companion.cot.model.sparse_parameters`) on its own ``num // replicates``
    fresh prompts. The prediction is the optimum :math:`(c^\star, b^\star)` of part (b) computed on ``eigs``, an
    independent sample of spectra, and its loss :math:`\E\sum_j(1-b^\star h_j)^2` with its Monte-Carlo standard error
    over that sample.

    Returns
    -------
    dict
        ``dict(c, b, pred, m)``: the trained :math:`c = -vw` and :math:`b = 1/w` per replicate, the optimum
        ``(c, b, loss, loss_se)`` and :func:`companion.cot.stats.trained_vs_prediction` of the replicates' errors against it.
    """
    v, w = train_looped_isotropic(d, n, k, steps=steps, lr=lr, lr_final=lr_final, seed=seed, replicates=replicates)
    errs = []
    with threads1(), torch.no_grad():
        for r in range(replicates):
            pr = sample_prompts(num // replicates, d, n, make_generator(COT_ISO_EVAL.replicate(seed, r)))
            W_KQ, W_PV = sparse_parameters(v[r] * np.eye(d), w[r] * np.eye(d), -1.0)
            errs.append(per_prompt_error(looped_predict(pr, W_KQ, W_PV, k), pr).numpy())
    c, b, _ = th.looped_two_param_optimum(k, eigs)
    loss, loss_se = mean_se(np.sum((1 - b * (1 - (1 - c * eigs) ** k)) ** 2, axis=1))
    return dict(c=-v * w, b=1 / w, pred=(c, b, loss, loss_se), m=trained_vs_prediction(np.stack(errs), loss, loss_se))


def full_vs_floor(res, d: int, n: int, k: int, num: int, seed: int) -> dict:
    """The full-parameter looped model ``res`` with k loops on ``num`` fresh prompts (stream ``COT_EVAL``) against the
    one-layer floor (:func:`companion.cot.stats.trained_vs_prediction`)."""
    errors = model_errors("looped", res, sample_prompts(num, d, n, make_generator(COT_EVAL(seed))), k)
    return trained_vs_prediction(errors, th.no_cot_floor(d, n))


def figure(ks, opt_a: dict, opt_b: dict, eigs, eta: float, floor: float, k_check: int, marks: dict, d: int, n: int):
    """``fig_cot_looped``: (a) the looped optima (a), (b) against CoT with a fixed step and the one-layer floor, with the measured
    models at ``k_check`` (``marks``: label -> error); (b) the optimal parameters against k
    (:func:`looped_optima` dictionaries)."""
    fig, (ax0, ax1) = new_figure(ncols=2, width=3.6, height=3.1)
    ax0.semilogy(ks, [opt_a[k][2] for k in ks], "-o", ms=3, label=r"looped, $W_{13}=I$: $c_k$")
    ax0.semilogy(ks, [opt_b[k][2] for k in ks], "-s", ms=3, mfc="none", label=r"looped, $W_{13}$ trained")
    ax0.semilogy(ks, [th.gd_error_mc(int(k), eta, eigs).mean for k in ks], "--", label=rf"CoT, fixed $\eta$ = {eta:g}")
    ax0.axhline(floor, color="k", ls=":", lw=1, label="one layer (floor)")
    for (label, val), style in zip(marks.items(), (dict(marker="*", ms=11, color="C4"), dict(marker="x", ms=8, color="k"),
                                                   dict(marker="D", ms=6, mfc="none", color="C5"))):
        ax0.plot([k_check], [val], ls="none", label=label, **style)
    ax0.set_xlabel("loops / CoT steps k")
    ax0.set_ylabel(r"$E\,\|\hat w_k - w^\star\|^2$")
    ax0.set_title(f"(a) d = {d}, n = {n}")
    ax1.errorbar(ks, [opt_a[k][0] for k in ks], yerr=[2 * opt_a[k][1] for k in ks], fmt="-o", ms=3, label=r"$c_k$ ($W_{13}=I$)")
    ax1.plot(ks[1:], [opt_b[int(k)][0] for k in ks[1:]], "-s", ms=3, mfc="none", label=r"$c$ ($W_{13}$ trained)")
    ax1.plot(ks[1:], [opt_b[int(k)][1] for k in ks[1:]], "-^", ms=3, mfc="none", label=r"$b^\star = 1/w$")
    ax1.axhline(th.eta_star(d, n), color="k", ls=":", lw=1, label=r"$\eta^\star$")
    ax1.set_xlabel("loops k")
    ax1.set_title("(b) optimal parameters")
    legend_outside(ax0, "below", ncol=2)
    legend_outside(ax1, "below", ncol=2)
    return fig
