"""The formulas behind the no-CoT pages (Theorem 3.1, Corollary 3.1): the sceptic's proportional-limit step and
floor, the floor from the exact moments, the Adam horizon and the stopping rule's drift."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from companion.cot import theory as th
from companion.cot.model import construction
from companion.cot.results import cor3_1, thm3_1
from companion.cot.train import Optimizer

PAIRS = [(1, 1), (3, 8), (5, 9), (10, 20), (10, 40), (50, 5000)]


def _proportional_error(eta, d, n):
    """The one-step error with the Marchenko-Pastur moment E tr S^2 / d = 1 + d/n."""
    return d * (1 - 2 * eta + eta**2 * (1 + d / n))


@pytest.mark.parametrize("d,n", PAIRS)
def test_proportional_step_and_floor_minimise_the_proportional_error(d, n):
    grid = np.linspace(0, 1.5, 300_001)
    err = _proportional_error(grid, d, n)
    i = int(np.argmin(err))
    assert abs(grid[i] - thm3_1.eta_proportional(d, n)) <= 1e-5
    assert abs(err[i] - cor3_1.floor_proportional(d, n)) <= 1e-9 * max(1.0, d)
    # the relative distances the pages quote
    assert math.isclose(thm3_1.eta_proportional(d, n) / th.eta_star(d, n) - 1, 1 / (n + d), rel_tol=1e-12)
    assert math.isclose(1 - cor3_1.floor_proportional(d, n) / th.no_cot_floor(d, n), n / ((d + 1) * (n + d)),
                        rel_tol=1e-12)


@pytest.mark.parametrize("d,n", PAIRS)
def test_floor_from_the_exact_quadratic_is_the_closed_form(d, n):
    assert math.isclose(cor3_1.floor_from_moments(d, n), th.no_cot_floor(d, n), rel_tol=1e-12)
    # and not the floor without the finite-size +1 (a plausible slip in E tr S^2)
    assert not math.isclose(cor3_1.floor_from_moments(d, n), cor3_1.floor_proportional(d, n), rel_tol=1e-6)


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


def test_last_quarter_drift():
    steps = np.arange(0, 101, 5)
    vals = np.stack([steps**0.5, 2 * steps**0.5], axis=1)  # two replicates, the last quarter from step 75
    np.testing.assert_allclose(thm3_1.last_quarter_drift(steps, vals), [10 - 75**0.5, 2 * (10 - 75**0.5)], rtol=1e-12)
    assert thm3_1.last_quarter_drift(steps, np.ones(len(steps))) == 0.0
    assert thm3_1.last_quarter_drift(np.arange(0, 9), np.arange(0, 9) ** 2) == 64 - 36  # step 6 is nearest to 3T/4


@pytest.mark.parametrize("eta", [0.3, 0.645])
def test_eta_eff_of_the_construction_is_its_step(eta):
    W_KQ, W_PV = construction(4, eta)  # W24 = -1, V31 = -eta I: A = eta I
    assert math.isclose(thm3_1.no_cot_eta_eff(W_KQ.numpy(), W_PV.numpy(), 4), eta, rel_tol=1e-12)
