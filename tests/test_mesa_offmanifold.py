"""The split of a trained ab into the GD restricted to the diagonal manifold on the same training set and the
off-manifold feedback (companion.mesa.evidence.restricted_ab, offmanifold_residual).

After one epoch from a diagonal init the full model's diagonal update *is* the restricted GD's first step (the
diagonal gradient at a diagonal point is the restricted gradient), so the two ab agree to complex64 round-off:
this fails if the restricted GD reads another training set (seed stream), rescales its statistics with the wrong
powers of the scale, or starts from another init or step. After many epochs the off-manifold parameters have
fitted the sample and the two differ."""

from __future__ import annotations

import numpy as np
import pytest

from companion import stats as S
from companion.mesa import train
from companion.mesa.evidence import offmanifold_residual, restricted_ab


def _run(epochs: int, seed: int, law: str = "gaussian", scale: float = 1.7, m: int = 200):
    return train.run(law=law, scale=scale, d=3, T=8, m=m, m_test=10, a0=0.5, b0=1.5, lr=2e-4 / scale**6 * 8,
                     epochs=epochs, seed=seed)


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
