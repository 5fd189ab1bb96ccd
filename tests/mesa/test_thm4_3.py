"""Theorem 4.3 (companion.mesa.results.thm4_3): the masked loss and the masking gap, paired by training set and,
with the prediction's own models, by test sequence."""

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from companion import stats
from companion.mesa import analysis
from companion.mesa import theory as th
from companion.mesa.data import generate
from companion.mesa.evidence import equivariant_moments, richardson_paired
from companion.mesa.results import thm4_3
from companion.seeds import MESA_EQUIVARIANT_MC


@pytest.fixture(scope="module")
def tiny():
    """A tiny masking design (d = 3, T = 8, two epochs), its replicates, moments and population gap."""
    inits = [(0.5, 1.5)]
    lr, d, T, epochs = 2e-4, 3, 8, 2
    design = thm4_3.design(inits, lr, d, T, 160, 400, epochs, 3, 160, 3)
    rep, rep_u = thm4_3.replicates(design)
    moments = equivariant_moments("full_one", d, T, 1000, 3)
    gap = thm4_3.masking_gap(d, T, *inits[0], lr, epochs, moments)
    return SimpleNamespace(design=design, rep=rep, rep_u=rep_u, gap=gap, d=d, T=T,
                           paired=thm4_3.paired_with_prediction(design, rep, rep_u, gap, thm4_3.loss_sample(design)))


def test_equivariant_losses_are_the_quadratic_form_of_the_moments():
    """The loss of the model p = (a, a', b, b') on a sequence is 1/2 (c'G c - 2 h'c + y) of that sequence's moments,
    c = equivariant_c(p): the blocks are laid out as the moments' unit configurations (a swapped a' and b' fails)."""
    d, T, m, seed = 3, 8, 50, 11
    mo = equivariant_moments("full_one", d, T, m, seed)
    data = generate("full_one", m, d, T, 1.0, MESA_EQUIVARIANT_MC.rng(seed), torch.complex128)  # the moments' sequences
    p = (0.7, -0.2, 1.3, 0.4)
    c = th.equivariant_c(*p)
    want = 0.5 * (np.einsum("k,nkl,l->n", c, mo["G"], c) - 2 * mo["h"] @ c + mo["y"])
    np.testing.assert_allclose(thm4_3.equivariant_losses(data, p), want, rtol=1e-10)


def test_the_control_s_mean_is_the_population_loss():
    """The diagonal model at ab = c, the control of the masked loss, has mean loss L(c) (what the paired estimator
    adds back), within 4 SE over 4000 sequences."""
    d, T, c = 3, 8, 0.6
    data = generate("full_one", 4000, d, T, 1.0, np.random.default_rng(5), torch.complex128)
    mu, se = stats.mean_se(thm4_3.equivariant_losses(data, (c, 0.0, 1.0, 0.0)))
    assert abs(mu - float(th.population_loss("full_one", 1.0, d, T, c))) < 4 * se


def test_pairing_with_the_prediction_removes_the_test_set_noise(tiny):
    """The controls are evaluated on the replicates' own test sequences: after two epochs the trained models are
    close to the population GD's, so the paired test-set SE is a small part of the unpaired one (a control on other
    sequences would add noise instead), and the paired estimates agree with the unpaired ones within the latter's
    test-set SE."""
    rep, rep_u, q = tiny.rep, tiny.rep_u, tiny.paired
    assert q.loss.se_test < 0.5 * rep.loss.se_test
    assert abs(q.loss.measured - rep.loss.measured) < 4 * rep.loss.se_test
    unpaired = richardson_paired(rep_u.loss.big - rep.loss.big, rep_u.loss.small - rep.loss.small)
    assert q.gap.se_test < 0.5 * unpaired.se_test
    assert abs(q.gap.measured - unpaired.measured) < 4 * unpaired.se_test + 4 * tiny.gap.se
    assert q.loss.zero_loss == rep.loss.zero_loss


def test_the_paired_estimate_adds_back_the_control_s_mean(tiny):
    """Measured minus predicted is the paired term alone: the masked loss minus L(c) and the gap minus the
    prediction's Monte-Carlo mean do not depend on those means (a control mean left out, or added twice, fails)."""
    rep, q, gap = tiny.rep, tiny.paired, tiny.gap
    L_c = float(th.population_loss("full_one", 1.0, tiny.d, tiny.T, rep.predicted))
    # the replicates' excess over the control at each size, as the Richardson combination sees it
    assert q.loss.mean_big - L_c == pytest.approx(q.loss.measured - L_c + (q.loss.mean_small - q.loss.mean_big) / 3,
                                                  abs=1e-12)
    assert abs(q.loss.measured - L_c) < 1e-2 * L_c  # two epochs from the same init: trained ~ population GD
    # the gap: the prediction's Monte-Carlo mean is added back whole, so shifting it shifts the measurement alike
    # and leaves measured minus predicted and the band as they were (left out, the shift would not move it)
    moved = thm4_3.paired_with_prediction(tiny.design, rep, tiny.rep_u, replace(gap, predicted=gap.predicted + 1.0),
                                          thm4_3.loss_sample(tiny.design))
    assert moved.gap.measured - q.gap.measured == pytest.approx(1.0, abs=1e-12)
    assert moved.gap.se == q.gap.se and moved.loss.measured == q.loss.measured
    assert q.se_gap_prediction == pytest.approx(float(np.abs(gap.grad_end * gap.se_end).sum()))
    assert q.dof_gap_prediction == gap.se_end_dof


def test_the_gap_s_gradient_is_that_of_the_mean_loss(tiny):
    """``grad_end`` is the gradient of the population GD's mean loss at its endpoint p = (a, a', b, b') on the
    Monte-Carlo moments (central differences; a transposed Jacobian fails)."""
    gap = tiny.gap
    mo = equivariant_moments("full_one", tiny.d, tiny.T, 1000, 3)
    G, h = mo["G"].mean(0), mo["h"].mean(0)

    def mean_loss(p):
        c = th.equivariant_c(*p)
        return 0.5 * (c @ G @ c - 2 * h @ c)

    p0, eps = np.array(gap.path[-1], dtype=float), 1e-6
    num = [(mean_loss(p0 + eps * e) - mean_loss(p0 - eps * e)) / (2 * eps) for e in np.eye(4)]
    np.testing.assert_allclose(gap.grad_end, num, rtol=1e-5, atol=1e-8)


def test_the_paired_difference_s_standard_error_is_measured_on_independent_sequences(tiny):
    """paired_differences: the mean over the runs' own test sequences, the SE from the same two models on other
    sequences (loss_sample: as many, not the same ones), scaled to the test set's size: it does not move with the
    test set (the per-sequence losses are skewed) and it is the mean's spread over test sets."""
    (ini,) = tiny.design.masked
    masked, unmasked = thm4_3.figure_runs(tiny.design)
    td, sample = analysis.test_data(masked[ini]), thm4_3.loss_sample(tiny.design)
    assert sample.m == td.m and not np.allclose(sample.theta, td.theta)

    def diff(data):
        return (analysis.per_sequence_loss(data, *analysis.weights(unmasked[ini]))
                - analysis.per_sequence_loss(data, *analysis.weights(masked[ini])))

    def fresh(m, s):
        return generate("full_one", m, tiny.d, tiny.T, 1.0, np.random.default_rng([s, 99]), torch.complex128)

    mu, se = thm4_3.paired_differences(masked, unmasked, sample)[ini]
    assert mu == pytest.approx(float(diff(td).mean()), rel=1e-12)
    mu4, se4 = thm4_3.paired_differences(masked, unmasked, fresh(4 * td.m, 1000))[ini]  # four times the sequences
    assert mu4 == mu and se4 != se
    means = [float(diff(fresh(td.m, s)).mean()) for s in range(40)]
    assert 0.7 < np.std(means, ddof=1) / se4 < 1.4
