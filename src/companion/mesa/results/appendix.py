r"""The appendix experiments of the mesa paper (notebook ``mesa/appendix_experiments``): random initialisation
(Fig. 5), other diagonal inits, and the step sizes of Table 1 (the book's proposition on the stability of GD on
the reduced system, :prf:ref:`mesa-prop-stability`).

What the page checks, and where:

* the runs of the page: Fig. 5, the diagonal inits, the contraction-rate replicates and the divergence
  demonstration (:func:`design`);
* from a standard Gaussian init, the trained mean :math:`a_jb_j` against the per-coordinate population GD and
  the paired test loss of the full trained model against a diagonal init's, the caption's "same test performance"
  (:func:`fig5_evidence`, the page's headline: a claim that may find the paper's statement not to hold at the
  page's sizes), and what the initial off-manifold entries keep and cost, family by family
  (:func:`fig5_offmanifold`, a measurement);
* from several diagonal inits, the final (a, b) of replicate training sets, extrapolated in m, against the
  population GD, which conserves :math:`a^2-b^2` (:func:`init_evidence`);
* the Table-1 step sizes against the stability bound of the reduced system (:func:`table1_stability`), the
  divergence beyond it (:func:`divergence_check`) and, below it, the forward-Euler contraction multiplier of the
  trained transformer against the gradient flow's (:func:`euler_rate`; the experiment: :func:`euler_rate_design`);
* Fig. 5 (:func:`fig5_heatmaps`), the (a, b) paths (:func:`init_paths`) and the step sizes (:func:`table1_steps`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from companion import params, replicate_seed, stats
from companion.claims import ClaimSpec, ResultSpec
from companion.mesa import paper
from companion.mesa import theory as th
from companion.mesa.analysis import manifold_part, radial_losses, test_data, weights
from companion.mesa.evidence import (
    FALSIFIER_INDEPENDENT,
    FALSIFIER_T_INFINITY,
    GAUSSIAN_TILT,
    ROUNDOFF32,
    SETTING_STRIDE,
    AbEvidence,
    Replicates,
    ab_evidence,
    offmanifold_floor,
    offmanifold_words,
    replicate_sets,
)
from companion.mesa.figures import init_label, plain_log_ticks
from companion.mesa.results import number_tag
from companion.mesa.stability import ReducedBound, reduced_stability, stable_lr
from companion.mesa.train import TrainingDiverged, run
from companion.plotting import COLORS, legend_outside, new_figure
from companion.stats import Z_LEVEL

from ...text import tex_number

__all__ = ["CLAIMS", "RESULT", "tag", "manifest", "RATE_WINDOW", "RateDesign", "euler_rate_design", "Design", "design",
           "paper_design", "paper_runs", "page_lr", "FamilyCost", "Fig5Row", "fig5_evidence", "OFF_FAMILIES", "fig5_offmanifold",
           "family_words", "InitRow", "init_evidence", "Table1Row", "table1_stability", "EulerRate", "euler_rate",
           "Divergence", "divergence_check", "record_fig5", "record_inits", "record_stability", "record_euler_rate",
           "record_divergence", "fig5_heatmaps", "init_paths", "table1_steps", "euler_window_words", "euler_words"]

_EQUAL_FACTORS = r"no conserved $a^2 - b^2$ (equal factors $a = b = \sqrt{ab}$)"
_FLOW = r"gradient flow for the same time: multiplier $e^{-\eta\alpha(a^2 + b^2)}$"
_NOT_SHARP = "the bound is not sharp: GD converges beyond it"
_NO_MESA = "the random init does not find the mesa-optimizer (loss of the zero predictor)"

CLAIMS = (
    ClaimSpec("fig5_ab_{sw}", "statistical", "trained", prediction="companion.mesa.evidence.population_ab",
              falsifier=r"the $T\to\infty$ constant $m_4/m_6$ ($m_{24} > 0$) or independent coordinates "
                        r"($m_{24} = m_2 m_4$)",
              alternatives=(FALSIFIER_T_INFINITY, FALSIFIER_INDEPENDENT)),
    # predicted 0: the same limit, so the same test loss as the diagonal init (the caption, on the full models)
    ClaimSpec("fig5_same_loss_{sw}", "statistical", "trained", headline=True,
              prediction="companion.mesa.theory.population_loss", falsifier=_NO_MESA,
              may_not_hold="the caption's same test performance, tested on the full trained models after the page's "
                           "epochs, where the entries off the diagonal manifold that a random init starts with, whose "
                           "decay the theory does not give, may still cost test loss"),
    ClaimSpec("init_a_{a0}_{b0}", "statistical", "trained", prediction="companion.mesa.theory.reduced_gd",
              falsifier=_EQUAL_FACTORS),
    ClaimSpec("init_b_{a0}_{b0}", "statistical", "trained", prediction="companion.mesa.theory.reduced_gd",
              falsifier=_EQUAL_FACTORS,
              supporting="b of the same trained models as `init_a_*`: with their $ab$ and the conserved $a^2 - b^2$ it "
                         "follows from $a$ (over held-out seeds the two z coincide), one fact read twice"),
    ClaimSpec("table1_stable", "bound", "closed_form", prediction="companion.mesa.results.appendix.table1_stability"),
    ClaimSpec("lr_stable", "bound", "closed_form", prediction="companion.mesa.stability.reduced_stability",
              supporting="this page's step size below the stability bound: a precondition of its training runs, not a "
                         "statement of the paper (at the paper's settings it is a Table-1 step, `table1_stable`)"),
    ClaimSpec("euler_rate", "statistical", "trained",
              prediction="companion.mesa.results.appendix.euler_rate_design",
              falsifier=_FLOW),
    ClaimSpec("unstable_diverges", "qualitative", "trained", prediction="companion.mesa.stability.reduced_stability",
              falsifier=_NOT_SHARP),
)

RESULT = ResultSpec(paper="mesa", number="Appendix", title="random init, other inits, Table-1 step sizes",
                    label="mesa-prop-stability", notebook="mesa/appendix_experiments", module=__name__,
                    claims=CLAIMS, figures=("fig_mesa_fig5", "fig_mesa_inits", "fig_mesa_table1"), sweep="")


tag = number_tag  # the claim-id part of a number: 0p01


def manifest(fig5: dict, init_rows: dict) -> list[str]:
    """The claim ids the page's verdict declares for the Fig. 5 scales and the diagonal inits."""
    ids = [f"fig5_{k}_{tag(sw)}" for sw in fig5 for k in ("ab", "same_loss")]
    ids += [f"init_{k}_{tag(a0)}_{tag(b0)}" for a0, b0 in init_rows for k in ("a", "b")]
    return ids + ["table1_stable", "lr_stable", "euler_rate", "unstable_diverges"]


#: the contraction-rate experiment (:func:`euler_rate_design`): the window of deviations from c* in which the
#: multiplier is read, relative to c* (below the upper end the linear regime holds to about 1 %; above the lower
#: end the deviation is 1e3 times the complex64 round-off of ab)
RATE_WINDOW = (1e-4, 1e-2)


def _window(dev, lo: float, hi: float) -> tuple[int, int]:
    """The first epoch with ``dev <= hi`` and the last epoch before ``dev < lo`` (``(k1, k2)``; ``k2 <= k1`` when
    the window holds fewer than two epochs)."""
    inside, below = dev <= hi, dev < lo
    if not inside.any() or not below.any():
        return 0, -1
    return int(inside.argmax()), int(below.argmax()) - 1


@dataclass(frozen=True)
class RateDesign:
    r"""The contraction-rate experiment (:func:`euler_rate_design`): the step ``lr``, :math:`x=\eta\alpha(a_\infty^2+
    b_\infty^2)` (``x``), ``cstar``, the init ``a0``, the epochs of the population GD's window (``k1``, ``k2``) and
    the flow's (``f1``, ``f2``), the ``epochs`` to train, the population-GD multiplier ``predicted`` and the flow's
    ``falsifier_value`` (NaN where a window holds fewer than two epochs), and their linear values ``euler`` =
    1 - x and ``flow`` = exp(-x)."""

    lr: float
    x: float
    cstar: float
    a0: float
    k1: int
    k2: int
    f1: int
    f2: int
    epochs: int
    predicted: float
    falsifier_value: float
    euler: float
    flow: float


def euler_rate_design(law, scale: float, d: int, T: int, kappa: float, a0: float = 1.2,
                      window: tuple[float, float] = RATE_WINDOW) -> RateDesign:
    r"""The contraction-rate experiment of the stability proposition (:prf:ref:`mesa-prop-stability`): GD from the
    diagonal init :math:`(a_0 I, a_0 I)` at the step :math:`\eta=\kappa\,\eta_{\max}` (``kappa`` times the largest
    stable step of the reduced system, :func:`companion.mesa.stability.reduced_stability`), near the limit :math:`(a_\infty, b_\infty)`.

    Linearised at the limit, the deviation :math:`e_k=a_kb_k-c^*` of forward Euler contracts by
    :math:`\lambda=1-x` per epoch, :math:`x=\eta\,\alpha\,(a_\infty^2+b_\infty^2)`; gradient flow run for the same time
    contracts by :math:`e^{-x}`. The multiplier is read as :math:`|e_{k_2}/e_{k_1}|^{1/(k_2-k_1)}` over the epochs
    whose population deviation lies in ``window`` (relative to :math:`c^*`, :data:`RATE_WINDOW`), on the population GD
    (``predicted``, nonlinear terms included) and on the gradient flow sampled at :math:`\tau=\eta k` over its own
    window (``falsifier_value``). ``epochs`` = :math:`2k_2+2`, so a run ends with its deviation squared below
    the window (its own limit). Returns the :class:`RateDesign`."""
    al, be = th.alpha_beta(law, scale, d, T)
    cst = be / al
    lr = params.real("kappa", kappa, min=0, max=1, min_open=True, max_open=True) * reduced_stability(
        law, scale, d, T, 1.0, [(a0, a0)]).lr_max
    a_inf, b_inf = th.limits(a0, a0, cst)
    x = lr * al * (a_inf**2 + b_inf**2)
    lo, hi = window
    K = int(min(10**5, 10 + 3 * math.log(lo * cst / max(abs(a0 * a0 - cst), 1e-300)) / math.log(max(abs(1 - x), math.exp(-x)))))
    _, _, pc = th.reduced_gd(a0, a0, lr, max(K, 10), al, be)
    k1, k2 = _window(abs(pc - cst) / cst, lo, hi)
    tau = lr * np.arange(max(K, 10) + 1)
    _, _, fc = th.gradient_flow(a0, a0, tau, al, be)
    f1, f2 = _window(abs(fc - cst) / cst, lo, hi)
    dev, fdev = abs(pc - cst), abs(fc - cst)
    pred = float((dev[k2] / dev[k1]) ** (1 / (k2 - k1))) if k2 > k1 else math.nan
    fal = float((fdev[f2] / fdev[f1]) ** (1 / (f2 - f1))) if f2 > f1 else math.nan
    return RateDesign(lr=lr, x=x, cstar=cst, a0=a0, k1=k1, k2=k2, f1=f1, f2=f2, epochs=2 * max(k2, 1) + 2,
                      predicted=pred, falsifier_value=fal, euler=1 - x, flow=math.exp(-x))


@dataclass(frozen=True)
class Design:
    """Every training run of the page (:func:`design`), as keyword arguments of :func:`companion.mesa.train.run`: the
    diagonal-init reference of Fig. 5 (``fig5_reference``) and the runs from a Gaussian init per sigma_w (``fig5``);
    the replicate training sets of every diagonal init (``inits``: (a0, b0) -> :class:`Replicates`); the
    contraction-rate experiment (``rate``,
    :func:`euler_rate_design`) with its replicate training sets (``rate_replicates``, None when its window holds
    fewer than two epochs); and the divergence demonstration (``divergence``, at ``factor`` times the largest stable
    step ``lr_crit`` of the reduced system; None when not asked for), which is not among ``runs``: it diverges."""

    fig5_reference: dict
    fig5: dict
    inits: dict
    rate: RateDesign
    rate_replicates: Replicates | None
    divergence: dict | None
    lr_crit: float

    def runs(self) -> list[dict]:
        """Every run of the page that trains to its last epoch."""
        rate = self.rate_replicates.runs() if self.rate_replicates is not None else []
        inits = [kw for rep in self.inits.values() for kw in rep.runs()]
        return [self.fig5_reference, *self.fig5.values(), *inits, *rate]


def design(sigma_ws, epochs_fig5: int, inits, lr: float, d: int, T: int, m: int, m_test: int, epochs: int, seed: int,
           m_rate: int, n_rate: int, kappa: float, m_div: int | None = None, a0_rate: float = 1.2,
           factor: float = 1.5, epochs_div: int = 60, m_init: int = 2500, n_init: int = 10) -> Design:
    r"""The runs of the page. Fig. 5: the Gaussian law at sigma = 1 with step ``lr`` for ``epochs_fig5`` epochs from a
    standard Gaussian init of each ``sigma_ws`` and from the diagonal init (0.5, 1.5) (the reference on the same
    data); from every diagonal init of ``inits`` with :math:`a_0\ne b_0`, ``n_init`` replicate training sets at
    ``m_init`` and ``m_init/4`` (the Gaussian law tilted by :data:`companion.mesa.evidence.GAUSSIAN_TILT`, as Theorem
    4.1's replicates: at the paper's settings its sets from (0.5, 1.5) are the first of Theorem 4.1's) for ``epochs``
    epochs, and from an init with :math:`a_0 = b_0` the first of those sets at each size (its path is drawn; its
    claims have nothing to decide, :func:`init_evidence`). The first init with :math:`a_0\ne b_0` draws its sets
    from the page's seed, every later one from its own base (:data:`~companion.mesa.evidence.SETTING_STRIDE`):
    mirrored inits such as (0.5, 1.5) and (1.5, 0.5) on the same sets would give one measurement twice (the
    restricted GD is symmetric under swapping a and b). The contraction rate: the sparse law at c = 1 from
    ``(a0_rate I, a0_rate I)`` at ``kappa`` times the reduced bound (:func:`euler_rate_design`), ``n_rate`` replicate
    training sets at ``m_rate`` and ``m_rate/4``; with ``m_div``, the divergence demonstration: the same law and init
    on ``m_div`` sequences at ``factor`` times the largest stable step of the reduced system, ``epochs_div`` epochs."""
    common = dict(law="gaussian", scale=1.0, d=d, T=T, m=m, m_test=m_test, seed=seed, lr=lr)
    rate = euler_rate_design("sparse", 1.0, d, T, kappa, a0=a0_rate)
    reps = (Replicates("sparse", 1.0, d, T, rate.a0, rate.a0, rate.lr, rate.epochs, m_rate, n_rate, seed)
            if rate.k2 > rate.k1 else None)
    lr_crit = reduced_stability("sparse", 1.0, d, T, 1.0, [(a0_rate, a0_rate)]).lr_max
    div = None if m_div is None else dict(law="sparse", scale=1.0, a0=a0_rate, b0=a0_rate, lr=factor * lr_crit,
                                          epochs=epochs_div, d=d, T=T, m=m_div, m_test=10, seed=seed, check_lr=False)
    return Design(fig5_reference=dict(a0=0.5, b0=1.5, epochs=epochs_fig5, **common),
                  fig5={sw: dict(init="gaussian", sigma_w=sw, epochs=epochs_fig5, **common) for sw in sigma_ws},
                  inits=_init_replicates(inits, d, T, lr, epochs, m_init, n_init, seed),
                  rate=rate, rate_replicates=reps, divergence=div, lr_crit=lr_crit)


def _init_replicates(inits, d: int, T: int, lr: float, epochs: int, m_init: int, n_init: int, seed: int) -> dict:
    """The replicate design of every diagonal init (:func:`design`): one set per size where a0 = b0, else ``n_init``;
    the first init with a0 != b0 from ``seed``, each later one from replicate ``SETTING_STRIDE * i`` of it."""
    out, i = {}, 0
    for a0, b0 in inits:
        base = seed
        if a0 != b0:
            base = seed if i == 0 else replicate_seed(seed, SETTING_STRIDE * i)
            i += 1
        out[a0, b0] = Replicates("gaussian", 1.0, d, T, a0, b0, lr, epochs, m_init, n_init if a0 != b0 else 1, base,
                                 tilt=GAUSSIAN_TILT)
    return out


def page_lr(lr: float, inits, kappa: float, d: int, T: int, m: int, seed: int, m_init: int, n_init: int) -> float:
    """The step size of the page's Gaussian runs: ``lr`` where it is positive, else ``kappa`` times the
    full-parameter stability bound over every init and every training set those runs train on: the Fig. 5 set of
    ``m`` sequences and the diagonal inits' replicate sets at ``m_init`` and ``m_init/4``, tilted
    (:func:`companion.mesa.stability.stable_lr`)."""
    if lr > 0:
        return float(lr)
    return min(stable_lr("gaussian", 1.0, d, T, inits, kappa, seed, sets=[(m, seed)]),
               stable_lr("gaussian", 1.0, d, T, inits, kappa, seed, sets=replicate_sets(m_init, n_init, seed),
                         tilt=GAUSSIAN_TILT))


def paper_design() -> Design:
    """:func:`design` at the paper's settings (:mod:`companion.mesa.paper`, the page's defaults), without the
    divergence demonstration (it diverges: there is nothing to compute in advance)."""
    return design(paper.FIG5["sigma_ws"], paper.FIG5["epochs"], paper.INITS + paper.APPENDIX_INITS, paper.FIG5["lr"],
                  **paper.COMMON, m_rate=paper.RATE["m_rate"], n_rate=paper.RATE["n_rate"], kappa=paper.KAPPA,
                  m_init=paper.REPLICATES["m_rep_init"], n_init=paper.REPLICATES["n_rep_init"])


def paper_runs() -> list[dict]:
    """Every run of the page at the paper's settings (:func:`paper_design`)."""
    return paper_design().runs()


@dataclass(frozen=True)
class FamilyCost:
    """What a Fig. 5 run keeps of one family of its initial off-manifold entries (``kept``, NaN for a family that
    was zero at the init) and what removing the family changes in its test loss (``cost`` with ``cost_se``)."""

    kept: float
    cost: float
    cost_se: float


@dataclass(frozen=True)
class Fig5Row:
    """The evidence of one Fig. 5 run (:func:`fig5_evidence`): the run ``r``, its mean :math:`a_jb_j` against the
    per-coordinate population GD (``ab``), the paired test-loss differences to the diagonal-init reference, on the
    manifold (``dL``) and in full (``dL_full``), each (mean, SE), the falsifier's difference ``dL_f`` (the zero
    predictor's test loss minus the full diagonal-init model's) and what the
    run kept of each family of its initial off-manifold entries (``kept``, :func:`fig5_offmanifold`)."""

    r: object
    ab: AbEvidence
    kept: dict
    dL: tuple[float, float]
    dL_full: tuple[float, float]
    dL_f: float


def fig5_evidence(design: Design, batch_stats) -> tuple[dict, float]:
    """Fig. 5: the runs of the ``design`` from a standard Gaussian init per ``sigma_w``, against the diagonal-init
    reference (0.5, 1.5) on the same data. Per sigma_w a :class:`Fig5Row`: the run ``r``, the evidence on mean a_j b_j
    (:func:`companion.mesa.evidence.ab_evidence`), the paired test-loss difference ``dL`` (mean, SE) of the two runs'
    parts on the diagonal manifold (:func:`companion.mesa.analysis.manifold_part`: the model the theory's limit
    describes), the same difference ``dL_full`` of the full models (what the entries off the manifold still cost
    after the run: the caption's comparison), the falsifier's difference ``dL_f`` (the zero predictor's) and what
    the run kept of its initial off-manifold entries (:func:`fig5_offmanifold`). Test losses with the radius of x_1 integrated
    (:func:`companion.mesa.analysis.radial_losses`). Returns ``(fig5, L_zero)``, ``L_zero`` the zero predictor's
    loss."""
    d, T = design.fig5_reference["d"], design.fig5_reference["T"]
    ref = run(**design.fig5_reference)
    td, sc = test_data(ref), ref.config["scale"]  # the runs share their test set (same seed)
    L_ref = radial_losses(td, *weights(ref), sc)
    L_ref_m = radial_losses(td, *manifold_part(*weights(ref)), sc)
    L_zero = d / 2 * (T - 2) * th.moments("gaussian", 1.0, d).m2
    fig5 = {}
    for sw, kw in design.fig5.items():
        r = run(**kw)
        fig5[sw] = Fig5Row(r=r, ab=ab_evidence(r, batch_stats), kept=fig5_offmanifold(r),
                           dL=stats.mean_se(radial_losses(td, *manifold_part(*weights(r)), sc) - L_ref_m),
                           dL_full=stats.mean_se(radial_losses(td, *weights(r), sc) - L_ref),
                           dL_f=L_zero - float(L_ref.mean()))
    return fig5, L_zero


#: the off-manifold families of :func:`fig5_offmanifold`, with a few words each (maths between dollars)
OFF_FAMILIES = {
    "kq_off": r"off-diagonal entries of the four $d\times d$ blocks of $W^{KQ}$",
    "pv_off": r"off-diagonal entries of the two blocks of $W^{PV}$",
    "diag_diff": r"$(A_{11,jj} - A_{22,jj})/2$, seen only by the $x_0 = 0$ boundary term",
    "diag_sum": r"$(A_{11,jj} + A_{22,jj})/2$",
    "diag_other": r"the diagonals of $A_{12}$ and of the second block of $W^{PV}$",
}


def fig5_offmanifold(r) -> dict:
    r"""What a run from a random init (``init="gaussian"``) keeps of its initial off-manifold entries, and what they
    cost on its test set: a measurement beside the Fig. 5 loss claim (which compares the parts on the manifold),
    not a claim.

    Write :math:`W^{KQ} = \begin{pmatrix} A_{11} & A_{12} \\ A_{21} & A_{22} \end{pmatrix}` and
    :math:`W^{PV} = (P_1\;P_2)`; the red blocks' diagonals :math:`A_{21,jj} = a_j`, :math:`P_{1,jj} = b_j` are the
    manifold. The prediction sees :math:`W^{KQ}` through :math:`M = B^H W^{KQ} B` with :math:`B = (I; \bar D)`
    (:mod:`companion.mesa.model`): :math:`M_{jj} = A_{11,jj} + A_{22,jj} + \bar\lambda_j A_{12,jj} + \lambda_j A_{21,jj}`,
    so the difference :math:`A_{11,jj} - A_{22,jj}` enters only through the boundary term of :math:`e_1 = (x_1; 0)`,
    whose weight falls like :math:`1/(t-1)` with the position: a nearly flat direction of the loss. The other
    off-manifold entries have a curvature that grows with the diagonal (for an off-diagonal entry of the
    :math:`W^{KQ}` blocks about :math:`(T-2)\,b_j^2 m_4 m_2`), so near the zero init they decay slowly.

    Per family of :data:`OFF_FAMILIES`: ``kept``, the RMS of its final entries over the RMS of its initial ones
    (the run's own ``W_KQ0``, ``W_PV0``), and ``cost``, the mean change
    of the run's per-sequence test loss when the family is removed from the trained model (``diag_diff``:
    :math:`A_{11,jj}` and :math:`A_{22,jj}` both set to their mean), with its SE over the test sequences. A family
    that was zero at the init has ``kept`` NaN."""
    d = r.config["d"]
    K0, P0 = r.W_KQ0.astype(np.complex128), r.W_PV0.astype(np.complex128)
    K, Pv = r.W_KQ.astype(np.complex128), r.W_PV.astype(np.complex128)
    off = ~np.eye(d, dtype=bool)
    jj = np.arange(d)
    kq = [(slice(i * d, (i + 1) * d), slice(k * d, (k + 1) * d)) for i in (0, 1) for k in (0, 1)]
    pv = [(slice(None), slice(0, d)), (slice(None), slice(d, 2 * d))]

    def entries(Kx, Px, fam):
        if fam == "kq_off":
            return np.concatenate([Kx[b][off] for b in kq])
        if fam == "pv_off":
            return np.concatenate([Px[b][off] for b in pv])
        A11, A22 = np.diag(Kx[:d, :d]), np.diag(Kx[d:, d:])
        if fam == "diag_diff":
            return (A11 - A22) / 2
        if fam == "diag_sum":
            return (A11 + A22) / 2
        return np.concatenate([np.diag(Kx[:d, d:]), np.diag(Px[:, d:])])

    def removed(fam):
        Kx, Px = K.copy(), Pv.copy()
        if fam == "kq_off":
            for b in kq:
                Kx[b][off] = 0
        elif fam == "pv_off":
            for b in pv:
                Px[b][off] = 0
        elif fam in ("diag_diff", "diag_sum"):
            keep = (np.diag(K[:d, :d]) + (1 if fam == "diag_diff" else -1) * np.diag(K[d:, d:])) / 2
            Kx[jj, jj], Kx[d + jj, d + jj] = keep, keep if fam == "diag_diff" else -keep
        else:
            Kx[jj, d + jj] = 0
            Px[jj, d + jj] = 0
        return torch.from_numpy(Kx), torch.from_numpy(Px)

    data = test_data(r)
    sc = r.config["scale"]
    L = radial_losses(data, torch.from_numpy(K), torch.from_numpy(Pv), sc)
    out = {}
    for fam in OFF_FAMILIES:
        rms0 = float(np.sqrt(np.mean(np.abs(entries(K0, P0, fam)) ** 2)))
        rms = float(np.sqrt(np.mean(np.abs(entries(K, Pv, fam)) ** 2)))
        cost = stats.mean_se(L - radial_losses(data, *removed(fam), sc))
        out[fam] = FamilyCost(kept=rms / rms0 if rms0 > 0 else math.nan, cost=float(cost[0]), cost_se=float(cost[1]))
    return out


def family_words(kept: dict) -> str:
    """One clause per family of :func:`fig5_offmanifold`: what it keeps of its initial size (or that it was zero at
    the init) and what it costs."""
    return "; ".join(f"{OFF_FAMILIES[f]} "
                     + (f"keep {q.kept:.0%} of their initial size" if math.isfinite(q.kept) else "were zero at the init")
                     + f" and cost ${q.cost:+.3g} \\pm {q.cost_se:.2g}$" for f, q in kept.items())


@dataclass(frozen=True)
class InitRow:
    """The evidence of one diagonal init (:func:`init_evidence`): its replicate design ``rep``, the first replicate
    run at m ``r`` (its (a, b) path is drawn), the final mean diagonal ``a`` and ``b`` of the replicates each
    extrapolated in m (:func:`companion.stats.richardson`: ``measured``, ``se``, ``dof``, ``mean_big``,
    ``mean_small``; None for an init with :math:`a_0 = b_0`), the population GD's final a and b (``a_pred``,
    ``b_pred``), the equal-factor falsifier ``f`` and the limit ``lim`` from the conserved :math:`a^2-b^2`."""

    rep: Replicates
    r: object
    a: dict | None
    b: dict | None
    a_pred: float
    b_pred: float
    f: float
    lim: tuple[float, float]


def init_evidence(design: Design, al: float, be: float) -> dict:
    r"""Per diagonal init of the ``design`` an :class:`InitRow`: the final mean diagonal a and b of its ``n_init``
    replicate training sets at m and m/4 (``design.inits``), extrapolated to m -> infinity,

    .. math:: \hat a_\infty = \tfrac13\big(4\,\bar a(m) - \bar a(m/4)\big)

    (:func:`companion.stats.richardson`; the same for b), against the population GD (:func:`companion.mesa.theory.reduced_gd`
    at the population :math:`\alpha`, :math:`\beta` = ``al``, ``be``), which conserves :math:`a^2-b^2` up to the
    step's second order. The restricted GD on a training set is a smooth function of its sample moments and the
    off-manifold feedback is of second order in the :math:`O(m^{-1/2})` fluctuations: both bias the final (a, b)
    by O(1/m), which the combination removes; its standard error is the replicate spread's (Welch). The
    falsifier: equal factors :math:`a = b = \sqrt{ab}` at the population GD's ab. From an init with
    :math:`a_0 = b_0` the conserved :math:`a^2 - b^2` is 0 and equal factors are the prediction: there is nothing
    for the claims to decide (the ab such an init reaches is Theorem 4.1's claim), so ``a`` and ``b`` are None and
    its one run per size is only drawn."""
    rows = {}
    for (a0, b0), rep in design.inits.items():
        big = [run(**kw) for kw in rep.big]
        small = [run(**kw) for kw in rep.small]
        ap, bp, cp = th.reduced_gd(a0, b0, rep.lr, rep.epochs, al, be)
        a = stats.richardson([r.a_mean[-1] for r in big], [r.a_mean[-1] for r in small]) if a0 != b0 else None
        b = stats.richardson([r.b_mean[-1] for r in big], [r.b_mean[-1] for r in small]) if a0 != b0 else None
        rows[a0, b0] = InitRow(rep=rep, r=big[0], a=a, b=b, a_pred=float(ap[-1]), b_pred=float(bp[-1]),
                               f=float(np.sqrt(cp[-1])), lim=th.limits(a0, b0, be / al))
    return rows


@dataclass(frozen=True)
class Table1Row:
    """One Table-1 step size ``lr`` of a ``law`` at scale ``s``: its stability number and the largest stable step
    (``stability``, :class:`companion.mesa.stability.ReducedBound`)."""

    law: str
    s: float
    lr: float
    stability: ReducedBound


def table1_stability(d: int, T: int) -> list[Table1Row]:
    """:func:`companion.mesa.stability.reduced_stability` of every Table-1 step size
    (:data:`companion.mesa.paper.TABLE1`, the paper's inits) at (d, T)."""
    return [Table1Row(law, s, lr, reduced_stability(law, s, d, T, lr, paper.INITS))
            for law, rows in paper.TABLE1.items() for s, lr in rows]


@dataclass(frozen=True)
class EulerRate:
    """The contraction multiplier of the trained transformer (:func:`euler_rate`): the experiment (``design``,
    :class:`RateDesign`), the multiplier extrapolated in m (``measured``, ``se``, ``dof``; ``mean_big``,
    ``mean_small`` at the two sizes; NaN where the window is too short), the per-replicate multipliers ``big`` and
    ``small``, the round-off ``floor``, and the replicates ``m_rate`` and ``n_rate``."""

    design: RateDesign
    measured: float
    se: float
    dof: float
    mean_big: float
    mean_small: float
    big: np.ndarray
    small: np.ndarray
    floor: float
    m_rate: int
    n_rate: int


def euler_rate(design: Design) -> EulerRate:
    r"""The contraction multiplier of GD on the full transformer near its limit, against forward Euler on the reduced
    system (:prf:ref:`mesa-prop-stability`), on the runs of the ``design``: sparse law, c = 1, from
    :math:`(1.2 I, 1.2 I)` at ``kappa`` times the largest stable step (:func:`euler_rate_design`: step, window,
    epochs, the population-GD multiplier ``predicted`` and the gradient flow's ``falsifier_value``).

    Per trained run and coordinate j the multiplier :math:`|e_{j,k_2}/e_{j,k_1}|^{1/(k_2-k_1)}` of
    :math:`e_{j,k}=a_{j,k}b_{j,k}-a_{j,K}b_{j,K}` (its own limit at the last epoch K), averaged over the coordinates
    (their empirical :math:`\alpha_j` average to the population :math:`\alpha` exactly for this law). The replicate
    training sets at ``m_rate`` and ``m_rate/4`` (``n_rate`` each, ``design.rate_replicates``) are extrapolated
    to m -> infinity for a 1/m bias (:func:`companion.stats.richardson`: the off-manifold feedback is of second order
    in the O(m^-1/2) fluctuations), the standard error from the replicate spreads (Welch degrees of
    freedom). Returns the :class:`EulerRate`."""
    des, reps = design.rate, design.rate_replicates
    k1, k2 = des.k1, des.k2
    if reps is None:
        nan = math.nan
        return EulerRate(des, nan, nan, nan, nan, nan, np.array([]), np.array([]), nan, 0, 0)

    def rate(kw):
        ab = run(**kw).ab_diag
        e = np.abs(ab - ab[-1])
        return float(np.mean((e[k2] / e[k1]) ** (1.0 / (k2 - k1))))

    big = np.array([rate(kw) for kw in reps.big])
    small = np.array([rate(kw) for kw in reps.small])
    return EulerRate(des, **stats.richardson(big, small), big=big, small=small, floor=ROUNDOFF32 * des.predicted, m_rate=reps.m,
                     n_rate=reps.n_rep)


@dataclass(frozen=True)
class Divergence:
    """The divergence demonstration (:func:`divergence_check`): ``diverged`` (1.0 if training diverged), the largest
    stable step of the reduced system ``lr_crit`` and the training's message."""

    diverged: float
    lr_crit: float
    message: str


def divergence_check(design: Design) -> Divergence:
    """Full-parameter GD of the divergence demonstration of the ``design`` (sparse law, c = 1, from (a0 I, a0 I), at
    a factor times the largest stable step of the reduced system): ``diverged`` (1.0 if training raised
    TrainingDiverged), ``lr_crit`` and the message."""
    try:
        run(**design.divergence)
    except TrainingDiverged as err:
        return Divergence(diverged=1.0, lr_crit=design.lr_crit, message=str(err))
    return Divergence(diverged=0.0, lr_crit=design.lr_crit, message="training did not diverge")


# ---- the verdict


def _jackknife_words(n_batches: int, off: float, dof, pred: float, floor: str) -> tuple[str, str]:
    """The reason and the method of a trained-ab claim banded by the restricted GD's jackknife plus the run's
    measured off-manifold feedback (:func:`companion.mesa.evidence.offmanifold_floor`)."""
    reason = (f"{Z_LEVEL:.3g} SE of the restricted GD's jackknife over {n_batches} batches of the training set, Student-t; "
              f"plus this run's measured off-manifold bias (${tex_number(off, '+.3g')}$) and round-off")
    detail = (f"level of {Z_LEVEL:.3g} SE: jackknife SE ({n_batches} batches) of the restricted GD, Student-t on {dof} degrees "
              f"of freedom; + {offmanifold_words(off, predicted=pred, see='mesa/thm4_1_emergence')} + {floor}")
    return reason, detail


def record_fig5(v, fig5: dict, cst: float, epochs_fig5: int, n_batches: int, L_zero: float) -> None:
    r"""Claims ``fig5_ab_{sw}`` and ``fig5_same_loss_{sw}`` per initialisation scale :math:`\sigma_w`
    (:func:`fig5_evidence`): the trained mean :math:`a_jb_j` against the per-coordinate population GD, at ``Z_LEVEL`` SE
    of the restricted GD's jackknife plus the run's measured off-manifold feedback
    (:func:`companion.mesa.evidence.offmanifold_floor`); and the caption's "same test performance" as stated: the
    paired test loss of the full trained model against the diagonal init's (predicted 0; the headline), where the
    population GD has converged to within 1 % of c* (else not applicable: the caption is about trained limits). A miss
    is ``does_not_hold`` (the spec's ``may_not_hold``): the paper's statement does not hold at these sizes, a finding.
    The difference of the parts on the diagonal manifold and the off-manifold families (:func:`family_words`) are
    reported beside it, in the method."""
    for sw, q in fig5.items():
        e = q.ab
        why, how = _jackknife_words(n_batches, e.off, e.dof, e.predicted, "round-off")
        v.statistical(
            f"fig5_ab_{tag(sw)}", quantity=rf"$\sigma_w = {sw:g}$: trained mean over $j$ of $a_j b_j$ vs per-coordinate "
                                           "population GD",
            predicted=e.predicted, measured=e.measured, se=e.se, dof=e.dof,
            floor=offmanifold_floor(e.floor, e.off), falsifier=e.falsifier,
            falsifier_value=e.falsifier_value,
            reason=why, detail=how)
        loss_q = rf"$\sigma_w = {sw:g}$: test loss of the trained transformer minus the diagonal init's (paired)"
        if not abs(e.pop[-1] / cst - 1) <= 0.01:  # not converged
            v.not_applicable(
                f"fig5_same_loss_{tag(sw)}", kind="statistical", quantity=loss_q,
                reason=f"the per-coordinate population GD is at $ab = {tex_number(e.pop[-1], '.4g')}$ after {epochs_fig5} "
                       f"epochs, more than 1 % from $c^* = {tex_number(cst, '.4g')}$: the caption's 'same test performance' "
                       "is about trained limits")
            continue
        part, part_se = q.dL
        v.statistical(
            f"fig5_same_loss_{tag(sw)}", quantity=loss_q, headline=True,
            predicted=0.0, measured=q.dL_full[0], se=q.dL_full[1], floor=1e-12 * L_zero,
            falsifier=_NO_MESA, falsifier_value=q.dL_f,
            reason=f"{Z_LEVEL:.3g} SE of the mean paired difference over i.i.d. test sequences (radius of $x_1$ integrated); "
                   rf"the parts on the manifold differ by ${tex_number(part, '.3g')} \pm {tex_number(part_se, '.2g')}$",
            detail=f"{Z_LEVEL:.3g} SE (normal) of the mean paired difference of the full models over i.i.d. test sequences "
                   "(the radius of $x_1$ integrated) + round-off ($10^{-12}$ of the zero predictor's loss). Beside it, "
                   rf"measured: the two models' parts on the diagonal manifold differ by ${tex_number(part, '.4g')} \pm "
                   rf"{tex_number(part_se, '.2g')}$; the rest is what the entries off the manifold still cost after "
                   f"{epochs_fig5} epochs, whose decay the theory does not give (the {family_words(q.kept)})")


def record_inits(v, init_rows: dict) -> None:
    r"""Claims ``init_{a,b}_{a0}_{b0}``: per diagonal init (:func:`init_evidence`) the final mean diagonal a and b of
    its replicate training sets, extrapolated in m, against the population GD that conserves :math:`a^2-b^2`, at
    ``Z_LEVEL`` SE of the replicate spreads (Welch) plus complex64 round-off; the falsifier is equal factors
    :math:`a=b=\sqrt{ab}`. Not applicable from an init with :math:`a_0 = b_0`, where equal factors are the
    prediction."""
    for (a0, b0), q in init_rows.items():
        rep = q.rep
        for k, e, pred in (("a", q.a, q.a_pred), ("b", q.b, q.b_pred)):
            if e is None:
                v.not_applicable(
                    f"init_{k}_{tag(a0)}_{tag(b0)}", kind="statistical",
                    quantity=f"init $({a0:g}, {b0:g})$: final mean diagonal ${k}$ vs population GD",
                    reason="$a_0 = b_0$: the conserved $a^2 - b^2$ is $0$, so equal factors $a = b = \\sqrt{ab}$ are the "
                           "prediction and there is no competitor to reject; the $ab$ this init reaches is Theorem 4.1's claim")
                continue
            v.statistical(
                f"init_{k}_{tag(a0)}_{tag(b0)}", quantity=f"init $({a0:g}, {b0:g})$: final mean diagonal ${k}$, "
                                                          r"extrapolated to $m\to\infty$, vs population GD",
                predicted=pred, measured=e["measured"], se=e["se"], dof=e["dof"], floor=ROUNDOFF32 * abs(pred),
                falsifier=_EQUAL_FACTORS, falsifier_value=q.f,
                reason=f"{Z_LEVEL:.3g} SE of {rep.n_rep} replicate training sets at each of two sizes, extrapolated in $m$, "
                       "Student-t (Welch); plus complex64 round-off",
                detail=f"level of {Z_LEVEL:.3g} SE: {rep.n_rep} replicate training sets at $m = {rep.m}$ and {rep.n_rep} at "
                       f"$m/4$ (tilted samples of the law), Richardson $(4x(m) - x(m/4))/3$, SE from the replicate "
                       f"spreads, {stats.band_words(e['dof'])} (Welch) + complex64 round-off")


def record_stability(v, max_number: float, lr_number: float, lr: float, d: int, T: int) -> None:
    r"""Claims ``table1_stable`` (at the paper's (d, T) only; else not applicable) and ``lr_stable``: the largest
    stability number :math:`\eta\alpha(a^2+b^2)` of the Table-1 step sizes (:func:`table1_stability`) and of this
    page's step size, at the inits and their limits, below 2 (the closed-form bound of forward Euler)."""
    stable = "forward Euler on the reduced system is stable iff below $2$ (closed form)"
    if (d, T) == (paper.COMMON["d"], paper.COMMON["T"]):
        v.bound("table1_stable", quantity=rf"largest $\eta\alpha(a^2 + b^2)$ of the Table-1 step sizes at $d = {d}$, "
                                          f"$T = {T}$, init and limit",
                bound=2.0, measured=max_number, comparison="upper", tolerance=0.0, reason=stable)
    else:
        v.not_applicable("table1_stable", kind="bound", quantity="stability of the Table-1 step sizes",
                         reason=f"Table 1 is the paper's choice at $d = {paper.COMMON['d']}$, $T = {paper.COMMON['T']}$; "
                                f"at $d = {d}$, $T = {T}$ the step sizes follow from the stability bound (`lr_stable`)")
    v.bound("lr_stable", quantity=rf"largest $\eta\alpha(a^2 + b^2)$ of this page's step size $\eta = {tex_number(lr)}$ over "
                                  "every init and its limit",
            bound=2.0, measured=lr_number, comparison="upper", tolerance=0.0, reason=stable)


def euler_window_words(des) -> str:
    r"""Where the multiplier is read, in words (Markdown, for ``{glue:md}``): the epochs of the window
    ``RATE_WINDOW`` in the population deviation (``des``: :func:`euler_rate_design`), or that it holds fewer than two."""
    if des.k2 > des.k1:
        return f"over the epochs {des.k1} to {des.k2}"
    return "over no epochs at this `kappa` (the deviation crosses the window in fewer than two: claim `euler_rate` does not apply)"


def euler_words(records, rate: EulerRate) -> str:
    r"""The verdict's sentence on ``euler_rate`` (Markdown, for ``{glue:md}``), from its record: the replicate means
    at the two sizes, their extrapolation against forward Euler and the flow, with the status, or why the claim does
    not apply."""
    rec = next(r for r in records if r.claim == "euler_rate")
    if rec.status == "not_applicable":
        return f"The contraction multiplier is not read at these parameters (claim `euler_rate`): {rec.reason}."
    words = ("Below the bound the trained transformer contracts towards its limit by the forward-Euler multiplier, "
             "not by the gradient flow's" if rec.status == "passed" else
             "Below the bound, the trained transformer's contraction multiplier towards its limit")
    return (rf"{words} (claim `euler_rate`, **{rec.status.replace('_', ' ')}**): the replicate means "
            rf"${rate.mean_big:.4f}$ at `m_rate` and ${rate.mean_small:.4f}$ at a quarter of it extrapolate to "
            rf"${rec.measured:.4f}$, against ${rec.predicted:.4f}$ for forward Euler and ${rec.falsifier_value:.4f}$ "
            rf"for the flow (${abs(rec.z_falsifier):.0f}$ standard errors away).")


def record_euler_rate(v, rate: EulerRate, n_rate: int, m_rate: int, kappa: float) -> None:
    r"""Claim ``euler_rate``: the contraction multiplier of the trained transformer
    (:func:`euler_rate`), extrapolated in m, against forward Euler on the reduced system, at ``Z_LEVEL`` SE of the replicate
    spreads (Welch) plus complex64 round-off; the falsifier is the gradient flow's multiplier
    :math:`e^{-\eta\alpha(a^2+b^2)}`. Not applicable where the window of the reading is under two epochs."""
    des = rate.design
    if not des.k2 > des.k1:
        v.not_applicable("euler_rate", kind="statistical", quantity="contraction multiplier of the trained transformer",
                         reason=rf"at $\kappa = {kappa:g}$ the population deviation crosses the window $10^{{-2}}$ to "
                                "$10^{-4}$ of $c^*$ in fewer than two epochs (multiplier near $0$): no rate to read")
        return
    v.statistical(
        "euler_rate",
        quantity=rf"contraction multiplier of $a_j b_j - c^*$ per epoch of the trained transformer (sparse $c = 1$ "
                 rf"from $({des.a0:g}, {des.a0:g})$, $\eta\alpha(a^2 + b^2) = {des.x:.3g}$, epochs "
                 rf"{des.k1} to {des.k2}), extrapolated to $m\to\infty$, vs forward Euler on the reduced system",
        predicted=des.predicted, measured=rate.measured, se=rate.se, dof=rate.dof,
        floor=rate.floor, falsifier=_FLOW, falsifier_value=des.falsifier_value,
        reason=f"{Z_LEVEL:.3g} SE of {n_rate} replicate training sets at each of two sizes, extrapolated in $m$, Student-t "
               "(Welch); plus complex64 round-off",
        detail=f"level of {Z_LEVEL:.3g} SE: {n_rate} replicate training sets at $m = {m_rate}$ and {n_rate} at $m/4$, Richardson "
               f"$(4x(m) - x(m/4))/3$, SE from the replicate spreads, {stats.band_words(rate.dof)} (Welch) + complex64 "
               "round-off")


def record_divergence(v, div: Divergence) -> None:
    """Claim ``unstable_diverges``: full-parameter GD at 1.5 times the largest stable step of the reduced system
    (:func:`divergence_check`) diverges; the falsifier: the bound is not sharp."""
    v.qualitative("unstable_diverges",
                  quantity="GD at $1.5$ times the largest stable step (sparse $c = 1$, from $(1.2, 1.2)$) diverges "
                           "($1$ means yes)",
                  predicted=1.0, measured=div.diverged, comparison="abs", tolerance=0.0,
                  falsifier=_NOT_SHARP, reason="observed divergence (exact)")


# ---- figures


def fig5_heatmaps(fig5: dict, d: int):
    """Fig. 5: the red blocks of the runs from a standard Gaussian init (``fig5[sigma_w].r``), one colour
    scale per row."""
    fig, axes = new_figure(ncols=len(fig5), nrows=2, width=2.9, height=2.6, squeeze=False)
    for rr, (key, sl, name) in enumerate([("W_KQ", np.s_[d:, :d], r"$W^{KQ}_{21}$"), ("W_PV", np.s_[:, :d], r"$W^{PV}_{11}$")]):
        vmax = max(np.abs(getattr(q.r, key)[sl].real).max() for q in fig5.values())
        for c, (sw, q) in enumerate(fig5.items()):
            ax = axes[rr][c]
            im = ax.imshow(getattr(q.r, key)[sl].real, cmap="RdBu_r", vmin=-vmax, vmax=vmax)
            ax.set_title(f"{name}, $\\sigma_w$ = {sw:g}", fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
        fig.colorbar(im, ax=list(axes[rr]), shrink=0.85)
    return fig


def init_paths(init_rows: dict, cst: float):
    """The (a, b) paths of the diagonal-init runs (``init_rows[ini].r``, each init's first replicate at m), their
    limits (stars, from the conserved a^2 - b^2) and the hyperbola ab = c*."""
    fig, ax = new_figure(width=4.2, height=3.4)
    hi = 1.1 * max(max(abs(a0), abs(b0)) for a0, b0 in init_rows)
    for i, (ini, q) in enumerate(init_rows.items()):
        ax.plot(q.r.a_mean, q.r.b_mean, color=COLORS[i % len(COLORS)], lw=1.5, label=init_label(ini))
        ax.plot(*q.lim, "k*", ms=8)
    cc = np.linspace(0.02, hi, 200)
    ax.plot(cc, cst / cc, "k--", lw=0.8, label="$ab=c^*$")
    ax.set_xlim(0, hi)
    ax.set_ylim(0, hi)
    ax.set_xlabel("$a$ (mean diagonal of $W^{KQ}_{21}$)")
    ax.set_ylabel("$b$ (mean diagonal of $W^{PV}_{11}$)")
    legend_outside(ax, ncol=3, fontsize=7)
    return fig


def table1_steps(stab: list, laws):
    """Table-1 step sizes against the largest stable step per law and scale (``stab``: the rows of
    :func:`table1_stability`)."""
    fig, ax = new_figure(width=5.0, height=3.0)
    for i, law in enumerate(laws):
        qs = [q for q in stab if q.law == law]
        scales = sorted({q.s for q in qs})
        ax.loglog(scales, [min(q.stability.lr_max for q in qs if q.s == s) for s in scales], "-", marker="_", ms=14,
                  color=COLORS[i], label=f"{law}: largest stable step")  # a dash where a law has one scale
        ax.loglog(scales, [next(q.lr for q in qs if q.s == s) for s in scales], "o", color=COLORS[i],
                  label=f"{law}: Table 1")
    plain_log_ticks(ax, sorted({q.s for q in stab}))
    ax.set_xlabel(r"scale ($\sigma$ or $c$)")
    ax.set_ylabel("step size $\\eta$")
    legend_outside(ax, ncol=2, fontsize=7)
    return fig
