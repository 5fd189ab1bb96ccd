r"""Corollary 3.1 ({prf:ref}`cot-cor-3-1`, notebook ``cot/cor3_1_floor``): the no-CoT error floor
:math:`d(d+1)/(n+d+1) = \Theta(d^2/n)`.

One claim per :math:`(d, n)` of the grid: Monte Carlo of :math:`\E\tr(I-\eta^\star S)^2` against the floor
(:func:`floor_mc`); one per trained model: a full no-CoT LSA against the floor
(:func:`companion.cot.results.thm3_1.trained_no_cot`, the training of the theorem this corollary follows from).
Every claim rejects the full step :math:`\eta = 1`, error :math:`d(d+1)/n`.
"""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import NullFormatter, ScalarFormatter

from companion.claims import ClaimSpec, ResultSpec
from companion.plotting import legend_outside, new_figure
from companion.stats import mean_se

from .. import theory as th
from .thm3_1 import FULL_STEP

__all__ = ["CLAIMS", "RESULT", "grid_pairs", "floor_mc", "figure", "manifest"]

FLOOR = ClaimSpec("cot_c31_floor_d{d}_n{n}", "statistical", "monte_carlo", headline=True,
                  prediction="companion.cot.theory.no_cot_floor", falsifier=FULL_STEP)
TRAINED = ClaimSpec("cot_c31_trained_d{d}_n{n}", "statistical", "trained", prediction="companion.cot.theory.no_cot_floor",
                    falsifier=FULL_STEP)
CLAIMS = (FLOOR, TRAINED)

RESULT = ResultSpec(paper="cot", number="Corollary 3.1", title="the no-CoT error floor d(d+1)/(n+d+1)",
                    label="cot-cor-3-1", notebook="cot/cor3_1_floor", module=__name__, claims=CLAIMS,
                    figures=("fig_cot_cor31",), sweep="")


def grid_pairs(d_list, ratios) -> list[tuple[int, int]]:
    r"""The sorted distinct pairs :math:`(d, n)`, :math:`n = \max(d, \mathrm{round}(r d))`, of the dimensions and
    ratios n/d (the grid of the Monte-Carlo claims, and with one ratio, of the trained models)."""
    return sorted({(d, max(d, int(round(r * d)))) for d in d_list for r in ratios})


def manifest(pairs, trained_pairs) -> list[str]:
    """The claim ids the notebook records: one floor claim per grid pair, one per trained pair."""
    return ([FLOOR.id.format(d=d, n=n) for d, n in pairs] + [TRAINED.id.format(d=d, n=n) for d, n in trained_pairs])


def floor_mc(d: int, n: int, num: int, rng: np.random.Generator, eta: float | None = None) -> tuple[float, float]:
    r"""Monte-Carlo :math:`\E\tr(I-\eta S)^2` (default :math:`\eta = \eta^\star`, i.e. the no-CoT floor of
    {prf:ref}`cot-cor-3-1`) from ``num`` independent S, with its standard error over the sample."""
    eta = th.eta_star(d, n) if eta is None else eta
    S = th.sample_S(d, n, num, rng)
    per = d - 2 * eta * np.trace(S, axis1=1, axis2=2) + eta**2 * np.einsum("bij,bji->b", S, S)
    return mean_se(per)


def figure(d_list, ratios, pairs, mc: dict, trained: dict):
    """``fig_cot_cor31``: (a) the floor: formula, Monte Carlo (``mc[d, n] = (mean, se)``) and trained models
    (``trained[d, n]``); (b) the floor over :math:`d^2/n` against n/d."""
    fig, (ax0, ax1) = new_figure(ncols=2, width=3.5, height=3.0)
    for c, d in enumerate(d_list):
        ns = np.array([n for dd, n in pairs if dd == d])
        ngrid = np.geomspace(ns.min(), ns.max() + 1e-9, 100)
        ax0.loglog(ngrid, d * (d + 1) / (ngrid + d + 1), "-", color=f"C{c}", label=f"d = {d}")
        ax0.errorbar(ns, [mc[d, n][0] for n in ns], yerr=[2 * mc[d, n][1] for n in ns], fmt="o", ms=4,
                     mfc="none", color=f"C{c}")
        ax1.semilogx(ngrid / d, d * (d + 1) / (ngrid + d + 1) / (d**2 / ngrid), "-", color=f"C{c}", label=f"d = {d}")
    for (_, n), t in trained.items():
        ax0.plot([n], [t["mean"]], "*", ms=11, color="k")
    ax0.plot([], [], "*", color="k", label="trained LSA")
    ax0.set_xlabel("n")
    ax0.set_ylabel(r"min $E\,\|\hat w - w^\star\|^2$")
    ax0.set_title("(a) floor: formula, MC, trained")
    ax1.axhline(1, color="k", lw=0.8, ls="--")
    ax1.axhline(0.5, color="k", lw=0.8, ls=":")
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
