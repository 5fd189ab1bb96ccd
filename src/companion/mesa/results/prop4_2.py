r"""Proposition 4.2 of the mesa paper: beyond Assumption 4.1 the one-step-GD point is not critical (notebook
``mesa/prop4_2_beyond``).

What the page checks, and where:

* the trained ab of the unmasked full-one transformer, extrapolated in m, against the population GD beyond
  Assumption 4.1 (:func:`companion.mesa.evidence.equivariant_ab`), with the masked runs on the same training sets
  as a control variate (:func:`ab_beyond`); the falsifier is the one-step-GD value of the masked reduced system;
* the closed-form off-diagonal gradient (:func:`companion.mesa.theory.offdiag_gradient`) against the exact
  population gradient (:func:`offdiag_exact_error`) and against Monte Carlo at the page's size
  (:func:`offdiag_mc`);
* the first GD step of the trained transformer from every init (:func:`first_steps`; the runs: :func:`design`);
* Fig. 7 (:func:`weight_heatmaps`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.patches as mpatches
import numpy as np
import torch

from companion import stats
from companion.claims import ClaimSpec, ResultSpec
from companion.mesa import paper
from companion.mesa import theory as th
from companion.mesa.analysis import gradient_blocks
from companion.mesa.data import generate
from companion.mesa.empirical import exact_population
from companion.mesa.evidence import (
    MASKING_PAIR,
    ROUNDOFF32,
    EquivariantAb,
    ExtrapolatedAb,
    MaskingRuns,
    extrapolated_ab,
    masking_runs,
    paired_shift,
)
from companion.mesa.figures import init_label
from companion.mesa.results import init_tag
from companion.mesa.train import run
from companion.plotting import new_figure
from companion.seeds import MESA_OFFDIAG_MC
from companion.stats import Z_LEVEL

__all__ = ["CLAIMS", "RESULT", "tag", "manifest", "Design", "design", "paper_design", "paper_runs", "figure_runs",
           "replicates", "AbBeyond", "ab_beyond", "mc_data", "offdiag_exact_error", "BlockValue", "OffdiagGradient",
           "offdiag_mc", "first_steps",
           "record_ab_unmasked", "record_exact_formula", "record_mc", "record_first_step", "weight_heatmaps"]

_INVARIANT = "invariant diagonal manifold (gradient $0$)"
_NO_STEP = "invariant diagonal manifold (no off-diagonal step)"
#: why the first-step claims are supporting: one GD step is the training-set gradient times the step size
_FIRST_STEP = ("one GD step of the trainer from the init is minus the step size times the training set's gradient: "
               "the Monte-Carlo gradient of `mc_pv` and `mc_kq` again, at each init, through the training code")
#: the falsifier of the headline: Assumption 4.1's answer, the one-step-GD value of the reduced (diagonal) system
FALSIFIER_AB = "one-step GD on the diagonal (the masked reduced-system GD, limit $c^*$)"

CLAIMS = (
    ClaimSpec("ab_unmasked", "statistical", "trained", headline=True, prediction="companion.mesa.evidence.equivariant_ab",
              falsifier=FALSIFIER_AB, experiment=MASKING_PAIR),
    ClaimSpec("exact_formula", "numerics", "closed_form", prediction="companion.mesa.theory.offdiag_gradient"),
    ClaimSpec("mc_pv", "statistical", "monte_carlo",
              prediction="companion.mesa.theory.offdiag_gradient", falsifier=_INVARIANT),
    ClaimSpec("mc_kq", "statistical", "monte_carlo", prediction="companion.mesa.theory.offdiag_gradient",
              falsifier=_INVARIANT),
    ClaimSpec("first_step_pv_{init}", "statistical", "trained", prediction="companion.mesa.theory.offdiag_gradient",
              falsifier=_NO_STEP, supporting=_FIRST_STEP),
    ClaimSpec("first_step_kq_{init}", "statistical", "trained", prediction="companion.mesa.theory.offdiag_gradient",
              falsifier=_NO_STEP, supporting=_FIRST_STEP),
)

RESULT = ResultSpec(paper="mesa", number="Proposition 4.2", title="beyond Assumption 4.1: off the diagonal",
                    label="mesa-prop-4-2", notebook="mesa/prop4_2_beyond", module=__name__, claims=CLAIMS,
                    figures=("fig_mesa_fig7",), sweep="")


tag = init_tag  # the claim-id part of an init: 0p5_1p5


def manifest(inits) -> list[str]:
    """The claim ids the page's verdict declares for the diagonal inits ``inits``."""
    return ["ab_unmasked", "exact_formula", "mc_pv", "mc_kq"] + [f"first_step_{k}_{tag(ini)}" for ini in inits for k in ("pv", "kq")]


@dataclass(frozen=True)
class Design:
    """Every training run of the page (:func:`design`): one GD epoch from every init (``first_steps[a0, b0]``, keyword
    arguments of :func:`companion.mesa.train.run`) and the runs it shares with Theorem 4.3's page (``masking``,
    :class:`companion.mesa.evidence.MaskingRuns`)."""

    first_steps: dict
    masking: MaskingRuns

    def runs(self) -> list[dict]:
        """Every run of the page."""
        return list(self.first_steps.values()) + self.masking.runs()


def design(inits, lr: float, d: int, T: int, m: int, m_test: int, epochs: int, seed: int, m_rep: int,
           n_rep: int) -> Design:
    """The runs of the page: the full-one law at scale 1 with step ``lr``, one GD epoch from every init (the first
    step), the same from every init for ``epochs`` epochs, masked and unmasked, and the paired replicates
    (``n_rep`` at ``m_rep`` and ``m_rep/4``) from the middle init (:func:`companion.mesa.evidence.masking_runs`)."""
    first = {(a0, b0): dict(law="full_one", scale=1.0, d=d, T=T, m=m, m_test=10, a0=a0, b0=b0, lr=lr, epochs=1,
                            seed=seed) for a0, b0 in inits}
    return Design(first, masking_runs(inits, lr, d, T, m, m_test, epochs, seed, m_rep, n_rep))


def paper_design() -> Design:
    """:func:`design` at the paper's settings (:mod:`companion.mesa.paper`, the page's defaults)."""
    rep = paper.REPLICATES
    return design(paper.INITS, paper.TABLE1["full_one"][0][1], **paper.COMMON, m_rep=rep["m_rep_mask"],
                  n_rep=rep["n_rep_mask"])


def paper_runs() -> list[dict]:
    """Every run of the page at the paper's settings (:func:`paper_design`)."""
    return paper_design().runs()


def figure_runs(design: Design) -> tuple[dict, dict]:
    """The runs from every init of the ``design``: ``(unmasked, masked)``, each by init
    (:func:`companion.mesa.train.run`, cached)."""
    return ({ini: run(**kw) for ini, kw in design.masking.unmasked.items()},
            {ini: run(**kw) for ini, kw in design.masking.masked.items()})


def replicates(design: Design) -> tuple[dict, dict]:
    """The paired replicates of the ``design`` extrapolated in m (:func:`companion.mesa.evidence.extrapolated_ab`):
    ``(unmasked, masked)``."""
    return (extrapolated_ab(design.masking.replicates_unmasked), extrapolated_ab(design.masking.replicates_masked))


@dataclass(frozen=True)
class AbBeyond:
    """The evidence of the claim ``ab_unmasked`` (:func:`ab_beyond`): the control-variate estimate ``measured``
    against the unmasked population GD ``predicted``, their combined ``se`` and ``dof``, the falsifier's value, and
    the paired shift (unmasked minus masked) with its ``se_shift``, ``dof_shift``, its population value
    ``shift_predicted`` and that value's Monte-Carlo ``se_pred``."""

    measured: float
    predicted: float
    se: float
    dof: float
    falsifier_value: float
    shift: float
    se_shift: float
    dof_shift: float
    shift_predicted: float
    se_pred: float


def ab_beyond(rep_u: ExtrapolatedAb, rep_m: ExtrapolatedAb, eq: EquivariantAb, ab_masked_pop: float) -> AbBeyond:
    r"""Prop 4.2 on the trained transformer: the unmasked ab at the last epoch, extrapolated to m -> infinity, by the
    control-variate estimator

    .. math:: \widehat{ab}_u = ab^{\rm pop}_{m} + \hat\Delta_\infty,\qquad
              \hat\Delta_\infty=\tfrac13\big(4\,\overline{\Delta}(m)-\overline{\Delta}(m/4)\big),

    :math:`\Delta_k` the unmasked minus the masked trained ab on the same training set k
    (:func:`companion.mesa.evidence.paired_shift`), :math:`ab^{\rm pop}_m` the masked reduced-system population GD
    (``ab_masked_pop``, the control variate's known mean: :prf:ref:`mesa-thm-4-3`). Against the unmasked population
    GD ``eq`` (:func:`companion.mesa.evidence.equivariant_ab`, independent Monte-Carlo moments); the falsifier is
    :math:`ab^{\rm pop}_m` itself, so it is rejected exactly when the measured shift is nonzero. The standard error
    adds the replicate spread of the differences and the Monte-Carlo SE of the prediction (Welch)."""
    sh = paired_shift(rep_u, rep_m)
    se, dof = stats.welch((sh.se, sh.dof), (eq.se_ab, eq.dof))
    return AbBeyond(measured=ab_masked_pop + sh.measured, predicted=eq.ab, se=se, dof=dof,
                    falsifier_value=float(ab_masked_pop), shift=sh.measured, se_shift=sh.se, dof_shift=sh.dof,
                    shift_predicted=eq.ab - ab_masked_pop, se_pred=eq.se_ab)


def mc_data(d: int, T: int, m_mc: int, seed: int):
    """The full-one sequences of the Monte-Carlo gradient check: ``m_mc`` of them, seed stream :data:`~companion.seeds.MESA_OFFDIAG_MC`, ``[seed, 7]``
    (independent of every training and test set), complex128."""
    return generate("full_one", m_mc, d, T, 1.0, MESA_OFFDIAG_MC.rng(seed), torch.complex128)


def offdiag_exact_error(points, sizes=((2, 6), (3, 5))) -> float:
    r"""Max relative error of the closed-form off-diagonal gradient (:func:`companion.mesa.theory.offdiag_gradient`, full-one)
    against the exact population gradient (phase grid) at every diagonal point and size (d, T)."""
    err = 0.0
    for dd, TT in sizes:
        data, w = exact_population("full_one", dd, TT)
        for a, b in points:
            g = gradient_blocks(data, a, b, weights=w)
            f_pv, f_kq = th.offdiag_gradient("full_one", 1.0, dd, TT, a, b)
            err = max(err, np.abs(g["pv_off"].real - f_pv).max() / abs(f_pv), np.abs(g["kq_off"].real - f_kq).max() / abs(f_kq))
    return float(err)


@dataclass(frozen=True)
class BlockValue:
    """One red block's mean off-diagonal value: ``measured`` with its standard error ``se`` and, where there is one,
    the closed form's ``predicted``."""

    measured: float
    se: float
    predicted: float = float("nan")


@dataclass(frozen=True)
class OffdiagGradient:
    """The mean off-diagonal entry of each red block, ``pv`` (:math:`W^{PV}`) and ``kq`` (:math:`W^{KQ}_{21}`)
    (:class:`BlockValue` each), with the degrees of freedom ``dof`` of their standard errors."""

    pv: BlockValue
    kq: BlockValue
    dof: int

    def blocks(self):
        """``(name, BlockValue)`` of the two red blocks."""
        return (("pv", self.pv), ("kq", self.kq))


def offdiag_mc(data, a: float, b: float, n_groups: int) -> OffdiagGradient:
    r"""Monte-Carlo off-diagonal red-block gradient at (aI, bI): the mean over all (exchangeable) off-diagonal
    entries, per group of sequences; mean and SE over the groups (:func:`companion.stats.mean_se`), per block."""
    per = []
    for ix in np.array_split(np.arange(data.m), n_groups):
        g = gradient_blocks(data.subset(ix), a, b)
        per.append((g["pv_off"].real.mean(), g["kq_off"].real.mean()))
    per = np.array(per)
    return OffdiagGradient(BlockValue(*stats.mean_se(per[:, 0])), BlockValue(*stats.mean_se(per[:, 1])), dof=n_groups - 1)


def first_steps(design: Design, n_groups: int, sample) -> dict:
    r"""Prop 4.2 on the trained transformer, per init: one GD epoch of :func:`companion.mesa.train.run` from
    (a0 I, b0 I) (``design.first_steps``); the mean signed off-diagonal entry of each red block after the step
    against -lr times the population gradient: an :class:`OffdiagGradient` per init, each block with its
    ``predicted`` step.

    The standard error is that of a mean over the training set's m sequences, :math:`\sigma/\sqrt m`, with the
    per-sequence spread :math:`\sigma` of the off-diagonal gradient at the init measured on ``sample``, full-one
    sequences independent of the training set (the page's Monte-Carlo sample, :func:`mc_data`): over ``n_groups``
    groups of :math:`m_s` sequences (:func:`offdiag_mc`) the group means' SE times :math:`\sqrt{m_s/m}`, on
    ``n_groups`` - 1 degrees of freedom. Not the training set's own spread: the per-sequence gradients are skewed,
    so a training set without the large ones would have a low mean and a low standard error at once."""
    out = {}
    for (a0, b0), kw in design.first_steps.items():
        law, d, T, m, lr = kw["law"], kw["d"], kw["T"], kw["m"], kw["lr"]
        if (sample.T, sample.d) != (T, d):
            raise ValueError(f"the sample's (T, d) is {(sample.T, sample.d)}; the runs' is {(T, d)}")
        r = run(**kw)
        off = ~np.eye(d, dtype=bool)
        meas_pv = float(r.W_PV[:, :d].real[off].mean())
        meas_kq = float(r.W_KQ[d:, :d].real[off].mean())
        spread = offdiag_mc(sample, a0, b0, n_groups)
        to_m = math.sqrt(sample.m / m)  # the SE of a mean over the sample's sequences -> over the training set's m
        f_pv, f_kq = th.offdiag_gradient(law, 1.0, d, T, a0, b0)
        out[a0, b0] = OffdiagGradient(BlockValue(meas_pv, lr * spread.pv.se * to_m, -lr * f_pv),
                                      BlockValue(meas_kq, lr * spread.kq.se * to_m, -lr * f_kq), dof=spread.dof)
    return out


# ---- the verdict

#: the red blocks in the records' words, TeX (MathJax macros of the book)
_BLOCK = {"pv": r"\WPV", "kq": r"\WKQ_{21}"}


def record_ab_unmasked(v, beyond: AbBeyond, rep_u: ExtrapolatedAb, a0: float, b0: float, epochs: int, m_rep: int, n_rep: int,
                       m_mom: int) -> None:
    r"""Claim ``ab_unmasked`` (the headline): the unmasked trained ab extrapolated in m with the masked runs as
    control variate (:func:`ab_beyond`) against the unmasked population GD beyond Assumption 4.1, at ``Z_LEVEL`` SE (Welch)
    plus complex64 round-off; the falsifier is the masked reduced-system population GD (``FALSIFIER_AB``)."""
    v.statistical(
        "ab_unmasked",
        quantity=rf"unmasked full-one training, init $({a0:g}, {b0:g})$: trained $ab$ at epoch {epochs}, extrapolated "
                 rf"from $m = {m_rep}$ and $m = {rep_u.m_small}$ with the masked runs on the same training sets as "
                 "control variate, vs the unmasked population GD beyond Assumption 4.1",
        predicted=beyond.predicted, measured=beyond.measured, se=beyond.se, dof=beyond.dof,
        floor=ROUNDOFF32 * abs(beyond.predicted), falsifier=FALSIFIER_AB,
        falsifier_value=beyond.falsifier_value, headline=True,
        reason=f"{Z_LEVEL:.3g} SE of {n_rep} paired replicate training sets per size (unmasked minus masked, extrapolated in $m$) "
               "and of the prediction's Monte-Carlo moments; plus complex64 round-off",
        detail=f"level of {Z_LEVEL:.3g} SE: {n_rep} paired replicate training sets per size (Richardson of the differences) and "
               f"the jackknife SE of the prediction's Monte-Carlo moments ({m_mom} sequences), "
               f"{stats.band_words(beyond.dof)} (Welch); + complex64 round-off")


def record_exact_formula(v, exact_err: float, n_points: int) -> None:
    """Claim ``exact_formula``: the closed-form off-diagonal gradient against exact population autograd
    (:func:`offdiag_exact_error`) at float64 round-off."""
    v.numerics(
        "exact_formula",
        quantity=f"off-diagonal gradient at {n_points} diagonal points, $(d, T) = (2, 6), (3, 5)$: exact population "
                 "autograd vs closed form (max rel. error)",
        predicted=0.0, measured=exact_err, tolerance=1e-9,
        reason="exact phase-grid expectation: float64 round-off only",
        detail="the largest relative error over both red blocks, every diagonal point and both sizes "
               "(`companion.mesa.results.prop4_2.offdiag_exact_error`), against a tolerance of $10^{-9}$")


def record_mc(v, mc: OffdiagGradient, f_pv: float, f_kq: float, a: float, b: float, d: int, T: int,
              n_groups: int) -> None:
    """Claims ``mc_pv`` and ``mc_kq``: the Monte-Carlo mean off-diagonal gradient of each red block at (a, b)
    (:func:`offdiag_mc`) against the closed form, at ``Z_LEVEL`` SE over groups of sequences; the falsifier is an invariant
    diagonal manifold (gradient 0)."""
    for (k, q), f in zip(mc.blocks(), (f_pv, f_kq)):
        v.statistical(
            f"mc_{k}",
            quantity=rf"mean off-diagonal $\partial L/\partial {_BLOCK[k]}$ at $({a:g}, {b:g})$, $d = {d}$, $T = {T}$: "
                     "Monte Carlo vs formula",
            predicted=f, measured=q.measured, se=q.se, dof=mc.dof, floor=1e-12 * abs(f),
            falsifier=_INVARIANT, falsifier_value=0.0,
            reason=f"{Z_LEVEL:.3g} SE over {n_groups} groups of sequences, Student-t; plus round-off",
            detail=f"level of {Z_LEVEL:.3g} SE: the SE over {n_groups} groups of sequences, Student-t on {mc.dof} degrees of "
                   "freedom; + round-off ($10^{-12}$ of the formula)")


def record_first_step(v, steps: dict, n_groups: int, m: int, m_mc: int) -> None:
    r"""Claims ``first_step_{pv,kq}_{init}``: the mean off-diagonal entry of each red block after the first GD step
    of the trained transformer from every init (:func:`first_steps`) against :math:`-\eta` times the closed-form
    gradient, at ``Z_LEVEL`` SE of a mean over the ``m`` training sequences, the per-sequence spread measured on
    ``m_mc`` independent ones in ``n_groups`` groups; the falsifier is no off-diagonal step."""
    for ini, step in steps.items():
        for k, q in step.blocks():
            v.statistical(
                f"first_step_{k}_{tag(ini)}",
                quantity=rf"init $({ini[0]:g}, {ini[1]:g})$: mean off-diagonal ${_BLOCK[k]}$ entry after the first GD "
                         r"step of the trained transformer vs $-\eta$ times the formula",
                predicted=q.predicted, measured=q.measured, se=q.se, dof=step.dof,
                floor=1e-6 * abs(q.predicted), falsifier=_NO_STEP, falsifier_value=0.0,
                reason=f"{Z_LEVEL:.3g} SE of a mean over the {m} training sequences, their spread measured on {m_mc} "
                       "independent ones, Student-t; plus complex64 round-off",
                detail=rf"level of {Z_LEVEL:.3g} SE: the SE of the training set's mean gradient (times $\eta$), from the "
                       f"spread of {n_groups} groups of {m_mc} independent sequences (the Monte-Carlo check's), "
                       f"Student-t on {step.dof} degrees of freedom; + complex64 round-off ($10^{{-6}}$ of the "
                       "prediction)")


# ---- figures


def weight_heatmaps(runs: dict, inits, d: int):
    """Fig. 7: Re W_KQ and Re W_PV of the trained runs ``runs[ini]`` with the red blocks (W_KQ21, W_PV11) outlined
    in red; one colour scale per matrix over all inits, 1.2 x the largest entry off the red diagonals."""
    fig, axes = new_figure(ncols=len(inits), nrows=2, width=3.0, height=2.7, squeeze=False)
    eye = np.eye(d, dtype=bool)
    for rr, (key, name, (x0, y0)) in enumerate([("W_KQ", "$W^{KQ}$", (0, d)), ("W_PV", "$W^{PV}$", (0, 0))]):
        mats = {ini: getattr(runs[ini], key).real for ini in inits}
        vmax = 1.2 * max(np.abs(np.where(np.pad(eye, ((y0, M.shape[0] - y0 - d), (x0, M.shape[1] - x0 - d))), 0, M)).max()
                         for M in mats.values())
        for c, ini in enumerate(inits):
            ax = axes[rr][c]
            im = ax.imshow(mats[ini], cmap="RdBu_r", vmin=-vmax, vmax=vmax)
            ax.add_patch(mpatches.Rectangle((x0 - 0.5, y0 - 0.5), d, d, fill=False, ec="red", lw=2))  # the red block
            ax.set_title(f"{name}, {init_label(ini)}", fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
        fig.colorbar(im, ax=list(axes[rr]), shrink=0.85, label=f"Re {name} (shared scale)")
    return fig
