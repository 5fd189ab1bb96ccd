"""Theorem 4.3 (companion.mesa.results.thm4_3): the trained masking gap, paired by training set and by test
sequence."""

from types import SimpleNamespace

import numpy as np
import pytest

from companion.mesa.results import thm4_3


def test_extrapolated_gap_pairs_replicates_and_test_sequences():
    """(4 D(m) - D(m/4))/3 of the per-replicate differences; the shared test-set noise cancels in the pair."""
    rng = np.random.default_rng(0)
    common = rng.normal(size=200)  # test-sequence effects shared by every model
    u = SimpleNamespace(loss=SimpleNamespace(big=common + 1.0 + 0.01 * rng.normal(size=(3, 200)),
                                             small=common + 1.4 + 0.01 * rng.normal(size=(3, 200))))
    m = SimpleNamespace(loss=SimpleNamespace(big=common + 2.0 + 0.01 * rng.normal(size=(3, 200)),
                                             small=common + 2.1 + 0.01 * rng.normal(size=(3, 200))))
    q = thm4_3.extrapolated_gap(u, m)
    assert q.measured == pytest.approx((4 * (-1.0) - (-0.7)) / 3, abs=0.01)
    assert q.se < 0.01  # the common test-set effects (sd 1) do not enter
