"""Theorem 3.1 (companion.cot.theory.no_cot, companion.cot.results.thm3_1): the optimal one-step size eta*, the
sceptic's proportional-limit step, the Monte-Carlo argmin, the Adam horizon and the stopping rule's drift, and the
effective step read off a model.

Each test is meant to fail on a plausible bug: eta* = n/(n+d) (a dropped +1), a proportional step that is not the
minimiser of its own error, an Adam horizon one step short, the drift measured from the wrong snapshot, an effective
step with the wrong block or sign."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from companion.cot.model import construction
from companion.cot.results import thm3_1
from companion.cot.theory import gd, no_cot, wishart
from companion.cot.train import Optimizer

PAIRS = [(1, 1), (3, 8), (5, 9), (10, 20), (10, 40), (50, 5000)]


def _proportional_error(eta, d, n):
    """The one-step error with the Marchenko-Pastur moment E tr S^2 / d = 1 + d/n."""
    return d * (1 - 2 * eta + eta**2 * (1 + d / n))


def test_eta_star_and_the_floor_are_the_minimiser_and_minimum_of_the_one_step_error():
    assert no_cot.eta_star(10, 20) == pytest.approx(0.64516, abs=1e-5)
    assert no_cot.no_cot_floor(10, 20) == pytest.approx(3.5484, abs=1e-4)
    for d, n in [(10, 20), (5, 10), (20, 40), (10, 100)]:
        e = no_cot.eta_star(d, n)
        # floor = d - d * eta* = min_eta E tr (I - eta S)^2, with E tr S^2 = d (n + d + 1) / n
        assert no_cot.no_cot_floor(d, n) == pytest.approx(d - d * e, rel=1e-14)
        assert d * (1 - 2 * e + e**2 * (n + d + 1) / n) == pytest.approx(no_cot.no_cot_floor(d, n), rel=1e-13)
        assert gd.gd_error_wishart(1, e, d, n) == pytest.approx(no_cot.no_cot_floor(d, n), rel=1e-13)


@pytest.mark.parametrize("d,n", PAIRS)
def test_proportional_step_minimises_the_proportional_error(d, n):
    grid = np.linspace(0, 1.5, 300_001)
    i = int(np.argmin(_proportional_error(grid, d, n)))
    assert abs(grid[i] - thm3_1.eta_proportional(d, n)) <= 1e-5
    # the relative distance the page quotes
    assert math.isclose(thm3_1.eta_proportional(d, n) / no_cot.eta_star(d, n) - 1, 1 / (n + d), rel_tol=1e-12)


def test_monte_carlo_argmin_against_eta_star():
    S = wishart.sample_S(5, 9, 50_000, np.random.default_rng(4))
    eta, se = thm3_1.eta_argmin_mc(S)
    assert abs(eta - no_cot.eta_star(5, 9)) <= 4 * se and se < 5e-3


def _lr_sum(lr, lr_final, steps):
    """The learning rates Optimizer (as train_full builds it) uses over ``steps`` steps, summed."""
    p = torch.zeros(1, dtype=torch.float64)
    opt = Optimizer([p], "gd", lr, lr_final ** (1.0 / steps))
    total = 0.0
    for _ in range(steps):
        total += opt.lr
        opt.step([torch.zeros(1, dtype=torch.float64)])
    return total


@pytest.mark.parametrize("lr,lr_final,path", [(0.01, 0.01, 2.0), (0.01, 0.1, 2.0), (0.005, 0.05, 1.0),
                                              (0.003, 0.01, 2.0), (0.02, 1.0, 2.0), (0.1, 0.5, 0.3)])
def test_adam_horizon_is_the_shortest_run_whose_learning_rates_add_up_to_the_path(lr, lr_final, path):
    T = thm3_1.adam_horizon(lr, lr_final, path)
    assert _lr_sum(lr, lr_final, T) >= path * (1 - 1e-9)
    assert T == 1 or _lr_sum(lr, lr_final, T - 1) < path


def test_adam_horizon_at_the_page_defaults():
    assert thm3_1.adam_horizon(0.01, 0.01, 2.0) == 929
    assert thm3_1.adam_horizon(0.01, 1.0, 2.0) == 200


def test_last_quarter_drift_is_measured_from_the_step_nearest_three_quarters():
    steps = np.arange(0, 101, 5)
    vals = np.stack([steps**0.5, 2 * steps**0.5], axis=1)  # two replicates, the last quarter from step 75
    np.testing.assert_allclose(thm3_1.last_quarter_drift(steps, vals), [10 - 75**0.5, 2 * (10 - 75**0.5)], rtol=1e-12)
    assert thm3_1.last_quarter_drift(steps, np.ones(len(steps))) == 0.0
    assert thm3_1.last_quarter_drift(np.arange(0, 9), np.arange(0, 9) ** 2) == 64 - 36  # step 6 is nearest to 3T/4


@pytest.mark.parametrize("eta", [0.3, 0.645])
def test_eta_eff_of_the_construction_is_its_step(eta):
    W_KQ, W_PV = construction(4, eta)  # W24 = -1, V31 = -eta I: A = eta I
    assert math.isclose(thm3_1.no_cot_eta_eff(W_KQ.numpy(), W_PV.numpy(), 4), eta, rel_tol=1e-12)
