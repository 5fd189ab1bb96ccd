"""The setting (companion.mesa.results.setup): the Monte-Carlo formula checks have a round-off floor where the loss
vanishes, and their standard errors cover at the nominal level over many seeds at the size of the page's smoke point.

The Gaussian sixth moments behind the loss and gradient make a plain mean's SE unreliable (a correct formula failed
at 4.2 SE at seed 21); a bounded Gauss-Hermite stand-in for the Gaussian still gave z s.d. 1.11 (loss) and 1.44
(gradient, 20 groups) at d = 5, T = 20, m = 200. :func:`companion.mesa.results.setup.formula_checks` integrates the
radius of x_1 exactly (:func:`companion.mesa.analysis.radial_terms`) and takes groups of two sequences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats as st

from companion.mesa import analysis
from companion.mesa import theory as th
from companion.mesa.data import generate
from companion.mesa.model import loss_grad_fast, per_sequence_loss
from companion.mesa.results import setup
from companion.mesa.train import init_diagonal


def test_setup_checks_sparse_at_cstar_has_a_roundoff_floor():
    """At c* the sparse law's loss is 0 for every sequence: the tolerance must not be 0."""
    q = setup.setup_checks("sparse", 1.0, 3, 10, 200, 1.0, 1.0, 20, 0).formulas
    assert q.L_floor > 0 and abs(q.L_emp - q.L_pop) <= 4 * q.L_se + q.L_floor


@pytest.mark.parametrize("law, dof", [("gaussian", 4), ("sparse_gaussian", 1)])
def test_radius_integrated_loss_has_the_laws_expectation(law, dof):
    """The radius-integrated per-sequence loss has the law's expectation: against the plain mean of 2e5 draws
    (within 5 SE) and against the population formula (within 5 of its own SE; for the sparse-Gaussian law at a
    diagonal point every sequence has the same value, the formula's to round-off)."""
    d, T, W = 4, 8, init_diagonal(4, 0.4, 0.7, torch.complex128)
    data = generate(law, 200_000, d, T, 1.3, 2, torch.complex128)
    v, plain = analysis.radial_losses(data, *W, 1.3, dof=dof), per_sequence_loss(data, *W)
    se = np.hypot(v.std(), plain.std()) / np.sqrt(v.size)
    assert abs(v.mean() - plain.mean()) <= 5 * se
    pop = th.population_loss(law, 1.3, d, T, 0.4 * 0.7)
    assert abs(v.mean() - pop) <= 5 * v.std() / np.sqrt(v.size) + 1e-12 * pop


@pytest.mark.parametrize("law", ["gaussian", "sparse"])
def test_diagonal_gradients_are_the_diagonal_of_each_groups_gradient(law):
    """At random full weights (off the diagonal manifold too) each group's mean of the per-sequence central
    differences is the mean real diagonal of W_KQ's lower-left block in that group's gradient from the fused
    backward pass, to round-off (a step on another block, a missing 1/d or a one-sided difference fails)."""
    d, T, m = 3, 9, 12
    data = generate(law, m, d, T, 1.0, 5, torch.complex128)
    g = torch.Generator().manual_seed(1)
    W_KQ = 0.3 * torch.randn(2 * d, 2 * d, dtype=torch.complex128, generator=g)
    W_PV = 0.3 * torch.randn(d, 2 * d, dtype=torch.complex128, generator=g)
    per_seq = setup.diagonal_gradients(data, W_KQ, W_PV)
    assert per_seq.shape == (m,)
    for ix in np.array_split(np.arange(m), 4):
        want = float(torch.diagonal(loss_grad_fast(data.subset(ix), W_KQ, W_PV)[1][d:, :d]).real.mean())
        assert per_seq[ix].mean() == pytest.approx(want, rel=1e-10, abs=1e-12)


@pytest.mark.slow  # 200 seeds per law: a few seconds each
@pytest.mark.parametrize("law", ["gaussian", "rademacher"])  # sparse, sparse_gaussian: every sequence the same
def test_formula_checks_cover_at_their_nominal_level(law):
    """Over 200 seeds at the smoke point's size (d = 5, T = 20, m = 200, a = 0.3, b = 0.5) the loss and gradient
    standard errors cover the exact formulas at their nominal level: the share beyond 2 SE is that of the normal
    (loss) and of Student-t on 99 degrees of freedom (gradient, 100 groups), within a two-sided 1e-3 binomial band;
    no seed beyond 4.5 SE; and the mean z^2 is 1 within its sampling band. A bounded Gauss-Hermite stand-in for the
    Gaussian fails it (gradient z^2 mean 2.1, a seed at 5.6 SE)."""
    d, T, m, a, b, n = 5, 20, 200, 0.3, 0.5, 200
    zL, zg = [], []
    for seed in range(n):
        q = setup.formula_checks(law, 1.0, d, T, m, a, b, seed)
        zL.append((q.L_emp - q.L_pop) / q.L_se)
        zg.append((q.g_emp - q.g_pop) / q.g_se)
    for z, p2 in ((np.array(zL), 2 * st.norm.sf(2)), (np.array(zg), 2 * st.t.sf(2, 99))):
        lo, hi = st.binom.ppf([5e-4, 1 - 5e-4], n, p2)
        assert lo <= np.sum(np.abs(z) > 2) <= hi, (np.sum(np.abs(z) > 2), lo, hi)
        assert np.abs(z).max() <= 4.5
        assert 0.7 <= np.mean(z**2) <= 1.45
