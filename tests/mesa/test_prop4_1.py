"""Proposition 4.1 (companion.mesa.results.prop4_1): the trained T sweep (its replicate rule and its step over its
own training sets), the replicates the no-recovery claims read, and the limit-model claims (``limit_t*``), whose
estimator integrates the radius of x_1 exactly: the plain test-set mean of the degree-6 per-sequence loss has an SE
that under-covers (z s.d. 1.25 at d = 4, T = 30, 1000 sequences)."""

import numpy as np
import pytest

from companion import params
from companion.mesa import analysis, evidence, stability, train
from companion.mesa.results import prop4_1
from companion.params import ParameterError


def test_sweep_replicates_rule():
    """Every T of the sweep trains n_rep sets per size (on tilted sets the long contexts decide too)."""
    assert prop4_1.sweep_replicates(10, [10, 20, 100]) == {10: 10, 20: 10, 100: 10}
    assert prop4_1.sweep_replicates(3, [5, 1000]) == {5: 3, 1000: 3}


def test_the_sweep_step_is_stable_on_its_stiffest_replicate_set():
    """The T sweep's step is taken over its own training sets: at d = 5, T = 10, m_sweep = 400, seed 52 one replicate
    set of m = 100 (index 15) is 11.8 times stiffer than the 400 independent sequences of ``stability_bound``, and GD
    at a quarter of that bound diverges at epoch 4; the step over the training sets trains it."""
    sets = evidence.replicate_sets(400, 10, 52)
    assert sets[15][0] == 100
    old = stability.stable_lr("gaussian", 1.0, 5, 10, [(0.5, 1.5)], 0.25, 52)
    new = stability.stable_lr("gaussian", 1.0, 5, 10, [(0.5, 1.5)], 0.25, 52, sets=sets)
    assert new < old / 8
    kw = evidence.Replicates("gaussian", 1.0, 5, 10, 0.5, 1.5, new, 30, 400, 10, 52).runs()[15]
    assert np.isfinite(train.run(**kw).ab[-1])
    with pytest.raises(params.ParameterError, match="diverged"):
        train.run(**dict(kw, lr=old))


def test_the_no_recovery_claims_read_the_replicates_of_the_sweeps_shortest_context():
    """Prop 4.1's trained-loss claims (``prop4_1.no_recovery``): the replicates of the sweep's shortest T (its most
    numerous), the last position T0 - 1 and the whole sequence, each against the population loss at that T's
    population-GD ab (``evidence.replicate_loss``), never at the page's own T."""
    from companion.mesa import theory as th

    des = prop4_1.design([1.0], [1e-3], [(0.5, 1.5)], 3, 9, 200, 100, 10, 5, [8, 6], 200, 3, 0.25)
    sweep, reps = prop4_1.t_sweep(des)
    T0, cap = prop4_1.no_recovery(des, sweep, 100)
    assert T0 == 6 and reps[6] == 3 and set(cap) == {"last", "whole"}
    c = sweep[6].predicted
    assert cap["last"].predicted == pytest.approx(float(th.position_loss("gaussian", 1.0, 3, 5.0, c)), rel=1e-12)
    assert cap["whole"].predicted == pytest.approx(float(th.population_loss("gaussian", 1.0, 3, 6, c)), rel=1e-12)
    assert cap["whole"].loss.zero_loss == pytest.approx(3 / 2 * 4 * 1.0)  # d/2 (T0 - 2) m2


def test_radial_moments_are_the_chi_square_moments():
    # E r^2, E r^4, E r^6 of |x| for x ~ N(0, s^2 I_d): s^2 d, s^4 d(d+2), s^6 d(d+2)(d+4)
    assert np.allclose(analysis.radial_moments(3, 1.0), (3, 15, 105))
    assert np.allclose(analysis.radial_moments(5, 0.5), (5 * 0.25, 35 * 0.0625, 315 * 0.5**6))


@pytest.mark.parametrize("d, T, scale", [(3, 10, 1.0), (5, 20, 0.7)])
def test_limit_model_z_is_standard_normal_over_seeds(d, T, scale):
    """Over 80 seeds at 400 sequences the z of each position against l_t(c*) has mean ~0, s.d. ~1 and no |z| > 4
    (the plain mean's z had mean -0.44 and s.d. 1.25 at d = 4, T = 30, 1000 sequences)."""
    pos = prop4_1.limit_positions(T)
    z = np.array([[(mu - pr) / se for mu, se, pr in zip(o.mean, o.se, o.pred)]
                  for o in (prop4_1.limit_position_losses("gaussian", scale, d, T, pos, 400, s) for s in range(80))])
    assert np.all(np.abs(z.mean(0)) < 0.35), z.mean(0)     # the mean of 80 standard normals: s.e. 0.11
    assert np.all((z.std(0) > 0.8) & (z.std(0) < 1.2)), z.std(0)
    assert np.abs(z).max() < 4.0


def test_limit_model_needs_a_gaussian_start():
    with pytest.raises(ParameterError, match="law"):
        prop4_1.limit_position_losses("sparse", 1.0, 3, 10, [9], 100, 0)


def test_radial_losses_rest_on_an_exact_polynomial_in_the_radius_for_any_weights():
    """For any weights a sequence's loss is r^2 A + r^4 B + r^6 C in the radius of x_1 (a cubic prediction, a linear
    target): the coefficients read at r^2 = 1, 2, 3 give the loss at r^2 = 5; and on a Gaussian test set the
    radius-integrated mean agrees with the plain mean."""
    import torch

    from companion.mesa.data import ARData, generate
    from companion.mesa.model import per_sequence_loss

    d = 3
    g = torch.Generator().manual_seed(1)
    W = (0.3 * torch.randn(2 * d, 2 * d, dtype=torch.complex128, generator=g),
         0.3 * torch.randn(d, 2 * d, dtype=torch.complex128, generator=g))
    data = generate("gaussian", 20000, d, 8, 0.8, 4, torch.complex128)
    u = data.x1 / data.x1.abs().pow(2).sum(1, keepdim=True).sqrt()
    L = [per_sequence_loss(ARData(x1=u * q**0.5, lam=data.lam, T=8, theta=data.theta), *W) for q in (1.0, 2.0, 3.0, 5.0)]
    coef = np.linalg.solve(np.array([[q, q * q, q**3] for q in (1.0, 2.0, 3.0)]), np.array(L[:3]))
    assert np.allclose(np.array([5.0, 25.0, 125.0]) @ coef, L[3], rtol=1e-9)
    v = analysis.radial_losses(data, *W, 0.8)
    plain = per_sequence_loss(data, *W)
    assert abs(v.mean() - plain.mean()) < 4 * np.hypot(v.std() / np.sqrt(v.size), plain.std() / np.sqrt(plain.size))
    assert v.std() < plain.std() / 2  # the radius carries most of the spread
