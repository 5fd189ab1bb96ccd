r"""Theorem 4.3 of the mesa paper: masking the off-diagonal gradients (notebook ``mesa/thm4_3_masking``).

For :math:`x_1=\mathbf 1`, training with the off-diagonal red-block gradients masked converges to the
one-step-GD point :math:`ab=c^*`, whose loss the unmasked transformer beats. What the page checks, and where:

* masked ab and test loss, extrapolated in m, against the population GD
  (:func:`companion.mesa.evidence.extrapolated_ab` with ``mask=True``), with what the extrapolation leaves of the
  freely trained blocks' feedback as a measured systematic error of ab
  (:func:`companion.mesa.evidence.offmanifold_residual`: the masked population dynamics stay on the diagonal
  manifold, so that feedback vanishes as m -> infinity);
* the unmasked-minus-masked test-loss gap (:func:`extrapolated_gap`) against the 4-parameter equivariant
  population GD (:func:`masking_gap` with the Monte-Carlo moments
  :func:`companion.mesa.evidence.equivariant_moments`), and the unmasked off-diagonal entries;
* the per-init sign of the paired test-loss difference (:func:`paired_differences`), where the population GD
  predicts a gain at that init;
* the figure (:func:`masking`).
"""

from __future__ import annotations

import numpy as np

from companion import stats as S
from companion.claims import ClaimSpec, ResultSpec
from companion.mesa import theory as th
from companion.mesa.analysis import per_sequence_loss, test_data, weights
from companion.mesa.evidence import equivariant_ab, population_ab, richardson_paired
from companion.mesa.figures import POPULATION, TRAINED, init_label
from companion.mesa.results import init_tag
from companion.plotting import COLORS, legend_outside, new_figure

__all__ = ["CLAIMS", "RESULT", "tag", "manifest", "paired_differences", "masking_gap", "extrapolated_gap", "masking"]

_COSTS_NOTHING = "masking costs nothing (the one-step-GD model is optimal)"
#: the falsifier of the headline: the mask changes nothing, training ends where the unmasked population GD does
FALSIFIER_AB = "the mask changes nothing (the unmasked population GD beyond Assumption 4.1)"

CLAIMS = (
    ClaimSpec("ab_masked", "statistical", "trained", headline=True, prediction="companion.mesa.evidence.population_ab",
              falsifier=FALSIFIER_AB),
    ClaimSpec("loss_masked", "statistical", "trained", prediction="companion.mesa.theory.population_loss",
              falsifier="ab at the T -> infinity constant 1 (its population loss)"),
    ClaimSpec("masking_gap", "statistical", "trained",  # its falsifier (no gain, 0) is no close competitor
              prediction="companion.mesa.results.thm4_3.masking_gap", falsifier=_COSTS_NOTHING),
    ClaimSpec("offdiag_kq", "statistical", "trained", prediction="companion.mesa.evidence.equivariant_ab",
              falsifier="invariant diagonal manifold (off-diagonal entries 0)"),
    ClaimSpec("offdiag_pv", "statistical", "trained", prediction="companion.mesa.evidence.equivariant_ab",
              falsifier="invariant diagonal manifold (off-diagonal entries 0)"),
    ClaimSpec("unmasked_lower_{init}", "qualitative", "trained",  # a sign: no prediction function
              falsifier="masking costs nothing (the one-step-GD solution is optimal for x_1 = 1)"),
)

RESULT = ResultSpec(paper="mesa", number="Theorem 4.3", title="masking the off-diagonal gradients",
                    label="mesa-thm-4-3", notebook="mesa/thm4_3_masking", module=__name__, claims=CLAIMS,
                    figures=("fig_mesa_mask",), sweep="")


tag = init_tag  # the claim-id part of an init: 0p5_1p5


def manifest(inits) -> list[str]:
    """The claim ids the page's verdict declares for the diagonal inits ``inits``."""
    return ["ab_masked", "loss_masked", "masking_gap", "offdiag_kq", "offdiag_pv"] + [
        f"unmasked_lower_{tag(ini)}" for ini in inits]


def paired_differences(masked: dict, unmasked: dict) -> dict:
    """Per init: the mean and standard error of the per-sequence test-loss difference, unmasked minus masked,
    on the same test sequences (those of the first masked run: every run of one seed has them)."""
    td = test_data(masked[next(iter(masked))])
    return {ini: S.mean_se(per_sequence_loss(td, *weights(unmasked[ini])) - per_sequence_loss(td, *weights(masked[ini])))
            for ini in masked}


def masking_gap(d: int, T: int, a0: float, b0: float, lr: float, epochs: int, moments: dict) -> dict:
    r"""Thm 4.3 for :math:`x_1=\mathbf 1`: the predicted test-loss difference, unmasked minus masked, of the
    population GD from (a0 I, b0 I) after ``epochs`` steps (:func:`companion.mesa.evidence.equivariant_ab` with the
    Monte-Carlo moments :func:`companion.mesa.evidence.equivariant_moments`, masked with the exact reduced system).

    The masked endpoint is :math:`c_m=(ab,0,0,0)` of :func:`companion.mesa.evidence.population_ab`; the unmasked one :math:`c_u` follows the
    4-parameter population GD. The difference is the mean of the per-sequence differences
    :math:`\ell_n(c_u)-\ell_n(c_m)` (exact per sequence), its standard error the Monte-Carlo SE over the
    sequences (:func:`companion.stats.mean_se`). Also returned: the unmasked endpoint (a, a', b, b') with its
    jackknife SE, and the check of the moments against the closed form, :math:`E G_{11}=d\alpha`, :math:`E h_1=d\beta`."""
    G, h, y = moments["G"], moments["h"], moments["y"]
    eq = equivariant_ab(d, T, a0, b0, lr, epochs, moments)
    c_u = th.equivariant_c(*eq["path"][-1])
    c_m = np.array([population_ab("full_one", 1.0, d, T, a0, b0, lr, epochs)[-1], 0.0, 0.0, 0.0])

    def per_seq(c):
        return 0.5 * (np.einsum("k,nkl,l->n", c, G, c) - 2 * h @ c + y)

    gap, se = S.mean_se(per_seq(c_u) - per_seq(c_m))
    al, be = th.alpha_beta("full_one", 1.0, d, T)
    g11, se11 = S.mean_se(G[:, 0, 0])
    h1, se1 = S.mean_se(h[:, 0])
    return dict(predicted=gap, se=se, path=eq["path"], se_end=eq["se_end"], se_end_dof=eq["dof"], c_u=c_u, c_m=c_m,
                loss_u=float(per_seq(c_u).mean()), loss_m=float(per_seq(c_m).mean()),
                z_G11=(g11 - d * al) / se11, z_h1=(h1 - d * be) / se1)


def extrapolated_gap(rep_u: dict, rep_m: dict) -> dict:
    r"""Test-loss difference of two sets of replicates trained on the same training sets (e.g. unmasked minus
    masked, same seeds), evaluated on the same test set (``m_loss`` of :func:`companion.mesa.evidence.extrapolated_ab`), extrapolated in
    m with the 1/m law of :func:`companion.mesa.evidence.extrapolated_ab`. Paired twice: per training set (the replicate spread of
    the per-replicate differences) and per test sequence (the test-set SE of the same combination)."""
    u, w = rep_u["loss"], rep_m["loss"]
    return richardson_paired(u["big"] - w["big"], u["small"] - w["small"])  # (n_rep, m_loss) each


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
