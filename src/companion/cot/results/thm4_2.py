r"""Theorem 4.2 ({prf:ref}`cot-thm-4-2`, notebook ``cot/thm4_2_ood``): out-of-distribution generalisation of the
trained CoT model and its limits.

The model trained on :math:`\Sigma = I` is run on test covariances :math:`\Sigma`; per covariance
(:func:`ood_row`) its median error after k steps against the median of an independent sample of the k-step GD law,
the stated bound :math:`d\max_j|1-\eta\lambda_j|^{2k}`, the geometric bound under the spectral sufficient condition,
and the one-step formula against Monte Carlo. The phase diagram (:func:`phase_diagram`) maps the stability boundary.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from companion.claims import ClaimSpec, ResultSpec
from companion.plotting import legend_outside, new_figure
from companion.stats import mean_se, median_se
from companion.text import id_part

from .. import theory as th
from ..data import Prompts, make_generator, sample_prompts
from ..model import cot_inference
from ..stats import replicate_median
from ..train import replicate_seed, threads1

__all__ = ["CLAIMS", "RESULT", "parse_spectrum", "spectrum_name", "ood_row", "in_distribution_median",
           "phase_diagram", "figure", "manifest"]

CLAIMS = (
    ClaimSpec("cot42_one_step_{sigma}", "statistical", "monte_carlo", prediction="companion.cot.theory.one_step_ood_error",
              falsifier="the printed form with a factor 2 (Javanmard et al., Lemma A.1)"),
    ClaimSpec("cot42_model_{sigma}", "statistical", "trained", headline=True,
              prediction="companion.cot.theory.gd_error_samples",
              falsifier="the in-distribution median (the model's error does not see Σ)"),
    ClaimSpec("cot42_bound_{sigma}", "bound", "trained", prediction="companion.cot.results.thm4_2.ood_row"),
    ClaimSpec("cot42_condition_{sigma}", "bound", "trained", prediction="companion.cot.results.thm4_2.ood_row"),
)

RESULT = ResultSpec(paper="cot", number="Theorem 4.2", title="out-of-distribution generalisation and its limits",
                    label="cot-thm-4-2", notebook="cot/thm4_2_ood", module=__name__, claims=CLAIMS,
                    figures=("fig_cot_thm42",), sweep="")


def spectrum_name(text: str) -> str:
    """The claim-id part of a test covariance 'lo:hi': '0.5:1.5' -> '0p5_1p5'."""
    return id_part(str(text).replace(":", "_"))


def manifest(names) -> list[str]:
    """The claim ids the notebook records: four per test covariance (``names``: :func:`spectrum_name`)."""
    return [c.id.format(sigma=nm) for nm in names for c in CLAIMS]


def in_distribution_median(d: int, n: int, k: int, eta: float, num: int, rng: np.random.Generator) -> float:
    r"""The median of the k-step GD law at :math:`\Sigma = I` from ``num`` independent spectra: the falsifier of the
    model claims (a model whose error does not see :math:`\Sigma`)."""
    return median_se(th.gd_error_samples(k, eta, th.sample_S_eigs(d, n, num, rng), rng))[0]


def parse_spectrum(text: str) -> tuple[float, float]:
    """'lo:hi' -> (lo, hi) (ValueError when malformed)."""
    lo, hi = (float(x) for x in str(text).split(":"))
    return lo, hi


def ood_row(res, Sigma: np.ndarray, eta: float, k_list: list, n: int, num_eval: int, num_mc: int,
            seed: int, rng: np.random.Generator) -> dict:
    r"""Everything {prf:ref}`cot-thm-4-2` says about one test covariance :math:`\Sigma`.

    * the trained model's per-prompt errors after each k in ``k_list`` on ``num_eval`` prompts
      :math:`x \sim N(0, \Sigma)` (medians with order-statistic standard errors); for R replicate models
      (``res`` trained with ``replicates=R``) each on its own ``num_eval // R`` prompts, and the mean of their
      medians (:func:`companion.cot.stats.replicate_median`);
    * an *independent* sample of ``num_mc`` spectra of :math:`S_\Sigma`: the median of the k-step GD law
      :math:`\sum_j(1-\eta\lambda_j)^{2k}z_j^2`, of the stated bound :math:`d\max_j|1-\eta\lambda_j|^{2k}`, and the fraction
      of prompts beyond the stability boundary :math:`\eta\lambda_{\max}(S_\Sigma) > 2`;
    * the one-step formula at :math:`V = -\eta^\star I` against Monte Carlo on the same S sample;
    * the spectral sufficient condition :math:`\eta\lambda_{\max}(\Sigma)(1+\sqrt{d/n})^2 < 2` and its rate
      :math:`\rho_\Sigma = \max(|1-\eta\lambda_{\min}(\Sigma)(1-\sqrt{d/n})^2|, |1-\eta\lambda_{\max}(\Sigma)(1+\sqrt{d/n})^2|)`.
    """
    d = Sigma.shape[0]
    K = max(k_list)
    R = res.W_KQ.shape[0] if res.W_KQ.dim() == 3 else 1
    with threads1(), torch.no_grad():
        parts = [sample_prompts(num_eval // R, d, n, make_generator(replicate_seed(seed, r)), Sigma=Sigma) for r in range(R)]
        p = Prompts(torch.cat([q.X for q in parts]), torch.cat([q.w_star for q in parts]))
        w_m = cot_inference(p, res.W_KQ, res.W_PV, K)  # replicate-major: replicate r meets its own prompts
        with np.errstate(over="ignore", invalid="ignore"):
            em = np.nan_to_num(((w_m - p.w_star[:, None, :]) ** 2).sum(-1).numpy(), nan=np.inf).reshape(R, -1, K + 1)
    S = th.sample_S(d, n, num_mc, rng, Sigma)
    eigs = np.linalg.eigvalsh(S)
    eta1 = th.eta_star(d, n)
    one = np.sum((np.eye(d) - eta1 * S) ** 2, axis=(1, 2))
    lo, hi = np.linalg.eigvalsh(Sigma)[[0, -1]]
    eps = math.sqrt(d / n)
    out = dict(unstable=float(np.mean(eta * eigs[:, -1] > 2)), one_mc=mean_se(one),
               one_pred=th.one_step_ood_error(-eta1 * np.eye(d), Sigma, n),
               one_j26=th.one_step_ood_error(-eta1 * np.eye(d), Sigma, n, factor=2.0),
               cond=float(eta * hi * (1 + eps) ** 2),
               rho=float(max(abs(1 - eta * lo * (1 - eps) ** 2), abs(1 - eta * hi * (1 + eps) ** 2))), ks={})
    with np.errstate(over="ignore", invalid="ignore"):
        for k in k_list:
            law = th.gd_error_samples(k, eta, eigs, rng)
            bnd = d * np.max(np.abs(1 - eta * eigs), axis=1) ** (2 * k)
            out["ks"][k] = dict(model=replicate_median(em[:, :, k]), law=median_se(law), bound=median_se(bnd))
    return out


def phase_diagram(d: int, k: int, grid: int, rng: np.random.Generator, num: int = 400) -> dict:
    r"""The median k-step GD error :math:`\sum_j(1-\eta\lambda_j)^{2k}` (:math:`\Sigma = I`) and the fraction of prompts
    with :math:`\eta\lambda_{\max}(S) > 2` on a ``grid`` x ``grid`` mesh of steps :math:`\eta\in[0.05, 1.6]` and
    ratios :math:`n/d \in [1, 16]`, from ``num`` spectra per ratio; and the Marchenko-Pastur boundary
    :math:`\eta = 2/(1+\sqrt{d/n})^2`. Returns ``dict(etas, ratios, median, unstable, eta_mp)``."""
    etas, ratios = np.linspace(0.05, 1.6, grid), np.geomspace(1.0, 16.0, grid)
    med, frac = np.zeros((grid, grid)), np.zeros((grid, grid))
    for j, r in enumerate(ratios):
        e = th.sample_S_eigs(d, max(d, int(round(r * d))), num, rng)
        with np.errstate(over="ignore"):
            med[:, j] = np.median(np.sum((1 - etas[:, None, None] * e[None]) ** (2 * k), axis=-1), axis=1)
        frac[:, j] = np.mean(etas[:, None] * e[None, :, -1] > 2, axis=1)
    return dict(etas=etas, ratios=ratios, median=med, unstable=frac,
                eta_mp=2 / (1 + np.sqrt(d / np.maximum(d, np.round(ratios * d)))) ** 2)


def figure(rows: dict, k_list, phase: dict, floor: float, k_train: int):
    """``fig_cot_thm42``: (a) the trained model's median error per test covariance against the GD law; (b) the phase diagram of the
    median k-step GD error (``phase``: :func:`phase_diagram`)."""
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
