r"""Theorem 4.3 of the mesa paper: masking the off-diagonal gradients (notebook ``mesa/thm4_3_masking``).

For :math:`x_1=\mathbf 1`, training with the off-diagonal red-block gradients masked converges to the
one-step-GD point :math:`ab=c^*`, whose loss the unmasked transformer beats. What the page checks, and where:

* masked ab and test loss, extrapolated in m, against the population GD (:func:`replicates`; the runs:
  :func:`design`), with what the extrapolation leaves of the
  freely trained blocks' feedback as a measured systematic error of ab
  (:func:`companion.mesa.evidence.offmanifold_residual`: the masked population dynamics stay on the diagonal
  manifold, so that feedback vanishes as m -> infinity);
* the masked test loss and the unmasked-minus-masked test-loss gap, each paired per test sequence with the
  prediction's own models (:func:`paired_with_prediction`), against the population loss and the 4-parameter
  equivariant population GD (:func:`masking_gap` with the Monte-Carlo moments
  :func:`companion.mesa.evidence.equivariant_moments`), and the unmasked off-diagonal entries;
* the per-init sign of the paired test-loss difference (:func:`paired_differences`), where the population GD
  predicts a gain at that init;
* the figure (:func:`masking`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from companion import stats
from companion.claims import ClaimSpec, ResultSpec
from companion.mesa import paper
from companion.mesa import theory as th
from companion.mesa.analysis import per_sequence_loss, test_data, weights
from companion.mesa.data import generate
from companion.mesa.evidence import (
    MASKING_PAIR,
    ROUNDOFF32,
    ExtrapolatedAb,
    ExtrapolatedLoss,
    MaskingRuns,
    equivariant_ab,
    extrapolated_ab,
    masking_runs,
    offmanifold_floor,
    offmanifold_words,
    population_ab,
    richardson_paired,
)
from companion.mesa.figures import POPULATION, TRAINED, init_label
from companion.mesa.results import init_tag
from companion.mesa.train import run
from companion.plotting import COLORS, legend_outside, new_figure
from companion.seeds import MESA_LOSS_EVAL
from companion.stats import Z_LEVEL

__all__ = ["CLAIMS", "RESULT", "tag", "manifest", "design", "paper_design", "paper_runs", "figure_runs", "replicates",
           "paired_differences", "loss_sample", "MaskingGap", "masking_gap", "equivariant_losses", "PairedLosses",
           "paired_with_prediction",
           "record_ab_masked", "record_loss_masked", "record_masking_gap", "record_offdiag", "record_unmasked_lower",
           "masking"]

_COSTS_NOTHING = "masking costs nothing (the one-step-GD model is optimal)"
#: the falsifier of the headline: the mask changes nothing, training ends where the unmasked population GD does
FALSIFIER_AB = "the mask changes nothing (the unmasked population GD beyond Assumption 4.1)"
_LOSS_FALSIFIER = r"$ab$ at the $T\to\infty$ constant $1$ (its population loss)"
_NO_OFFDIAG = "invariant diagonal manifold (off-diagonal entries $0$)"
_OPTIMAL = r"masking costs nothing (the one-step-GD solution is optimal for $x_1 = \mathbf 1$)"

CLAIMS = (
    ClaimSpec("ab_masked", "statistical", "trained", headline=True, prediction="companion.mesa.evidence.population_ab",
              falsifier=FALSIFIER_AB, experiment=MASKING_PAIR),
    ClaimSpec("loss_masked", "statistical", "trained", prediction="companion.mesa.theory.population_loss",
              falsifier=_LOSS_FALSIFIER, experiment=MASKING_PAIR),
    ClaimSpec("masking_gap", "statistical", "trained",  # its falsifier (no gain, 0) is no close competitor
              prediction="companion.mesa.results.thm4_3.masking_gap", falsifier=_COSTS_NOTHING,
              experiment=MASKING_PAIR),
    ClaimSpec("offdiag_kq", "statistical", "trained", prediction="companion.mesa.evidence.equivariant_ab",
              falsifier=_NO_OFFDIAG, experiment=MASKING_PAIR),
    ClaimSpec("offdiag_pv", "statistical", "trained", prediction="companion.mesa.evidence.equivariant_ab",
              falsifier=_NO_OFFDIAG, experiment=MASKING_PAIR),
    ClaimSpec("unmasked_lower_{init}", "qualitative", "trained",  # the sign of the population GD's gap at that init
              prediction="companion.mesa.results.thm4_3.masking_gap",
              falsifier=_OPTIMAL, experiment=MASKING_PAIR,
              supporting="the sign of the gap that `masking_gap` measures and predicts at the middle init, per init "
                         "on one training set each: the same fact, weaker",
              undecided="the population GD's predicted gain (less its Monte-Carlo error at the level) is under twice "
                        "the level's standard errors of the paired test: a sign test at the level misses it by chance "
                        "more often than it raises a false alarm"),
)

RESULT = ResultSpec(paper="mesa", number="Theorem 4.3", title="masking the off-diagonal gradients",
                    label="mesa-thm-4-3", notebook="mesa/thm4_3_masking", module=__name__, claims=CLAIMS,
                    figures=("fig_mesa_mask",), sweep="")


tag = init_tag  # the claim-id part of an init: 0p5_1p5


def manifest(inits) -> list[str]:
    """The claim ids the page's verdict declares for the diagonal inits ``inits``."""
    return ["ab_masked", "loss_masked", "masking_gap", "offdiag_kq", "offdiag_pv"] + [
        f"unmasked_lower_{tag(ini)}" for ini in inits]


def design(inits, lr: float, d: int, T: int, m: int, m_test: int, epochs: int, seed: int, m_rep: int,
           n_rep: int) -> MaskingRuns:
    """The runs of the page (:func:`companion.mesa.evidence.masking_runs`): the full-one law from every init, masked
    and unmasked at m, and the paired replicates (``n_rep`` at ``m_rep`` and ``m_rep/4``) from the middle init."""
    return masking_runs(inits, lr, d, T, m, m_test, epochs, seed, m_rep, n_rep)


def paper_design() -> MaskingRuns:
    """:func:`design` at the paper's settings (:mod:`companion.mesa.paper`, the page's defaults)."""
    rep = paper.REPLICATES
    return design(paper.INITS, paper.TABLE1["full_one"][0][1], **paper.COMMON, m_rep=rep["m_rep_mask"],
                  n_rep=rep["n_rep_mask"])


def paper_runs() -> list[dict]:
    """Every run of the page at the paper's settings (:func:`paper_design`)."""
    return paper_design().runs()


def figure_runs(design: MaskingRuns) -> tuple[dict, dict]:
    """The runs from every init of the ``design``: ``(masked, unmasked)``, each by init
    (:func:`companion.mesa.train.run`, cached)."""
    return ({ini: run(**kw) for ini, kw in design.masked.items()},
            {ini: run(**kw) for ini, kw in design.unmasked.items()})


def replicates(design: MaskingRuns) -> tuple[dict, dict]:
    """The replicates of the ``design`` extrapolated in m (:func:`companion.mesa.evidence.extrapolated_ab`), each with
    its whole-sequence test loss on the same ``m_test`` common test sequences: ``(masked, unmasked)``, the masked one
    with what the extrapolation leaves of the other blocks' feedback (``off``)."""
    m_loss = next(iter(design.masked.values()))["m_test"]
    return (extrapolated_ab(design.replicates_masked, m_loss=m_loss, offmanifold=True),
            extrapolated_ab(design.replicates_unmasked, m_loss=m_loss))


def paired_differences(masked: dict, unmasked: dict, sample) -> dict:
    r"""Per init: the mean of the per-sequence test-loss difference, unmasked minus masked, on the runs' own test
    sequences (those of the first masked run: every run of one seed has them), and its standard error
    :math:`\sigma/\sqrt{m_{\rm test}}`, the per-sequence spread :math:`\sigma` of the same two models' difference
    measured on ``sample``, sequences of the law independent of the runs' test set (:func:`loss_sample`). Not the
    test set's own spread: the per-sequence losses are skewed, so a test set without the large ones would have a
    small difference and a small standard error at once."""
    td = test_data(masked[next(iter(masked))])
    out = {}
    for ini in masked:
        mean = float(np.mean(per_sequence_loss(td, *weights(unmasked[ini])) - per_sequence_loss(td, *weights(masked[ini]))))
        spread = np.std(per_sequence_loss(sample, *weights(unmasked[ini])) - per_sequence_loss(sample, *weights(masked[ini])),
                        ddof=1)
        out[ini] = (mean, float(spread / np.sqrt(td.m)))
    return out


def loss_sample(design: MaskingRuns):
    """Full-one sequences independent of every run's training and test sets: the replicates' common test set
    (:func:`paired_with_prediction`; stream :data:`~companion.seeds.MESA_LOSS_EVAL`), as many as a run's test set."""
    r = design.replicates_masked
    m_test = next(iter(design.masked.values()))["m_test"]
    return generate(r.law, m_test, r.d, r.T, r.scale, MESA_LOSS_EVAL.rng(r.seed), torch.complex128)


@dataclass(frozen=True)
class MaskingGap:
    r"""The predicted test-loss gap, unmasked minus masked, of the population GD (:func:`masking_gap`): ``predicted``
    with its Monte-Carlo ``se``; the unmasked path (a, a', b, b') per epoch (``path``), the jackknife SE of its end
    (``se_end``, ``se_end_dof`` degrees of freedom), the two endpoints ``c_u``, ``c_m`` and their losses ``loss_u``,
    ``loss_m``, and the moments' z against the closed form, :math:`E G_{11}=d\alpha` (``z_G11``) and
    :math:`E h_1=d\beta` (``z_h1``)."""

    predicted: float
    se: float
    path: np.ndarray
    se_end: np.ndarray
    se_end_dof: int
    grad_end: np.ndarray
    c_u: np.ndarray
    c_m: np.ndarray
    loss_u: float
    loss_m: float
    z_G11: float
    z_h1: float


def masking_gap(d: int, T: int, a0: float, b0: float, lr: float, epochs: int, moments: dict) -> MaskingGap:
    r"""Thm 4.3 for :math:`x_1=\mathbf 1`: the predicted test-loss difference, unmasked minus masked, of the
    population GD from (a0 I, b0 I) after ``epochs`` steps (:func:`companion.mesa.evidence.equivariant_ab` with the
    Monte-Carlo moments :func:`companion.mesa.evidence.equivariant_moments`, masked with the exact reduced system).

    The masked endpoint is :math:`c_m=(ab,0,0,0)` of :func:`companion.mesa.evidence.population_ab`; the unmasked one :math:`c_u` follows the
    4-parameter population GD. The difference is the mean of the per-sequence differences
    :math:`\ell_n(c_u)-\ell_n(c_m)` (exact per sequence), its standard error the Monte-Carlo SE over the
    sequences (:func:`companion.stats.mean_se`). Also returned: the unmasked endpoint p = (a, a', b, b') with its
    jackknife SE and the gap's gradient there, :math:`J(\bar Gc_u-\bar h)` with :math:`J_{kj}=\partial c_j/\partial p_k`,
    and the check of the moments against the closed form, :math:`E G_{11}=d\alpha`, :math:`E h_1=d\beta`."""
    G, h, y = moments["G"], moments["h"], moments["y"]
    eq = equivariant_ab(d, T, a0, b0, lr, epochs, moments)
    a, ap, b, bp = eq.path[-1]
    c_u = th.equivariant_c(a, ap, b, bp)
    jac = np.array([[b, bp, 0, 0], [0, 0, b, bp], [a, 0, ap, 0], [0, a, 0, ap]])  # rows: d c / d(a, a', b, b')
    c_m = np.array([population_ab("full_one", 1.0, d, T, a0, b0, lr, epochs)[-1], 0.0, 0.0, 0.0])

    def per_seq(c):
        return 0.5 * (np.einsum("k,nkl,l->n", c, G, c) - 2 * h @ c + y)

    gap, se = stats.mean_se(per_seq(c_u) - per_seq(c_m))
    al, be = th.alpha_beta("full_one", 1.0, d, T)
    g11, se11 = stats.mean_se(G[:, 0, 0])
    h1, se1 = stats.mean_se(h[:, 0])
    return MaskingGap(predicted=gap, se=se, path=eq.path, se_end=eq.se_end, se_end_dof=eq.dof,
                      grad_end=jac @ (G.mean(0) @ c_u - h.mean(0)), c_u=c_u, c_m=c_m,
                      loss_u=float(per_seq(c_u).mean()), loss_m=float(per_seq(c_m).mean()),
                      z_G11=(g11 - d * al) / se11, z_h1=(h1 - d * be) / se1)


def equivariant_losses(data, p) -> np.ndarray:
    r"""Per-sequence whole-sequence loss of the model whose only nonzero blocks are the equivariant red blocks
    :math:`W^{KQ}_{21}=aI+a'(J-I)`, :math:`W^{PV}_{11}=bI+b'(J-I)`, ``p`` = (a, a', b, b')
    (:func:`companion.mesa.theory.equivariant_c`; (c, 0, 1, 0) is the diagonal model at ab = c), on ``data``."""
    d = data.d
    a, ap, b, bp = (float(x) for x in p)
    eye = torch.eye(d, dtype=torch.complex128)
    off = torch.ones(d, d, dtype=torch.complex128) - eye
    W_KQ = torch.zeros(2 * d, 2 * d, dtype=torch.complex128)
    W_PV = torch.zeros(d, 2 * d, dtype=torch.complex128)
    W_KQ[d:, :d] = a * eye + ap * off
    W_PV[:, :d] = b * eye + bp * off
    return per_sequence_loss(data, W_KQ, W_PV)


@dataclass(frozen=True)
class PairedLosses:
    """The masked test loss (``loss``) and the test-loss gap unmasked minus masked (``gap``) of the replicates,
    each extrapolated in m and paired per test sequence with the prediction's own models
    (:func:`paired_with_prediction`); ``se_gap_prediction`` is the Monte-Carlo error of the predicted gap that the
    pairing leaves (that of the unmasked population GD's endpoint), with ``dof_gap_prediction`` degrees of freedom."""

    loss: ExtrapolatedLoss
    gap: ExtrapolatedLoss
    se_gap_prediction: float
    dof_gap_prediction: int


def _controlled(big: np.ndarray, small: np.ndarray, control: np.ndarray, mean: float) -> ExtrapolatedLoss:
    """:func:`companion.mesa.evidence.richardson_paired` of the per-sequence ``big`` and ``small`` (replicates by
    test sequences) minus the ``control`` on the same sequences, plus the control's expectation ``mean``."""
    q = richardson_paired(big - control, small - control)
    return replace(q, measured=q.measured + mean, mean_big=q.mean_big + mean, mean_small=q.mean_small + mean)


def paired_with_prediction(design: MaskingRuns, rep: ExtrapolatedAb, rep_u: ExtrapolatedAb,
                           gap: MaskingGap, sample) -> PairedLosses:
    r"""The test losses of the replicates (:func:`replicates`) measured against the prediction's own models on the
    same common test sequences ``sample`` (:func:`loss_sample`: a control variate; the sequences of
    :func:`companion.mesa.evidence.extrapolated_ab`'s ``m_loss``, stream :data:`~companion.seeds.MESA_LOSS_EVAL`).

    *Masked loss.* With :math:`\ell_n` the loss of test sequence n, the diagonal model at the population-GD
    :math:`ab=c` has the exactly known mean :math:`L(c)` (:func:`companion.mesa.theory.population_loss`), so

    .. math:: \hat L = L(c) + \tfrac13\big(4\,\overline{\ell(W_m)-\ell(c)}-\overline{\ell(W_{m/4})-\ell(c)}\big)

    estimates the trained models' expected loss without the test-set noise the two share: a per-sequence loss is
    heavy-tailed, and its plain mean over the test set has an error that correlates with its own standard error.
    The standard error: the replicate spread and the test-set SE of the paired combination (Welch).

    *Gap.* The trained gap unmasked minus masked, per replicate and sequence, minus the population GD's
    :math:`\ell_n(c_u)-\ell_n(c_m)` on the same sequence, extrapolated likewise, plus the predicted gap
    ``gap.predicted``: measured minus predicted is then the paired term alone, and the Monte-Carlo error of the
    predicted mean cancels. What remains of the prediction's error is that of the endpoint :math:`c_u`: its
    jackknife SEs (``gap.se_end``) through the gap's gradient, bounded by
    :math:`\sum_k|\partial\Delta/\partial p_k|\,\mathrm{se}_k` whatever their correlation.
    """
    r = design.replicates_masked
    big, small = rep.loss.big, rep.loss.small
    td = sample
    if td.m != big.shape[1]:
        raise ValueError(f"the replicates' losses are on {big.shape[1]} test sequences; the sample has {td.m}")
    c_m = float(gap.c_m[0])
    ell_c = equivariant_losses(td, (rep.predicted, 0.0, 1.0, 0.0))
    L_c = float(th.population_loss(r.law, r.scale, r.d, r.T, rep.predicted))
    loss = replace(_controlled(big, small, ell_c, L_c), zero_loss=rep.loss.zero_loss)
    ell_gap = equivariant_losses(td, gap.path[-1]) - equivariant_losses(td, (c_m, 0.0, 1.0, 0.0))
    gap_meas = _controlled(rep_u.loss.big - big, rep_u.loss.small - small, ell_gap, gap.predicted)
    return PairedLosses(loss=loss, gap=gap_meas, se_gap_prediction=float(np.abs(gap.grad_end * gap.se_end).sum()),
                        dof_gap_prediction=gap.se_end_dof)


# ---- the verdict


def _sizes(m_rep: int, rep: ExtrapolatedAb) -> str:
    """The two training-set sizes of an extrapolation in m, as maths."""
    return f"$m = {m_rep}$ and $m = {rep.m_small}$"


def record_ab_masked(v, rep: ExtrapolatedAb, gap: MaskingGap, a0: float, b0: float, epochs: int, m_rep: int, n_rep: int) -> None:
    """Claim ``ab_masked`` (the headline): the masked trained ab extrapolated in m against the masked population GD
    (limit c*), at ``Z_LEVEL`` SE (Student-t, Welch) plus what the extrapolation leaves of the off-manifold feedback
    (:func:`companion.mesa.evidence.offmanifold_floor`) and complex64 round-off; the falsifier is the unmasked
    population GD's ab (``gap.c_u[0]``, :func:`masking_gap`)."""
    r = rep.off.measured
    v.statistical(
        "ab_masked",
        quantity=f"masked training, init $({a0:g}, {b0:g})$: trained $ab$ at epoch {epochs}, extrapolated from "
                 f"{_sizes(m_rep, rep)}, vs population GD (limit: the masked $c^*$)",
        predicted=rep.predicted, measured=rep.measured, se=rep.se, dof=rep.dof,
        floor=offmanifold_floor(rep.floor, rep.off),
        falsifier=FALSIFIER_AB, falsifier_value=float(gap.c_u[0]), headline=True,
        reason=f"{Z_LEVEL:.3g} SE of {n_rep} replicate training sets per size, extrapolated in $m$, Student-t; plus the measured "
               f"off-manifold remnant (${r / rep.se:+.2f}$ SE) and round-off",
        detail=f"level of {Z_LEVEL:.3g} SE; the SE from {n_rep} replicate training sets per size (Richardson), Student-t on "
               f"{rep.dof:.1f} Welch degrees of freedom; + {offmanifold_words(rep.off, se=rep.se)} "
               "+ complex64 round-off")


def record_loss_masked(v, rep: ExtrapolatedAb, paired: PairedLosses, L_pred: float, L_fal: float, a0: float,
                       b0: float, m_rep: int, n_rep: int, m_test: int) -> None:
    r"""Claim ``loss_masked``: the masked whole-sequence test loss extrapolated in m and paired with the
    population-GD model on the same test sequences (``paired.loss``, :func:`paired_with_prediction`) against the
    population loss ``L_pred`` at the population-GD ab, at ``Z_LEVEL`` SE (Welch); the falsifier ``L_fal`` is the population
    loss at the :math:`T\to\infty` constant 1."""
    q = paired.loss
    v.statistical(
        "loss_masked",
        quantity=f"masked training, init $({a0:g}, {b0:g})$: whole-sequence test loss, extrapolated from "
                 f"{_sizes(m_rep, rep)} ($1/m$ law), vs population loss at the population-GD $ab$",
        predicted=L_pred, measured=q.measured, se=q.se, dof=q.dof, floor=1e-12 * q.zero_loss,
        falsifier=_LOSS_FALSIFIER, falsifier_value=L_fal,
        reason=f"{Z_LEVEL:.3g} SE of {n_rep} replicate training sets per size and of the {m_test} common i.i.d. test sequences, "
               "each paired with the population-GD model, extrapolated in $m$ (Welch); plus round-off",
        detail=f"level of {Z_LEVEL:.3g} SE: {n_rep} replicate training sets per size and the {m_test} common i.i.d. test "
               "sequences, on which the loss of the population-GD model (known mean) is subtracted sequence by "
               f"sequence and its population loss added, {stats.band_words(q.dof)} (Welch); + round-off "
               "($10^{-12}$ of the zero predictor's loss)")


def record_masking_gap(v, paired: PairedLosses, gap: MaskingGap, rep: ExtrapolatedAb, a0: float, b0: float,
                       m_rep: int, n_rep: int, m_test: int, m_mc: int) -> None:
    """Claim ``masking_gap``: the test-loss gap unmasked minus masked extrapolated in m and paired with the population
    GD's gap on the same test sequences (``paired.gap``, :func:`paired_with_prediction`) against the 4-parameter
    population GD (:func:`masking_gap`), at ``Z_LEVEL`` SE of the pair and of the prediction's endpoint (Welch); the falsifier
    is no gain (0)."""
    q = paired.gap
    gap_se, gap_dof = stats.welch((q.se, q.dof), (paired.se_gap_prediction, paired.dof_gap_prediction))
    v.statistical(
        "masking_gap",
        quantity=f"init $({a0:g}, {b0:g})$: test loss unmasked minus masked (same training and test sets), "
                 f"extrapolated from {_sizes(m_rep, rep)} ($1/m$ law), vs the 4-parameter population GD",
        predicted=gap.predicted, measured=q.measured, se=gap_se, dof=gap_dof,
        floor=1e-12 * rep.loss.zero_loss, falsifier=_COSTS_NOTHING, falsifier_value=0.0,
        reason=f"{Z_LEVEL:.3g} SE of {n_rep} paired replicate training sets per size and of the {m_test} common test sequences, "
               "each paired with the population GD's gap, and of the prediction's endpoint (Welch); plus round-off",
        detail=f"level of {Z_LEVEL:.3g} SE: {n_rep} paired replicate training sets per size and the {m_test} common test "
               "sequences, on which the population GD's gap is subtracted sequence by sequence (its Monte-Carlo mean "
               f"over {m_mc} sequences added back, so that its error cancels from the comparison), and the jackknife "
               "SE of the population GD's endpoint through the gap's gradient, "
               f"{stats.band_words(gap_dof)} (Welch); + round-off ($10^{{-12}}$ of the zero predictor's loss)")


def record_offdiag(v, rep_u: ExtrapolatedAb, gap: MaskingGap, rep: ExtrapolatedAb, a0: float, b0: float, epochs: int, m_rep: int,
                   n_rep: int) -> None:
    r"""Claims ``offdiag_kq`` and ``offdiag_pv``: the unmasked mean off-diagonal entry of :math:`W^{KQ}_{21}` and
    :math:`W^{PV}_{11}` extrapolated in m (``rep_u``) against the 4-parameter population GD's (``gap.path``),
    at ``Z_LEVEL`` SE of both (Welch) plus complex64 round-off; the falsifier is an invariant diagonal manifold (0)."""
    for k, q, j, blk in (("kq", rep_u.offdiag_kq, 1, r"\WKQ_{21}"), ("pv", rep_u.offdiag_pv, 3, r"\WPV_{11}")):
        o_se, o_dof = stats.welch((q.se, q.dof), (float(gap.se_end[j]), gap.se_end_dof))
        v.statistical(
            f"offdiag_{k}",
            quantity=f"unmasked, init $({a0:g}, {b0:g})$: mean off-diagonal entry of ${blk}$ at epoch {epochs}, "
                     f"extrapolated from {_sizes(m_rep, rep)}, vs the 4-parameter population GD",
            predicted=float(gap.path[-1, j]), measured=q.measured, se=o_se, dof=o_dof,
            floor=ROUNDOFF32 * abs(float(gap.path[-1, j])), falsifier=_NO_OFFDIAG, falsifier_value=0.0,
            reason=f"{Z_LEVEL:.3g} SE of {n_rep} replicate training sets per size, extrapolated in $m$, and of the prediction's "
                   "Monte-Carlo moments (Welch); plus complex64 round-off",
            detail=f"level of {Z_LEVEL:.3g} SE: {n_rep} replicate training sets per size (Richardson) and the jackknife SE of "
                   f"the prediction's Monte-Carlo moments, {stats.band_words(o_dof)} (Welch); + complex64 round-off")


def record_unmasked_lower(v, paired: dict, gaps: dict, epochs: int) -> None:
    """Claims ``unmasked_lower_{init}``: per init, the sign of the paired test-loss difference unmasked minus masked
    (:func:`paired_differences`), below -``Z_LEVEL`` SE; not applicable where the population GD from that init (``gaps``,
    :func:`masking_gap`) predicts no gain resolved at ``Z_LEVEL`` Monte-Carlo SE, and undecided (``not_resolvable``, a hit and a miss alike)
    where the predicted gain is under twice that margin of the paired test. The falsifier: masking costs nothing."""
    for ini, (mu, se) in paired.items():
        g = gaps[ini]
        where = f"init $({ini[0]:g}, {ini[1]:g})$"
        if g.predicted + Z_LEVEL * g.se >= 0:  # the population GD predicts no resolved gain from this init at this epoch
            v.not_applicable(
                f"unmasked_lower_{tag(ini)}", kind="qualitative", quantity=f"{where}: unmasked minus masked test loss",
                reason=f"the population GD from this init predicts a gap of ${g.predicted:.3g} \\pm {g.se:.2g}$ "
                       f"(Monte Carlo) after {epochs} epochs, not below $-{Z_LEVEL:.3g}$ SE: no gain of the unmasked model to order")
            continue
        # a Z_LEVEL-SE sign test finds a gap of twice Z_LEVEL SE or more as reliably as it avoids a false alarm; below that, a miss
        # says nothing against the theory
        weak = g.predicted + Z_LEVEL * g.se >= -2 * Z_LEVEL * se
        v.qualitative(
            f"unmasked_lower_{tag(ini)}",
            quantity=f"{where}: unmasked minus masked test loss (paired, same test sequences), below $-{Z_LEVEL:.3g}$ SE",
            predicted=-Z_LEVEL * se, measured=mu, comparison="upper", tolerance=0.0, falsifier=_OPTIMAL, falsifier_value=0.0,
            reason=f"sign with a margin of {Z_LEVEL:.3g} SE of the mean paired difference, its spread measured on independent "
                   "test sequences",
            detail="the mean over the run's test sequences of the per-sequence loss of the unmasked model minus the "
                   f"masked one (same test sequences), against $-{Z_LEVEL:.3g}$ SE, the SE from the same two models' "
                   "differences on as many independent sequences; made where the population GD from this init "
                   f"predicts a gain resolved at {Z_LEVEL:.3g} Monte-Carlo SE",
            undecided=(f"the population GD predicts a gap of ${g.predicted:.3g} \\pm {g.se:.2g}$, less than {2 * Z_LEVEL:.3g} SE "
                       f"(${2 * Z_LEVEL * se:.3g}$) of the paired test below $0$: a {Z_LEVEL:.3g}-SE sign test misses a gap this small by "
                       "chance more often than it raises a false alarm") if weak else None)


# ---- figures


def masking(masked: dict, unmasked: dict, inits, d: int, T: int, lr: float, epochs: int):
    """Thm 4.3: ab (left) and whole-sequence test loss (right) of the masked (wide) and unmasked (dash-dotted)
    full-one runs, the masked population GD, c* and the population loss at c*."""
    cst = th.masked_full_one_c_star(d, T)
    fig, axes = new_figure(ncols=2, width=3.6, height=3.0)
    ep = np.arange(epochs + 1)
    for i, ini in enumerate(inits):
        col = COLORS[i % len(COLORS)]
        axes[0].plot(ep, masked[ini].ab, color=col, label=f"masked, {init_label(ini)}", **TRAINED)
        axes[0].plot(ep, unmasked[ini].ab, color=col, lw=1.0, ls="-.", label=f"unmasked, {init_label(ini)}")
        axes[0].plot(ep, population_ab("full_one", 1.0, d, T, *ini, lr, epochs), label="population GD" if i == 0 else None,
                     **POPULATION)
        axes[1].plot(masked[ini].test_epochs, masked[ini].test_loss, color=col, **TRAINED)
        axes[1].plot(unmasked[ini].test_epochs, unmasked[ini].test_loss, color=col, lw=1.0, ls="-.")
    axes[0].axhline(cst, color="k", lw=0.8, ls="--", label="$c^*$")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("epoch")
    axes[0].set_ylabel("$ab$")
    axes[1].axhline(float(th.population_loss("full_one", 1.0, d, T, cst)), color="k", lw=0.8, ls=":",
                    label="population $L(c^*)$")
    axes[1].set_yscale("log")
    axes[1].set_xlabel("epoch")
    axes[1].set_ylabel("test AR loss")
    legend_outside(fig, ncol=3, fontsize=7)
    return fig
