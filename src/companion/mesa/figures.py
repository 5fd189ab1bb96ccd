"""The figures of the mesa notebooks, in the book's one style (:mod:`companion.plotting`).

Each function takes the results a page has computed (runs, check results) and returns a matplotlib Figure;
nothing here trains or decides a verdict. Trained curves are wide and translucent, the population theory a
thin black dashed line drawn on top, so that both stay visible where they coincide; legends sit outside
the data (:func:`companion.plotting.legend_outside`).
"""

from __future__ import annotations

import matplotlib.patches as mpatches
import numpy as np

from companion.mesa import checks as C
from companion.mesa import theory as th
from companion.plotting import COLORS, legend_outside, new_figure

__all__ = ["glue_figure", "ab_curves", "test_loss_curves", "capability_probe", "ratio_curves", "T_sweep",
           "weight_heatmaps", "masking", "fig5_heatmaps", "init_paths", "table1_steps", "setup_figure"]

TRAINED = dict(lw=2.4, alpha=0.55)  # trained runs: wide, translucent
POPULATION = dict(color="k", ls=(0, (2, 2)), lw=1.0)  # population GD: thin, dashed, on top


def glue_figure(name: str, fig) -> None:
    """Glue a figure under ``name`` for a ``{glue:figure}`` directive and close it."""
    import matplotlib.pyplot as plt
    from myst_nb import glue

    glue(name, fig, display=False)
    plt.close(fig)


def _plain_log_ticks(ax, values) -> None:
    """Label a log x axis at ``values`` only, in plain numbers (no crowded minor labels)."""
    from matplotlib.ticker import NullFormatter

    ax.set_xticks(values, [f"{v:g}" for v in values])
    ax.xaxis.set_minor_formatter(NullFormatter())


def _init_label(ini) -> str:
    return f"init ({ini[0]:g}, {ini[1]:g})"


def ab_curves(runs: dict, law: str, scales, inits, d: int, T: int, epochs: int, inf_line=None):
    """Fig. 1a/1c: ab per epoch of the trained runs ``runs[law, s, a0, b0]`` and of the population GD, with
    the finite-T limit c* and optionally the T -> infinity line ``inf_line(s)``."""
    fig, axes = new_figure(ncols=len(scales), width=3.0, height=3.0, squeeze=False)
    ep = np.arange(epochs + 1)
    for ax, s in zip(axes[0], scales):
        for i, (a0, b0) in enumerate(inits):
            r = runs[law, s, a0, b0]
            ax.plot(ep, r.ab, color=COLORS[i % len(COLORS)], label=f"GD, {_init_label((a0, b0))}", **TRAINED)
            ax.plot(ep, C.population_ab(law, s, d, T, a0, b0, r.config["lr"], epochs),
                    label="population GD" if i == 0 else None, **POPULATION)
        cst = th.c_star(law, s, d, T)
        ax.axhline(cst, color="k", lw=0.8, ls="--", label="$c^*$ (finite $T$)")
        if inf_line is not None:
            ax.axhline(inf_line(s), color="0.5", lw=0.8, ls="-.", label=r"$1/(5\sigma^2)$ ($T\to\infty$)")
        ax.set_yscale("log")
        ax.set_xlabel("epoch")
        ax.set_title((r"$\sigma$" if law == "gaussian" else "$c$") + f" = {s:g}:  $c^*$ = {cst:.4g}", fontsize=9)
    axes[0][0].set_ylabel("$ab$")
    legend_outside(fig, ncol=3, fontsize=8)
    return fig


def test_loss_curves(runs: dict, law: str, scales, inits, d: int, T: int, epochs: int, floor: float):
    """Fig. 1d: test loss per logged epoch of the trained runs ``runs[s, a0, b0]`` and the population loss
    along the population GD; losses below ``floor`` (round-off) are drawn at it."""
    fig, axes = new_figure(ncols=len(scales), width=3.0, height=2.9, squeeze=False)
    for ax, s in zip(axes[0], scales):
        for i, ini in enumerate(inits):
            r = runs[(s, *ini)]
            keep = r.test_epochs > 0
            ax.semilogy(r.test_epochs[keep], np.maximum(r.test_loss[keep], floor), "o-", ms=3, lw=2.2, alpha=0.55,
                        color=COLORS[i % len(COLORS)], label=f"trained, {_init_label(ini)}")
            popL = th.population_loss(law, s, d, T, C.population_ab(law, s, d, T, *ini, r.config["lr"], epochs))
            ax.semilogy(np.arange(epochs + 1)[1:], np.maximum(popL[1:], floor), label="population GD" if i == 0 else None,
                        **POPULATION)
        ax.set_ylim(bottom=floor / 3)
        ax.set_xlabel("epoch")
        ax.set_title(f"$c$ = {s:g}")
    axes[0][0].set_ylabel("test AR loss")
    legend_outside(fig, ncol=4, fontsize=8)
    return fig


def capability_probe(cap: dict, cond: dict, laws, floor: float):
    """The capability probe: trained test loss (2 SE bars) per law, the population loss at the population-GD
    ab and the falsifier, with the two parts of Assumption 4.2 under each law."""
    fig, ax = new_figure(width=5.0, height=3.4)
    xs = np.arange(len(laws))
    for x, law in zip(xs, laws):
        q = cap[law, 1.0]["whole"]
        ax.errorbar(x, max(q["measured"], floor), yerr=2 * q["se"] if q["measured"] > 4 * q["se"] else None, fmt="o", ms=7,
                    color=COLORS[2] if cond[law]["holds"] else COLORS[1], label="trained model, test loss" if x == 0 else None)
        ax.plot(x, max(q["predicted"], floor), "k_", ms=26, mew=2, label="population, at population-GD $ab$" if x == 0 else None)
        ax.plot(x, max(q["falsifier_value"], floor), "x", color="0.4", ms=8, label="falsifier" if x == 0 else None)
    ax.set_yscale("log")
    ax.set_xticks(xs, [f"{n}\n(i) {'✓' if cond[n]['i'] else '✗'}  (ii) {'✓' if cond[n]['ii'] else '✗'}" for n in laws],
                  fontsize=8)
    ax.set_ylabel("test AR loss after training")
    legend_outside(fig, ncol=3, fontsize=8)
    return fig


def ratio_curves(runs: dict, sigmas, inits, d: int, T: int, epochs: int):
    """Fig. 1b: the official ratio pred/true at T_te of the Gaussian runs ``runs[s, a0, b0]`` per logged
    epoch, the population c(k) sigma^2, c* sigma^2 and the T -> infinity value 1/5."""
    cs2 = th.c_star("gaussian", 1.0, d, T)
    fig, axes = new_figure(ncols=len(sigmas), width=3.0, height=2.9, squeeze=False)
    ep = np.arange(epochs + 1)
    for ax, s in zip(axes[0], sigmas):
        for i, ini in enumerate(inits):
            r = runs[(s, *ini)]
            ax.plot(r.test_epochs[1:], r.ratio[1:], color=COLORS[i % len(COLORS)], label=f"GD, {_init_label(ini)}", **TRAINED)
            pop = C.population_ab("gaussian", s, d, T, *ini, r.config["lr"], epochs)
            ax.plot(ep[1:], pop[1:] * s**2, label=r"population $c(k)\sigma^2$" if i == 0 else None, **POPULATION)
        ax.axhline(cs2, color="k", ls="--", lw=0.8, label=f"$c^*\\sigma^2$ = {cs2:.4f}")
        ax.axhline(0.2, color="0.5", ls="-.", lw=0.8, label="1/5 ($T\\to\\infty$)")
        ax.set_ylim(0, 0.4)
        ax.set_xlabel("epoch")
        ax.set_title(f"$\\sigma$ = {s:g}")
    axes[0][0].set_ylabel(r"ratio pred/true at $T_{te}$")
    legend_outside(fig, ncol=3, fontsize=8)
    return fig


def T_sweep(sweep: dict, d: int, m_sweep: int):
    """The trained T sweep: ab sigma^2 extrapolated in m (2 SE bars) and at m, against c*(T) sigma^2 and 1/5."""
    fig, ax = new_figure(width=4.6, height=3.0)
    Tg = np.unique(np.geomspace(5, max(sweep) * 3, 200).astype(int))
    ax.semilogx(Tg, [th.c_star("gaussian", 1.0, d, int(t)) for t in Tg], "k-", lw=1, label=r"$c^*(T)\sigma^2$ (closed form)")
    ax.errorbar(list(sweep), [q["measured"] for q in sweep.values()], yerr=[2 * q["se"] for q in sweep.values()], fmt="o",
                ms=4, color=COLORS[1], capsize=3, label="trained, extrapolated in $m$ (±2 s.e.)")
    ax.plot(list(sweep), [q["mean_big"] for q in sweep.values()], "x", color=COLORS[0], label=f"trained, mean at $m$ = {m_sweep}")
    ax.axhline(0.2, color="0.5", ls="-.", lw=0.8, label="1/5")
    _plain_log_ticks(ax, sorted(set(sweep) | {5}))
    ax.set_xlabel("sequence length $T$")
    ax.set_ylabel(r"$ab\,\sigma^2=E[\hat y_{t,j}/x_{t+1,j}]$")
    legend_outside(ax, ncol=2, fontsize=8)
    return fig


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
            ax.set_title(f"{name}, {_init_label(ini)}", fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
        fig.colorbar(im, ax=list(axes[rr]), shrink=0.85, label=f"Re {name} (shared scale)")
    return fig


def masking(masked: dict, unmasked: dict, inits, d: int, T: int, lr: float, epochs: int):
    """Thm 4.3: ab (left) and whole-sequence test loss (right) of the masked (wide) and unmasked (dash-dotted)
    full-one runs, the masked population GD, c* and the population loss at c*."""
    cst = th.masked_full_one_c_star(d, T)
    fig, axes = new_figure(ncols=2, width=3.6, height=3.0)
    ep = np.arange(epochs + 1)
    for i, ini in enumerate(inits):
        col = COLORS[i % len(COLORS)]
        axes[0].plot(ep, masked[ini].ab, color=col, label=f"masked, {_init_label(ini)}", **TRAINED)
        axes[0].plot(ep, unmasked[ini].ab, color=col, lw=1.0, ls="-.", label=f"unmasked, {_init_label(ini)}")
        axes[0].plot(ep, C.population_ab("full_one", 1.0, d, T, *ini, lr, epochs), label="population GD" if i == 0 else None,
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


def fig5_heatmaps(fig5: dict, d: int):
    """Fig. 5: the red blocks of the runs from a standard Gaussian init (``fig5[sigma_w]["r"]``), one colour
    scale per row."""
    fig, axes = new_figure(ncols=len(fig5), nrows=2, width=2.9, height=2.6, squeeze=False)
    for rr, (key, sl, name) in enumerate([("W_KQ", np.s_[d:, :d], r"$W^{KQ}_{21}$"), ("W_PV", np.s_[:, :d], r"$W^{PV}_{11}$")]):
        vmax = max(np.abs(getattr(q["r"], key)[sl].real).max() for q in fig5.values())
        for c, (sw, q) in enumerate(fig5.items()):
            ax = axes[rr][c]
            im = ax.imshow(getattr(q["r"], key)[sl].real, cmap="RdBu_r", vmin=-vmax, vmax=vmax)
            ax.set_title(f"{name}, $\\sigma_w$ = {sw:g}", fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
        fig.colorbar(im, ax=list(axes[rr]), shrink=0.85)
    return fig


def init_paths(init_rows: dict, cst: float):
    """The (a, b) paths of the diagonal-init runs (``init_rows[ini]["r"]``), their limits (stars, from the
    conserved a^2 - b^2) and the hyperbola ab = c*."""
    fig, ax = new_figure(width=4.2, height=3.4)
    hi = 1.1 * max(max(abs(a0), abs(b0)) for a0, b0 in init_rows)
    for i, (ini, q) in enumerate(init_rows.items()):
        ax.plot(q["r"].a_mean, q["r"].b_mean, color=COLORS[i % len(COLORS)], lw=1.5, label=_init_label(ini))
        ax.plot(*q["lim"], "k*", ms=8)
    cc = np.linspace(0.02, hi, 200)
    ax.plot(cc, cst / cc, "k--", lw=0.8, label="$ab=c^*$")
    ax.set_xlim(0, hi)
    ax.set_ylim(0, hi)
    ax.set_xlabel("$a$ (mean diagonal of $W^{KQ}_{21}$)")
    ax.set_ylabel("$b$ (mean diagonal of $W^{PV}_{11}$)")
    legend_outside(ax, ncol=3, fontsize=7)
    return fig


def table1_steps(stab: list, laws):
    """Table-1 step sizes against the largest stable step per law and scale (``stab``: rows with law, s,
    lr, lr_max)."""
    fig, ax = new_figure(width=5.0, height=3.0)
    for i, law in enumerate(laws):
        qs = [q for q in stab if q["law"] == law]
        scales = sorted({q["s"] for q in qs})
        ax.loglog(scales, [min(q["lr_max"] for q in qs if q["s"] == s) for s in scales], "-", marker="_", ms=14,
                  color=COLORS[i], label=f"{law}: largest stable step")  # a dash where a law has one scale
        ax.loglog(scales, [next(q["lr"] for q in qs if q["s"] == s) for s in scales], "o", color=COLORS[i],
                  label=f"{law}: Table 1")
    _plain_log_ticks(ax, sorted({q["s"] for q in stab}))
    ax.set_xlabel(r"scale ($\sigma$ or $c$)")
    ax.set_ylabel("step size $\\eta$")
    legend_outside(ax, ncol=2, fontsize=7)
    return fig


def setup_figure(setup: dict, a: float, b: float, d: int, T: int):
    """The setting: one training sequence (first coordinates) and the per-position loss of the diagonal model
    against the population formula (``setup`` from :func:`companion.mesa.checks.setup_checks`)."""
    fig, axes = new_figure(ncols=2, width=3.6, height=3.0)
    tt = np.arange(1, T + 1)
    for j in range(min(d, 3)):
        axes[0].plot(tt, setup["x0"][:, j].real, lw=1, label=f"Re $x_{{t,{j + 1}}}$")
    axes[0].set_xlabel("position $t$")
    axes[0].set_title("one training sequence")
    legend_outside(axes[0], fontsize=7, ncol=3)
    t_pos = np.arange(2, T)
    axes[1].plot(t_pos, setup["pos_loss"], ".", ms=3, label="measured (mean over sequences)")
    axes[1].plot(t_pos, setup["pos_pop"], "k-", lw=1, label="population formula")
    axes[1].set_xlabel("prediction position $t$")
    axes[1].set_ylabel(r"$\frac{1}{2}\|\hat y_t - x_{t+1}\|^2$")
    axes[1].set_title(f"diagonal model, $a={a:g}$, $b={b:g}$")
    legend_outside(axes[1], fontsize=7, ncol=1)
    return fig
