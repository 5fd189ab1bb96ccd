"""The contraction-rate design of the appendix (issue 24): forward Euler's multiplier 1 - x against the flow's
exp(-x) at x = eta alpha (a_inf^2 + b_inf^2), read over a window of population deviations."""

from __future__ import annotations

import math

import pytest

from companion.mesa import theory as th
from companion.mesa.stability import euler_rate_design, reduced_stability


@pytest.mark.parametrize("d, T, kappa", [(5, 100, 0.25), (3, 30, 0.25), (6, 20, 0.1), (5, 12, 0.4)])
def test_multipliers_are_forward_euler_and_the_flow(d, T, kappa):
    """The population-GD reading is 1 - x and the flow's exp(-x), up to the nonlinear terms of the window (< 2e-3;
    a window one epoch too long, a sign or the flow's multiplier for Euler's is caught); x is kappa times 2 S_inf /
    S_init for the init (1.2, 1.2) whose limit is (1, 1) (sparse c = 1: c* = 1)."""
    q = euler_rate_design("sparse", 1.0, d, T, kappa)
    al, be = th.alpha_beta("sparse", 1.0, d, T)
    assert be / al == pytest.approx(1.0)
    assert q["lr"] == pytest.approx(kappa * reduced_stability("sparse", 1.0, d, T, 1.0, [(1.2, 1.2)])["lr_max"])
    assert q["x"] == pytest.approx(kappa * 2 * 2.0 / (2 * 1.2**2), rel=1e-12)
    assert q["k2"] > q["k1"] >= 1 and q["epochs"] == 2 * q["k2"] + 2
    assert abs(q["predicted"] - (1 - q["x"])) <= 2e-3
    assert abs(q["falsifier_value"] - math.exp(-q["x"])) <= 2e-3
    assert abs(q["falsifier_value"] - q["predicted"]) >= 0.25 * q["x"] ** 2  # the gap x^2/2 to leading order


def test_window_of_a_multiplier_near_zero_is_empty():
    """At x near 1 the deviation crosses the window in one epoch: no rate to read (the page records the claim
    not applicable)."""
    q = euler_rate_design("sparse", 1.0, 5, 100, 0.72)
    assert q["k2"] <= q["k1"] and math.isnan(q["predicted"])
