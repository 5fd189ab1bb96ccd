r"""Theorem 4.3 of the mesa paper: masking the off-diagonal gradients (notebook ``mesa/thm4_3_masking``).

For :math:`x_1=\mathbf 1`, training with the off-diagonal red-block gradients masked converges to the
one-step-GD point :math:`ab=c^*`, whose loss the unmasked transformer beats. What the page checks, and where:

* masked ab and test loss, extrapolated in m, against the population GD
  (:func:`companion.mesa.evidence.extrapolated_ab` with ``mask=True``);
* the unmasked-minus-masked test-loss gap (:func:`extrapolated_gap`) against the 4-parameter equivariant
  population GD (:func:`masking_gap` with the Monte-Carlo moments :func:`equivariant_moments`), and the
  unmasked off-diagonal entries;
* the per-init sign of the paired test-loss difference (:func:`paired_differences`);
* the figure (:func:`masking`).
"""

from __future__ import annotations

import numpy as np
import torch

from companion import params as P
from companion import stats as S
from companion.claims import ClaimSpec, ResultSpec
from companion.mesa import theory as th
from companion.mesa.analysis import per_sequence_loss, test_data, weights
from companion.mesa.data import generate
from companion.mesa.evidence import population_ab, richardson_paired
from companion.mesa.figures import POPULATION, TRAINED, init_label
from companion.mesa.model import predict_fast
from companion.mesa.results import init_tag
from companion.plotting import COLORS, legend_outside, new_figure
from companion.seeds import MESA_EQUIVARIANT_MC

__all__ = ["CLAIMS", "RESULT", "tag", "manifest", "paired_differences", "equivariant_moments", "masking_gap",
           "extrapolated_gap", "masking"]

_COSTS_NOTHING = "masking costs nothing (the one-step-GD model is optimal)"

CLAIMS = (
    ClaimSpec("ab_masked", "statistical", "trained", headline=True, prediction="companion.mesa.evidence.population_ab",
              falsifier="T -> infinity constant m4/m6"),
    ClaimSpec("loss_masked", "statistical", "trained", prediction="companion.mesa.theory.population_loss",
              falsifier="ab at the T -> infinity constant 1 (its population loss)"),
    ClaimSpec("masking_gap", "statistical", "trained", headline=True,
              prediction="companion.mesa.results.thm4_3.masking_gap", falsifier=_COSTS_NOTHING),
    ClaimSpec("offdiag_kq", "statistical", "trained", prediction="companion.mesa.theory.equivariant_gd",
              falsifier="invariant diagonal manifold (off-diagonal entries 0)"),
    ClaimSpec("offdiag_pv", "statistical", "trained", prediction="companion.mesa.theory.equivariant_gd",
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


def equivariant_moments(law: str, d: int, T: int, m: int, seed: int, chunk: int = 1000) -> dict:
    r"""Per-sequence moments of the population loss on the equivariant red blocks (:func:`companion.mesa.theory.equivariant_c`):
    :math:`G_n=\mathrm{Re}\sum_t\langle F_{k,t},F_{l,t}\rangle`, :math:`h_n=\mathrm{Re}\sum_t\langle F_{k,t},x_{t+1}\rangle`,
    :math:`y_n=\sum_t\|x_{t+1}\|^2` for ``m`` sequences (seed stream :data:`~companion.seeds.MESA_EQUIVARIANT_MC`, ``[seed, 9]``, independent of every training
    and test set; complex128), so that the loss of sequence n at c is exactly
    :math:`\ell_n(c)=\frac12(c^\top G_nc-2h_n^\top c+y_n)`. Returns G, h, y (per sequence)."""
    P.memory("m_mc", 16.0 * min(m, chunk) * (T - 2) * d * 5, "the equivariant moments")
    data = generate(law, m, d, T, 1.0, MESA_EQUIVARIANT_MC.rng(seed), torch.complex128)
    eye, off = np.eye(d), np.ones((d, d)) - np.eye(d)
    units = [(A, B) for A in (eye, off) for B in (eye, off)]  # order of theory.equivariant_c
    G, h, y = np.empty((m, 4, 4)), np.empty((m, 4)), np.empty(m)
    for i in range(0, m, chunk):
        sub = data.subset(slice(i, i + chunk))
        F = []
        for A, B in units:
            W_KQ = torch.zeros(2 * d, 2 * d, dtype=torch.complex128)
            W_PV = torch.zeros(d, 2 * d, dtype=torch.complex128)
            W_KQ[d:, :d] = torch.from_numpy(A)
            W_PV[:, :d] = torch.from_numpy(B)
            F.append(predict_fast(sub, W_KQ, W_PV).reshape(sub.m, -1))
        F = torch.stack(F, 1)  # (n, 4, positions * d)
        Y = sub.tables(np.arange(2, T))[2].reshape(sub.m, -1)
        G[i : i + sub.m] = torch.einsum("nkp,nlp->nkl", F.conj(), F).real.numpy()
        h[i : i + sub.m] = torch.einsum("nkp,np->nk", F.conj(), Y).real.numpy()
        y[i : i + sub.m] = (Y.abs() ** 2).sum(1).numpy()
    return dict(G=G, h=h, y=y)


def masking_gap(d: int, T: int, a0: float, b0: float, lr: float, epochs: int, moments: dict) -> dict:
    r"""Thm 4.3 for :math:`x_1=\mathbf 1`: the predicted test-loss difference, unmasked minus masked, of the
    population GD from (a0 I, b0 I) after ``epochs`` steps (:func:`companion.mesa.theory.equivariant_gd` with the Monte-Carlo
    moments :func:`equivariant_moments`, masked with the exact reduced system).

    The masked endpoint is :math:`c_m=(ab,0,0,0)` of :func:`companion.mesa.evidence.population_ab`; the unmasked one :math:`c_u` follows the
    4-parameter population GD. The difference is the mean of the per-sequence differences
    :math:`\ell_n(c_u)-\ell_n(c_m)` (exact per sequence), its standard error the Monte-Carlo SE over the
    sequences (:func:`companion.stats.mean_se`). Also returned: the unmasked endpoint (a, a', b, b') and the
    check of the moments against the closed form, :math:`E G_{11}=d\alpha`, :math:`E h_1=d\beta`."""
    G, h, y = moments["G"], moments["h"], moments["y"]
    path = th.equivariant_gd(a0, b0, lr, epochs, G.mean(0), h.mean(0), d)
    c_u = th.equivariant_c(*path[-1])
    c_m = np.array([population_ab("full_one", 1.0, d, T, a0, b0, lr, epochs)[-1], 0.0, 0.0, 0.0])

    def per_seq(c):
        return 0.5 * (np.einsum("k,nkl,l->n", c, G, c) - 2 * h @ c + y)

    gap, se = S.mean_se(per_seq(c_u) - per_seq(c_m))
    Gm, hm, ym = G.mean(0), h.mean(0), y.mean()
    L_path = [0.5 * (c @ Gm @ c - 2 * hm @ c + ym) for c in (th.equivariant_c(*x) for x in path)]
    back = max(1, epochs // 10)  # population loss change of the unmasked GD over the last tenth of the epochs
    al, be = th.alpha_beta("full_one", 1.0, d, T)
    g11, se11 = S.mean_se(G[:, 0, 0])
    h1, se1 = S.mean_se(h[:, 0])
    # Monte-Carlo SE of the endpoint (a, a', b, b'): delete-a-group jackknife of the moments (20 groups)
    groups = np.array_split(np.arange(len(y)), min(20, len(y)))
    loo = [th.equivariant_gd(a0, b0, lr, epochs, np.delete(G, ix, 0).mean(0), np.delete(h, ix, 0).mean(0), d)[-1]
           for ix in groups]
    return dict(predicted=gap, se=se, path=path, se_end=S.jackknife_se(path[-1], np.array(loo))[1],
                se_end_dof=len(groups) - 1, c_u=c_u, c_m=c_m,
                drift=abs(L_path[-1] - L_path[-1 - back]),
                loss_u=float(per_seq(c_u).mean()),
                loss_m=float(per_seq(c_m).mean()), z_G11=(g11 - d * al) / se11, z_h1=(h1 - d * be) / se1)


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
