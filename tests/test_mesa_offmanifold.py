"""The split of a trained ab into the GD restricted to the diagonal manifold on the same training set and the
off-manifold feedback (companion.mesa.evidence.restricted_ab, offmanifold_residual).

After one epoch from a diagonal init the full model's diagonal update *is* the restricted GD's first step (the
diagonal gradient at a diagonal point is the restricted gradient), so the two ab agree to complex64 round-off:
this fails if the restricted GD reads another training set (seed stream), rescales its statistics with the wrong
powers of the scale, or starts from another init or step. After many epochs the off-manifold parameters have
fitted the sample and the two differ.

The same for the masked training of Theorem 4.3 (x_1 = 1, off-diagonal red entries clipped): the mask changes
neither prediction nor loss, so the restricted masked GD is the restricted GD on the same (Q, P), cross terms
k != l included (fails if they are dropped), and its feedback comes from the other blocks alone."""

from __future__ import annotations

import numpy as np
import pytest

from companion import stats as S
from companion.mesa import train
from companion.mesa.evidence import offmanifold_floor, offmanifold_residual, offmanifold_words, restricted_ab


def _run(epochs: int, seed: int, law: str = "gaussian", scale: float = 1.7, m: int = 200, mask: bool = False):
    return train.run(law=law, scale=scale, d=3, T=8, m=m, m_test=10, a0=0.5, b0=1.5, lr=2e-4 / scale**6 * 8,
                     epochs=epochs, seed=seed, mask=mask)


@pytest.mark.parametrize("law", ["gaussian", "sparse"])
def test_one_epoch_of_the_full_model_is_the_restricted_step(law):
    r = _run(1, 3, law)
    assert restricted_ab(r) == pytest.approx(float(r.ab[-1]), rel=2e-6)
    assert restricted_ab(r) != pytest.approx(float(r.ab[0]), rel=1e-4)  # the step moved ab


def test_the_off_manifold_feedback_grows_with_training_and_its_residual_is_the_richardson_of_the_differences():
    big = [_run(200, s, m=400) for s in (11, 12, 13)]
    small = [_run(200, s, m=100) for s in (21, 22, 23)]
    o_big = np.array([r.ab[-1] - restricted_ab(r) for r in big])
    o_small = np.array([r.ab[-1] - restricted_ab(r) for r in small])
    assert np.all(np.abs(o_big) > 1e-4 * np.abs([r.ab[-1] for r in big]))  # not round-off: the feedback exists
    out = offmanifold_residual(big, small)
    ref = S.richardson(o_big, o_small)
    assert out["measured"] == pytest.approx(ref["measured"], rel=1e-12)
    assert out["ratio"] == pytest.approx(o_small.mean() / o_big.mean(), rel=1e-12)


@pytest.mark.parametrize("law", ["full_one", "gaussian"])
def test_one_epoch_of_the_masked_model_is_the_restricted_masked_step(law):
    r = _run(1, 3, law, mask=True)
    assert r.config["mask"]
    assert restricted_ab(r) == pytest.approx(float(r.ab[-1]), rel=2e-6)
    assert restricted_ab(r) != pytest.approx(float(r.ab[0]), rel=1e-4)  # the step moved ab


def test_the_masked_feedback_is_the_other_blocks_alone_and_grows_with_training():
    masked = _run(200, 5, "full_one", m=400, mask=True)
    unmasked = _run(200, 5, "full_one", m=400)
    assert restricted_ab(masked) == restricted_ab(unmasked)  # the mask leaves the restricted GD alone
    assert masked.offdiag_kq[-1] == 0 and masked.offdiag_pv[-1] == 0  # clipped: only the other blocks moved
    assert masked.other_max[-1] > 0
    o = masked.ab[-1] - restricted_ab(masked)
    assert abs(o) > 1e-4 * abs(masked.ab[-1])  # not round-off: the other blocks' feedback exists
    assert abs(unmasked.ab[-1] - masked.ab[-1]) > abs(o)  # for x_1 = 1 the off-diagonal red entries do more


def test_the_band_adds_the_measured_feedback_in_absolute_value_and_the_reason_names_it():
    res = dict(measured=-3e-5, ratio=2.5, se=1e-5)  # an offmanifold_residual dict (extrapolated claims)
    assert offmanifold_floor(1e-6, res) == 1e-6 + 3e-5
    assert offmanifold_floor(1e-6, -2e-4) == 1e-6 + 2e-4  # one run's ab - ab_diag (ab_evidence's "off")
    assert offmanifold_words(res, se=1e-5) == ("what the extrapolation leaves of the off-manifold feedback, measured "
                                               "(-3e-05, -3.00 SE; its decay ratio over m/4 -> m 2.50, 4 for 1/m)")
    assert offmanifold_words(-2e-4, predicted=0.1, see="mesa/thm4_1_emergence").endswith(
        "same training set (-0.0002, -0.20 %; see mesa/thm4_1_emergence)")
    with pytest.raises(ValueError):
        offmanifold_words(res)  # r in standard errors needs the claim's SE
    with pytest.raises(ValueError):
        offmanifold_words(-2e-4)  # o in % needs the prediction
