r"""The setting of the mesa paper (notebook ``mesa/setup``): the fast model against its definition, the
diagonal model as one GD step, and the population loss and gradient of the diagonal model by Monte Carlo.

What the page checks, and how:

* :func:`setup_checks` evaluates everything the page's verdict needs on one data set;
* :func:`population_gradient` is the theory's diagonal gradient :math:`b(\alpha ab-\beta)`;
* :func:`record_checks` records the page's four claims in its verdict;
* :func:`setup_figure` draws one training sequence and the per-position loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from companion import stats
from companion.claims import ClaimSpec, ResultSpec
from companion.mesa import theory as th
from companion.mesa.analysis import radial_terms
from companion.mesa.data import ARData, generate, sample_x1
from companion.mesa.evidence import FALSIFIER_INDEPENDENT, FALSIFIER_T_INFINITY, falsifier_alpha
from companion.mesa.model import per_sequence_loss, predict, predict_direct
from companion.mesa.train import init_diagonal
from companion.plotting import legend_outside, new_figure
from companion.seeds import MESA_FORMULA_MC, MESA_RANDOM_WEIGHTS, MESA_TRAIN_DATA
from companion.stats import Z_LEVEL

__all__ = ["CLAIMS", "RESULT", "RADIAL", "manifest", "population_gradient", "diagonal_gradients", "FormulaChecks", "formula_checks", "SetupChecks",
           "setup_checks",
           "record_checks", "setup_figure"]

_FALSIFIER = (r"$\alpha$ of the $T\to\infty$ constant ($m_{24} > 0$) or of independent coordinates "
              r"($m_{24} = 0$)")

CLAIMS = (
    ClaimSpec("fast_vs_definition", "identity", "closed_form", prediction="companion.mesa.model.predict_direct"),
    ClaimSpec("one_step_gd", "identity", "closed_form", prediction="companion.mesa.theory.one_step_gd_predict"),
    ClaimSpec("loss_formula", "statistical", "monte_carlo", prediction="companion.mesa.theory.population_loss",
              falsifier=_FALSIFIER, alternatives=(FALSIFIER_T_INFINITY, FALSIFIER_INDEPENDENT)),
    ClaimSpec("grad_formula", "statistical", "monte_carlo",
              prediction="companion.mesa.results.setup.population_gradient", falsifier=_FALSIFIER, alternatives=(FALSIFIER_T_INFINITY, FALSIFIER_INDEPENDENT)),
)

RESULT = ResultSpec(paper="mesa", number="Section 3, the setting", title="AR data, linear attention, AR loss",
                    label="mesa-def-data", notebook="mesa/setup", module=__name__, claims=CLAIMS,
                    figures=("fig_mesa_setup",), sweep="", setting=True)


def manifest() -> list[str]:
    """The claim ids the page's verdict declares."""
    return [c.id for c in CLAIMS]


def population_gradient(law, scale: float, d: int, T: int, a: float, b: float) -> float:
    r"""The population gradient of the loss in each diagonal entry of :math:`W^{KQ}_{21}` at :math:`(aI, bI)`:

    .. math:: \frac{\partial L}{\partial a_j} = b\,(\alpha\, ab - \beta).
    """
    al, be = th.alpha_beta(law, scale, d, T)
    return b * (al * (a * b) - be)


def diagonal_gradients(data: ARData, W_KQ: torch.Tensor, W_PV: torch.Tensor) -> np.ndarray:
    r"""Per sequence, the mean over j of the derivative of its loss in the diagonal entry
    :math:`(W^{KQ}_{21})_{jj}` (real part), at any weights: shape (m,).

    The prediction is linear in :math:`W^{KQ}`, so each sequence's loss is a quadratic :math:`q(s)` in the step
    s along :math:`D`, the identity in the block :math:`W^{KQ}_{21}`; its derivative at 0 is the central difference

    .. math:: q'(0) = \frac{q(h) - q(-h)}{2h}\quad\text{(exact for a quadratic, any } h\text{)},

    here with h = 1 (two calls of :func:`companion.mesa.model.per_sequence_loss`), divided by d. A group's mean of
    these is the mean diagonal of that group's gradient from :func:`companion.mesa.model.loss_grad_fast`, up to
    round-off."""
    d = data.d
    D = torch.zeros_like(W_KQ)
    j = torch.arange(d)
    D[d + j, j] = 1.0
    return (per_sequence_loss(data, W_KQ + D, W_PV) - per_sequence_loss(data, W_KQ - D, W_PV)) / (2 * d)


#: the laws with a Gaussian factor, and the chi-square degrees of freedom of their radius (0: d, the token dimension)
RADIAL = {"gaussian": 0, "sparse_gaussian": 1}


@dataclass(frozen=True)
class FormulaChecks:
    """The Monte-Carlo loss and diagonal gradient against the population formulas (:func:`formula_checks`): the loss
    ``L_emp`` with ``L_se``, its formula ``L_pop``, the falsifier's ``L_fal`` and the round-off ``L_floor``; the same
    for the gradient (``g_*``) with its ``n_groups`` groups and ``g_dof`` degrees of freedom; ``radial`` when the
    radius of x_1 is integrated exactly."""

    L_emp: float
    L_se: float
    L_pop: float
    L_fal: float
    L_floor: float
    g_emp: float
    g_se: float
    g_pop: float
    g_fal: float
    g_floor: float
    n_groups: int
    g_dof: int
    radial: bool


def formula_checks(law, scale: float, d: int, T: int, m: int, a: float, b: float, seed: int,
                   n_groups: int = 100) -> FormulaChecks:
    r"""The Monte-Carlo loss and diagonal gradient at :math:`(aI, bI)` against the population formulas.

    Data: m sequences with uniform phases and :math:`x_1` from the law (:func:`companion.mesa.data.sample_x1`), seed
    stream :data:`~companion.seeds.MESA_FORMULA_MC`. The loss is the mean of i.i.d. per-sequence losses
    (:func:`companion.stats.mean_se`, normal band); the gradient the mean over ``n_groups`` groups of
    :func:`diagonal_gradients` (Student-t on n_groups - 1 degrees of freedom). The falsifier
    replaces alpha by :func:`companion.mesa.evidence.falsifier_alpha`.

    *Gaussian factors* (``gaussian``; ``sparse_gaussian``, whose one active coordinate is Gaussian): both are
    polynomials of degree 6 in :math:`x_1`, and a plain mean of Gaussian sixth moments has an SE that does not cover
    (a correct formula failed at 4.2 SE at seed 21; a bounded Gauss-Hermite stand-in for the Gaussian still gave a z
    of s.d. 1.11 for the loss and 1.44 for the gradient at d = 5, T = 20, m = 200). The radius of :math:`x_1` is integrated exactly instead
    (:func:`companion.mesa.analysis.radial_terms`): per sequence and per group the loss and gradient are
    :math:`r^2A+r^4B+r^6C`, and the chi-square moments of the radius replace its draws (``dof`` d, or 1 for the
    sparse-Gaussian law); the directions and phases are drawn. The other laws are bounded and drawn as they are."""
    rng = MESA_FORMULA_MC.rng(seed)
    theta = rng.uniform(0.0, 2 * np.pi, size=(m, d))
    x1 = sample_x1(law, m, d, scale, rng)
    data = ARData(torch.from_numpy(x1.astype(complex)), torch.from_numpy(np.exp(1j * theta)), T, theta)
    W_KQ, W_PV = init_diagonal(d, a, b, torch.complex128)
    al, be = th.alpha_beta(law, scale, d, T)
    _, al_f = falsifier_alpha(law, scale, d, T)
    mo = th.moments(law, scale, d)
    N, c = T - 2, a * b
    groups = np.array_split(np.arange(m), min(n_groups, m // 2))

    def losses(x):
        return per_sequence_loss(x, W_KQ, W_PV)

    def grads(x):
        g = diagonal_gradients(x, W_KQ, W_PV)
        return [float(g[ix].mean()) for ix in groups]

    dof = RADIAL.get(law)
    if dof is None:
        L, g = losses(data), grads(data)
    else:
        L, g = (radial_terms(data, f, dof or d, scale) for f in (losses, grads))
    L_emp, L_se = stats.mean_se(L)
    g_emp, g_se = stats.mean_se(g)  # equal-size groups up to one sequence: the mean of group means
    return FormulaChecks(
        L_emp=L_emp, L_se=L_se, L_pop=float(th.population_loss(law, scale, d, T, c)),
        L_fal=d / 2 * (al_f * c * c - 2 * be * c + N * mo.m2),
        L_floor=stats.ROUNDOFF * d / 2 * (al * c * c + 2 * be * abs(c) + N * mo.m2),
        g_emp=g_emp, g_se=g_se, g_pop=population_gradient(law, scale, d, T, a, b), g_fal=b * (al_f * c - be),
        g_floor=stats.ROUNDOFF * abs(b) * (al * abs(c) + be), n_groups=len(groups), g_dof=len(groups) - 1,
        radial=dof is not None,
    )


@dataclass(frozen=True)
class SetupChecks:
    """The checks of the setting (:func:`setup_checks`): the relative errors of the fast model against its
    definition (``err_fast``) and of the diagonal model against one GD step (``err_gd``), alpha and beta, the
    falsifier in words, the formula checks (``formulas``), and for the figure one training sequence (``x0``) with the
    per-position loss measured (``pos_loss``) and from the formula (``pos_pop``)."""

    err_fast: float
    err_gd: float
    alpha: float
    beta: float
    falsifier: str
    formulas: FormulaChecks
    x0: np.ndarray
    pos_loss: np.ndarray
    pos_pop: np.ndarray


def setup_checks(law, scale: float, d: int, T: int, m: int, a: float, b: float, m_direct: int, seed: int) -> SetupChecks:
    r"""The implementation tests and Monte-Carlo checks of the setting (``mesa/setup``).

    * fast model vs the literal prefix-sum definition at random full weights (identity);
    * diagonal model vs one GD step on the in-context OLS loss (identity);
    * the Monte-Carlo loss and diagonal gradient at (aI, bI) against the population formulas
      (:func:`formula_checks`, on their own bounded draws with the law's expectation).

    Data of the identity checks and the figure: seed stream :data:`~companion.seeds.MESA_TRAIN_DATA`,
    ``[seed, 0]`` (complex128).
    """
    data = generate(law, m, d, T, scale, MESA_TRAIN_DATA.rng(seed), torch.complex128)
    gen = torch.Generator().manual_seed(MESA_RANDOM_WEIGHTS(seed))
    W_KQ_r = torch.randn(2 * d, 2 * d, dtype=torch.complex128, generator=gen)
    W_PV_r = torch.randn(d, 2 * d, dtype=torch.complex128, generator=gen)
    small = data.subset(slice(0, m_direct))
    y_def = predict_direct(small, W_KQ_r, W_PV_r)
    err_fast = float((predict(small, W_KQ_r, W_PV_r) - y_def).abs().max() / y_def.abs().max())
    W_KQ, W_PV = init_diagonal(d, a, b, torch.complex128)
    y_gd = th.one_step_gd_predict(small.tokens(), a, b)
    err_gd = float((predict(small, W_KQ, W_PV) - y_gd).abs().max() / max(float(y_gd.abs().max()), 1e-300))
    name, _ = falsifier_alpha(law, scale, d, T)
    c = a * b
    tok = data.tokens()
    resid = (predict(data, W_KQ, W_PV) - tok[:, 2:]).abs() ** 2
    al, be = th.alpha_beta(law, scale, d, T)
    return SetupChecks(
        err_fast=err_fast, err_gd=err_gd, alpha=al, beta=be, falsifier=name,
        formulas=formula_checks(law, scale, d, T, m, a, b, seed),
        x0=tok[0].numpy(), pos_loss=0.5 * resid.sum(-1).mean(0).numpy(),
        pos_pop=th.position_loss(law, scale, d, np.arange(2, T), c),
    )


# ---- verdict


def record_checks(v, setup: SetupChecks, m: int) -> None:
    r"""Record the page's claims in the verdict ``v`` (``setup`` from :func:`setup_checks`, ``m`` its sequences).

    Two implementation tests (the fast model against the literal prefix sums of :math:`E_tE_t^{\Hm}`, the diagonal
    model at :math:`(aI, bI)` against one GD step on the in-context OLS loss) and two Monte-Carlo checks: the loss
    against :math:`L(ab)=\frac d2(\alpha c^2-2\beta c+Nm_2)` and the diagonal gradient against
    :math:`b(\alpha ab-\beta)`, each against the falsifier's :math:`\alpha`
    (:func:`~companion.mesa.evidence.falsifier_alpha`)."""
    f = setup.formulas
    radial = " (the radius of $x_1$ integrated exactly)" if f.radial else ""
    how = (" A Gaussian factor of $x_1$ has its radius integrated exactly with the $\\chi^2$ moments of $r^2$ "
           "(`companion.mesa.analysis.radial_terms`); the directions and phases are drawn, so every summand is "
           "bounded and its standard error covers." if f.radial else
           " The law of $x_1$ is bounded: its draws are used as they are.")
    v.identity("fast_vs_definition",
               quantity="max relative deviation, fast model vs literal prefix-sum definition",
               predicted=0.0, measured=setup.err_fast, tolerance=1e-10,
               reason="float64 round-off (the closed-form geometric sums lose a few digits when two phases nearly "
                      "coincide)",
               detail=r"Random complex128 full weights $\WKQ$, $\WPV$ (seed stream `MESA_RANDOM_WEIGHTS`); the "
                      "largest deviation of `companion.mesa.model.predict` from "
                      "`companion.mesa.model.predict_direct` on the sequences of the literal evaluation, relative "
                      "to the largest prediction.")
    v.identity("one_step_gd",
               quantity="max relative deviation, diagonal model vs one GD step on the in-context OLS loss",
               predicted=0.0, measured=setup.err_gd, tolerance=1e-10,
               reason="an algebraic identity: float64 round-off only",
               detail=r"The model at $(aI, bI)$ against `companion.mesa.theory.one_step_gd_predict` (one GD step "
                      r"of size $ab/(t-1)$ from $\hat W = 0$ on the in-context OLS loss), on the sequences of the "
                      "literal evaluation; relative to the largest prediction.")
    v.statistical("loss_formula", quantity="Monte-Carlo loss at $(aI, bI)$ vs population $L(ab)$",
                  predicted=f.L_pop, measured=f.L_emp, se=f.L_se, floor=f.L_floor,
                  falsifier=setup.falsifier, falsifier_value=f.L_fal,
                  reason=f"{Z_LEVEL:.3g} SE of the mean of {m} i.i.d. per-sequence losses{radial} + float64 round-off of "
                         "the sum",
                  detail=f"Mean of {m} i.i.d. per-sequence losses at $(aI, bI)$ (seed stream `MESA_FORMULA_MC`; "
                         f"SE {f.L_se:.3g}, normal band at {Z_LEVEL:.3g} SE).{how} Floor: float64 round-off of the sum, "
                         f"{f.L_floor:.2g}. The falsifier is the same formula with the falsifier's "
                         r"$\alpha$.")
    v.statistical("grad_formula",
                  quantity=r"Monte-Carlo diagonal gradient of $\WKQ_{21}$ vs $b(\alpha ab - \beta)$",
                  predicted=f.g_pop, measured=f.g_emp, se=f.g_se, dof=f.g_dof,
                  floor=f.g_floor, falsifier=setup.falsifier, falsifier_value=f.g_fal,
                  reason=f"level of {Z_LEVEL:.3g} SE: the SE from {f.n_groups} independent groups of sequences{radial}, "
                         f"Student-t on {f.g_dof} degrees of freedom; + float64 round-off",
                  detail=f"Mean over {f.n_groups} independent groups of sequences (seed stream "
                         "`MESA_FORMULA_MC`) of the mean diagonal gradient of the red block $\\WKQ_{21}$ "
                         f"(`companion.mesa.results.setup.diagonal_gradients`); SE {f.g_se:.3g} from the group means, "
                         f"Student-t at the level of {Z_LEVEL:.3g} normal SE on {f.g_dof} degrees of freedom.{how} "
                         f"Floor: float64 round-off, {f.g_floor:.2g}. The falsifier is "
                         r"$b(\alpha_f ab - \beta)$ with the falsifier's $\alpha_f$.")


# ---- figure


def setup_figure(setup: SetupChecks, a: float, b: float, d: int, T: int):
    """The setting: one training sequence (first coordinates) and the per-position loss of the diagonal model
    against the population formula (``setup`` from :func:`setup_checks`)."""
    fig, axes = new_figure(ncols=2, width=3.6, height=3.0)
    tt = np.arange(1, T + 1)
    for j in range(min(d, 3)):
        axes[0].plot(tt, setup.x0[:, j].real, lw=1, label=f"Re $x_{{t,{j + 1}}}$")
    axes[0].set_xlabel("position $t$")
    axes[0].set_title("one training sequence")
    legend_outside(axes[0], fontsize=7, ncol=3)
    t_pos = np.arange(2, T)
    axes[1].plot(t_pos, setup.pos_loss, ".", ms=3, label="measured (mean over sequences)")
    axes[1].plot(t_pos, setup.pos_pop, "k-", lw=1, label="population formula")
    axes[1].set_xlabel("prediction position $t$")
    axes[1].set_ylabel(r"$\frac{1}{2}\|\hat y_t - x_{t+1}\|^2$")
    axes[1].set_title(f"diagonal model, $a={a:g}$, $b={b:g}$")
    legend_outside(axes[1], fontsize=7, ncol=1)
    return fig
