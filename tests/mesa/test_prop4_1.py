"""Proposition 4.1 (companion.mesa.results.prop4_1): the trained T sweep (its replicate rule and its step over its
own training sets), the trained-loss band of the no-recovery claims, and the limit-model claims (``limit_t*``), whose
estimator integrates the radius of x_1 exactly: the plain test-set mean of the degree-6 per-sequence loss has an SE
that under-covers (z s.d. 1.25 at d = 4, T = 30, 1000 sequences)."""

import numpy as np
import pytest

from companion import params, stats
from companion.mesa import analysis, evidence, stability, train
from companion.mesa.results import prop4_1
from companion.params import ParameterError


def test_sweep_replicates_rule():
    assert prop4_1.sweep_replicates(10, [10, 20, 100]) == {10: 10, 20: 7, 100: 3}
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


def test_the_no_recovery_band_holds_the_training_sets_ab_spread_and_feedback_at_any_T():
    """Prop 4.1's trained-loss claims (``prop4_1.no_recovery``): the SE combines the test-set SE with the jackknife
    SE of the run's own restricted-GD ab moved through the loss, and the band adds the run's feedback moved the same
    way, at any T (an ab term taken from the T sweep would be 0 at a T the sweep does not reach)."""
    from companion.mesa.empirical import sampling_spread
    from companion.mesa.evidence import training_stats
    r = train.run(law="gaussian", scale=1.0, d=3, T=8, m=200, m_test=100, a0=0.5, b0=1.5, lr=1e-3, epochs=30, seed=5)
    out = prop4_1.no_recovery(r, 0.5, 1.5, 30, n_batches=10)
    restricted, se_ab = sampling_spread(None, 0.5, 1.5, 1e-3, 30, batch_stats=training_stats("gaussian", 200, 3, 8, 5, 10))
    assert se_ab[-1] > 0 and out["whole"].off == pytest.approx(float(r.ab[-1] - restricted[-1]), rel=1e-12)
    for q in out.values():
        ev = q.loss
        ab_term = abs(ev.slope) * se_ab[-1]
        assert ab_term > 1e-3 * ev.se_test  # left out, the SE below would differ by far more than its rel
        assert ev.se == pytest.approx(np.hypot(ev.se_test, ab_term), rel=1e-9)
        crit = stats.critical(stats.Z_LEVEL, 9)
        ab_floor = abs(ev.slope) * abs(q.off) + 0.5 * ev.curvature * (abs(q.off) + crit * se_ab[-1]) ** 2
        assert q.off_loss == pytest.approx(ab_floor + abs(ev.remnant[0]), rel=1e-9)


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
