"""The figures of the cot notebooks, in the book's one style (:mod:`companion.plotting`): each function takes
what a notebook computed and returns a matplotlib Figure, with legends outside the data
(:func:`companion.plotting.legend_outside`). The notebooks glue the figure and write its caption."""

from __future__ import annotations

import numpy as np

from companion.plotting import legend_outside, new_figure

__all__ = ["experiments", "looped", "setup", "thm31", "cor31", "thm32", "thm32_mp", "thm41", "thm42"]


def experiments(runs: list, d: int, k: int):
    """Evaluation loss during training, with CoT (the replicates' mean, each replicate thin) and without, per n;
    dotted: the no-CoT floor and the k-step GD error (:func:`companion.cot.checks.cot_vs_no_cot` rows)."""
    fig, axs = new_figure(ncols=len(runs), width=3.5, height=3.0)
    for ax, r in zip(np.atleast_1d(axs), runs):
        cot, noc = r["cot"], r["noc"]
        curves = np.asarray(cot.eval_loss).reshape(len(cot.steps), -1)
        ax.semilogy(cot.steps, curves, color="C0", lw=0.5, alpha=0.5)
        ax.semilogy(cot.steps, curves.mean(axis=1), color="C0", label=f"with CoT (k={k}), {curves.shape[1]} seeds")
        ax.semilogy(noc.steps, noc.eval_loss, color="C1", label="without CoT")
        ax.axhline(r["floor"], color="C1", ls=":", lw=1, label="floor d(d+1)/(n+d+1)")
        ax.axhline(r["pred"].mean, color="C0", ls=":", lw=1, label=r"$E\,\mathrm{tr}(I-\eta S)^{2k}$")
        ax.set_xlabel("Adam step")
        ax.set_ylabel("evaluation loss (7)")
        ax.set_title(rf"d={d}, n={r['n']}, $\eta$={r['eta']:g}")
    legend_outside(fig, "below", ncol=2)
    return fig


def looped(ks, opt_a: dict, opt_b: dict, eigs, eta: float, floor: float, k_check: int, marks: dict, d: int, n: int):
    """(a) the looped optima (a), (b) against CoT with a fixed step and the one-layer floor, with the measured
    models at ``k_check`` (``marks``: label -> error); (b) the optimal parameters against k
    (:func:`companion.cot.checks.looped_optima` dictionaries)."""
    from . import theory as th

    fig, (ax0, ax1) = new_figure(ncols=2, width=3.6, height=3.1)
    ax0.semilogy(ks, [opt_a[k][2] for k in ks], "-o", ms=3, label=r"looped, $W_{13}=I$: $c_k$")
    ax0.semilogy(ks, [opt_b[k][2] for k in ks], "-s", ms=3, mfc="none", label=r"looped, $W_{13}$ trained")
    ax0.semilogy(ks, [th.gd_error_mc(int(k), eta, eigs).mean for k in ks], "--", label=rf"CoT, fixed $\eta$ = {eta:g}")
    ax0.axhline(floor, color="k", ls=":", lw=1, label="one layer (floor)")
    for (label, val), style in zip(marks.items(), (dict(marker="*", ms=11, color="C4"), dict(marker="x", ms=8, color="k"),
                                                   dict(marker="D", ms=6, mfc="none", color="C5"))):
        ax0.plot([k_check], [val], ls="none", label=label, **style)
    ax0.set_xlabel("loops / CoT steps k")
    ax0.set_ylabel(r"$E\,\|\hat w_k - w^\star\|^2$")
    ax0.set_title(f"(a) d = {d}, n = {n}")
    ax1.errorbar(ks, [opt_a[k][0] for k in ks], yerr=[2 * opt_a[k][1] for k in ks], fmt="-o", ms=3, label=r"$c_k$ ($W_{13}=I$)")
    ax1.plot(ks[1:], [opt_b[int(k)][0] for k in ks[1:]], "-s", ms=3, mfc="none", label=r"$c$ ($W_{13}$ trained)")
    ax1.plot(ks[1:], [opt_b[int(k)][1] for k in ks[1:]], "-^", ms=3, mfc="none", label=r"$b^\star = 1/w$")
    ax1.axhline(th.eta_star(d, n), color="k", ls=":", lw=1, label=r"$\eta^\star$")
    ax1.set_xlabel("loops k")
    ax1.set_title("(b) optimal parameters")
    legend_outside(ax0, "below", ncol=2)
    legend_outside(ax1, "below", ncol=2)
    return fig


def setup(r: dict, d: int, n: int, k: int):
    """(a) the prompt after k CoT steps of the construction; (b) CoT against GD on three prompts and the median
    (``r``: :func:`companion.cot.checks.setup_identities`)."""
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


def thm31(S, res, eta_star: float, eta_eff: float, error: float, d: int, n: int):
    """(a) the one-step error against the step: exact, Monte Carlo on ``S`` and the trained LSA; (b) the trained
    no-CoT model's effective coefficient during training (``res``: a :class:`companion.cot.train.TrainResult`)."""
    from . import theory as th
    from .checks import no_cot_eta_eff

    etas, etas_mc = np.linspace(0.0, 1.2, 121), np.linspace(0.1, 1.1, 11)
    L1_mc = [np.mean(np.sum((np.eye(d) - e * S[:5000]) ** 2, axis=(1, 2))) for e in etas_mc]
    eta_traj = [no_cot_eta_eff(kq, pv, d) for kq, pv in res.snapshots]
    fig, (ax0, ax1) = new_figure(ncols=2, width=3.5, height=3.0)
    ax0.plot(etas, [th.gd_error_exact(1, e, d, n) for e in etas], label=r"exact $d(1-2\eta+\eta^2\frac{n+d+1}{n})$")
    ax0.plot(etas_mc, L1_mc, "o", ms=4, mfc="none", label="Monte Carlo")
    ax0.axvline(eta_star, color="k", lw=0.8, ls="--")
    ax0.plot([eta_eff], [error], "*", ms=11, color="C1", label="trained LSA")
    ax0.set_xlabel(r"step $\eta$")
    ax0.set_ylabel(r"$E\,\|\hat w - w^\star\|^2$")
    ax0.set_title("(a) one GD step: error vs step")
    ax1.plot(res.steps, eta_traj, "-", label=r"trained $\eta_{\rm eff} = \mathrm{tr}A/d$")
    ax1.axhline(eta_star, color="k", ls="--", lw=0.8, label=r"$\eta^\star = n/(n+d+1)$")
    ax1.set_xlabel("Adam step")
    ax1.set_ylabel("effective coefficient")
    ax1.set_ylim(min(0, min(eta_traj)) - 0.05, max(1.0, max(eta_traj) + 0.05))
    ax1.set_title("(b) training the full LSA")
    legend_outside(ax0, "below", ncol=1)
    legend_outside(ax1, "below", ncol=1)
    return fig


def cor31(d_list, ratios, pairs, mc: dict, trained: dict):
    """(a) the floor: formula, Monte Carlo (``mc[d, n] = (mean, se)``) and trained models (``trained[d, n]``);
    (b) the floor over :math:`d^2/n` against n/d."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

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


def thm32(err, k_list, med: dict, decay: dict, rho: float, eta: float, d: int, n: int):
    """(a) the construction's error against k with the exact, independent-law, MP-limit and bound curves;
    (b) the geometric decay of the mean and median for several n/d (``decay[n] = (mean, median)``)."""
    from . import theory as th

    K, gam = err.shape[1] - 1, d / n
    ks = np.arange(K + 1)
    fig, (ax0, ax1) = new_figure(ncols=2, width=3.5, height=3.0)
    ax0.semilogy(ks, err.mean(0), "-", label="CoT construction (mean)")
    ax0.semilogy(ks, np.median(err, axis=0), "--", label="CoT construction (median)")
    ax0.plot([1, 2], [th.gd_error_exact(1, eta, d, n), th.gd_error_exact(2, eta, d, n)], "ko", ms=5, mfc="none",
             label="exact (moments)")
    ax0.plot(k_list, [med[k][1] for k in k_list], "s", ms=4, mfc="none", color="C2", label="independent law (median)")
    ax0.semilogy(ks, [d * th.gd_error_mp(int(k), eta, gam) for k in ks], ":", color="C3", label="d × MP limit")
    ax0.semilogy(ks, d * rho ** (2 * ks), "-.", color="C4", lw=0.8, label=r"bound $d\rho_{\rm MP}^{2k}$")
    ax0.axhline(th.no_cot_floor(d, n), color="k", lw=0.8, ls="-.", label="no-CoT floor")
    ax0.set_xlabel("CoT steps k")
    ax0.set_ylabel(r"$\|\hat w_k - w^\star\|^2$")
    ax0.set_title(f"(a) d = {d}, n = {n}")
    for c, (nn, (mean, median)) in enumerate(decay.items()):
        steps = np.arange(len(mean))
        ax1.semilogy(steps, mean, "-", color=f"C{c}", label=f"n/d = {nn / d:g}")
        ax1.semilogy(steps, median, "--", color=f"C{c}", lw=0.8)
    ax1.set_xlabel("CoT steps k")
    ax1.set_ylabel(r"$E\,\mathrm{tr}(I-\eta S)^{2k}$")
    ax1.set_title("(b) geometric decay (— mean, -- median)")
    legend_outside(fig, "below", ncol=3)
    return fig


def thm32_mp(fit: dict, mp_k: float, k: int, ratio: float):
    """The Monte-Carlo values of :math:`\\E\\tr(I-\\eta S)^{2k}/d` against 1/d (``fit``:
    :func:`companion.cot.checks.mp_limit_fit`), the fit a + b/d and the Marchenko-Pastur integral at 1/d = 0."""
    fig, ax = new_figure(width=4.2, height=3.0)
    xs = np.linspace(0, 1.05 / fit["ds"][0], 50)
    ax.errorbar(1 / fit["ds"], fit["values"], yerr=2 * fit["ses"], fmt="o", ms=4, mfc="none", label="Monte Carlo (±2 SE)")
    ax.plot(xs, fit["a"] + fit["b"] * xs, "-", lw=1, label="fit a + b/d")
    ax.plot([0], [mp_k], "k*", ms=10, label="Marchenko–Pastur integral")
    ax.set_xlabel("1 / d   (n/d fixed)")
    ax.set_ylabel(r"$E\,\mathrm{tr}(I-\eta S)^{2k}\,/\,d$")
    ax.set_title(f"k = {k}, n/d = {ratio:g}")
    legend_outside(ax, "below", ncol=2)
    return fig


def thm41(ode: dict, fin: dict, flow: dict, runs, pred_mean: float, regime: list, *, eta_ode: float, k_ode: int,
          eta: float, d: int, n: int, d_flow: int):
    """The four figures of {prf:ref}`cot-thm-4-1`: (1) the reduced flow and the distance to the construction;
    (2) the restricted matrix flow and full-parameter training (one line per seed); (3) the trained weights of
    replicate 0, rescaled by :math:`c = -W_{24}`; (4) the regime :math:`n \\sim d\\log d`, :math:`k \\sim \\log d`.

    Returns:
        the four figures, in that order.
    """
    from . import theory as th
    from .model import blocks

    fig, (ax0, ax1) = new_figure(ncols=2, width=3.6, height=3.1)
    tt = ode["t"] <= 2 * ode["t_half"] + 5 / ode["mu"]
    ax0.plot(ode["t"][tt], ode["v"][tt], label="v(t)")
    ax0.plot(ode["t"][tt], ode["w"][tt], label="w(t)")
    ax0.plot(ode["t"][tt], ode["veq"][tt], "k--", lw=0.8, label=r"$v_{\rm eq}(w(t))$")
    ax0.axvline(ode["t1"], color="0.5", lw=0.8, ls=":")
    ax0.axhline(-eta_ode, color="C0", lw=0.6, ls=":")
    ax0.axhline(1, color="C1", lw=0.6, ls=":")
    ax0.set_ylim(-eta_ode - 0.15, 1.15)
    ax0.set_xlabel("t")
    ax0.set_title(rf"(a) $n\to\infty$, $\eta$={eta_ode:g}, k={k_ode}")
    legend_outside(ax0, "below")
    dist0 = np.hypot(ode["v"] + eta_ode, ode["w"] - 1)
    ax1.semilogy(ode["t"], dist0, label="reduced, n→∞")
    ax1.semilogy(ode["t"], 1e-3 * np.exp(-ode["mu"] * (ode["t"] - ode["t2"])), "k:", lw=0.8, label=r"rate $\mu$")
    ax1.semilogy(fin["t"], np.hypot(fin["v"] + eta, fin["w"] - 1), label=f"reduced, d={d}, n={n}")
    ax1.semilogy(flow["t"], np.maximum(np.abs(flow["Vu"] + eta * np.eye(d_flow)).max(axis=(1, 2)),
                                       np.abs(flow["Wu"] - np.eye(d_flow)).max(axis=(1, 2))), "--", label=f"matrix flow, d={d_flow}")
    ax1.set_ylim(1e-10, 3)
    ax1.set_xlabel("t")
    ax1.set_ylabel("distance to the construction")
    ax1.set_title("(b) convergence (stage 2)")
    legend_outside(ax1, "below", ncol=2)

    fig2, (ax2, ax3) = new_figure(ncols=2, width=3.6, height=3.1)
    for j in range(d_flow):
        ax2.plot(flow["t"], flow["Vu"][:, j, j], color="C0", lw=0.9)
        ax2.plot(flow["t"], flow["Wu"][:, j, j], color="C1", lw=0.9)
    ax2.plot([], [], color="C0", label=r"eig. of $V_{31}$")
    ax2.plot([], [], color="C1", label=r"eig. of $W_{13}$")
    ax2.set_xlabel("t")
    ax2.set_title(f"(a) matrix flow, d={d_flow}")
    legend_outside(ax2, "below", ncol=1)
    curves = np.asarray(runs.eval_loss).reshape(len(runs.steps), -1)
    ax3.semilogy(runs.steps, curves, color="C0", lw=0.8)
    ax3.plot([], [], color="C0", label=f"trained, eval. loss (7), {curves.shape[1]} seeds")
    ax3.axhline(pred_mean, color="k", ls="--", lw=0.8, label="k GD steps")
    ax3.axhline(th.no_cot_floor(d, n), color="k", ls=":", lw=0.8, label="no-CoT floor")
    ax3.set_xlabel("Adam step")
    ax3.set_title("(b) full-parameter training")
    legend_outside(ax3, "below", ncol=1)

    res = runs.replicate(0)
    c = float(-blocks(res.W_KQ, d)["24"][0, 0])
    fig3, axs = new_figure(ncols=2, width=3.4, height=3.1)
    for ax, M, title in ((axs[0], res.W_KQ.numpy() / c, r"(a) $W^{KQ}$ / c"), (axs[1], res.W_PV.numpy() * c, r"(b) $W^{PV}$ · c")):
        lim = np.abs(M).max()
        im = ax.imshow(M, cmap="RdBu_r", vmin=-lim, vmax=lim, interpolation="nearest")
        fig3.colorbar(im, ax=ax, shrink=0.75)
        for r_ in (d - 0.5, d + 0.5, 2 * d + 0.5):
            ax.axhline(r_, color="k", lw=0.4)
            ax.axvline(r_, color="k", lw=0.4)
        ax.set_title(title)
        ax.grid(False)
        ax.set_xticks([])
        ax.set_yticks([])

    fig4, ax4 = new_figure(width=4.2, height=3.0)
    ds = [r_["d"] for r_ in regime]
    ax4.errorbar(ds, [r_["err"] for r_ in regime], yerr=[2 * r_["se"] for r_ in regime], fmt="o-", ms=4,
                 label=r"$E\,\mathrm{tr}(I-\eta S)^{2k}/d$ (MC, ±2 SE)")
    ax4.plot(ds, [r_["bound"] for r_ in regime], "s--", ms=4, mfc="none", label=r"$\rho_{\rm MP}^{2k}$")
    ax4.set_xscale("log", base=2)
    ax4.set_yscale("log")
    ax4.set_xlabel(r"d  (n = ⌈$c_n$ d ln d⌉, k = ⌈$c_k$ ln d⌉)")
    ax4.set_ylabel("error per coordinate")
    legend_outside(ax4, "below", ncol=1)
    return fig, fig2, fig3, fig4


def thm42(rows: dict, k_list, phase: dict, floor: float, k_train: int):
    """(a) the trained model's median error per test covariance against the GD law; (b) the phase diagram of the
    median k-step GD error (``phase``: :func:`companion.cot.checks.phase_diagram`)."""
    fig, (ax0, ax1) = new_figure(ncols=2, width=3.6, height=3.1)
    for c, (name, r) in enumerate(rows.items()):
        ax0.semilogy(k_list, [r["ks"][k]["law"][0] for k in k_list], "-", color=f"C{c}",
                     label=f"Σ: {name.replace('_', ':').replace('p', '.')}")
        ax0.semilogy(k_list, [r["ks"][k]["model"][0] for k in k_list], "o", ms=5, mfc="none", color=f"C{c}")
    ax0.axhline(floor, color="k", lw=0.8, ls=":", label="no-CoT floor (Σ = I)")
    ax0.set_xlabel("CoT steps k at test time")
    ax0.set_ylabel(r"median $\|\hat w_k - w^\star\|^2$")
    ax0.set_title("(a) trained model (o) vs GD law (—)")
    legend_outside(ax0, "below", ncol=2)
    ratios, etas = phase["ratios"], phase["etas"]
    lm = np.log10(np.clip(phase["median"], 1e-300, None))
    vmin, vmax = np.percentile(lm, [2, 98])
    im = ax1.pcolormesh(ratios, etas, np.clip(lm, vmin, vmax), cmap="viridis", shading="auto", vmin=vmin, vmax=vmax)
    cs = ax1.contour(ratios, etas, phase["unstable"], levels=[0.01, 0.5], colors=["w", "r"], linewidths=1)
    ax1.clabel(cs, fmt={0.01: "1 %", 0.5: "50 %"}, fontsize=9)
    ax1.plot(ratios, phase["eta_mp"], "k--", lw=1.2)
    ax1.set_xscale("log")
    ax1.set_xlabel("n / d")
    ax1.set_ylabel(r"step $\eta$")
    ax1.set_title(rf"(b) $\log_{{10}}$ median error, k={k_train}")
    ax1.grid(False)
    fig.colorbar(im, ax=ax1, shrink=0.85)
    return fig
