r"""Experiments: training with and without CoT (:prf:ref:`cot-prop-experiments`, notebook ``cot/experiments``;
Figure 2 of the paper).

At each n (:func:`cot_vs_no_cot`): independently seeded CoT models trained side by side against the Monte-Carlo
k-step GD error :math:`\E\tr(I-\eta S)^{2k}` (competitor: one GD step fewer), and a no-CoT model against the
floor :math:`d(d+1)/(n+d+1)` (competitor: its proportional limit :math:`d^2/(n+d)`).
"""

from __future__ import annotations

import numpy as np

from companion.claims import ClaimSpec, ResultSpec
from companion.plotting import legend_outside, new_figure
from companion.stats import ROUNDOFF, Z_LEVEL, band_words

from ...text import tex_number
from ..stats import replicate_errors, trained_vs_prediction
from ..theory import gd, no_cot, wishart
from ..train import cached_train_full
from .thm4_1 import PREV_STEP

__all__ = ["CLAIMS", "RESULT", "MP_FLOOR", "cot_vs_no_cot", "figure", "manifest", "record_pairs"]

COT = ClaimSpec("cotexp_cot_n{n}", "statistical", "trained", headline=True, prediction="companion.cot.theory.gd.gd_error_mc",
                falsifier=PREV_STEP)
#: the falsifier of the no-CoT claims: the floor without its finite-size corrections
MP_FLOOR = r"the floor's proportional (Marchenko–Pastur) limit $d^2/(n+d)$"
NO_COT = ClaimSpec("cotexp_no_cot_n{n}", "statistical", "trained", headline=True,
                   prediction="companion.cot.theory.no_cot.no_cot_floor", falsifier=MP_FLOOR)
CLAIMS = (COT, NO_COT)

RESULT = ResultSpec(paper="cot", number="Figure 2 (Section 5)", title="training with and without CoT",
                    label="cot-prop-experiments", notebook="cot/experiments", module=__name__, claims=CLAIMS,
                    figures=("fig_cot_experiments",), sweep="",
                    builds_on=("companion.cot.results.thm4_1",))


def manifest(n_list) -> list[str]:
    """The claim ids the notebook records: a CoT and a no-CoT claim per n."""
    return [c.id.format(n=n) for n in n_list for c in CLAIMS]


def cot_vs_no_cot(d: int, n: int, eta: float, k: int, *, steps: int, lr: float, lr_final: float, lr_no_cot: float,
                  lr_final_no_cot: float, replicates: int, eval_batch: int, num_mc: int, seed: int,
                  rng: np.random.Generator) -> dict:
    r"""Figure 2 of the paper at one n (:prf:ref:`cot-prop-experiments`): ``replicates`` CoT models (k teacher-forced
    GD steps of size ``eta``) and ``replicates`` no-CoT models, each kind trained side by side, all for ``steps``
    Adam steps on fresh prompts (through the run cache; the training curves on 200 fixed prompts); the
    ``eval_batch`` evaluation prompts split among the replicates of each kind, each replicate on its own
    (:func:`companion.cot.stats.replicate_errors`; the expected number of divergent prompts is that of one set of
    ``eval_batch``), so that the seed spread of either kind covers training and evaluation. The
    CoT models against an independent Monte-Carlo estimate of :math:`\E\tr(I-\eta S)^{2k}` from ``num_mc`` spectra,
    with the competitor :math:`\E\tr(I-\eta S)^{2(k-1)}` on the same spectra; the no-CoT model against the floor
    :math:`d(d+1)/(n+d+1)`,
    with the competitor :math:`d^2/(n+d)` (:func:`companion.cot.theory.no_cot.no_cot_floor_mp`); and, on the same spectra,
    the fraction of prompts with :math:`\eta\lambda_{\max}(S) > 2` and the 99.9 % quantile of :math:`\lambda_{\max}`.

    Returns
    -------
    dict
        ``dict(n, eta, cot, noc, pred, prev, floor, floor_mp, m_cot, m_noc, unstable, q999, eta999)`` (``m_*``:
        :func:`companion.cot.stats.trained_vs_prediction`; ``pred``, ``prev``: k and k - 1 GD steps).
    """
    every = max(1, steps // 20)
    cot = cached_train_full("cot", d, n, k, eta, steps=steps, lr=lr, lr_final=lr_final, batch=64, seed=seed,
                            eval_every=every, eval_batch=200, replicates=replicates)
    noc = cached_train_full("no_cot", d, n, 1, steps=steps, lr=lr_no_cot, lr_final=lr_final_no_cot, batch=64,
                            seed=seed, eval_every=every, eval_batch=200, replicates=replicates)
    eigs = wishart.sample_S_eigs(d, n, num_mc, rng)
    pred, prev, floor = gd.gd_error_mc(k, eta, eigs), gd.gd_error_mc(k - 1, eta, eigs), no_cot.no_cot_floor(d, n)
    eta999, q999 = gd.divergence_step(eigs, 1e-3)  # one prompt in a thousand diverges from this step on
    return dict(n=n, eta=eta, cot=cot, noc=noc, pred=pred, prev=prev, floor=floor, floor_mp=no_cot.no_cot_floor_mp(d, n),
                m_cot=trained_vs_prediction(replicate_errors("cot", cot, k, eval_batch // replicates, seed),
                                            pred.mean, pred.se),
                m_noc=trained_vs_prediction(replicate_errors("no_cot", noc, 1, eval_batch // replicates, seed),
                                            floor),
                unstable=float(np.mean(eta * eigs[:, -1] > 2)), q999=q999, eta999=eta999)






def record_pairs(v, runs: list, *, replicates: int, eval_batch: int, d: int) -> list:
    r"""The two headline claims at each n (``runs``: :func:`cot_vs_no_cot` rows): ``cotexp_cot_n{n}``, the mean
    evaluation error of the ``replicates`` trained CoT models against :math:`\E\tr(I-\eta S)^{2k}` (falsifier: one GD
    step fewer), not applicable where divergent prompts (:math:`\eta\lambda_{\max}(S) > 2`) are expected among the
    ``eval_batch`` evaluation prompts; and ``cotexp_no_cot_n{n}``, the mean error of the ``replicates`` trained no-CoT
    models against the floor :math:`d(d+1)/(n+d+1)` (falsifier: its proportional limit :math:`d^2/(n+d)`), with the
    band of the CoT claim (seeds or prompts, the wider).

    Returns the record of each CoT claim, in the order of ``runs`` (for the prose)."""
    out = []
    floor = ROUNDOFF * d
    for r in runs:
        n, mc, mn, u = r["n"], r["m_cot"], r["m_noc"], r["unstable"]
        if u * eval_batch >= 1:
            out.append(v.not_applicable(
                f"cotexp_cot_n{n}", kind="statistical",
                quantity=rf"$n = {n}$: CoT evaluation error vs $\E\tr(I - \eta S)^{{2k}}$",
                reason=rf"about {u * eval_batch:.0f} divergent prompts ($\eta\lambda_{{\max}}(S) > 2$) are expected among "
                       "the evaluation prompts: the mean is heavy-tailed and has no usable standard error",
                detail=rf"A fraction ${tex_number(u, '.1e')}$ of the independent spectra has $\eta\lambda_{{\max}}(S) > 2$, so "
                       rf"about {u * eval_batch:.0f} of the {eval_batch} evaluation prompts are expected to diverge; "
                       "the medians are compared on `cot/thm4_2_ood`."))
        else:
            out.append(v.statistical(
                f"cotexp_cot_n{n}",
                quantity=rf"$n = {n}$: trained CoT models ({replicates} seeds), mean evaluation error vs "
                         r"$\E\tr(I - \eta S)^{2k}$",
                predicted=mc["pred"], measured=mc["mean"], se=mc["se"], dof=mc["dof"], floor=floor,
                falsifier=COT.falsifier, falsifier_value=r["prev"].mean, headline=True,
                reason=rf"{Z_LEVEL:.3g} SE of the mean of {replicates} trained models, over training seeds or prompts (the wider "
                       "band), and of the independent Monte-Carlo prediction",
                detail=f"Level of {Z_LEVEL:.3g} normal standard errors; the wider of two valid bands decided: {mc['se_from']}, "
                       "combined (Welch) with the standard error of the independent Monte-Carlo sample of spectra "
                       rf"(`companion.cot.stats.trained_vs_prediction`); round-off floor ${tex_number(floor)}$."))
        v.statistical(f"cotexp_no_cot_n{n}",
                      quantity=rf"$n = {n}$: trained no-CoT models ({replicates} seeds), mean evaluation error vs the "
                               r"floor $d(d+1)/(n+d+1)$",
                      predicted=mn["pred"], measured=mn["mean"], se=mn["se"], dof=mn["dof"], floor=floor,
                      falsifier=MP_FLOOR, falsifier_value=r["floor_mp"], headline=True,
                      reason=rf"{Z_LEVEL:.3g} SE of the mean of {replicates} trained models, over training seeds or prompts (the "
                             "wider band), plus round-off",
                      detail=f"Each of the {replicates} models on its own {eval_batch // replicates} fresh prompts; level "
                             f"of {Z_LEVEL:.3g} normal standard errors, the wider of two valid bands decided: {mn['se_from']} "
                             rf"({band_words(mn['dof'])}), against the exact floor; round-off floor ${tex_number(floor)}$.")
    return out


def figure(runs: list, d: int, k: int):
    r"""``fig_cot_experiments``: evaluation loss during training, with CoT and without (each kind: the replicates' mean, each replicate thin), per n;
    dotted: the no-CoT floor and the k-step GD error (:func:`cot_vs_no_cot` rows)."""
    fig, axs = new_figure(ncols=len(runs), width=3.5, height=3.0)
    for ax, r in zip(np.atleast_1d(axs), runs):
        cot, noc = r["cot"], r["noc"]
        curves = np.asarray(cot.eval_loss).reshape(len(cot.steps), -1)
        ax.semilogy(cot.steps, curves, color="C0", lw=0.5, alpha=0.5)
        ax.semilogy(cot.steps, curves.mean(axis=1), color="C0", label=f"with CoT (k={k}), {curves.shape[1]} seeds")
        noc_curves = np.asarray(noc.eval_loss).reshape(len(noc.steps), -1)
        ax.semilogy(noc.steps, noc_curves, color="C1", lw=0.5, alpha=0.5)
        ax.semilogy(noc.steps, noc_curves.mean(axis=1), color="C1", label=f"without CoT, {noc_curves.shape[1]} seeds")
        ax.axhline(r["floor"], color="C1", ls=":", lw=1, label="floor d(d+1)/(n+d+1)")
        ax.axhline(r["pred"].mean, color="C0", ls=":", lw=1, label=r"$E\,\mathrm{tr}(I-\eta S)^{2k}$")
        ax.set_xlabel("Adam step")
        ax.set_ylabel("evaluation loss (7)")
        ax.set_title(rf"d={d}, n={r['n']}, $\eta$={r['eta']:g}")
    legend_outside(fig, "below", ncol=2)
    return fig
