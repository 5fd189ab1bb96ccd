r"""The setting of the mesa paper (notebook ``mesa/setup``): the fast model against its definition, the
diagonal model as one GD step, and the population loss and gradient of the diagonal model by Monte Carlo.

What the page checks, and how:

* :func:`setup_checks` evaluates everything the page's verdict needs on one data set;
* :func:`population_gradient` is the theory's diagonal gradient :math:`b(\alpha ab-\beta)`;
* :func:`setup_figure` draws one training sequence and the per-position loss.
"""

from __future__ import annotations

import numpy as np
import torch

from companion import stats as S
from companion.claims import ClaimSpec, ResultSpec
from companion.mesa import theory as th
from companion.mesa.data import ARData, generate, sample_x1
from companion.mesa.evidence import falsifier_alpha
from companion.mesa.model import loss_grad_fast, per_sequence_loss, predict, predict_direct
from companion.mesa.train import init_diagonal
from companion.plotting import legend_outside, new_figure
from companion.seeds import MESA_FORMULA_MC, MESA_RANDOM_WEIGHTS, MESA_TRAIN_DATA

__all__ = ["CLAIMS", "RESULT", "GH_NODES", "manifest", "population_gradient", "bounded_x1", "formula_checks", "setup_checks",
           "setup_figure"]

_FALSIFIER = "alpha of the T -> infinity constant (m24 > 0) or of independent coordinates (m24 = 0)"

CLAIMS = (
    ClaimSpec("fast_vs_definition", "identity", "closed_form", prediction="companion.mesa.model.predict_direct"),
    ClaimSpec("one_step_gd", "identity", "closed_form", prediction="companion.mesa.theory.one_step_gd_predict"),
    ClaimSpec("loss_formula", "statistical", "monte_carlo", prediction="companion.mesa.theory.population_loss",
              falsifier=_FALSIFIER),
    ClaimSpec("grad_formula", "statistical", "monte_carlo",
              prediction="companion.mesa.results.setup.population_gradient", falsifier=_FALSIFIER),
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


#: Gauss-Hermite rule of the Gaussian factor of a law (probabilists' nodes): exact for polynomials of degree <= 7
#: in each coordinate, so the loss and gradient (degree 6 in x_1) have exactly the Gaussian expectation
GH_NODES = 4


def bounded_x1(law, m: int, d: int, scale: float, rng: np.random.Generator) -> np.ndarray:
    r"""m initial tokens from a bounded law with the same moments as ``law`` up to order 7 in every coordinate.

    A Gaussian factor (``gaussian``: every coordinate; ``sparse_gaussian``: the active one) is replaced by a
    draw from the :data:`GH_NODES`-point Gauss-Hermite rule of :math:`\Nor(0,1)` (node :math:`x_i` with
    probability :math:`w_i/\sum w`), which matches :math:`\E g^k` for :math:`k\le 7`; the other built-in laws
    are bounded already and drawn as they are (:func:`companion.mesa.data.sample_x1`). The coordinates stay
    independent, so every moment of degree <= 7 per coordinate, and with it the expected loss and gradient of
    the diagonal model (polynomials of degree 6 in :math:`x_1`), is exactly the law's. The draws are bounded
    (:math:`|x|\le 2.34\,\sigma`), so the mean of per-sequence losses is light-tailed and its standard error
    covers at its nominal level (``tests/test_mesa_setup_coverage.py``); the sixth moments of a Gaussian draw
    are not (the issue-24 failure at seed 21: 4.2 SE from the truth with 100 group means)."""
    nodes, w = np.polynomial.hermite_e.hermegauss(GH_NODES)
    p = w / w.sum()
    if law == "gaussian":
        return scale * nodes[rng.choice(GH_NODES, size=(m, d), p=p)]
    if law == "sparse_gaussian":
        x = np.zeros((m, d))
        x[np.arange(m), rng.integers(0, d, size=m)] = nodes[rng.choice(GH_NODES, size=m, p=p)]
        return scale * x
    return sample_x1(law, m, d, scale, rng)


def formula_checks(law, scale: float, d: int, T: int, m: int, a: float, b: float, seed: int,
                   n_groups: int = 100) -> dict:
    r"""The Monte-Carlo loss and diagonal gradient at :math:`(aI, bI)` against the population formulas.

    Data: m sequences with uniform phases and :math:`x_1` from :func:`bounded_x1` (the same expectation as the
    law, bounded draws), seed stream :data:`~companion.seeds.MESA_FORMULA_MC`. The loss is the mean of i.i.d.
    per-sequence losses (:func:`companion.stats.mean_se`, normal band); the gradient the mean over ``n_groups``
    groups of :func:`companion.mesa.model.loss_grad_fast` (Student-t on n_groups - 1 degrees of freedom). The
    falsifier replaces alpha by :func:`companion.mesa.evidence.falsifier_alpha`."""
    rng = MESA_FORMULA_MC.rng(seed)
    theta = rng.uniform(0.0, 2 * np.pi, size=(m, d))
    x1 = bounded_x1(law, m, d, scale, rng)
    data = ARData(torch.from_numpy(x1.astype(complex)), torch.from_numpy(np.exp(1j * theta)), T, theta)
    W_KQ, W_PV = init_diagonal(d, a, b, torch.complex128)
    al, be = th.alpha_beta(law, scale, d, T)
    _, al_f = falsifier_alpha(law, scale, d, T)
    mo = th.moments(law, scale, d)
    N, c = T - 2, a * b
    L_emp, L_se = S.mean_se(per_sequence_loss(data, W_KQ, W_PV))
    groups = np.array_split(np.arange(m), min(n_groups, m // 10))
    g = [float(torch.diagonal(loss_grad_fast(data.subset(ix), W_KQ, W_PV)[1][d:, :d]).real.mean()) for ix in groups]
    g_emp, g_se = S.mean_se(g)  # equal-size groups up to one sequence: the mean of group means
    return dict(
        L_emp=L_emp, L_se=L_se, L_pop=float(th.population_loss(law, scale, d, T, c)),
        L_fal=d / 2 * (al_f * c * c - 2 * be * c + N * mo.m2),
        L_floor=S.ROUNDOFF * d / 2 * (al * c * c + 2 * be * abs(c) + N * mo.m2),
        g_emp=g_emp, g_se=g_se, g_pop=population_gradient(law, scale, d, T, a, b), g_fal=b * (al_f * c - be),
        g_floor=S.ROUNDOFF * abs(b) * (al * abs(c) + be), n_groups=len(groups), g_dof=len(groups) - 1,
    )


def setup_checks(law, scale: float, d: int, T: int, m: int, a: float, b: float, m_direct: int, seed: int) -> dict:
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
    return dict(
        err_fast=err_fast, err_gd=err_gd, alpha=al, beta=be, falsifier=name,
        **formula_checks(law, scale, d, T, m, a, b, seed),
        x0=tok[0].numpy(), pos_loss=0.5 * resid.sum(-1).mean(0).numpy(),
        pos_pop=th.position_loss(law, scale, d, np.arange(2, T), c),
    )


# ---- figure


def setup_figure(setup: dict, a: float, b: float, d: int, T: int):
    """The setting: one training sequence (first coordinates) and the per-position loss of the diagonal model
    against the population formula (``setup`` from :func:`setup_checks`)."""
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
