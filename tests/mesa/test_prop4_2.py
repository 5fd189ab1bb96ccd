"""Proposition 4.2 (companion.mesa.results.prop4_2): the trained unmasked ab with the masked runs on the same
training sets as its control variate."""

from types import SimpleNamespace

import numpy as np
import pytest

from companion.mesa import evidence
from companion.mesa.results import prop4_2


def test_paired_shift_and_the_control_variate_estimate():
    """evidence.paired_shift: (4 D(m) - D(m/4))/3 of the per-replicate differences u - m (not m - u); the shared
    training-set noise cancels; prop4_2.ab_beyond adds the masked population value (the falsifier) to the shift."""
    rng = np.random.default_rng(1)
    common_b, common_s = rng.normal(size=10), rng.normal(size=10)  # training-set effects shared by both runs
    u = SimpleNamespace(big=0.85 + 0.01 * common_b + 1e-4 * rng.normal(size=10),
                        small=0.86 + 0.02 * common_s + 1e-4 * rng.normal(size=10))
    m = SimpleNamespace(big=0.82 + 0.01 * common_b, small=0.83 + 0.02 * common_s)
    q = evidence.paired_shift(u, m)
    assert q.measured == pytest.approx((4 * 0.03 - 0.03) / 3, abs=3e-4) and q.se < 3e-4
    with pytest.raises(ValueError):
        evidence.paired_shift(u, SimpleNamespace(big=m.big[:5], small=m.small))
    eq = SimpleNamespace(ab=0.851, se_ab=1e-3, dof=19)
    b = prop4_2.ab_beyond(u, m, eq, 0.8258)
    assert b.measured == pytest.approx(0.8258 + q.measured, rel=1e-12) and b.falsifier_value == 0.8258
    assert b.predicted == 0.851 and b.se == pytest.approx(float(np.hypot(q.se, 1e-3)), rel=1e-12)


def test_the_first_steps_standard_error_is_a_mean_over_the_training_set_measured_on_independent_sequences():
    """first_steps: the SE of the first step is lr x the independent sample's group SE x sqrt(m_s / m), the same for
    every training set (it must not read the training set, whose skewed gradients would lower mean and SE at once),
    and it is the spread of the first step over training sets; a sample of other (T, d) is refused."""
    d, T, m, lr, ini = 3, 6, 200, 1e-3, (0.5, 1.5)
    sample = prop4_2.mc_data(d, T, 800, 2)
    spread = prop4_2.offdiag_mc(sample, *ini, 20)
    steps = [prop4_2.first_steps(prop4_2.design([ini], lr, d, T, m, 10, 1, seed, 160, 3), 20, sample)[ini]
             for seed in range(40)]
    for k in ("pv", "kq"):
        se = {getattr(q, k).se for q in steps}
        assert se == {lr * getattr(spread, k).se * 2.0}  # sqrt(800 / 200), whatever the training set
        measured = np.array([getattr(q, k).measured for q in steps])
        assert 0.7 < measured.std(ddof=1) / se.pop() < 1.4  # the SE is the first step's spread over training sets
    assert steps[0].dof == 19
    with pytest.raises(ValueError, match="T, d"):
        prop4_2.first_steps(prop4_2.design([ini], lr, d, T, m, 10, 1, 0, 160, 3), 20, prop4_2.mc_data(d, T + 1, 800, 2))
