"""The best residual polynomial of the looped page (companion.cot.results.looped.best_polynomial_loss) against the
one-layer floor (degree 1), the exact two-loop optimum (degree 2 contains it) and a Monte-Carlo minimisation."""

from __future__ import annotations

import numpy as np
import pytest

from companion.cot import theory as th
from companion.cot.results import looped


def test_best_polynomial_degree_one_is_the_floor_and_degree_two_beats_two_loops():
    for d, n in [(10, 20), (3, 8), (5, 5)]:
        assert looped.best_polynomial_loss(1, d, n) == pytest.approx(th.no_cot_floor(d, n), rel=1e-12)
        # (1 - c lambda)^2 is one degree-2 residual polynomial: the minimum over all of them is lower
        assert looped.best_polynomial_loss(2, d, n) < th.looped_optimum_exact_k2(d, n)[1]
        assert looped.best_polynomial_loss(3, d, n) < looped.best_polynomial_loss(2, d, n)


def test_best_polynomial_against_monte_carlo_least_squares():
    # min_q E sum_j q(lambda_j)^2 over q(0) = 1, deg q <= 3, on an independent spectrum sample (4 SE)
    d, n, k = 4, 10, 3
    eigs = th.sample_S_eigs(d, n, 200_000, np.random.default_rng(5))
    P = np.stack([eigs**i for i in range(1, k + 1)], axis=-1)  # (num, d, k)
    M = np.einsum("bji,bjl->il", P, P) / len(eigs)
    v = P.sum(axis=1).mean(axis=0)
    c = np.linalg.solve(M, -v)
    per = np.sum((1 + P @ c) ** 2, axis=1)
    assert abs(per.mean() - looped.best_polynomial_loss(k, d, n)) <= 4 * per.std(ddof=1) / np.sqrt(len(per))
