r"""The setting (:prf:ref:`cot-def-losses`, notebook ``cot/setup``): the implementation identities every later
page relies on.

CoT inference with the construction :math:`W_{13} = I`, :math:`W_{24} = -1`, :math:`V_{31} = -\eta I` against the GD
iterates and against the closed form :math:`w_k - w^\star = -(I-\eta S)^k w^\star`; the fast teacher-forced loss
(6) and its gradient against the per-position definition; the loss of the construction. All five claims are
identities (implementation tests), with the float64 round-off bound :func:`roundoff_bound` as tolerance.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from companion.claims import ClaimSpec, ResultSpec
from companion.plotting import legend_outside, new_figure
from companion.seeds import COT_PROMPTS

from ...text import tex_number
from ..data import cot_tokens, embed, gd_trajectory, make_generator, sample_prompts
from ..model import construction, cot_inference, teacher_forced_loss, teacher_forced_loss_direct
from ..train import threads1

__all__ = ["CLAIMS", "RESULT", "EPS", "roundoff_bound", "setup_identities", "record_identities", "figure",
           "manifest"]

CLAIMS = (
    ClaimSpec("cot_gd_iterates", "identity", "closed_form", prediction="companion.cot.data.gd_trajectory"),
    ClaimSpec("cot_closed_form", "identity", "closed_form", prediction="companion.cot.results.setup.setup_identities"),
    ClaimSpec("cot_fast_loss", "identity", "closed_form", prediction="companion.cot.model.teacher_forced_loss_direct"),
    ClaimSpec("cot_fast_grad", "identity", "closed_form", prediction="companion.cot.model.teacher_forced_loss_direct"),
    ClaimSpec("cot_construction_loss", "identity", "closed_form", prediction="companion.cot.model.construction"),
)

RESULT = ResultSpec(paper="cot", number="Section 2, losses (6) and (7)",
                    title="the setting: CoT inference, the construction and the two losses",
                    label="cot-def-losses", notebook="cot/setup", module=__name__, claims=CLAIMS,
                    figures=("fig_cot_setup",), sweep="", setting=True)

EPS = float(np.finfo(np.float64).eps)


def manifest() -> list[str]:
    """The claim ids the notebook records (none depends on the parameters)."""
    return [c.id for c in CLAIMS]


def roundoff_bound(d: int, n: int, k: int) -> float:
    r"""Relative float64 round-off of k CoT steps: each step sums over :math:`D = 2d+2` rows and :math:`n+k`
    columns, so the relative error is at most about :math:`k(n+k)D\epsilon`."""
    return k * (n + k) * (2 * d + 2) * EPS


def setup_identities(d: int, n: int, k: int, eta: float, batch: int, seed: int) -> dict:
    r"""The implementation identities of the setting (:prf:ref:`cot-def-losses`).

    CoT inference with the construction against GD and against the closed form :math:`-(I-\eta S)^k w^*`; the
    fast teacher-forced loss and its gradient against the per-position definition (random weights, 4 prompts);
    the loss of the construction. Returns the measured relative gaps, the round-off bound and the arrays the
    figure needs."""
    gen = make_generator(COT_PROMPTS(seed))
    with threads1():
        prompts = sample_prompts(batch, d, n, gen)
        W_gd = gd_trajectory(prompts, eta, k)
        W_KQ, W_PV = construction(d, eta)
        w_cot = cot_inference(prompts, W_KQ, W_PV, k)
        scale = float(W_gd.abs().max())
        I = torch.eye(d, dtype=prompts.S.dtype)
        closed = -torch.einsum("bij,bj->bi", torch.linalg.matrix_power(I - eta * prompts.S, k), prompts.w_star)
        few = sample_prompts(4, d, n, gen)
        W_few = gd_trajectory(few, eta, k)
        D = 2 * d + 2
        A = (0.3 / math.sqrt(D) * torch.randn(D, D, generator=gen, dtype=torch.float64)).requires_grad_()
        B = (0.3 / math.sqrt(D) * torch.randn(D, D, generator=gen, dtype=torch.float64)).requires_grad_()
        L_fast = teacher_forced_loss(few, W_few, A, B, k)
        g_fast = torch.autograd.grad(L_fast, [A, B])
        L_direct = teacher_forced_loss_direct(few, W_few, A, B, k)
        g_direct = torch.autograd.grad(L_direct, [A, B])
        L_constr = float(teacher_forced_loss(prompts, W_gd, W_KQ, W_PV, k))
    tol = roundoff_bound(d, n, k)
    return dict(
        gd_gap=float((w_cot - W_gd).abs().max()) / scale,
        closed_gap=float((w_cot[:, -1] - prompts.w_star - closed).abs().max()) / scale,
        loss_rel=abs(float(L_fast.detach()) - float(L_direct.detach())) / abs(float(L_direct.detach())),
        grad_rel=max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(g_fast, g_direct)),
        L_constr=L_constr, tol=tol, tol_loss=0.5 * k * D * (tol * scale) ** 2, scale=scale,
        Zk=torch.cat([embed(prompts)[0], cot_tokens(w_cot[:1, 1:])[0].T], dim=1).numpy(),
        err_cot=((w_cot - prompts.w_star[:, None, :]) ** 2).sum(-1).numpy(),
        err_gd=((W_gd - prompts.w_star[:, None, :]) ** 2).sum(-1).numpy(),
    )





def record_identities(v, r: dict, d: int, n: int, k: int) -> None:
    r"""Record the five identities of the page on the verdict ``v`` (``r``: :func:`setup_identities`).

    CoT inference with the construction against the GD iterates :math:`w_i` and against the closed form
    :math:`w_k - w^\star = -(I-\eta S)^k w^\star`; the fast teacher-forced loss (6) and its gradient against the
    per-position definition; the loss (6) of the construction, zero. Every band is the float64 round-off bound
    :func:`roundoff_bound`, :math:`k(n+k)D\epsilon` with :math:`D = 2d+2`."""
    batch = int(r["err_cot"].shape[0])
    bound = (rf"float64 round-off bound $k(n+k)D\epsilon = {tex_number(r['tol'])}$ at $d = {d}$, $n = {n}$, $k = {k}$: "
             rf"each CoT step sums over $D = 2d+2 = {2 * d + 2}$ rows and $n+k = {n + k}$ columns, a relative "
             rf"error of order $(n+k)D\epsilon$, and $k$ steps add up ($\epsilon = {tex_number(EPS)}$, the float64 machine "
             "precision)")
    why = r"float64 round-off of $k$ CoT steps over $n+k$ columns of $D$ rows: the bound $k(n+k)D\epsilon$"
    v.identity("cot_gd_iterates",
               quantity=r"$\max|\hat w_i - w_i^{\rm GD}| / \max|w|$ over prompts and $i \le k$ (construction)",
               predicted=0.0, measured=r["gd_gap"], tolerance=r["tol"],
               reason="CoT inference with the construction against the GD iterates; " + why,
               detail=f"{batch} prompts, every step $i = 1, \\dots, k$, errors relative to the largest GD entry "
                      rf"$\max|w| = {tex_number(r['scale'])}$. Band: " + bound + ".")
    v.identity("cot_closed_form",
               quantity=r"$\max|(\hat w_k - w^\star) + (I - \eta S)^k w^\star| / \max|w|$",
               predicted=0.0, measured=r["closed_gap"], tolerance=r["tol"],
               reason=r"CoT error after $k$ steps against the closed form $-(I-\eta S)^k w^\star$; " + why,
               detail=f"{batch} prompts; the matrix power $(I-\\eta S)^k$ by `torch.linalg.matrix_power`, errors relative to "
                      rf"$\max|w| = {tex_number(r['scale'])}$. Band: " + bound + ".")
    v.identity("cot_fast_loss",
               quantity="relative difference, fast vs direct teacher-forced loss (random weights)",
               predicted=0.0, measured=r["loss_rel"], tolerance=r["tol"],
               reason="the batched loss (6) against its per-position definition: they differ only in the order "
                      r"of summation, so the band is the round-off bound $k(n+k)D\epsilon$",
               detail="`teacher_forced_loss` against `teacher_forced_loss_direct` on 4 prompts with random dense "
                      r"$\WKQ, \WPV$ (entries $\Nor(0, 0.09/D)$), relative to the direct loss. Band: " + bound + ".")
    v.identity("cot_fast_grad",
               quantity="largest relative difference of the gradients (fast vs direct)",
               predicted=0.0, measured=r["grad_rel"], tolerance=r["tol"],
               reason="gradients of the batched loss (6) and of its definition: summation order only, so the band "
                      r"is the round-off bound $k(n+k)D\epsilon$",
               detail=r"The gradients in $\WKQ$ and $\WPV$ by autograd, on the same 4 prompts and random weights as "
                      "the loss; the largest entry-wise difference relative to the largest entry of the direct "
                      "gradient, the worse of the two matrices. Band: " + bound + ".")
    v.identity("cot_construction_loss", quantity="CoT loss (6) of the construction", predicted=0.0,
               measured=r["L_constr"], tolerance=r["tol_loss"],
               reason=r"exactly zero; each of the $kD$ residual entries may carry the round-off bound times "
                      r"$\max|w|$",
               detail=rf"Band $\frac12 kD(k(n+k)D\epsilon\max|w|)^2 = {tex_number(r['tol_loss'])}$, with "
                      rf"$\max|w| = {tex_number(r['scale'])}$ over the {batch} prompts: the loss is half the sum of the "
                      r"$k$ squared residual columns of $D$ entries each. Round-off: " + bound + ".")


def figure(r: dict, d: int, n: int, k: int):
    """``fig_cot_setup``: (a) the prompt after k CoT steps of the construction; (b) CoT against GD on three
    prompts and the median (``r``: :func:`setup_identities`)."""
    steps = np.arange(k + 1)
    fig, (ax0, ax1) = new_figure(ncols=2, width=3.6, height=3.1)
    lim = np.abs(r["Zk"]).max()
    im = ax0.imshow(r["Zk"], cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
    ax0.axvline(n - 0.5, color="k", lw=0.8)
    for row in (d - 0.5, d + 0.5, 2 * d + 0.5):
        ax0.axhline(row, color="k", lw=0.5)
    ax0.set_xlabel("column (data | w_0, ..., w_k)")
    ax0.set_ylabel("row (x | y | w | 1)")
    ax0.set_title("(a) prompt after k CoT steps")
    ax0.grid(False)
    fig.colorbar(im, ax=ax0, shrink=0.8)
    for b in range(3):
        ax1.semilogy(steps, r["err_cot"][b], "-", lw=1.2, color=f"C{b}")
        ax1.semilogy(steps, r["err_gd"][b], "o", ms=3, mfc="none", color=f"C{b}")
    ax1.semilogy(steps, np.median(r["err_cot"], axis=0), "k-", lw=2, label="median, CoT")
    ax1.set_xlabel("step i")
    ax1.set_ylabel(r"$\|\hat w_i - w^\star\|^2$")
    ax1.set_title("(b) CoT (lines) vs GD (circles)")
    legend_outside(ax1, "below")
    return fig
