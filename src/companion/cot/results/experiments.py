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
from .thm3_2 import converge_cot, optimisation_left, rule_words, unconverged_reason
from .thm4_1 import PREV_STEP

__all__ = ["CLAIMS", "RESULT", "MP_FLOOR", "cot_vs_no_cot", "figure", "manifest", "record_pairs", "verdict_words"]

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
                    builds_on=("companion.cot.results.thm3_2", "companion.cot.results.thm4_1"))


def manifest(n_list) -> list[str]:
    """The claim ids the notebook records: a CoT and a no-CoT claim per n."""
    return [c.id.format(n=n) for n in n_list for c in CLAIMS]


def cot_vs_no_cot(d: int, n: int, eta: float, k: int, *, steps: int, lr: float, lr_final: float, lr_no_cot: float,
                  lr_final_no_cot: float, replicates: int, eval_batch: int, num_mc: int, seed: int,
                  rng: np.random.Generator) -> dict:
    r"""Figure 2 of the paper at one n (:prf:ref:`cot-prop-experiments`): ``replicates`` CoT models (k teacher-forced
    GD steps of size ``eta``) and ``replicates`` no-CoT models, each kind trained side by side on fresh prompts
    (through the run cache; the training curves on 200 fixed prompts) under the stopping rule of
    :prf:ref:`cot-thm-3-2` (:func:`companion.cot.results.thm3_2.converge_cot`, horizons from ``steps // 2`` on,
    doubling until a doubling no longer moves the kind's error on its own training prompts by a share of the
    claim's band, each kind on its own); the ``eval_batch`` evaluation prompts split among the replicates of each
    kind, each replicate on its own (:func:`companion.cot.stats.replicate_errors`; the expected number of divergent
    prompts is that of one set of ``eval_batch``), so that the seed spread of either kind covers training and
    evaluation. The CoT models against an independent Monte-Carlo estimate of :math:`\E\tr(I-\eta S)^{2k}` from
    ``num_mc`` spectra, with the competitor :math:`\E\tr(I-\eta S)^{2(k-1)}` on the same spectra; the no-CoT model
    against the floor :math:`d(d+1)/(n+d+1)`, with the competitor :math:`d^2/(n+d)`
    (:func:`companion.cot.theory.no_cot.no_cot_floor_mp`); and, on the same spectra, the fraction of prompts with
    :math:`\eta\lambda_{\max}(S) > 2` and the 99.9 % quantile of :math:`\lambda_{\max}`.

    Returns
    -------
    dict
        ``dict(n, eta, cot, noc, rule_cot, rule_noc, pred, prev, floor, floor_mp, m_cot, m_noc, unstable, q999,
        eta999)`` (``cot``, ``noc``: the last training run of each kind; ``rule_*``: the stopping rule's outcome
        without the run; ``m_*``: :func:`companion.cot.stats.trained_vs_prediction`; ``pred``, ``prev``: k and
        k - 1 GD steps).
    """
    rule_cot = converge_cot(d, n, k, k, eta, steps=steps, lr=lr, lr_final=lr_final, replicates=replicates,
                            eval_batch=eval_batch, seed=seed)
    rule_noc = converge_cot(d, n, 1, 1, eta, steps=steps, lr=lr_no_cot, lr_final=lr_final_no_cot,
                            replicates=replicates, eval_batch=eval_batch, seed=seed, objective="no_cot")
    cot, noc = rule_cot.pop("runs"), rule_noc.pop("runs")
    eigs = wishart.sample_S_eigs(d, n, num_mc, rng)
    pred, prev, floor = gd.gd_error_mc(k, eta, eigs), gd.gd_error_mc(k - 1, eta, eigs), no_cot.no_cot_floor(d, n)
    eta999, q999 = gd.divergence_step(eigs, 1e-3)  # one prompt in a thousand diverges from this step on
    return dict(n=n, eta=eta, cot=cot, noc=noc, rule_cot=rule_cot, rule_noc=rule_noc, pred=pred, prev=prev,
                floor=floor, floor_mp=no_cot.no_cot_floor_mp(d, n),
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
    band of the CoT claim (seeds or prompts, the wider). Each band's floor adds the optimisation error its stopping
    rule leaves (:func:`companion.cot.results.thm3_2.optimisation_left`), as the trained claim of :prf:ref:`cot-thm-3-2` does.

    A kind whose stopping rule did not stop by its last horizon has no converged model to test: its claim is not
    applicable (``_unconverged``).

    Returns the record of each CoT claim, in the order of ``runs`` (for the prose)."""
    out = []
    roundoff = ROUNDOFF * d
    for r in runs:
        n, mc, mn, u = r["n"], r["m_cot"], r["m_noc"], r["unstable"]
        if not r["rule_cot"]["converged"]:
            out.append(_unconverged(v, f"cotexp_cot_n{n}", rf"$n = {n}$: CoT evaluation error vs $\E\tr(I - \eta S)^{{2k}}$",
                                    r["rule_cot"]))
        elif u * eval_batch >= 1:
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
                predicted=mc["pred"], measured=mc["mean"], se=mc["se"], dof=mc["dof"],
                floor=roundoff + optimisation_left(r["rule_cot"]),
                falsifier=COT.falsifier, falsifier_value=r["prev"].mean, headline=True,
                reason=rf"{Z_LEVEL:.3g} SE of the mean of {replicates} trained models, over training seeds or prompts (the wider "
                       "band), and of the independent Monte-Carlo prediction, + optimisation error left",
                detail=f"Level of {Z_LEVEL:.3g} normal standard errors; the wider of two valid bands decided: {mc['se_from']}, "
                       "combined (Welch) with the standard error of the independent Monte-Carlo sample of spectra "
                       rf"(`companion.cot.stats.trained_vs_prediction`). " + _floor_words(r["rule_cot"], roundoff)))
        if not r["rule_noc"]["converged"]:
            _unconverged(v, f"cotexp_no_cot_n{n}", rf"$n = {n}$: no-CoT evaluation error vs the floor $d(d+1)/(n+d+1)$",
                         r["rule_noc"])
            continue
        v.statistical(f"cotexp_no_cot_n{n}",
                      quantity=rf"$n = {n}$: trained no-CoT models ({replicates} seeds), mean evaluation error vs the "
                               r"floor $d(d+1)/(n+d+1)$",
                      predicted=mn["pred"], measured=mn["mean"], se=mn["se"], dof=mn["dof"],
                      floor=roundoff + optimisation_left(r["rule_noc"]),
                      falsifier=MP_FLOOR, falsifier_value=r["floor_mp"], headline=True,
                      reason=rf"{Z_LEVEL:.3g} SE of the mean of {replicates} trained models, over training seeds or prompts (the "
                             "wider band), + optimisation error left, round-off",
                      detail=f"Each of the {replicates} models on its own {eval_batch // replicates} fresh prompts; level "
                             f"of {Z_LEVEL:.3g} normal standard errors, the wider of two valid bands decided: {mn['se_from']} "
                             rf"({band_words(mn['dof'])}), against the exact floor. " + _floor_words(r["rule_noc"], roundoff))
    return out


def _floor_words(rule: dict, roundoff: float) -> str:
    return (rf"Floor: the optimisation error left after {rule['steps']} Adam steps (stopping rule `converge_cot`), "
            rf"the last doubling's change ${tex_number(abs(rule['change']), '.4g')}$ plus the even part's energy "
            rf"${tex_number(rule['even'], '.4g')}$, and round-off ${tex_number(roundoff)}$.")


def _unconverged(v, claim: str, quantity: str, rule: dict):
    """The record of a claim whose models' stopping rule (:func:`companion.cot.results.thm3_2.converge_cot`) did not
    stop by its last horizon: not applicable, in the words of :prf:ref:`cot-thm-3-2`'s trained claim."""
    return v.not_applicable(claim, kind="statistical", quantity=quantity, reason=unconverged_reason(rule),
                            detail=rule_words(rule) + " A longer horizon (`steps`) may reach a converged model.")


def figure(runs: list, d: int, k: int):
    r"""``fig_cot_experiments``: evaluation loss during training, with CoT and without (each kind: the replicates' mean, each replicate thin), per n;
    dotted: the no-CoT floor and the k-step GD error; each panel's title gives the horizon the stopping rule
    reached for either kind (:func:`cot_vs_no_cot` rows)."""
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
        ax.set_title(rf"d={d}, n={r['n']}, $\eta$={r['eta']:g}" "\n"
                     f"Adam steps: {cot.config['steps']} (CoT), {noc.config['steps']} (no CoT)")
    legend_outside(fig, "below", ncol=2)
    return fig


def verdict_words(records) -> dict:
    r"""The verdict paragraph's clauses (Markdown, for ``{glue:md}``), from the records: ``cot_0``, the first pair's
    CoT claim (the falsifier's distance and the status, or why the claim does not apply) and ``no_cot``, how many of
    the no-CoT claims pass, by status."""
    cot = [r for r in records if r.claim.startswith("cotexp_cot_n")]
    noc = [r for r in records if r.claim.startswith("cotexp_no_cot_n")]
    first = cot[0]
    if first.status == "not_applicable":
        cot_0 = f"the claim does not apply at this $n$: {first.reason}"
    else:
        cot_0 = (rf"one GD step fewer lies ${abs(first.z_falsifier):.1f}$ standard errors away (claim "
                 rf"**{first.status.replace('_', ' ')}**)")
    counts = {}
    for r in noc:
        counts[r.status] = counts.get(r.status, 0) + 1
    tally = ", ".join(f"{c} {s.replace('_', ' ')}" for s, c in sorted(counts.items()))
    if len(counts) == 1:
        tally = f"{len(noc)} of the {len(noc)} no-CoT claims {next(iter(counts)).replace('_', ' ')}"
    else:
        tally = f"of the {len(noc)} no-CoT claims, {tally}"
    return dict(cot_0=cot_0, no_cot=tally)
