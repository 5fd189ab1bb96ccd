r"""Corollary 3.1 (:prf:ref:`cot-cor-3-1`, notebook ``cot/cor3_1_floor``): the no-CoT error floor
:math:`d(d+1)/(n+d+1) = \Theta(d^2/n)`.

The headline claims, one per trained pair :math:`(d, n)`: the error of R independently seeded full no-CoT LSAs
trained from random weights in one batch (:func:`trained_floor`), each on its own fresh prompts, with the
standard error from the spread of the seeds, against the floor. Their falsifier is the proportional-limit
floor :math:`d^2/(n+d)` (:func:`companion.cot.theory.no_cot.no_cot_floor_mp`), what the leading-order :math:`\Theta(d^2/n)` analysis
gives. One identity claim checks the formula against the minimum of the exact one-step error
(:func:`floor_from_moments`); the Monte-Carlo floor (:func:`floor_mc`) is drawn in the figure.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.ticker import NullFormatter, ScalarFormatter

from companion.claims import ClaimSpec, ResultSpec
from companion.plotting import legend_outside, new_figure
from companion.stats import ROUNDOFF, Z_LEVEL, critical, mean_se

from ...text import tex_number
from ..data import Prompts
from ..stats import even_part_energy as stats_even_part_energy
from ..stats import model_errors, replicate_errors, rule_prompts, trained_vs_prediction
from ..theory import gd, no_cot, wishart
from .thm3_1 import CONVERGED, MAX_DOUBLINGS, RULE_PROMPTS, last_quarter_drift, train_until_converged

__all__ = ["CLAIMS", "RESULT", "PROPORTIONAL_FLOOR", "EVEN_SHARE", "grid_pairs", "floor_from_moments", "head_paragraph",
           "floor_mc", "even_part_energy", "even_part_met", "trained_floor", "record_formula", "record_trained", "trained_summary", "figure", "manifest"]

PROPORTIONAL_FLOOR = "the proportional-limit (Marchenko–Pastur) floor $d^2/(n+d)$"
#: the stopping rule of the trained claims: the even part's energy at most this share of the claim's standard error
#: (:func:`even_part_met`)
EVEN_SHARE = 0.1

IDENTITY = ClaimSpec("cot_c31_floor_formula", "identity", "closed_form", prediction="companion.cot.theory.no_cot.no_cot_floor")
TRAINED = ClaimSpec("cot_c31_trained_d{d}_n{n}", "statistical", "trained", headline=True,
                    prediction="companion.cot.theory.no_cot.no_cot_floor", falsifier=PROPORTIONAL_FLOOR)
CLAIMS = (IDENTITY, TRAINED)

RESULT = ResultSpec(paper="cot", number="Corollary 3.1", title="the no-CoT error floor d(d+1)/(n+d+1)",
                    label="cot-cor-3-1", notebook="cot/cor3_1_floor", module=__name__, claims=CLAIMS,
                    figures=("fig_cot_cor31",), sweep="",
                    builds_on=("companion.cot.results.thm3_1",))


def grid_pairs(d_list, ratios) -> list[tuple[int, int]]:
    r"""The sorted distinct pairs :math:`(d, n)`, :math:`n = \max(d, \mathrm{round}(r d))`, of the dimensions and
    ratios n/d (the grid of the figure and the identity claim, and with one ratio, of the trained models)."""
    return sorted({(d, max(d, int(round(r * d)))) for d in d_list for r in ratios})


def manifest(pairs, trained_pairs) -> list[str]:
    """The claim ids the notebook records: the identity over the grid, one claim per trained pair."""
    return [IDENTITY.id] + [TRAINED.id.format(d=d, n=n) for d, n in trained_pairs]


def floor_from_moments(d: int, n: int) -> float:
    r"""The minimum of the exact one-step error :math:`L_1(\eta) = \E\tr(I-\eta S)^2`
    (:func:`companion.cot.theory.gd.gd_error_wishart`, a sum over the exact Wishart trace moments), found from the
    quadratic through :math:`\eta = 0, 1, 2`: with :math:`L_1(\eta) = c + b\eta + a\eta^2`, the minimum
    :math:`c - b^2/(4a)`. An implementation of :prf:ref:`cot-cor-3-1` that uses neither
    :func:`companion.cot.theory.no_cot.no_cot_floor` nor :func:`companion.cot.theory.no_cot.eta_star`."""
    l0, l1, l2 = (gd.gd_error_wishart(1, e, d, n) for e in (0.0, 1.0, 2.0))
    a = (l2 - 2 * l1 + l0) / 2
    b = l1 - l0 - a
    return float(l0 - b * b / (4 * a))


def floor_mc(d: int, n: int, num: int, rng: np.random.Generator, eta: float | None = None) -> tuple[float, float]:
    r"""Monte-Carlo :math:`\E\tr(I-\eta S)^2` (default :math:`\eta = \eta^\star`, i.e. the no-CoT floor of
    :prf:ref:`cot-cor-3-1`) from ``num`` independent S, with its standard error over the sample."""
    eta = no_cot.eta_star(d, n) if eta is None else eta
    return mean_se(gd.gd_trace(eta, wishart.sample_S_eigs(d, n, num, rng), 1))


def even_part_energy(res, prompts: Prompts) -> np.ndarray:
    r"""Per replicate of a no-CoT :class:`~companion.cot.train.TrainResult`, the mean over ``prompts`` of
    :math:`\|\hat w_{\rm even}\|^2`, :math:`\hat w_{\rm even} = \tfrac12\bigl(\hat w(X, y) + \hat w(X, -y)\bigr)`:
    the part of the predictor even in the labels :math:`y = X^\T w^\star` (the prompt with :math:`-w^\star`;
    :func:`companion.cot.stats.even_part_energy` with one layer).

    The task is symmetric under :math:`w^\star \to -w^\star`, so the error splits as
    :math:`\E\|\hat w_{\rm odd} - w^\star\|^2 + \E\|\hat w_{\rm even}\|^2` (the cross term is odd) and
    every minimiser has :math:`\hat w_{\rm even} = 0`: its energy is an excess of the trained model over the best
    one that needs no prediction to measure (:prf:ref:`cot-cor-3-1`)."""
    return stats_even_part_energy("no_cot", res, prompts, 1)


def even_part_met(eval_batch: int):
    r"""The further stopping rule of the trained claims of :prf:ref:`cot-cor-3-1` (the ``also`` of
    :func:`companion.cot.results.thm3_1.train_until_converged`): on the run's own evaluation prompts
    (``cot.train_eval``, :data:`~companion.cot.stats.RULE_PROMPTS` of them, never the claim's), the
    replicates' mean :func:`even_part_energy` is at most :data:`EVEN_SHARE` times the standard error the claim will
    have over its prompts, :math:`s/\sqrt{R\,N}` (s the spread of the per-prompt errors there, N =
    ``eval_batch`` per replicate; a lower bound of the claim's standard error). The even part is then too small to
    move the claim's z by more than that share; the last-quarter fall of the loss does not see it, because it
    decays slowly while the loss barely moves."""
    def met(res) -> bool:
        prompts = _rule_prompts(res)
        err = np.concatenate([model_errors("no_cot", res.replicate(r), prompts, 1) for r in range(res.replicates)])
        se = float(np.std(err, ddof=1)) / math.sqrt(res.replicates * eval_batch)
        return bool(np.mean(even_part_energy(res, prompts)) <= EVEN_SHARE * se)
    return met


def _rule_prompts(res) -> Prompts:
    """The stopping rule's prompts of a training run: its own evaluation set (``cot.train_eval``)."""
    return rule_prompts(res, RULE_PROMPTS)


def trained_floor(d: int, n: int, *, lr: float, lr_final: float, path: float, replicates: int, eval_batch: int,
                  seed: int, batch: int = 64, z: float = Z_LEVEL) -> dict:
    r"""``replicates`` full no-CoT LSAs trained from random weights in one batch under the stopping rule
    (:func:`companion.cot.results.thm3_1.train_until_converged`, with :func:`even_part_met`), replicate r evaluated
    on its own ``eval_batch`` fresh prompts, against the floor of :prf:ref:`cot-cor-3-1`.

    Returns
    -------
    dict
        :func:`companion.cot.stats.trained_vs_prediction` (mean, se, dof, ...), with ``drift``
        (:func:`companion.cot.results.thm3_1.last_quarter_drift` of the replicates' mean evaluation loss on the
        run's fixed evaluation prompts), ``even`` (the replicates' mean :func:`even_part_energy` there), ``steps``,
        ``path`` and ``converged`` (of the stopping rule) and ``res`` (the training result).
    """
    res, steps, p, converged = train_until_converged(d, n, lr=lr, lr_final=lr_final, path=path, replicates=replicates,
                                                     seed=seed, batch=batch, also=even_part_met(eval_batch))
    err = replicate_errors("no_cot", res, 1, eval_batch, seed)
    out = trained_vs_prediction(err if res.replicates > 1 else err[0], no_cot.no_cot_floor(d, n), z=z)
    drift = float(np.mean(last_quarter_drift(res.steps, res.eval_loss)))
    even = float(np.mean(even_part_energy(res, _rule_prompts(res))))
    return dict(out, drift=drift, even=even, steps=steps, path=p, converged=converged, res=res)





def record_formula(v, formula_gap: float, pairs) -> None:
    r"""Record the identity ``cot_c31_floor_formula`` on the verdict ``v``: the closed-form floor
    :math:`d(d+1)/(n+d+1)` against the minimum of the exact one-step error :math:`L_1(\eta)`
    (:func:`floor_from_moments`), the largest gap over the grid ``pairs`` divided by :math:`d` (``formula_gap``),
    at :math:`10^3` times the round-off floor."""
    tol = 1e3 * ROUNDOFF
    v.identity("cot_c31_floor_formula",
               quantity=r"largest $|d(d+1)/(n+d+1) - \min_\eta L_1(\eta)|/d$ over the grid",
               predicted=0.0, measured=formula_gap, tolerance=tol,
               reason=r"the closed-form floor against the vertex of the exact quadratic $L_1(\eta)$ (Wishart "
                      "moments) at every pair of the grid; band: round-off",
               detail=rf"$L_1(\eta) = c + b\eta + a\eta^2$ evaluated at $\eta = 0, 1, 2$ by `gd_error_wishart` "
                      "(sums over the exact Wishart trace moments), and its minimum $c - b^2/(4a)$, at the "
                      rf"{len(pairs)} pairs $(d, n)$ of the grid; neither `no_cot_floor` nor `eta_star` enters. "
                      rf"Tolerance ${tex_number(tol)}$, $10^3$ times the float64 round-off floor ${tex_number(ROUNDOFF)}$ of "
                      r"the book, a margin for the cancellation in $c - b^2/(4a)$ (both terms near $d$ when the "
                      "floor is small).")


def record_trained(v, trained: dict, eval_batch: int):
    r"""Record the headline claims ``cot_c31_trained_d{d}_n{n}`` on the verdict ``v``, one per trained pair
    (``trained[d, n]``: :func:`trained_floor`): the mean error of the R seeds against the floor
    :math:`d(d+1)/(n+d+1)` at ``Z_LEVEL`` SE (the wider of the seed spread, Student-t, and the prompts) plus the
    optimisation error left (the last-quarter drift and the even part's energy) and round-off; the falsifier is the
    proportional-limit floor :math:`d^2/(n+d)`. Returns the record of the last pair (the largest, the one the prose
    reports), or None when no pair was trained."""
    head = None
    for (d, n), t in trained.items():
        R = len(t["means"]) if "means" in t else 1
        seeds = math.isfinite(t["dof"])
        band = f"{Z_LEVEL:.3g} SE of the seed spread (Student-t)" if seeds else f"{Z_LEVEL:.3g} SE over the evaluation prompts"
        drift, even = abs(t["drift"]), t["even"]
        rule = (f"met after {t['steps']} Adam steps (path {t['path']:g})" if t["converged"] else
                f"not met after {MAX_DOUBLINGS} doublings of the path; the last run had {t['steps']} Adam steps "
                f"(path {t['path']:g})")
        other = (f"the prompts-only standard error {tex_number(t['se_prompts'])} (normal), a lower bound" if seeds else
                 f"the seed spread {tex_number(t.get('se_seeds', math.nan))} on $R - 1 = {R - 1}$ degrees of freedom")
        fal = no_cot.no_cot_floor_mp(d, n)
        head = v.statistical(
            f"cot_c31_trained_d{d}_n{n}",
            quantity=rf"{R} trained no-CoT LSAs at $d = {d}$, $n = {n}$: mean error against $d(d+1)/(n+d+1)$",
            predicted=t["pred"], measured=t["mean"], se=t["se"], dof=t["dof"],
            floor=ROUNDOFF * d + drift + even, falsifier=PROPORTIONAL_FLOOR, falsifier_value=fal, headline=True,
            reason=rf"mean error of {R} training seeds against the floor $d(d+1)/(n+d+1)$; band: {band}, plus "
                   "the optimisation error left (last-quarter drift, even part)",
            detail=rf"Each seed evaluated on its own {eval_batch} fresh prompts. Standard error {tex_number(t['se'])} "
                   f"from {t['se_from']}, the wider of two valid bands at the level of {Z_LEVEL:.3g} normal SE (critical "
                   rf"value ${tex_number(critical(Z_LEVEL, t['dof']))}$); the other was {other}. Floor: the last-quarter "
                   rf"drift of the seeds' mean evaluation loss, ${tex_number(drift)}$, and their mean energy of the "
                   r"part of the predictor even in the labels, $\|\tfrac12(\hat w(X, y) + \hat w(X, -y))\|^2$ = "
                   rf"${tex_number(even)}$ (zero at every minimiser; both on the run's own evaluation prompts, the "
                   rf"optimisation error left), plus round-off $d\cdot10^{{-13}} = {tex_number(ROUNDOFF * d)}$. Training: full no-CoT LSAs from "
                   "random weights in one batch (Adam, fresh prompts, float64); the stopping rule (each seed's "
                   f"evaluation loss falls over the last quarter by at most {100 * CONVERGED:g} % of the floor "
                   rf"$d(d+1)/(n+d+1)$, and the seeds' mean even part is at most {EVEN_SHARE:g} times the claim's "
                   "standard error over its prompts) "
                   rf"was {rule}. Falsifier $d^2/(n+d) = {fal:.6g}$ against the floor ${t['pred']:.6g}$, a "
                   r"relative gap $n/((d+1)(n+d))$.")
    return head


def trained_summary(records, trained: dict) -> str:
    """One sentence on every trained pair's claim for the prose (``records``: the verdict's records; ``trained``:
    :func:`trained_floor` by pair): the pairs, how much d²/n and the floor grow across them, how many claims pass."""
    recs = [r for r in records if r.claim.startswith("cot_c31_trained_")]
    if not recs:
        return "With dimensions in `train_d` the same claim follows the floor across d²/n."
    if len(recs) < 2:
        return "One pair is trained here; with more dimensions in `train_d` the same claim follows the floor across d²/n."
    ratio = [d * d / n for d, n in trained]
    floors = [t["pred"] for t in trained.values()]
    listed = ", ".join(f"({d}, {n})" for d, n in sorted(trained))
    return (f"The same claim is made at every trained pair, (d, n) = {listed}: across them d²/n grows "
            f"{max(ratio) / min(ratio):.1f}-fold and the floor {max(floors) / min(floors):.1f}-fold, and "
            f"{sum(r.status == 'passed' for r in recs)} of the {len(recs)} claims pass.")


def head_paragraph(head, trained: dict, replicates: int) -> str:
    r"""The verdict paragraph on the largest trained pair (Markdown, for ``{glue:md}``): its mean error against the
    floor with its band and status, the falsifier's distance, the stopping rule's numbers; ``head`` is
    :func:`record_trained`'s record, None when ``train_d`` is empty (then the paragraph says so)."""
    if head is None:
        return ("No model is trained at these parameters (`train_d` is empty): the page checks the floor formula "
                "only, and no claim here is evidence about trained transformers.")
    d, n = max(trained)
    t = trained[d, n]
    dof = "infinitely many" if head.dof is None or not math.isfinite(head.dof) else f"{head.dof:.0f}"
    settle = ("The models settle on the floor and not below it." if head.status == "passed" else
              f"The claim is {head.status.replace('_', ' ')} at these parameters.")
    return (rf"At $d = {d}$ and $n = {n}$ the {replicates} trained one-layer models reach a mean error "
            rf"${head.measured:.4f} \pm {head.se:.4f}$ against the floor ${head.predicted:.4f}$ "
            rf"(**{head.status.replace('_', ' ')}**; ${abs(head.z_theory):.1f}$ standard errors, critical value "
            rf"${head.crit:.1f}$ on {dof} degrees of freedom). The proportional-limit floor "
            rf"${head.falsifier_value:.4f}$, only ${100 * n / ((d + 1) * (n + d)):.1f}$ % below, lies "
            rf"${abs(head.z_falsifier):.0f}$ standard errors away; the full step's error lies "
            rf"${100 * (d + 1) / n:.1f}$ % above the floor. The stopping rule ended training after {t['steps']} steps "
            rf"(path ${t['path']:g}$); the mean loss still fell by ${tex_number(abs(t['drift']), '.1e')}$ over their last "
            rf"quarter, their part even in the labels has energy ${tex_number(t['even'], '.1e')}$, and both are part of "
            rf"the tolerance ${head.tolerance:.3f}$. {settle}")


def figure(d_list, ratios, pairs, mc: dict, trained: dict):
    """``fig_cot_cor31``: (a) the floor: formula, Monte Carlo (``mc[d, n] = (mean, se)``) and trained models
    (``trained[d, n]``, their mean error); (b) the floor over :math:`d^2/n` against n/d, with the
    proportional-limit floor."""
    fig, (ax0, ax1) = new_figure(ncols=2, width=3.5, height=3.0)
    for c, d in enumerate(d_list):
        ns = np.array([n for dd, n in pairs if dd == d])
        ngrid = np.geomspace(ns.min(), ns.max() + 1e-9, 100)
        ax0.loglog(ngrid, d * (d + 1) / (ngrid + d + 1), "-", color=f"C{c}", label=f"d = {d}")
        ax0.errorbar(ns, [mc[d, n][0] for n in ns], yerr=[2 * mc[d, n][1] for n in ns], fmt="o", ms=4,
                     mfc="none", color=f"C{c}")
        ax1.semilogx(ngrid / d, d * (d + 1) / (ngrid + d + 1) / (d**2 / ngrid), "-", color=f"C{c}", label=f"d = {d}")
        ax1.semilogx(ngrid / d, (d * d / (ngrid + d)) / (d**2 / ngrid), ":", color=f"C{c}")
    for (_, n), t in trained.items():
        ax0.plot([n], [t["mean"]], "*", ms=11, color="k")
    if trained:  # no legend entry for stars that are not drawn (`train_d` empty)
        ax0.plot([], [], "*", color="k", label="trained LSAs (mean)")
    ax1.plot([], [], ":", color="k", label=r"falsifier $d^2/(n+d)$")
    ax0.set_xlabel("n")
    ax0.set_ylabel(r"min $E\,\|\hat w - w^\star\|^2$")
    ax0.set_title("(a) floor: formula, MC, trained")
    ax1.axhline(1, color="k", lw=0.8, ls="--")
    ax1.axhline(0.5, color="k", lw=0.8, ls="-.")
    ax1.set_xlabel("n / d")
    ax1.set_ylabel(r"floor / $(d^2/n)$")
    ax1.set_ylim(0, 1.3)
    ax1.set_title(r"(b) $\Theta(d^2/n)$")
    for axis in (ax0.yaxis, ax1.xaxis):
        axis.set_minor_formatter(NullFormatter())
        axis.set_major_formatter(ScalarFormatter())
    ylo, yhi = ax0.get_ylim()
    yt = [t for t in (0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100) if ylo <= t <= yhi]
    ax0.set_yticks(yt)
    ax0.set_yticklabels([f"{t:g}" for t in yt])
    ax1.set_xticks(sorted(set(ratios)))
    ax1.set_xticklabels([f"{r:g}" for r in sorted(set(ratios))])
    legend_outside(fig, "below")
    return fig
