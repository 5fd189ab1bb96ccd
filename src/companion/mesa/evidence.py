r"""The evidence several mesa results share: replicate designs, trained-versus-population comparisons and
their standard errors.

The science layer under :mod:`companion.mesa.results` (it imports no result). The replicate design
(:class:`Replicates`, :func:`replicate_sets`: which training sets, with which seeds) and the runs the two full-one
pages share (:func:`masking_runs`) are written here once; each result's ``design`` builds its runs from them. Each
evidence function returns the numbers a verdict needs as a typed record (measured value, independent prediction,
standard error from the data, falsifier); the results decide.

Noise models (stated on the pages that use them):

* **Trained ab at the notebook's m** (:func:`ab_evidence`): the sampling standard error of ab at the last
  epoch is the delete-one-batch jackknife (:func:`companion.stats.jackknife_se`) of GD restricted to the
  diagonal red-block manifold on the *same* training set (:mod:`companion.mesa.empirical`). The trained
  full-parameter model fluctuates like it to first order: the off-manifold parameters have zero population
  gradient (:prf:ref:`mesa-thm-4-1`), so their feedback on ab is of second order in the sampling noise.
* **Trained ab extrapolated in m** (:func:`extrapolated_ab`): replicate training sets (independent seeds) at
  two sizes m and m/4; the finite-m bias of the full model (of order 1/m asymptotically; its size and its ratio
  over m/4 -> m are measured and quoted on the page ``mesa/thm4_1_emergence``, *Noise model of the trained-model
  claims*) is removed by the Richardson combination (4 ab(m) - ab(m/4))/3, whose
  standard error comes from the replicate spread (:func:`companion.stats.replicate_se`), with its
  Welch–Satterthwaite degrees of freedom (:func:`companion.stats.welch`): the verdict's critical value is the
  Student-t quantile at the level of z normal standard errors (:func:`companion.stats.critical`). The
  combination is exact only for a 1/m bias; the off-manifold feedback is not in its 1/m regime at the book's
  sizes, and what the combination leaves of it is measured on the same training sets
  (:func:`offmanifold_residual`) and added to the band by the pages that use it.
* **Test losses** (:func:`loss_evidence`): i.i.d. per-sequence losses of an independent test set
  (:func:`companion.stats.mean_se`), combined in quadrature with the change of the population loss for one
  standard error of ab.

Falsifiers (:func:`falsifier_alpha`): the finite-T constant c* = beta/alpha against the T -> infinity constant
m4/m6 (= 1/(5 sigma^2) for the Gaussian) when m24 > 0; against "independent coordinates" (m24 replaced by
m2 m4) when m24 = 0 (the sparse law), the answer of a reader who forgets that x_1 has one active coordinate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from companion import params, replicate_seed, stats
from companion.cache import cached
from companion.mesa import theory as th
from companion.mesa import train
from companion.mesa.analysis import manifold_part, per_sequence_loss, radial_losses, test_data, weights
from companion.mesa.data import RADIAL_DOF, generate
from companion.mesa.empirical import diagonal_gd, diagonal_stats, sampling_spread
from companion.mesa.model import predict, predict_fast
from companion.seeds import MESA_EQUIVARIANT_MC, MESA_LOSS_EVAL, MESA_ONE_STEP_EVAL, MESA_TRAIN_DATA

__all__ = [
    "ROUNDOFF32",
    "GAUSSIAN_TILT",
    "SETTING_STRIDE",
    "MASKING_PAIR",
    "FALSIFIER_T_INFINITY",
    "FALSIFIER_INDEPENDENT",
    "Extrapolation",
    "OffManifold",
    "ExtrapolatedLoss",
    "ReplicateLoss",
    "OneStepScaling",
    "ExtrapolatedAb",
    "AbEvidence",
    "LossEvidence",
    "falsifier_alpha",
    "population_ab",
    "training_stats",
    "ab_evidence",
    "loss_evidence",
    "population_loss_terms",
    "replicate_loss",
    "replicate_loss_words",
    "loss_words",
    "MAX_REPLICATES",
    "replicate_sets",
    "Replicates",
    "MaskingRuns",
    "masking_runs",
    "extrapolated_ab",
    "restricted_ab",
    "offmanifold_residual",
    "offmanifold_floor",
    "offmanifold_words",
    "richardson_paired",
    "paired_shift",
    "equivariant_moments",
    "EquivariantAb",
    "equivariant_ab",
    "OneStepDeviation",
    "one_step_deviation",
]

#: relative round-off of a complex64 training run (the stated floor of trained-model claims)
ROUNDOFF32 = 1e-5


@dataclass(frozen=True)
class Extrapolation:
    r"""An estimate extrapolated to :math:`m\to\infty` from replicates at m and m/4
    (:func:`companion.stats.richardson`): ``measured`` :math:`=\tfrac13(4\bar x(m)-\bar x(m/4))`, its standard error
    ``se`` and Welch degrees of freedom ``dof``, and the two means ``mean_big`` (at m) and ``mean_small`` (at m/4)."""

    measured: float
    se: float
    dof: float
    mean_big: float
    mean_small: float

    @classmethod
    def of(cls, rich: dict) -> Extrapolation:
        """From the dict of :func:`companion.stats.richardson`."""
        return cls(rich["measured"], rich["se"], rich["dof"], rich["mean_big"], rich["mean_small"])


@dataclass(frozen=True)
class OffManifold(Extrapolation):
    r"""What the extrapolation in m leaves of the off-manifold feedback (:func:`offmanifold_residual`): the
    :class:`Extrapolation` of the per-replicate differences :math:`o = ab - ab^{\rm diag}` and their decay ratio
    ``ratio`` :math:`=\bar o(m/4)/\bar o(m)` (4 for a 1/m law)."""

    ratio: float


@dataclass(frozen=True)
class ExtrapolatedLoss(Extrapolation):
    """A test loss of replicates on one common test set, extrapolated in m (:func:`richardson_paired`): the
    :class:`Extrapolation` with the test-set standard error ``se_test`` included in ``se``; for the replicates' own
    losses also the zero predictor's loss and the per-sequence losses ``big``, ``small`` (replicates by sequences)."""

    se_test: float
    zero_loss: float = math.nan
    big: np.ndarray | None = None
    small: np.ndarray | None = None


@dataclass(frozen=True)
class OneStepScaling:
    r"""The replicates' mean deviation from one-step GD at m (``big``) and m/4 (``small``), the log2 of their ratio
    (``log2``), its standard error (propagated to first order) and Welch degrees of freedom."""

    big: float
    small: float
    log2: float
    se: float
    dof: float


@dataclass(frozen=True)
class ExtrapolatedAb(Extrapolation):
    """The trained ab extrapolated in m (:func:`extrapolated_ab`): the :class:`Extrapolation`, the replicates' final
    ab (``big``, ``small``) and curves (``curves_big``, ``curves_small``), the population GD per epoch (``pop``) and
    at the last epoch (``predicted``), the falsifier in words and its value, the round-off ``floor``, ``cstar``,
    the sizes ``m`` and ``m_small`` and ``n_rep`` per size; where asked for, the one-step-GD deviation
    (``one_step``), the extrapolated test loss (``loss``), the off-manifold residual (``off``) and the mean
    off-diagonal red entries (``offdiag_kq``, ``offdiag_pv``)."""

    big: np.ndarray
    small: np.ndarray
    curves_big: np.ndarray
    curves_small: np.ndarray
    pop: np.ndarray
    predicted: float
    falsifier: str
    falsifier_value: float
    floor: float
    cstar: float
    m: int
    m_small: int
    n_rep: int
    one_step: OneStepScaling | None = None
    loss: ExtrapolatedLoss | None = None
    off: OffManifold | None = None
    offdiag_kq: Extrapolation | None = None
    offdiag_pv: Extrapolation | None = None


@dataclass(frozen=True)
class AbEvidence:
    """One trained run's ab against the population GD (:func:`ab_evidence`): ``measured``, ``predicted``, the
    jackknife ``se`` and ``dof`` of the restricted GD, the run's off-manifold feedback ``off``, the falsifier in
    words and its value, the round-off ``floor``, the population and falsifier GD per epoch (``pop``, ``fal``) and
    ``cstar``."""

    measured: float
    predicted: float
    se: float
    dof: int
    off: float
    falsifier: str
    falsifier_value: float
    floor: float
    pop: np.ndarray
    fal: np.ndarray
    cstar: float


@dataclass(frozen=True)
class LossEvidence:
    r"""A trained model's test loss against the population loss (:func:`loss_evidence`): ``measured``,
    ``predicted``, ``se`` and ``dof`` (test set and the ab spread, Welch), the test set's ``se_test``, the slope
    :math:`L'` and curvature :math:`L''` in ab, the systematic parts ``ab_floor`` and ``remnant`` (mean, se) and their
    sum ``floor``, the ``estimator`` in words, the per-sequence ``losses`` and the zero predictor's ``zero_loss``."""

    measured: float
    predicted: float
    se: float
    dof: float
    se_test: float
    slope: float
    curvature: float
    ab_floor: float
    remnant: tuple[float, float]
    floor: float
    estimator: str
    losses: np.ndarray
    zero_loss: float


#: the falsifier of the trained ab where the law's fourth moments couple the coordinates (m24 > 0): the constant
#: of the limit T -> infinity
FALSIFIER_T_INFINITY = r"the $T\to\infty$ constant $m_4/m_6$ ($1/(5\sigma^2)$ for the Gaussian)"
#: the falsifier where they do not (m24 = m2 m4): independent coordinates
FALSIFIER_INDEPENDENT = r"independent coordinates ($m_{24} = m_2 m_4$)"


def falsifier_alpha(law, scale: float, d: int, T: int) -> tuple[str, float]:
    r"""The falsifier's alpha (beta is the same): the plausible wrong theory a sceptic would use.

    .. math:: \alpha_f = N m_6 \;(m_{24}>0,\ T\to\infty),\qquad
              \alpha_f = N m_6 + (d-1) H_{T-2}\, m_2 m_4 \;(m_{24}=0,\ \text{independent coordinates}).

    Returns
    -------
    tuple
        ``(name, alpha_f)``.
    """
    mo = th.moments(law, scale, d) if isinstance(law, str) else law
    N = T - 2
    if mo.m24 > 0:
        return FALSIFIER_T_INFINITY, N * mo.m6
    return FALSIFIER_INDEPENDENT, N * mo.m6 + (d - 1) * th.harmonic(N) * mo.m2 * mo.m4


def population_ab(law, scale: float, d: int, T: int, a0, b0, lr: float, epochs: int, falsifier: bool = False):
    r"""Population GD (forward Euler on the reduced system) of ab, per coordinate when a0, b0 are vectors;
    with ``falsifier=True`` the same GD with the falsifier's alpha. Returns mean_j a_j b_j per epoch."""
    al, be = th.alpha_beta(law, scale, d, T)
    if falsifier:
        al = falsifier_alpha(law, scale, d, T)[1]
    a0v, b0v = np.atleast_1d(np.asarray(a0, float)), np.atleast_1d(np.asarray(b0, float))
    out = [th.reduced_gd(x, y, lr, epochs, al, be)[2] for x, y in zip(a0v, b0v)]
    return np.mean(out, axis=0)


def training_stats(law, m: int, d: int, T: int, seed: int, n_batches: int, tilt: int = 0):
    r"""Batch statistics (Q, P) of the diagonal-restricted loss of the training set of seed ``seed`` at scale 1
    (exactly the training set of :func:`companion.mesa.train.run`, tilted by ``tilt`` as the run's is; other scales
    are exact rescalings). Cached on disk like the runs (:func:`companion.cache.cached`): thm4_2 and the appendix
    use the same Gaussian set."""
    params.memory("m", 16.0 * m * (T - 2) * d * d * 2 / max(1, n_batches) + 16.0 * min(m, 500) * T * d * d * 4,
             "the batch statistics of the diagonal-restricted loss")
    return _training_stats(law, int(m), int(d), int(T), int(seed), int(n_batches), int(tilt))


@cached
def _training_stats(law: str, m: int, d: int, T: int, seed: int, n_batches: int, tilt: int):
    return diagonal_stats(generate(law, m, d, T, 1.0, MESA_TRAIN_DATA.rng(seed), torch.complex128, tilt), n_batches)


def ab_evidence(result, batch_stats) -> AbEvidence:
    r"""The trained ab at the last epoch against population GD (same step and epochs), with the jackknife
    standard error of the diagonal-restricted GD on the same data and the falsifier's population GD; ``off``: the
    trained ab minus that restricted GD's (the off-manifold feedback of this run, :func:`offmanifold_residual`).

    Per-coordinate inits (random init) are followed coordinate by coordinate."""
    c = result.config
    law, s, d, T, lr, E = c["law"], c["scale"], c["d"], c["T"], c["lr"], c["epochs"]
    a0 = result.W_KQ0[d:, :d].real.diagonal().copy()
    b0 = result.W_PV0[:, :d].real.diagonal().copy()
    pop = population_ab(law, s, d, T, a0, b0, lr, E)
    fal = population_ab(law, s, d, T, a0, b0, lr, E, falsifier=True)
    restricted, se = sampling_spread(None, a0, b0, lr, E, scale=s, batch_stats=batch_stats)
    return AbEvidence(measured=float(result.ab[-1]), predicted=float(pop[-1]), se=float(se[-1]), dof=len(batch_stats[0]) - 1,
                      off=float(result.ab[-1] - restricted[-1]),
                      falsifier=falsifier_alpha(law, s, d, T)[0], falsifier_value=float(fal[-1]),
                      floor=ROUNDOFF32 * abs(float(pop[-1])), pop=pop, fal=fal, cstar=th.c_star(law, s, d, T))


def loss_evidence(result, c_pop: float, se_ab: float, positions=None, m_test: int | None = None,
                  dof_ab: float = math.inf, off: float = 0.0, z: float = stats.Z_LEVEL) -> LossEvidence:
    r"""Test loss of the full trained model (whole sequence, or ``positions``) against the population loss at
    the population-GD ab ``c_pop`` (never at the learned parameters).

    *Measured*: the test-set mean of the per-sequence loss; for a Gaussian start with the radius of :math:`x_1`
    integrated exactly (:func:`companion.mesa.analysis.radial_losses`: the plain mean of a degree-6 loss has an SE
    that under-covers).

    *SE*: the test-set mean's standard error combined with :math:`|L'(c)|\,\mathrm{se}_{ab}` (one standard error of
    ab moved through the population loss; ``dof_ab`` its degrees of freedom, combined by
    :func:`companion.stats.welch`).

    *Systematic parts* (``floor``, to be added to the band), both measured on this run:

    * ``ab_floor``: what the linear propagation leaves out. The population loss is exactly quadratic in ab,
      :math:`L(c)=L(c_{\rm pop})+L'\Delta+\tfrac12L''\Delta^2`, and near its minimum :math:`L'` vanishes: with the
      run's off-manifold shift ``off`` of ab (:func:`ab_evidence`) and the ab band at the level ``z``
      (:math:`t = ` :func:`companion.stats.critical`), ``ab_floor`` :math:`=|L'|\,|o|+\tfrac12L''(|o|+t\,\mathrm{se}_{ab})^2`.
      (At d = 5, T = 12, m = 400, seed 84, an off-manifold shift of +0.057 in ab costs 2.6 in the loss, against 0.37
      by the slope.)
    * ``remnant``: the cost of the trained model's off-manifold entries, the paired test-set mean of
      :math:`L(W)-L(W_{\rm manifold})` (:func:`companion.mesa.analysis.manifold_part`), with its SE: the population
      prediction describes a model on the diagonal manifold, and a finite training set leaves entries off it.

    Returns measured, predicted, se, dof, ``slope`` :math:`L'`, ``curvature`` :math:`L''`, ``ab_floor``,
    ``remnant`` (mean, se), ``floor`` (``ab_floor`` plus the absolute remnant mean), the ``estimator`` in words, the per-sequence
    losses and ``zero_loss`` (the zero predictor's)."""
    c = result.config
    law, s, d, T = c["law"], c["scale"], c["d"], c["T"]
    td = test_data(result, m=m_test)
    W = weights(result)
    gauss = law == "gaussian"

    def per_seq(K, Pv):
        return radial_losses(td, K, Pv, s, positions=positions) if gauss else per_sequence_loss(td, K, Pv, positions=positions)

    losses = per_seq(*W)
    mu, se_test = stats.mean_se(losses)
    remnant = stats.mean_se(losses - per_seq(*manifold_part(*W)))
    mo = th.moments(law, s, d)
    pred, slope, curv = population_loss_terms(law, s, d, T, c_pop, positions)
    se, dof = stats.welch((se_test, len(losses) - 1), (abs(slope) * se_ab, dof_ab))
    ab_floor = abs(slope) * abs(off) + 0.5 * curv * (abs(off) + stats.critical(z, dof_ab) * se_ab) ** 2
    return LossEvidence(measured=mu, predicted=pred, se=se, dof=dof, se_test=se_test, slope=slope, curvature=curv,
                        ab_floor=ab_floor, remnant=remnant, floor=ab_floor + abs(remnant[0]),
                        estimator="the radius of $x_1$ integrated exactly" if gauss else "the plain mean over sequences",
                        losses=losses,
                        zero_loss=d / 2 * (T - 2 if positions is None else len(np.atleast_1d(positions))) * mo.m2)


def population_loss_terms(law, scale: float, d: int, T: int, c: float, positions=None) -> tuple[float, float, float]:
    r"""The population loss on the diagonal manifold at ab = ``c`` over the whole sequence
    (:func:`companion.mesa.theory.population_loss`) or summed over ``positions``
    (:func:`companion.mesa.theory.position_loss`), with its slope :math:`L'(c)` and curvature :math:`L''` in ab (the
    loss is exactly quadratic in ab). Returns ``(L, L', L'')``."""
    mo = th.moments(law, scale, d)
    if positions is None:
        al, be = th.alpha_beta(law, scale, d, T)
        return float(th.population_loss(law, scale, d, T, c)), float(d * (al * c - be)), float(d * al)
    t = np.atleast_1d(positions).astype(float)
    q = mo.m6 + (d - 1) * mo.m24 / (t - 1)
    return (float(np.sum(th.position_loss(law, scale, d, t, c))), float(np.sum(d * (c * q - mo.m4))),
            float(np.sum(d * q)))


def loss_words(ev: LossEvidence) -> str:
    """The band of a :func:`loss_evidence` claim in words (for a record's ``detail``): the estimator and the two
    measured systematic parts."""
    r, rse = ev.remnant
    return (f"test-set mean ({ev.estimator}) and the jackknife SE of $ab$ through the loss (Welch degrees of "
            f"freedom) + the off-manifold shift of $ab$ and the $ab$ band's curvature through the loss "
            f"({ev.ab_floor:.3g}) + the measured cost of the trained entries off the diagonal manifold "
            f"(${r:+.3g} \\pm {rse:.2g}$)")


#: the tilt of the training sets of the Gaussian replicate designs (Theorem 4.1's ``ab_*``, Proposition 4.1's
#: ``ratio_T*``, the appendix's ``init_*``; Theorem 4.2's Gaussian and sparse-Gaussian ``loss_*``): importance
#: samples of the law (:func:`companion.mesa.data.generate`) whose weights make the degree-six leading part of each
#: sequence's loss count evenly. On plain Gaussian sets the off-manifold feedback
#: of the trained ab is a 1/m law only from m of about 1600 on (the spread of the first tokens' norms), so a
#: Richardson extrapolation from smaller sizes leaves an upward remnant; on sets tilted by r^6, m times the
#: feedback is constant from m = 100 on and the replicates' spread is smaller (``tools/offmanifold_scaling.py
#: --tilt 6``). A page's own runs stay plain samples of the law.
GAUSSIAN_TILT = 6

#: the most replicate training sets of one size a replicate design draws (:func:`replicate_sets`)
MAX_REPLICATES = 16

#: the replicate seeds of a page's further settings (each with a replicate design of its own: a scale of Theorem
#: 4.1, an init of the appendix) start at replicate ``SETTING_STRIDE * i`` of the page's seed (i = 1, 2, ... in the
#: page's order); one setting draws replicates 1 to 2 MAX_REPLICATES of its base, so the settings' training sets are
#: disjoint (the same draws, rescaled or started elsewhere, would make their claims one measurement read several times)
SETTING_STRIDE = 64


def replicate_sets(m: int, n_rep: int, seed: int) -> list[tuple[int, int]]:
    r"""The training sets of a replicate design, as ``(m, seed)`` of :func:`companion.mesa.train.run`: ``n_rep`` at
    m with the seeds of replicates :math:`1,\dots,n_{\rm rep}` of ``seed``, then ``n_rep`` at m/4 with those of
    replicates :math:`17,\dots,16+n_{\rm rep}` (:func:`companion.seeds.replicate_seed`: far apart, so the
    replicates of nearby seeds are independent too; replicate 0 is the page's own run). Each run draws its set
    from its seed through :data:`~companion.seeds.MESA_TRAIN_DATA`. At most :data:`MAX_REPLICATES` per size."""
    if not 1 <= n_rep <= MAX_REPLICATES:
        raise params.ParameterError("n_rep", f"must be an integer in [1, {MAX_REPLICATES}]; got {n_rep!r}")
    return ([(m, replicate_seed(seed, 1 + k)) for k in range(n_rep)]
            + [(max(1, m // 4), replicate_seed(seed, 1 + MAX_REPLICATES + k)) for k in range(n_rep)])


@dataclass(frozen=True)
class Replicates:
    """A replicate design: ``n_rep`` training sets at ``m`` and ``n_rep`` at ``m/4`` (:func:`replicate_sets`), each
    trained from (a0 I, b0 I) with step ``lr`` for ``epochs`` epochs, masked or not (:func:`extrapolated_ab`
    extrapolates them in m). A masked and an unmasked design of the same seed train on the same sets (paired)."""

    law: str
    scale: float
    d: int
    T: int
    a0: float
    b0: float
    lr: float
    epochs: int
    m: int
    n_rep: int
    seed: int
    mask: bool = False
    tilt: int = 0  # > 0: every training set tilted (companion.mesa.data.generate)

    @property
    def m_small(self) -> int:
        """The smaller size, m/4 (at least 1)."""
        return max(1, self.m // 4)

    @property
    def sets(self) -> list[tuple[int, int]]:
        """``(m, seed)`` of every training set, the n_rep at m first (:func:`replicate_sets`)."""
        return replicate_sets(self.m, self.n_rep, self.seed)

    def runs(self) -> list[dict]:
        """Every run, as keyword arguments of :func:`companion.mesa.train.run`, in the order of ``sets``."""
        kw = dict(law=self.law, scale=self.scale, d=self.d, T=self.T, m_test=10, a0=self.a0, b0=self.b0, lr=self.lr,
                  epochs=self.epochs, mask=self.mask, tilt=self.tilt)
        return [dict(kw, m=m, seed=s) for m, s in self.sets]

    @property
    def big(self) -> list[dict]:
        """The runs at m."""
        return self.runs()[: self.n_rep]

    @property
    def small(self) -> list[dict]:
        """The runs at m/4."""
        return self.runs()[self.n_rep:]


#: the experiment the trained-model claims of Proposition 4.2 and Theorem 4.3 read (``ClaimSpec.experiment``): the
#: runs of :class:`MaskingRuns`, masked and unmasked on the same training sets
MASKING_PAIR = "the masked and unmasked full-one transformers trained on the same sets (Proposition 4.2, Theorem 4.3)"


@dataclass(frozen=True)
class MaskingRuns:
    """The runs of the two pages on the full-one law with and without the mask (Proposition 4.2, Theorem 4.3;
    :func:`masking_runs`): from every init, trained unmasked and masked at m (``unmasked[a0, b0]``,
    ``masked[a0, b0]``, keyword arguments of :func:`companion.mesa.train.run`), and from the middle init the paired
    replicate designs ``replicates_unmasked`` and ``replicates_masked`` (the same training sets)."""

    unmasked: dict
    masked: dict
    replicates_unmasked: Replicates
    replicates_masked: Replicates

    def runs(self) -> list[dict]:
        """Every run, as keyword arguments of :func:`companion.mesa.train.run`."""
        return (list(self.unmasked.values()) + list(self.masked.values()) + self.replicates_unmasked.runs()
                + self.replicates_masked.runs())


def masking_runs(inits, lr: float, d: int, T: int, m: int, m_test: int, epochs: int, seed: int, m_rep: int,
                 n_rep: int) -> MaskingRuns:
    """The runs of the full-one pages (:class:`MaskingRuns`): scale 1, step ``lr``, every init of ``inits``; the
    replicates (``n_rep`` at ``m_rep`` and ``m_rep/4``) from the middle init."""
    common = dict(law="full_one", scale=1.0, d=d, T=T, m=m, m_test=m_test, epochs=epochs, seed=seed, lr=lr)
    a0, b0 = inits[len(inits) // 2]
    return MaskingRuns(
        {(x, y): dict(common, a0=x, b0=y, mask=False) for x, y in inits},
        {(x, y): dict(common, a0=x, b0=y, mask=True) for x, y in inits},
        *(Replicates("full_one", 1.0, d, T, a0, b0, lr, epochs, m_rep, n_rep, seed, mask=mask) for mask in (False, True)))


def extrapolated_ab(rep: Replicates, m_eval: int = 0, m_loss: int = 0, offmanifold: bool = False) -> ExtrapolatedAb:
    r"""Trained ab extrapolated to m -> infinity from the replicate training sets ``rep`` at m and m/4.

    .. math:: \widehat{ab}_\infty = \tfrac13\big(4\,\overline{ab}(m) - \overline{ab}(m/4)\big)

    (:func:`companion.stats.richardson`), exact for a finite-m bias B/m: ab is a smooth function of the sample
    moments and the off-manifold feedback is of second order in the O(m^-1/2) fluctuations, so both give a 1/m
    bias (its ratio at m/4 over m, 4 for a 1/m law and 2 for an m^-1/2 one, is measured on the page
    ``mesa/thm4_1_emergence`` from the replicates of this function).
    The runs: :class:`Replicates`, all independent training sets. With ``m_eval > 0`` also the one-step-GD
    deviation of every replicate (:func:`one_step_deviation`, ``one_step``); with ``m_loss > 0`` also their
    whole-sequence test loss extrapolated in m (``_extrapolated_loss``, ``loss``); with ``offmanifold`` (masked or
    not) the measured residual of the extrapolation (:func:`offmanifold_residual`, ``off``). Returns the
    :class:`ExtrapolatedAb`.
    """
    law, scale, d, T, a0, b0, lr, epochs = rep.law, rep.scale, rep.d, rep.T, rep.a0, rep.b0, rep.lr, rep.epochs
    runs_big = [train.run(**kw) for kw in rep.big]
    runs_small = [train.run(**kw) for kw in rep.small]
    big = np.array([r.ab[-1] for r in runs_big])
    small = np.array([r.ab[-1] for r in runs_small])
    nu = rep.n_rep - 1  # degrees of freedom of each replicate spread
    rich = stats.richardson(big, small)
    pop = population_ab(law, scale, d, T, a0, b0, lr, epochs)
    fal = population_ab(law, scale, d, T, a0, b0, lr, epochs, falsifier=True)
    out = dict(big=big, small=small, curves_big=np.array([r.ab for r in runs_big]),
               curves_small=np.array([r.ab for r in runs_small]), pop=pop, predicted=float(pop[-1]),
               falsifier=falsifier_alpha(law, scale, d, T)[0], falsifier_value=float(fal[-1]),
               floor=ROUNDOFF32 * abs(float(pop[-1])), cstar=th.c_star(law, scale, d, T), m=rep.m, m_small=rep.m_small,
               n_rep=rep.n_rep)
    if m_eval:
        db = np.array([one_step_deviation(r, m_eval).dev for r in runs_big])
        ds = np.array([one_step_deviation(r, m_eval).dev for r in runs_small])
        mdb, sdb = stats.replicate_se(db)
        mds, sds = stats.replicate_se(ds)
        dse, ddof = stats.welch((sdb / mdb / math.log(2), nu), (sds / mds / math.log(2), nu))
        out["one_step"] = OneStepScaling(big=mdb, small=mds, log2=math.log2(mds / mdb), se=dse, dof=ddof)
    if m_loss:
        out["loss"] = _extrapolated_loss(runs_big, runs_small, m_loss, rep.seed)
    if offmanifold:
        out["off"] = offmanifold_residual(runs_big, runs_small, big, small)
    off = ~np.eye(d, dtype=bool)
    for key, blk in (("offdiag_kq", lambda r: r.W_KQ[d:, :d]), ("offdiag_pv", lambda r: r.W_PV[:, :d])):
        if d > 1:  # mean off-diagonal red entry, extrapolated like ab (a 1/m bias)
            out[key] = Extrapolation.of(stats.richardson([float(blk(r).real[off].mean()) for r in runs_big],
                                                     [float(blk(r).real[off].mean()) for r in runs_small]))
    return ExtrapolatedAb(**Extrapolation.of(rich).__dict__, **out)


def restricted_ab(result) -> float:
    r"""ab after the run's epochs of GD **restricted to the diagonal red-block manifold** on the run's own
    training set (:func:`companion.mesa.empirical.diagonal_gd` on the statistics :func:`training_stats`, exact
    rescalings of the scale-1 set), from the run's diagonal init with its step size: the trained model with its
    off-manifold parameters held at 0. Masked runs (``mask=True``, :prf:ref:`mesa-thm-4-3`) included.

    *The masked loss on the manifold.* The mask (the "clip" option of :func:`companion.mesa.train.train`)
    changes neither the prediction nor the loss: it is the projection :math:`\Pi` that zeroes the off-diagonal
    entries of :math:`W^{KQ}_{21}` and :math:`W^{PV}_{11}` after each step,
    :math:`\theta\leftarrow\Pi(\theta-\eta\nabla L(\theta))`. The manifold
    :math:`\mathcal M=\{W^{KQ}_{21}=\mathrm{diag}(a),\ W^{PV}_{11}=\mathrm{diag}(b),\ \text{all else }0\}` lies in
    the range of :math:`\Pi`, and on it the prediction is
    :math:`\hat y_{t,j}=b_j\sum_k a_kF_{t,jk}` with
    :math:`F_{t,jk}=\frac1{t-1}\sum_{i<t}x_{i+1,j}\bar x_{i,k}x_{t,k}` for either training, so the masked loss
    restricted to :math:`\mathcal M` is the unmasked one,

    .. math:: L(a,b)=\tfrac12\sum_j\big[b_j^2\,a^\top Q_ja-2b_j\,a^\top P_j\big]+\mathrm{const},\qquad
              Q_{j,kl}=\tfrac1m\sum_{n,t}\mathrm{Re}\,F_{t,jk}\bar F_{t,jl},\quad
              P_{j,k}=\tfrac1m\sum_{n,t}\mathrm{Re}\,\bar F_{t,jk}x_{t+1,j},

    with the same statistics (:func:`companion.mesa.empirical.diagonal_stats`; the cross terms
    :math:`k\neq l` of :math:`Q_j` stay: the mask removes parameters, not the coupling of the diagonal ones
    through the data). Since the entries :math:`a_j=(W^{KQ}_{21})_{jj}`, :math:`b_j=(W^{PV}_{11})_{jj}` are
    coordinates of the full model, at a point of :math:`\mathcal M` the full gradient's diagonal red entries are
    :math:`\partial_{a_j}L`, :math:`\partial_{b_j}L`, and :math:`\Pi` leaves them alone: one epoch of the masked
    (or unmasked) model from a diagonal init *is* the restricted step. What differs is only what is held at 0:
    for a masked run the off-manifold parameters that move are the blocks outside the red ones, so
    ``ab - restricted_ab`` is their feedback alone (their population gradient on :math:`\mathcal M` is 0 for
    every law, :prf:ref:`mesa-thm-4-3`, so the masked manifold is invariant in the population, also for
    :math:`x_1=\mathbf 1`, where the unmasked one is not)."""
    c = result.config
    s = c["scale"]
    Q, Pm = training_stats(c["law"], c["m"], c["d"], c["T"], c["seed"], 1, c.get("tilt", 0))  # the same masked or not
    return float(diagonal_gd(c["a0"], c["b0"], c["lr"], c["epochs"], Q[0] * s**6, Pm[0] * s**4)[-1])


def offmanifold_residual(runs_big, runs_small, big=None, small=None) -> OffManifold:
    r"""What the 1/m extrapolation of :func:`extrapolated_ab` leaves of the **off-manifold feedback**, measured.

    Split each trained ab into the GD restricted to the diagonal manifold on the *same* training set
    (:func:`restricted_ab`) and the rest, :math:`o_k = ab_k - ab^{\rm diag}_k`, the feedback of the
    off-manifold parameters fitted to the sample. In the population the manifold is invariant
    (:prf:ref:`mesa-thm-4-1`; checked exactly on the page by the population gradient; for masked runs
    :prf:ref:`mesa-thm-4-3`, any law of identically distributed coordinates), so GD on the empirical loss
    of :math:`m\to\infty` sequences stays on it: :math:`E\,o(m)\to0`. Whatever the Richardson combination
    leaves of it,

    .. math:: r=\tfrac13\big(4\,\bar o(m)-\bar o(m/4)\big),

    is therefore the combination's error on this part (0 if :math:`E\,o(m)` falls like 1/m; how fast it falls at
    the book's sizes is ``ratio`` below, measured and quoted on the page ``mesa/thm4_1_emergence``, *What the
    extrapolation leaves*). The diagonal part is a smooth function of the sample moments, with the classical
    1/m bias. The differences are paired (same training set), so their spread is small and r is precise.
    Returns the :class:`OffManifold`: ``measured`` = r (:func:`companion.stats.richardson` of the differences) and
    ``ratio`` = :math:`\bar o(m/4)/\bar o(m)`, 4 for a 1/m law."""
    big = np.array([r.ab[-1] for r in runs_big]) if big is None else np.asarray(big)
    small = np.array([r.ab[-1] for r in runs_small]) if small is None else np.asarray(small)
    ob = big - np.array([restricted_ab(r) for r in runs_big])
    os_ = small - np.array([restricted_ab(r) for r in runs_small])
    rich = stats.richardson(ob, os_)
    ratio = rich["mean_small"] / rich["mean_big"] if rich["mean_big"] != 0 else math.inf
    return OffManifold(**vars(Extrapolation.of(rich)), ratio=float(ratio))


def _offmanifold_value(off) -> float:
    """The measured off-manifold term of ``off``: r of an :class:`OffManifold`, else one run's o."""
    return off.measured if isinstance(off, OffManifold) else off


def offmanifold_floor(base_floor: float, off) -> float:
    r"""The floor of a trained-ab claim with the measured **off-manifold feedback** added to it,

    .. math:: f = f_0 + |r| ,

    where :math:`f_0` is ``base_floor`` (the complex64 round-off, :data:`ROUNDOFF32` times the prediction) and r
    is, for ``off`` an :class:`OffManifold` (:func:`offmanifold_residual`; an extrapolated claim, :func:`extrapolated_ab` with
    ``offmanifold=True``), its ``measured``: what the Richardson combination leaves of the feedback; for ``off`` a
    number (one run, ``off`` of :func:`ab_evidence`), the run's own difference :math:`o = ab - ab^{\rm diag}` from
    the GD restricted to the diagonal manifold on the same training set. Either is a systematic error of the
    comparison with the population GD that the standard error does not hold, measured with its sign but added to
    the band in absolute value. The words that go with it in the claim's reason: :func:`offmanifold_words`."""
    return base_floor + abs(_offmanifold_value(off))


def offmanifold_words(off, *, se: float | None = None, predicted: float | None = None, see: str = "") -> str:
    r"""The reason's fragment for the term :func:`offmanifold_floor` adds to the band, naming its measured value.

    For ``off`` an :class:`OffManifold` (:func:`offmanifold_residual`): r, r in standard errors ``se`` of the extrapolated ab and
    the decay ratio :math:`\bar o(m/4)/\bar o(m)` of the feedback (4 for a 1/m law); for ``off`` a number (one
    run's :math:`o = ab - ab^{\rm diag}`): o and :math:`100\,o/\hat y` in %, :math:`\hat y` = ``predicted``. ``see``: a page that measures
    the feedback, named at the end. Returns the fragment without its leading "+ "."""
    if isinstance(off, OffManifold):
        if se is None:
            raise ValueError("offmanifold_words: the extrapolated residual needs the claim's standard error se")
        r = off.measured
        words = (f"what the extrapolation leaves of the off-manifold feedback, measured ({r:+.3g}, {r / se:+.2f} SE; "
                 f"its decay ratio from $m/4$ to $m$ is {off.ratio:.2f}, 4 for a $1/m$ law")
    else:
        if predicted is None:
            raise ValueError("offmanifold_words: one run's difference needs the claim's prediction")
        words = (f"the full model's finite-$m$ bias, measured on this run as its difference from the restricted GD on "
                 f"the same training set ({off:+.3g}, {100 * off / predicted:+.2f} %")
    return words + (f"; see {see}" if see else "") + ")"


def _extrapolated_loss(runs_big, runs_small, m_loss: int, seed: int, positions=None,
                       part=None) -> ExtrapolatedLoss:
    r"""Test loss of the replicates at m and m/4 (whole sequence, or summed over ``positions``) on one common test
    set (``m_loss`` sequences of the law, seed stream :data:`~companion.seeds.MESA_LOSS_EVAL`, ``[seed, 8]``,
    independent of every training set), extrapolated to m -> infinity; for a Gaussian or sparse-Gaussian start
    with the radius of :math:`x_1` integrated exactly (:func:`companion.mesa.analysis.radial_losses`,
    :data:`~companion.mesa.data.RADIAL_DOF`). ``part``: a function ``part(loss, W_KQ, W_PV)`` of that
    per-sequence loss function and the weights, returning the per-sequence statistic to extrapolate instead of the
    loss (same test set).

    At a stationary point of the population loss (converged diagonal at c*, other parameters 0) the loss
    excess of a finite-m model is quadratic in its parameter errors, which are O(m^-1/2), so the excess is
    O(1/m) and the Richardson combination for a 1/m law removes it:

    .. math:: \hat L_\infty = \tfrac13\big(4\,\bar L(m)-\bar L(m/4)\big),\qquad
              \mathrm{se}^2=\tfrac19\big(16\,\mathrm{se}^2_{\rm rep}(m)+\mathrm{se}^2_{\rm rep}(m/4)\big)
              +\mathrm{se}^2_{\rm test},

    the replicate spread (training sets) and the standard error of the same combination of per-sequence
    losses over the i.i.d. test sequences (the test set is common to all replicates).
    """
    c = runs_big[0].config
    law, s = c["law"], c["scale"]
    td = generate(law, m_loss, c["d"], c["T"], s, MESA_LOSS_EVAL.rng(seed), torch.complex128)

    def loss(K, Pv):
        if law in RADIAL_DOF:
            return radial_losses(td, K, Pv, s, positions=positions, dof=RADIAL_DOF[law](c["d"]))
        return per_sequence_loss(td, K, Pv, positions=positions)

    f = loss if part is None else (lambda K, Pv: part(loss, K, Pv))
    big = np.array([f(*weights(r)) for r in runs_big])
    small = np.array([f(*weights(r)) for r in runs_small])
    mo = th.moments(law, s, c["d"])
    n_pos = c["T"] - 2 if positions is None else len(np.atleast_1d(positions))
    return replace(richardson_paired(big, small), zero_loss=c["d"] / 2 * n_pos * mo.m2, big=big, small=small)


@dataclass(frozen=True)
class ReplicateLoss:
    r"""A test loss of trained replicates extrapolated in m against the population loss at the population-GD ab
    (:func:`replicate_loss`): the trained loss ``loss`` and the cost of the entries off the diagonal manifold
    ``off_entries`` (both :class:`ExtrapolatedLoss`), the ``predicted`` population loss, its slope and curvature in
    ab, the off-manifold remnant of ab through the slope ``ab_part``, the systematic ``floor`` (``ab_part`` plus
    the absolute extrapolated ``off_entries``) and the population-GD ab ``c_pop``."""

    loss: ExtrapolatedLoss
    off_entries: ExtrapolatedLoss
    predicted: float
    slope: float
    curvature: float
    ab_part: float
    floor: float
    c_pop: float


def replicate_loss(rep: Replicates, ab: ExtrapolatedAb, m_loss: int, positions=None) -> ReplicateLoss:
    r"""The test loss of the replicates ``rep`` (whole sequence, or summed over ``positions``) extrapolated in m,
    against the population loss at the population-GD ab ``ab.predicted`` (never at the learned parameters); ``ab``:
    the same replicates' :func:`extrapolated_ab` with ``offmanifold=True``.

    *Measured*: :math:`\hat L_\infty=\tfrac13(4\bar L(m)-\bar L(m/4))` on one common test set of ``m_loss``
    sequences (``_extrapolated_loss``; the radius of a Gaussian start integrated exactly), with the replicate
    spread and the paired test-set SE. A trained model's excess over the population loss is of second order in its
    :math:`O(m^{-1/2})` parameter errors (the loss is flat in the directions off the manifold and quadratic in ab),
    so it is a 1/m bias that the combination removes, in every training set's spread included.

    *Systematic parts* (``floor``), both what the combination leaves of a part whose population limit is known:

    * the off-manifold feedback of ab, :math:`r` of :func:`offmanifold_residual`, through the loss: :math:`|L'|\,|r|`;
    * the cost of the trained entries off the diagonal manifold, :math:`L(W)-L(W_{\rm manifold})`
      (:func:`companion.mesa.analysis.manifold_part`), 0 in the limit: its own combination
      :math:`\tfrac13(4\bar\Delta(m)-\bar\Delta(m/4))` in absolute value.

    Returns the :class:`ReplicateLoss`."""
    runs_big = [train.run(**kw) for kw in rep.big]
    runs_small = [train.run(**kw) for kw in rep.small]
    ev = _extrapolated_loss(runs_big, runs_small, m_loss, rep.seed, positions)
    man = _extrapolated_loss(runs_big, runs_small, m_loss, rep.seed, positions,
                             part=lambda loss, K, Pv: loss(*manifold_part(K, Pv)))
    off = richardson_paired(ev.big - man.big, ev.small - man.small)
    pred, slope, curv = population_loss_terms(rep.law, rep.scale, rep.d, rep.T, ab.predicted, positions)
    ab_part = abs(slope) * abs(_offmanifold_value(ab.off))
    return ReplicateLoss(ev, off, pred, slope, curv, ab_part, ab_part + abs(off.measured), float(ab.predicted))


def replicate_loss_words(q: ReplicateLoss, rep: Replicates) -> str:
    """The band of a :func:`replicate_loss` claim in words (for a record's ``detail``): the design, the estimator,
    the standard error and the two measured systematic parts."""
    ev, off = q.loss, q.off_entries
    return (f"{rep.n_rep} replicate training sets per size at $m = {rep.m}$ and $m = {rep.m_small}$"
            + (" (tilted samples of the law)" if rep.tilt else "") + ", each model's mean loss on one common test set"
            + (" (the radius of $x_1$ integrated exactly)" if rep.law in RADIAL_DOF else "")
            + r", Richardson combination $\tfrac13(4\bar L(m)-\bar L(m/4))$ for the $1/m$ excess of a trained model; "
            f"SE {ev.se:.3g} from the replicate spread and the paired test-set SE ({ev.se_test:.3g}), Welch degrees of "
            f"freedom; + the off-manifold remnant of $ab$ through the loss's slope ($|L'|\\,|r| = {q.ab_part:.3g}$) + "
            "what the extrapolation leaves of the cost of the entries off the diagonal manifold "
            f"(${off.measured:+.3g} \\pm {off.se:.2g}$)")


def richardson_paired(big: np.ndarray, small: np.ndarray) -> ExtrapolatedLoss:
    """:func:`companion.stats.richardson` of the replicates' mean test losses (rows: replicates, columns: the
    common test sequences), with the test-set standard error of the same combination added (Welch)."""
    rich = stats.richardson(big.mean(1), small.mean(1))
    _, se_test = stats.mean_se((4 * big.mean(0) - small.mean(0)) / 3)
    se, dof = stats.welch((rich["se"], rich["dof"]), (se_test, math.inf))
    return ExtrapolatedLoss(rich["measured"], se, dof, rich["mean_big"], rich["mean_small"], se_test=se_test)


def paired_shift(rep_u: ExtrapolatedAb, rep_m: ExtrapolatedAb) -> Extrapolation:
    r"""The trained ab of one set of replicates minus that of another trained on the **same** training sets (e.g.
    unmasked minus masked: a masked and an unmasked :class:`Replicates` of one seed share their sets), per replicate, extrapolated in m
    like ab (:func:`companion.stats.richardson`):

    .. math:: \hat\Delta_\infty=\tfrac13\big(4\,\overline{\Delta}(m)-\overline{\Delta}(m/4)\big),\qquad
              \Delta_k = ab^{(u)}_k - ab^{(m)}_k .

    Common random numbers: the training-set noise that moves both ab alike cancels in each difference (for the
    full-one masked and unmasked runs the two are strongly correlated), so the standard error is the replicate
    spread of the differences, with its Welch degrees of freedom (:class:`Extrapolation`)."""
    for key in ("big", "small"):
        if len(getattr(rep_u, key)) != len(getattr(rep_m, key)):
            raise ValueError(f"paired_shift needs the same replicates on both sides; got {len(getattr(rep_u, key))} "
                             f"and {len(getattr(rep_m, key))} at {key} m")
    return Extrapolation.of(stats.richardson(np.asarray(rep_u.big) - rep_m.big, np.asarray(rep_u.small) - rep_m.small))


def equivariant_moments(law: str, d: int, T: int, m: int, seed: int, chunk: int = 1000) -> dict:
    r"""Per-sequence moments of the population loss on the equivariant red blocks (:func:`companion.mesa.theory.equivariant_c`):
    :math:`G_n=\mathrm{Re}\sum_t\langle F_{k,t},F_{l,t}\rangle`, :math:`h_n=\mathrm{Re}\sum_t\langle F_{k,t},x_{t+1}\rangle`,
    :math:`y_n=\sum_t\|x_{t+1}\|^2` for ``m`` sequences (seed stream :data:`~companion.seeds.MESA_EQUIVARIANT_MC`,
    ``[seed, 9]``, independent of every training and test set; complex128), so that the loss of sequence n at c is
    exactly :math:`\ell_n(c)=\frac12(c^\top G_nc-2h_n^\top c+y_n)`. Cached on disk (:func:`companion.cache.cached`):
    the pages of Prop 4.2 and Thm 4.3 use the same moments. Returns G, h, y (per sequence)."""
    params.memory("m_mc", 16.0 * min(m, chunk) * (T - 2) * d * 5, "the equivariant moments")
    return _equivariant_moments(str(law), int(d), int(T), int(m), int(seed), int(chunk))


@cached
def _equivariant_moments(law: str, d: int, T: int, m: int, seed: int, chunk: int) -> dict:
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


@dataclass(frozen=True)
class EquivariantAb:
    """The unmasked population GD on the equivariant red blocks (:func:`equivariant_ab`): its ``path`` (a, a', b, b')
    per epoch, the diagonal product ``ab`` at the last epoch, the Monte-Carlo standard errors ``se_ab`` and
    ``se_end`` (of the last (a, a', b, b')) and their degrees of freedom ``dof``."""

    path: np.ndarray
    ab: float
    se_ab: float
    se_end: np.ndarray
    dof: int


def equivariant_ab(d: int, T: int, a0: float, b0: float, lr: float, epochs: int, moments: dict,
                   n_groups: int = 20) -> EquivariantAb:
    r"""The unmasked population GD from (a0 I, b0 I) beyond Assumption 4.1 (:func:`companion.mesa.theory.equivariant_gd`
    on the Monte-Carlo moments of :func:`equivariant_moments`, independent sequences): its path (a, a', b, b') per
    epoch, the diagonal product :math:`ab` at the last epoch (what a trained model's mean :math:`a_jb_j` is compared
    with), and their Monte-Carlo standard errors by the delete-a-group jackknife of the moments (``n_groups``
    groups, ``n_groups - 1`` degrees of freedom; :func:`companion.stats.jackknife_se`).

    Returns the :class:`EquivariantAb`."""
    G, h = moments["G"], moments["h"]
    path = th.equivariant_gd(a0, b0, lr, epochs, G.mean(0), h.mean(0), d)
    groups = np.array_split(np.arange(len(G)), min(n_groups, len(G)))
    loo = np.array([th.equivariant_gd(a0, b0, lr, epochs, np.delete(G, ix, 0).mean(0), np.delete(h, ix, 0).mean(0), d)[-1]
                    for ix in groups])
    _, se_end = stats.jackknife_se(path[-1], loo)
    _, se_ab = stats.jackknife_se(path[-1, 0] * path[-1, 2], loo[:, 0] * loo[:, 2])
    return EquivariantAb(path=path, ab=float(path[-1, 0] * path[-1, 2]), se_ab=float(se_ab),
                         se_end=np.asarray(se_end), dof=len(groups) - 1)


@dataclass(frozen=True)
class OneStepDeviation:
    """A trained model against one-step GD (:func:`one_step_deviation`): the relative deviation of its predictions
    (``dev``) and the relative mass of its off-manifold weights (``mass``)."""

    dev: float
    mass: float


def one_step_deviation(result, m_eval: int = 300) -> OneStepDeviation:
    r"""Relative deviation of the trained model's predictions from the explicit one-step-GD formula with its
    learned diagonals, on ``m_eval`` fresh sequences (seed stream :data:`~companion.seeds.MESA_ONE_STEP_EVAL`, ``[seed, 3]``, independent of training and
    test sets); and the relative off-manifold weight mass."""
    c = result.config
    d = c["d"]
    ev = generate(c["law"], m_eval, d, c["T"], c["scale"], MESA_ONE_STEP_EVAL.rng(c["seed"]), torch.complex128)
    y = predict(ev, *weights(result))
    a = np.diag(result.W_KQ[d:, :d].real).copy()
    b = np.diag(result.W_PV[:, :d].real).copy()
    y1 = th.one_step_gd_predict(ev.tokens(), a, b)
    dev = float(torch.linalg.vector_norm(y - y1) / torch.linalg.vector_norm(y1))
    Wk = np.zeros_like(result.W_KQ)
    Wp = np.zeros_like(result.W_PV)
    Wk[d:, :d] = np.diag(a)
    Wp[:, :d] = np.diag(b)
    mass = math.sqrt((np.linalg.norm(result.W_KQ - Wk) ** 2 + np.linalg.norm(result.W_PV - Wp) ** 2)
                     / (np.linalg.norm(a) ** 2 + np.linalg.norm(b) ** 2))
    return OneStepDeviation(dev=dev, mass=mass)
