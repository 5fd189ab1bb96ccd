r"""Theorem 4.2 (:prf:ref:`cot-thm-4-2`, notebook ``cot/thm4_2_ood``): out-of-distribution generalisation of the
trained CoT model and its limits.

The model trained on :math:`\Sigma = I` is run on test covariances :math:`\Sigma`. Per covariance (:func:`ood_row`):
its mean error after :math:`K` steps against the expectation :math:`\E\tr(I-\eta S_\Sigma)^{2K}` of an independent
sample (a paired control-variate design: the model minus exact GD on the same prompts); its median against the median
of the GD law near the boundary; beyond it, the fraction of prompts whose error has grown after :math:`K` steps
against the GD law's; the geometric bound under the spectral sufficient condition; the one-step formula against
Monte Carlo. Which of these a claim compares, and with which numbers, is decided here (:func:`regime`,
:func:`model_claim`, :func:`growth_claim`, :func:`condition_claim`), not on the page. The phase diagram
(:func:`phase_diagram`) maps the stability boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from companion.claims import ClaimSpec, ResultSpec
from companion.plotting import legend_outside, new_figure
from companion.stats import ROUNDOFF, Z_LEVEL, band_words, mean_se, median_se, replicate_se, welch, wider
from companion.text import id_part

from ...text import tex_number
from ..data import Prompts, make_generator, sample_prompts
from ..model import cot_inference
from ..paper import COT_MODELS
from ..stats import nearer_neighbour, replicate_median
from ..theory import gd, mp, no_cot, ood, wishart
from ..train import replicate_seed, threads1

__all__ = ["CLAIMS", "RESULT", "NEAR_STEP", "NO_BOUNDARY", "MIN_EXPECTED", "parse_spectrum", "spectrum_name", "ood_row", "regime",
           "ClaimNumbers", "model_claim", "growth_claim", "condition_claim", "in_distribution_growth", "phase_diagram",
           "figure", "axis_cap", "beyond_words", "manifest", "spectrum_lo_hi", "spectrum_text", "PROSE_KEYS",
           "prose_numbers", "PRINTED_FACTOR", "record_covariances"]

#: the falsifier of the model claims: GD one step short or long (whichever expectation is nearer the prediction)
NEAR_STEP = "the construction one CoT step short or long ($K - 1$ or $K + 1$ GD steps), the nearer"
#: the falsifier of the growth claims
NO_BOUNDARY = r"the model's error does not see the boundary (the fraction at $\Sigma = I$)"
#: the falsifier of the one-step claims
PRINTED_FACTOR = "the printed form with a factor 2 (Javanmard et al., Lemma A.1)"
#: the least expected count of grown (and of not grown) prompts, in the model's test prompts and in the law's
#: sample, for a normal band on a growth fraction (Cochran's rule for the normal approximation of a binomial)
MIN_EXPECTED = 5

CLAIMS = (
    ClaimSpec("cot42_one_step_{sigma}", "statistical", "monte_carlo", prediction="companion.cot.theory.ood.one_step_ood_error",
              falsifier=PRINTED_FACTOR,
              supporting="the one-step (no-CoT) error formula the page derives beside the theorem, by Monte Carlo: a "
                         "formula stated beside the theorem, not its statement about the trained CoT model"),
    ClaimSpec("cot42_model_{sigma}", "statistical", "trained", headline=True,
              prediction="companion.cot.results.thm4_2.ood_row",
              falsifier=NEAR_STEP, experiment=COT_MODELS),
    ClaimSpec("cot42_growth_{sigma}", "statistical", "trained", prediction="companion.cot.results.thm4_2.ood_row",
              falsifier=NO_BOUNDARY, experiment=COT_MODELS),
    ClaimSpec("cot42_condition_{sigma}", "bound", "trained", prediction="companion.cot.results.thm4_2.ood_row",
              experiment=COT_MODELS),
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


def parse_spectrum(text: str) -> tuple[float, float]:
    """'lo:hi' -> (lo, hi) (ValueError when malformed)."""
    lo, hi = (float(x) for x in str(text).split(":"))
    return lo, hi




def _law_errors(eta: float, eigs: np.ndarray, z: np.ndarray, k: int) -> np.ndarray:
    r"""Per-prompt k-step GD errors :math:`\sum_j(1-\eta\lambda_j)^{2k}z_j^2` (:func:`companion.cot.theory.gd.gd_trace`;
    rows of ``eigs``, one fixed ``z`` per prompt, so that the errors at several k are one GD path); an overflow that
    meets :math:`z_j = 0` is :math:`+\infty`, not NaN."""
    with np.errstate(invalid="ignore"):
        return np.nan_to_num(gd.gd_trace(eta, eigs, k, z=z), nan=np.inf)


def in_distribution_growth(d: int, n: int, K: int, eta: float, num: int, rng: np.random.Generator) -> float:
    r"""The fraction of prompts at :math:`\Sigma = I` whose K-step GD error exceeds the starting error
    :math:`\|w^\star\|^2`, from ``num`` independent spectra: the falsifier of the growth claims (a model whose error
    does not see the boundary)."""
    eigs = wishart.sample_S_eigs(d, n, num, rng)
    z = rng.standard_normal(eigs.shape)
    return float(np.mean(_law_errors(eta, eigs, z, K) > np.sum(z**2, axis=-1)))


def _fraction_se(p: float, num: int) -> float:
    return math.sqrt(max(p * (1 - p), 1.0 / num**2) / num)


def ood_row(res, Sigma: np.ndarray, eta: float, k_list: list, n: int, num_eval: int, num_mc: int,
            seed: int, rng: np.random.Generator, z: float = Z_LEVEL) -> dict:
    r"""Everything :prf:ref:`cot-thm-4-2` says about one test covariance :math:`\Sigma`; :math:`K` = max(``k_list``).

    The trained model (``res``; R replicate models when trained with ``replicates=R``, each on its own
    ``num_eval // R`` prompts :math:`x \sim N(0, \Sigma)`) gives per-prompt errors :math:`\|\hat w_k - w^\star\|^2`;
    exact GD with step :math:`\eta` runs on the *same* prompts. An *independent* sample of ``num_mc`` spectra of
    :math:`S_\Sigma` (and one :math:`z \sim N(0, I)` per spectrum) gives the predictions. Returned (``dict``):

    * ``mean``: the model's mean error after K steps by a paired control variate,
      :math:`\bar e_{\rm model} - \bar e_{\rm GD} + \hat L_K` with :math:`\hat L_K` the independent mean of
      :math:`\tr(I-\eta S_\Sigma)^{2K}`; its standard error is the spread of the R replicates' paired differences
      (R - 1 degrees of freedom) combined (Welch) with the Monte-Carlo error of :math:`\hat L_K`; the prediction
      :math:`\hat L_K` and the competitors :math:`\hat L_{K\pm1}` (same sample); ``finite`` is False when a paired
      difference overflowed;
    * ``median``: the model's median after K steps (:func:`companion.cot.stats.replicate_median`) against the median of
      the GD law :math:`\sum_j(1-\eta\lambda_j)^{2k}z_j^2` at K and K ± 1 (order-statistic standard errors); and
      ``paired``, the mean over the replicates of the model's median minus exact GD's median on the same prompts,
      with its standard error and R - 1 degrees of freedom (NaN for one model): the median of a few hundred prompts
      scatters by about 13 % near the boundary (d = 4, n = 12, Σ 0.2:2), and the difference on the same prompts
      removes that scatter, as the paired mean does inside;
    * ``growth``: the fraction of prompts whose error after K steps exceeds the starting error :math:`\|w^\star\|^2`,
      the model's (mean of the replicates' fractions; the wider of their spread and the binomial error) and the GD
      law's on the independent sample (binomial error); with the model's and the law's median errors at K, whose
      ratio measures how far the trained model follows GD's divergence; the sizes, the model's ``prompts`` and the
      law's ``spectra``; and ``pilot``, the law's fraction on a second independent sample of as many spectra (the
      rule of :func:`growth_claim`);
    * ``ks``: per k of ``k_list``, the model's and the law's medians (the figure);
    * ``K``, ``R``, ``d``: the test steps, the number of replicate models and the dimension;
    * ``unstable``: the fraction of the independent spectra with :math:`\eta\lambda_{\max}(S_\Sigma) > 2`;
    * ``stated``: the independent mean of the stated bound :math:`d\max_j|1-\eta\lambda_j|^{2K}`;
    * ``cond``, ``rho``: the spectral sufficient condition :math:`\eta\lambda_{\max}(\Sigma)(1+\sqrt{d/n})^2 < 2` and its
      rate :math:`\rho_\Sigma = \max(|1-\eta\lambda_{\min}(\Sigma)(1-\sqrt{d/n})^2|, |1-\eta\lambda_{\max}(\Sigma)(1+\sqrt{d/n})^2|)`;
    * ``one_mc``, ``one_pred``, ``one_j26``: the one-step error at :math:`V = -\eta^\star I` by Monte Carlo on the
      sample of S, by the one-step formula of :prf:ref:`cot-thm-4-2`, and by its printed form with a factor 2.
    """
    # beyond the boundary the GD errors and their means overflow to inf, which is what they are
    with np.errstate(over="ignore", invalid="ignore"):
        return _ood_row(res, Sigma, eta, k_list, n, num_eval, num_mc, seed, rng, z)


def _ood_row(res, Sigma, eta, k_list, n, num_eval, num_mc, seed, rng, z) -> dict:
    d = Sigma.shape[0]
    K = max(k_list)
    R = res.W_KQ.shape[0] if res.W_KQ.dim() == 3 else 1
    with threads1(), torch.no_grad():
        parts = [sample_prompts(num_eval // R, d, n, make_generator(replicate_seed(seed, r)), Sigma=Sigma) for r in range(R)]
        p = Prompts(torch.cat([q.X for q in parts]), torch.cat([q.w_star for q in parts]))
        w_m = cot_inference(p, res.W_KQ, res.W_PV, K)  # replicate-major: replicate r meets its own prompts
        with np.errstate(over="ignore", invalid="ignore"):
            em = np.nan_to_num(((w_m - p.w_star[:, None, :]) ** 2).sum(-1).numpy(), nan=np.inf).reshape(R, -1, K + 1)
            # exact GD on the same prompts: w_K - w* = -(I - eta S)^K w*, S v = X (X^T v) / n (no d x d matrix per prompt)
            v = -p.w_star
            for _ in range(K):
                v = v - (eta / n) * torch.einsum("bdn,bn->bd", p.X, torch.einsum("bdn,bd->bn", p.X, v))
            eg = np.nan_to_num((v**2).sum(-1).numpy(), nan=np.inf).reshape(R, -1)
    eigs = wishart.sample_S_eigs(d, n, num_mc, rng, Sigma)
    zz = rng.standard_normal(eigs.shape)
    eta1 = no_cot.eta_star(d, n)
    cond, rho = ood.spectral_condition(eta, Sigma, n)
    out = dict(K=K, R=R, d=d, unstable=float(np.mean(eta * eigs[:, -1] > 2)),
               one_mc=mean_se(gd.gd_trace(eta1, eigs, 1)),
               one_pred=ood.one_step_ood_error(-eta1 * np.eye(d), Sigma, n),
               one_j26=ood.one_step_ood_error(-eta1 * np.eye(d), Sigma, n, factor=2.0), cond=cond, rho=rho, ks={})
    tr = {k: gd.gd_trace(eta, eigs, k) for k in (max(K - 1, 0), K, K + 1)}
    with np.errstate(over="ignore", invalid="ignore"):
        out["stated"] = float(np.mean(d * np.max(np.abs(1 - eta * eigs), axis=1) ** (2 * K)))
        diff = (em[:, :, K] - eg).mean(axis=1)  # the replicates' paired differences model - GD
    pred, pred_se = mean_se(tr[K])
    finite = bool(np.all(np.isfinite(diff)) and np.isfinite(pred_se))
    if finite:
        dm, dse = replicate_se(diff) if R > 1 else (float(diff[0]), float(np.std(em[0, :, K] - eg[0], ddof=1)
                                                                        / math.sqrt(em.shape[1])))
        se, dof = welch((dse, R - 1 if R > 1 else math.inf), (pred_se, math.inf))
    else:
        dm, se, dof = math.nan, math.inf, math.inf
    out["mean"] = dict(measured=float(dm + pred), se=float(se), dof=float(dof), pred=float(pred), pred_se=float(pred_se),
                       prev=float(np.mean(tr[max(K - 1, 0)])), next=float(np.mean(tr[K + 1])), finite=finite,
                       model=float(np.mean(em[:, :, K])), gd=float(np.mean(eg)), diff=float(dm))
    law = {k: _law_errors(eta, eigs, zz, k) for k in set(k_list) | {max(K - 1, 0), K + 1}}
    for k in k_list:
        out["ks"][k] = dict(model=replicate_median(em[:, :, k], z), law=median_se(law[k]))
    with np.errstate(over="ignore", invalid="ignore"):
        dmed = np.median(em[:, :, K], axis=1) - np.median(eg, axis=1)  # per replicate: model - GD on the same prompts
    paired = replicate_se(dmed) + (R - 1,) if R > 1 and np.all(np.isfinite(dmed)) else (math.nan, math.inf, math.inf)
    out["median"] = dict(model=out["ks"][K]["model"], law=out["ks"][K]["law"], prev=float(np.median(law[max(K - 1, 0)])),
                         next=float(np.median(law[K + 1])), paired=tuple(float(x) for x in paired))
    grown = em[:, :, K] > em[:, :, 0]
    fr = grown.mean(axis=1)
    pooled = _fraction_se(float(fr.mean()), grown.size)
    if R > 1:
        fse, fdof = wider(z, replicate_se(fr)[1:] + (R - 1,), (pooled, math.inf))
    else:
        fse, fdof = pooled, math.inf
    pl = float(np.mean(law[K] > np.sum(zz**2, axis=-1)))
    # a pilot sample of its own for the rule that decides whether the fraction can be compared (growth_claim): a rule
    # read from the prediction's own sample would keep the seeds whose sample over-counts, and bias the comparison
    pe = wishart.sample_S_eigs(d, n, num_mc, rng, Sigma)
    pz = rng.standard_normal(pe.shape)
    pilot = float(np.mean(_law_errors(eta, pe, pz, K) > np.sum(pz**2, axis=-1)))
    out["growth"] = dict(model=float(fr.mean()), se=float(fse), dof=float(fdof), law=pl, law_se=_fraction_se(pl, num_mc),
                         model_median=out["ks"][K]["model"][0], law_median=out["ks"][K]["law"][0],
                         prompts=int(grown.size), spectra=int(num_mc), pilot=pilot)
    return out




def phase_diagram(d: int, k: int, grid: int, rng: np.random.Generator, num: int = 400) -> dict:
    r"""The median k-step GD error :math:`\sum_j(1-\eta\lambda_j)^{2k}` (:math:`\Sigma = I`) and the fraction of prompts
    with :math:`\eta\lambda_{\max}(S) > 2` on a ``grid`` x ``grid`` mesh of steps :math:`\eta\in[0.05, 1.6]` and
    ratios :math:`n/d \in [1, 16]`, from ``num`` spectra per ratio; and the Marchenko-Pastur boundary
    :math:`\eta = 2/(1+\sqrt{d/n})^2`. Returns ``dict(etas, ratios, median, unstable, eta_mp)``."""
    etas, ratios = np.linspace(0.05, 1.6, grid), np.geomspace(1.0, 16.0, grid)
    ns = [max(d, int(round(r * d))) for r in ratios]
    med, frac = np.zeros((grid, grid)), np.zeros((grid, grid))
    for j, nj in enumerate(ns):
        e = wishart.sample_S_eigs(d, nj, num, rng)
        med[:, j] = np.median(gd.gd_trace(etas, e, k), axis=1)
        frac[:, j] = np.mean(etas[:, None] * e[None, :, -1] > 2, axis=1)
    return dict(etas=etas, ratios=ratios, median=med, unstable=frac,
                eta_mp=np.array([2 / mp.mp_edges(d / nj)[1] for nj in ns]))


def figure(rows: dict, k_list, phase: dict, floor: float, k_train: int):
    """``fig_cot_thm42``: (a) the trained model's median error per test covariance against the GD law; (b) the phase diagram of the
    median k-step GD error (``phase``: :func:`phase_diagram`)."""
    fig, (ax0, ax1) = new_figure(ncols=2, width=3.6, height=3.1)
    ks = np.asarray(k_list)
    cap = axis_cap(rows, k_list, floor)
    above = False
    for c, (name, r) in enumerate(rows.items()):
        law = np.array([r["ks"][k]["law"][0] for k in k_list], dtype=float)
        model = np.array([r["ks"][k]["model"][0] for k in k_list], dtype=float)
        ax0.semilogy(ks, np.where(np.isfinite(law) & (law <= cap), law, np.nan), "-", color=f"C{c}",
                     label=f"Σ: {name.replace('_', ':').replace('p', '.')}")
        out = ~np.isfinite(model) | (model > cap)
        ax0.semilogy(ks[~out], model[~out], "o", ms=5, mfc="none", color=f"C{c}")
        if out.any():  # beyond the axis: drawn on its top edge
            ax0.semilogy(ks[out], np.full(int(out.sum()), cap), "^", ms=6, color=f"C{c}", clip_on=False)
            above = True
    ax0.axhline(floor, color="k", lw=0.8, ls=":", label="no-CoT floor (Σ = I)")
    if above:
        ax0.set_ylim(top=cap)
        ax0.plot([], [], "^", ms=6, color="0.4", label="model above the axis")
    ax0.set_xlabel("CoT steps k at test time")
    ax0.set_ylabel(r"median $\|\hat w_k - w^\star\|^2$")
    ax0.set_title("(a) trained model (o) vs GD law (—)")
    legend_outside(ax0, "below", ncol=2)
    ratios, etas = phase["ratios"], phase["etas"]
    lm = np.log10(np.clip(phase["median"], 1e-300, 1e300))  # an overflowed median (inf) at the top of the scale
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


def axis_cap(rows: dict, k_list, floor: float) -> float:
    """The top of :func:`figure`'s panel (a): three decades above the largest finite GD-law median (or the floor).
    Beyond the stability boundary the trained model's error can outgrow GD's by hundreds of decades (its CoT
    recursion is not exactly linear in the state), and a log axis spanning them cannot be drawn; such points sit on
    the top edge, marked."""
    vals = [r["ks"][k]["law"][0] for r in rows.values() for k in k_list]
    top = max([v for v in vals if np.isfinite(v) and v > 0] + [floor])
    return float(10.0 ** (math.ceil(math.log10(top)) + 3))


def beyond_words(rows: dict, k_list) -> str:
    """How the trained model's median error compares with the GD law's at the largest test k, on the test covariances
    beyond the stability boundary (:func:`regime`): the words that end the figure caption's sentence "there the
    trained model's error ..."."""
    k = max(k_list)
    pairs = [(r["ks"][k]["model"][0], r["ks"][k]["law"][0]) for r in rows.values() if regime(r) == "beyond"]
    if not pairs:
        return "is not measured here: no test covariance lies beyond it"
    slower = [bool(np.isfinite(m) and m <= g) for m, g in pairs]  # an overflowed model (inf, NaN) counts as faster
    if all(slower):
        return f"grows too, more slowly (at k = {k})"
    if not any(slower):
        return f"grows faster than GD's (at k = {k})"
    return f"grows more slowly than GD's on some test covariances and faster on others (at k = {k})"


def regime(row: dict) -> str:
    r"""Where a test covariance lies, from the independent sample of :func:`ood_row`: ``"inside"`` when none of its
    spectra has :math:`\eta\lambda_{\max}(S_\Sigma) > 2` (the mean error is then not carried by divergent prompts),
    ``"near"`` when some but fewer than half have, ``"beyond"`` when half or more have (the median prompt diverges)."""
    u = row["unstable"]
    return "inside" if u == 0 else ("near" if u < 0.5 else "beyond")


@dataclass(frozen=True)
class ClaimNumbers:
    r"""The numbers one claim of one test covariance hands to the verdict (:func:`model_claim`,
    :func:`growth_claim`, :func:`condition_claim`).

    ``form`` says what is compared: ``"mean"``, ``"median"``, ``"fraction"`` or ``"bound"``; empty where the claim
    is not applicable, and then ``why_not`` says why where the regime alone does not (the growth claims).
    ``predicted`` is the prediction (for a bound: the bound), ``measured`` the trained model's
    value, ``se`` and ``dof`` their combined standard error and its degrees of freedom (``math.inf``: normal),
    ``falsifier_value`` the competitor's value and ``falsifier_k`` its number of steps (the model claims only)."""

    form: str
    why_not: str = ""
    predicted: float = math.nan
    measured: float = math.nan
    se: float = math.nan
    dof: float = math.inf
    falsifier_value: float = math.nan
    falsifier_k: int | None = None

    @property
    def applicable(self) -> bool:
        """Whether the claim is tested (otherwise it is recorded as not applicable)."""
        return bool(self.form)


def model_claim(row: dict) -> ClaimNumbers:
    r"""The numbers of the claim ``cot42_model_*`` of one test covariance (``row``: :func:`ood_row`), at
    :math:`K` = ``row["K"]`` steps, by :func:`regime`:

    * inside or near the boundary: the medians (``"median"``). With R > 1 replicates, the paired control variate
      :math:`m_{\rm law} + \overline{(m_{\rm model} - m_{\rm GD})}` against :math:`m_{\rm law}`, the median of the
      K-step GD law on the independent sample: measured minus predicted is the replicates' mean median difference
      to exact GD on the same prompts, so the law's Monte-Carlo error cancels, and the standard error is that of
      the replicates' differences alone (R - 1 degrees of freedom). With one model, the model's median
      :math:`m_{\rm model} \pm s_{\rm model}` against :math:`m_{\rm law} \pm s_{\rm law}`, the two standard errors
      combined by :func:`companion.stats.welch` (the law's sample counts as normal);
    * beyond it (half or more of the spectra diverge): not applicable (empty ``form``).

    Medians everywhere the median prompt converges, not means: a prompt with :math:`\eta\lambda_{\max}(S) > 2` has an
    error that grows geometrically in K, and such prompts occur among a few thousand test prompts even where the
    independent sample shows none; one of them then carries the paired mean difference and its spread alike, so
    that the mean's z is about +-1 whatever the model does.

    The competitor is the same quantity one step short or long, whichever is nearer the prediction
    (:func:`companion.cot.stats.nearer_neighbour`, the rule of :prf:ref:`cot-thm-3-2` too): ``falsifier_value`` and
    ``falsifier_k``.
    """
    K, md = row["K"], row["median"]
    if regime(row) == "beyond":
        return ClaimNumbers("")
    (mm, ms, mdof), (lm, ls) = md["model"], md["law"]
    k, near = nearer_neighbour(K, lm, {K - 1: md["prev"], K + 1: md["next"]})
    pm, pse, pdof = md.get("paired", (math.nan, math.inf, math.inf))
    if math.isfinite(pm) and math.isfinite(pse):  # the paired control variate: the law's median cancels
        return ClaimNumbers("median", predicted=lm, measured=lm + pm, se=pse, dof=pdof, falsifier_value=near,
                            falsifier_k=k)
    se, dof = welch((ls, math.inf), (ms, mdof))
    return ClaimNumbers("median", predicted=lm, measured=mm, se=se, dof=dof, falsifier_value=near, falsifier_k=k)


def growth_claim(row: dict, id_growth: float) -> ClaimNumbers:
    r"""The numbers of the claim ``cot42_growth_*`` of one test covariance (``row``: :func:`ood_row`): where any
    spectrum of the independent sample has :math:`\eta\lambda_{\max}(S_\Sigma) > 2`, the model's fraction of prompts
    whose error after K steps exceeds :math:`\|w^\star\|^2` (``"fraction"``) against the GD law's, their standard
    errors combined (Welch, :func:`companion.stats.welch`: the law's binomial error as normal, the model's on its
    degrees of freedom); the competitor ``id_growth`` is the fraction at :math:`\Sigma = I`
    (:func:`in_distribution_growth`). Where no spectrum is beyond the boundary, not applicable; and where the law's
    fraction p on the pilot sample (``pilot``, independent of both compared numbers) predicts fewer than
    :data:`MIN_EXPECTED` grown or not grown prompts among the model's test prompts or the law's sample
    (:math:`\min(p, 1-p)N`), not applicable either, with ``why_not`` (the smaller count): a normal band on so few
    counts is skewed. The rule reads neither the model's fraction nor the prediction's sample: one read from the
    prediction's sample would keep the seeds whose sample over-counts, and bias the comparison."""
    if row["unstable"] > 0:
        g = row["growth"]
        p = min(g["pilot"], 1 - g["pilot"])
        few = [(what, p * n) for what, n in ((f"the model's {g['prompts']} test prompts", g["prompts"]),
                                             (f"the law's {g['spectra']} spectra", g["spectra"])) if p * n < MIN_EXPECTED]
        if few:
            what, e = min(few, key=lambda t: t[1])
            return ClaimNumbers("", why_not=f"a pilot sample of the GD law gives a fraction {g['pilot']:.2g}: {e:.2g} "
                                            f"grown or not grown prompts expected among {what}, fewer than the "
                                            f"{MIN_EXPECTED} a normal band needs")
        se, dof = welch((g["law_se"], math.inf), (g["se"], g["dof"]))
        return ClaimNumbers("fraction", predicted=g["law"], measured=g["model"], se=se, dof=dof,
                            falsifier_value=id_growth)
    return ClaimNumbers("")


def condition_claim(row: dict) -> ClaimNumbers:
    r"""The numbers of the claim ``cot42_condition_*`` of one test covariance (``row``: :func:`ood_row`): where the
    spectral sufficient condition :math:`\eta\lambda_{\max}(\Sigma)(1+\sqrt{d/n})^2 < 2` holds, the bound
    :math:`d\rho_\Sigma^{2K}` (``"bound"``, in ``predicted``) on the model's median error after K steps, with the
    median's standard error and degrees of freedom (:func:`companion.cot.stats.replicate_median`). Where the
    condition fails the theorem states nothing: not applicable."""
    if row["cond"] < 2:
        mm, ms, mdof = row["median"]["model"]
        return ClaimNumbers("bound", predicted=row["d"] * row["rho"] ** (2 * row["K"]), measured=mm, se=ms, dof=mdof)
    return ClaimNumbers("")


# --------------------------------------------------------------------------------------------- the verdict



def spectrum_lo_hi(name: str) -> str:
    """A claim-id part ``0p5_1p5`` (:func:`spectrum_name`) as the parameter writes it: ``0.5:1.5``."""
    return name.replace("_", ":").replace("p", ".")


def spectrum_text(name: str) -> str:
    r"""A test covariance as the page writes it: the claim-id part ``0p5_1p5`` (:func:`spectrum_name`) ->
    ``$\Sigma$ 0.5:1.5``."""
    return r"$\Sigma$ " + spectrum_lo_hi(name)


#: the keys of :func:`prose_numbers`
PROSE_KEYS = ("h_sigma", "h_gap", "h_stated", "h_cond", "b_sigma", "b_unstable", "b_model", "b_law", "b_model_med",
              "b_law_med", "b_verdict")


def prose_numbers(rows: dict, records=()) -> dict[str, str]:
    r"""The numbers of the page's prose after the verdict, as text (``"—"`` where no covariance qualifies), from
    ``rows`` (name -> :func:`ood_row`): for the first covariance inside the boundary (:func:`regime`) its spectrum
    ``h_sigma``, the distance ``h_gap`` of the competitor one CoT step away from the prediction (:func:`model_claim`),
    the stated bound :math:`d\,\E\max_j|1-\eta\lambda_j|^{2K}` over the theorem's mean error ``h_stated`` and the
    sufficient condition's bound over the model's median ``h_cond`` (:func:`condition_claim`); for the covariance
    farthest beyond the boundary its spectrum ``b_sigma``, its share of divergent spectra ``b_unstable``, the model's
    and the law's growth fractions ``b_model``, ``b_law``, median errors ``b_model_med``, ``b_law_med`` and the status
    of its claim ``cot42_growth_*`` among ``records`` (the verdict's), ``b_verdict``."""
    inside = [nm for nm, r in rows.items() if regime(r) == "inside"]
    beyond = sorted((nm for nm, r in rows.items() if r["unstable"] > 0), key=lambda nm: rows[nm]["unstable"])
    text = dict.fromkeys(PROSE_KEYS, "—")
    if inside:
        r = rows[inside[0]]
        model, cond = model_claim(r), condition_claim(r)
        text.update(h_sigma=spectrum_lo_hi(inside[0]),
                    h_gap=f"{100 * abs(model.falsifier_value / model.predicted - 1):.1f} %",
                    h_stated=f"{r['stated'] / r['mean']['pred']:.3g}",
                    h_cond=f"{cond.predicted / cond.measured:.3g}" if cond.applicable else "—")
    if beyond:
        r = rows[beyond[-1]]
        g = r["growth"]
        text.update(b_sigma=spectrum_lo_hi(beyond[-1]), b_unstable=f"{r['unstable']:.0%}",
                    b_model=f"{g['model']:.3f}", b_law=f"{g['law']:.3f}", b_model_med=f"{g['model_median']:.3g}",
                    b_law_med=f"{g['law_median']:.3g}")
        status = {r.claim: r.status for r in records}.get(f"cot42_growth_{beyond[-1]}")
        text.update(b_verdict=status.replace("_", " ") if status else "—")
    return text


def record_covariances(v, rows: dict, id_growth: float, *, num_mc: int, escape: str = "") -> None:
    r"""The four claims of each test covariance (``rows``: name -> :func:`ood_row`), at :math:`K` = ``row["K"]``:

    * ``cot42_one_step_*``: the one-step error at :math:`V = -\eta^\star I` by Monte Carlo against the formula of
      :prf:ref:`cot-thm-4-2` (falsifier: its printed form with a factor 2);
    * ``cot42_model_*`` (the headline): by :func:`regime` and :func:`model_claim`, inside the boundary the model's
      mean error (paired control variate) against :math:`\E\tr(I-\eta S_\Sigma)^{2K}`, near it the medians,
      beyond it not applicable; falsifier: the nearer of :math:`K \pm 1` steps;
    * ``cot42_growth_*``: where any spectrum lies beyond the boundary, the fraction of prompts whose error grows,
      model against GD law (:func:`growth_claim`; falsifier: the fraction at :math:`\Sigma = I`, ``id_growth``);
    * ``cot42_condition_*``: under the spectral sufficient condition, the model's median below
      :math:`d\rho_\Sigma^{2K}` (:func:`condition_claim`).

    ``num_mc``: the size of the independent sample of spectra (the words of a not-applicable growth claim);
    ``escape``: which replicates the rows count (:meth:`companion.cot.stats.Escape.words`), for the trained claims'
    details."""
    for nm, r in rows.items():
        sig, floor = spectrum_text(nm), ROUNDOFF * r["d"]
        _record_one_step(v, nm, r, sig, floor, num_mc)
        _record_model(v, nm, r, sig, floor, escape)
        _record_growth(v, nm, r, sig, id_growth, num_mc, escape)
        _record_condition(v, nm, r, sig, floor)


def _record_one_step(v, nm: str, r: dict, sig: str, floor: float, num_mc: int) -> None:
    v.statistical(f"cot42_one_step_{nm}",
                  quantity=rf"{sig}: one-step error at $V = -\eta^\star I$, Monte Carlo vs the formula",
                  predicted=r["one_pred"], measured=r["one_mc"][0], se=r["one_mc"][1], floor=floor,
                  falsifier=PRINTED_FACTOR, falsifier_value=r["one_j26"],
                  reason=f"{Z_LEVEL:.3g} standard errors of the Monte-Carlo mean over the sample of $S_\\Sigma$, plus round-off",
                  detail=rf"Mean of $\|I - \eta^\star S_\Sigma\|_F^2$ over {num_mc} independent matrices "
                         r"$S_\Sigma$ (normal, many degrees of freedom) against "
                         rf"`companion.cot.theory.ood.one_step_ood_error`; round-off floor ${tex_number(floor)}$.")


def _record_model(v, nm: str, r: dict, sig: str, floor: float, escape: str = "") -> None:
    K, R = r["K"], r["R"]
    model = model_claim(r)
    if model.form == "median":
        pm, pse = r["median"].get("paired", (math.nan, math.inf, math.inf))[:2]
        paired = math.isfinite(pm) and math.isfinite(pse)
        where = ("inside the boundary" if regime(r) == "inside" else
                 f"near the boundary: {r['unstable']:.2%} of the spectra beyond it")
        v.statistical(f"cot42_model_{nm}",
                      quantity=rf"{sig} ({where}): median error of the trained model after $K = {K}$ steps ("
                               + ("the law median + the models minus exact GD on the same prompts" if paired else
                                  "one model")
                               + r") vs the median of the $K$-step GD law",
                      predicted=model.predicted, measured=model.measured, se=model.se, dof=model.dof,
                      floor=floor, headline=True, falsifier=NEAR_STEP, falsifier_value=model.falsifier_value,
                      reason=(f"{Z_LEVEL:.3g} SE of the {R} models' median differences to exact GD on their own prompts (the "
                              "law's median cancels)" if paired else
                              f"{Z_LEVEL:.3g} SE of the model's and the law's order statistics")
                             + f"; the competitor takes {model.falsifier_k} steps",
                      detail=(f"{escape}. " if escape else "")
                             + rf"Falsifier at {model.falsifier_k} steps (of $K \pm 1$, the nearer); level of {Z_LEVEL:.3g} SE: "
                             + (f"the spread of the {R} models' median differences to exact GD on their own prompts "
                                "(measured minus predicted is that difference: the Monte-Carlo error of the law's "
                                "median cancels)" if paired else
                                "the order-statistic standard errors of the model's prompts and of the independent "
                                "sample, Welch")
                             + rf" ({band_words(model.dof)}) + round-off floor ${tex_number(floor)}$.")
    else:
        v.not_applicable(f"cot42_model_{nm}", kind="statistical",
                         quantity=rf"{sig}: the model's error after $K = {K}$ steps vs the GD law",
                         reason=rf"{r['unstable']:.0%} of the independent spectra have $\eta\lambda_{{\max}}(S) > 2$: "
                                rf"the typical prompt diverges; what is measured there is `cot42_growth_{nm}`")


def _record_growth(v, nm: str, r: dict, sig: str, id_growth: float, num_mc: int, escape: str = "") -> None:
    K, R, g = r["K"], r["R"], r["growth"]
    growth = growth_claim(r, id_growth)
    if growth.applicable:
        v.statistical(f"cot42_growth_{nm}",
                      quantity=rf"{sig} ({r['unstable']:.2%} of the spectra beyond the boundary): fraction of "
                               rf"prompts whose error after $K = {K}$ steps exceeds $\|w^\star\|^2$, trained model "
                               rf"vs GD law (median errors at $K$: model ${tex_number(g['model_median'])}$, GD law "
                               rf"${tex_number(g['law_median'])}$)",
                      predicted=growth.predicted, measured=growth.measured, se=growth.se, dof=growth.dof,
                      falsifier=NO_BOUNDARY, falsifier_value=growth.falsifier_value,
                      reason=rf"{Z_LEVEL:.3g} SE of the binomial error of the independent sample and of the {R} models' "
                             "fractions (their spread or the binomial error, the wider)",
                      detail=(f"{escape}. " if escape else "") + f"Level of {Z_LEVEL:.3g} SE: binomial error of the independent "
                             "sample and, for the "
                             rf"{R} models, the wider band of their fractions' spread and the binomial error, "
                             f"combined by Welch ({band_words(growth.dof)}).")
    else:
        v.not_applicable(f"cot42_growth_{nm}", kind="statistical", quantity=rf"{sig}: growth beyond the boundary",
                         reason=growth.why_not or
                         (rf"none of the {num_mc} independent spectra has $\eta\lambda_{{\max}}(S) > 2$: no "
                          "prompt is predicted to diverge"))


def _record_condition(v, nm: str, r: dict, sig: str, floor: float) -> None:
    K = r["K"]
    cond = condition_claim(r)
    if cond.applicable:
        v.bound(f"cot42_condition_{nm}",
                quantity=rf"{sig}: condition holds (${r['cond']:.3f} < 2$); median error after $K = {K}$ steps "
                         rf"$\le d\rho_\Sigma^{{2K}}$ (slack: the bound is ${tex_number(cond.predicted / cond.measured)}$ "
                         "times the median)",
                bound=cond.predicted, measured=cond.measured, comparison="upper", se=cond.se, dof=cond.dof,
                floor=floor,
                reason=f"geometric decay under the spectral sufficient condition; level of {Z_LEVEL:.3g} SE of the model's "
                       "median",
                detail=r"$\rho_\Sigma = \max(|1-\eta\lambda_{\min}(\Sigma)(1-\sqrt{d/n})^2|, "
                       r"|1-\eta\lambda_{\max}(\Sigma)(1+\sqrt{d/n})^2|)$; the model's median after $K$ steps "
                       r"(`companion.cot.stats.replicate_median`: the replicates' spread or their order "
                       rf"statistics, the wider; {band_words(cond.dof)}) + round-off floor ${tex_number(floor)}$.")
    else:
        v.not_applicable(f"cot42_condition_{nm}", kind="bound", quantity=rf"{sig}: spectral sufficient condition",
                         reason=rf"$\eta\lambda_{{\max}}(\Sigma)(1 + \sqrt{{d/n}})^2 = {r['cond']:.3f} \ge 2$: the "
                                "sufficient condition fails and the theorem states nothing here")
