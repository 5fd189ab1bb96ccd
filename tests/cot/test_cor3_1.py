"""Corollary 3.1 (companion.cot.theory.no_cot, companion.cot.results.cor3_1): the no-CoT floor d(d+1)/(n+d+1), its
proportional (Marchenko-Pastur) limit d^2/(n+d), the floor from the exact quadratic and by Monte Carlo.

Each test is meant to fail on a plausible bug: a floor d^2/(n+d+1), a proportional floor that is not the minimum of
its own error, E tr S^2 without its finite-size +1, a Monte-Carlo floor at the wrong step."""

from __future__ import annotations

import math

import numpy as np
import pytest

from companion.cot.results import cor3_1
from companion.cot.theory import mp, no_cot

PAIRS = [(1, 1), (3, 8), (5, 9), (10, 20), (10, 40), (50, 5000)]


def _proportional_error(eta, d, n):
    """The one-step error with the Marchenko-Pastur moment E tr S^2 / d = 1 + d/n."""
    return d * (1 - 2 * eta + eta**2 * (1 + d / n))


@pytest.mark.parametrize("d,n", PAIRS)
def test_proportional_floor_is_the_minimum_of_the_proportional_error(d, n):
    grid = np.linspace(0, 1.5, 300_001)
    assert abs(np.min(_proportional_error(grid, d, n)) - no_cot.no_cot_floor_mp(d, n)) <= 1e-9 * max(1.0, d)
    # the relative distance the page quotes
    assert math.isclose(1 - no_cot.no_cot_floor_mp(d, n) / no_cot.no_cot_floor(d, n), n / ((d + 1) * (n + d)),
                        rel_tol=1e-12)


@pytest.mark.parametrize("d,n", PAIRS)
def test_floor_from_the_exact_quadratic_is_the_closed_form(d, n):
    assert math.isclose(cor3_1.floor_from_moments(d, n), no_cot.no_cot_floor(d, n), rel_tol=1e-12)
    # and not the floor without the finite-size +1 (a plausible slip in E tr S^2)
    assert not math.isclose(cor3_1.floor_from_moments(d, n), no_cot.no_cot_floor_mp(d, n), rel_tol=1e-6)


def test_mp_floor_is_the_proportional_limit_of_the_floor():
    # d * min_eta (1 - 2 eta + eta^2 * int lambda^2 dMP), minimised numerically with the MP moments
    for d, n in ((10, 20), (10, 40), (3, 12)):
        gamma = d / n
        m1, m2 = mp.mp_moment(1, gamma), mp.mp_moment(2, gamma)
        etas = np.linspace(0, 1.5, 150001)
        assert no_cot.no_cot_floor_mp(d, n) == pytest.approx(d * np.min(1 - 2 * etas * m1 + etas**2 * m2), rel=1e-8)
        assert no_cot.no_cot_floor_mp(d, n) < no_cot.no_cot_floor(d, n)
    # the finite-size corrections vanish at fixed d/n
    assert no_cot.no_cot_floor_mp(1000, 2000) == pytest.approx(no_cot.no_cot_floor(1000, 2000), rel=1e-3)
    assert no_cot.no_cot_floor_mp(10, 20) == pytest.approx(100 / 30, rel=1e-14)


def test_monte_carlo_floor_against_the_closed_form():
    m, se = cor3_1.floor_mc(5, 9, 50_000, np.random.default_rng(4))
    assert abs(m - no_cot.no_cot_floor(5, 9)) <= 4 * se


def test_the_trained_pairs_sentence_counts_the_passes_and_the_growth():
    """The prose's sentence on every trained pair: the pairs in order, d²/n and the floor's growth across them, and
    how many claims passed (a failed or undecided one is not a pass)."""
    from types import SimpleNamespace

    pairs = [(10, 40), (5, 20), (20, 80)]
    trained = {p: {"pred": no_cot.no_cot_floor(*p)} for p in pairs}
    recs = [SimpleNamespace(claim=f"cot_c31_trained_d{d}_n{n}", status=s)
            for (d, n), s in zip(pairs, ("passed", "not_resolvable", "passed"))]
    recs.append(SimpleNamespace(claim="cot_c31_floor_formula", status="passed"))
    words = cor3_1.trained_summary(recs, trained)
    growth = no_cot.no_cot_floor(20, 80) / no_cot.no_cot_floor(5, 20)
    assert "(5, 20), (10, 40), (20, 80)" in words and "grows 4.0-fold" in words and f"{growth:.1f}-fold" in words
    assert "2 of the 3 claims pass" in words
    assert cor3_1.trained_summary(recs[:1], {pairs[0]: trained[pairs[0]]}).startswith("One pair is trained here")
    assert "train_d" in cor3_1.trained_summary(recs[3:], {})


def test_the_head_paragraph_reports_the_largest_pair_or_that_none_was_trained():
    """With `train_d` empty the paragraph says so (it glued NaN and left keys unglued, a strict build's error); else
    the largest pair's numbers and its status, and "settle on the floor" only when the claim passed."""
    from types import SimpleNamespace

    assert "`train_d` is empty" in cor3_1.head_paragraph(None, {}, 3)
    trained = {(5, 20): dict(steps=100, path=2.0, drift=-1e-4, even=2e-5), (10, 40): dict(steps=300, path=4.0, drift=1e-4, even=1e-5)}
    head = SimpleNamespace(status="passed", measured=2.123, se=0.01, predicted=2.1176, z_theory=-0.5, crit=4.2, dof=2.0,
                           falsifier_value=2.0, z_falsifier=12.0, tolerance=0.05)
    words = cor3_1.head_paragraph(head, trained, 3)
    assert "$d = 10$ and $n = 40$" in words and "300 steps" in words and "$2.1230 \\pm 0.0100$" in words
    assert "**passed**" in words and "settle on the floor" in words and "on 2 degrees" in words
    words = cor3_1.head_paragraph(SimpleNamespace(**{**vars(head), "status": "not_resolvable", "dof": None}), trained, 3)
    assert "settle" not in words and "not resolvable at these" in words and "infinitely many degrees" in words


def _models(d, perturb, seed=0):
    """Two no-CoT models side by side as a TrainResult: the GD construction (A = eta* I, odd in the labels) and,
    when ``perturb`` > 0, the construction with every weight moved by N(0, perturb^2)."""
    import torch

    from companion.cot.model import construction
    from companion.cot.train import TrainResult

    K, V = construction(d, no_cot.eta_star(d, 4 * d))
    g = torch.Generator().manual_seed(seed)
    K2 = K + perturb * torch.randn(K.shape, generator=g, dtype=K.dtype)
    V2 = V + perturb * torch.randn(V.shape, generator=g, dtype=V.dtype)
    return TrainResult(torch.stack([K, K2]), torch.stack([V, V2]), np.array([0]), np.zeros((1, 2)), np.zeros(1), [],
                       dict(d=d, n=4 * d, seed=3))


def test_the_even_part_is_zero_for_the_gd_step_and_splits_the_error_exactly():
    """The construction is odd in the labels: no even part. A perturbed model has one, and on a prompt set closed
    under w* -> -w* its mean error is exactly the odd part's error plus the even part's energy (a wrong factor or
    sign in the even part breaks the identity)."""
    import torch

    from companion.cot.data import Prompts, make_generator, sample_prompts
    from companion.cot.stats import model_errors

    d = 3
    res = _models(d, 0.05)
    p = sample_prompts(500, d, 4 * d, make_generator(1))
    both = Prompts(torch.cat([p.X, p.X]), torch.cat([p.w_star, -p.w_star]))
    even = cor3_1.even_part_energy(res, both)
    assert even[0] < 1e-24 and even[1] > 1e-4
    from companion.cot.model import no_cot_predict

    m = res.replicate(1)
    w_pos, w_neg = no_cot_predict(p, m.W_KQ, m.W_PV), no_cot_predict(Prompts(p.X, -p.w_star), m.W_KQ, m.W_PV)
    odd = (w_pos - w_neg) / 2
    odd_error = float(((odd - p.w_star) ** 2).sum(-1).mean())
    assert model_errors("no_cot", m, both, 1).mean() == pytest.approx(odd_error + even[1], rel=1e-12)


def test_the_even_part_rule_holds_for_the_gd_step_and_not_for_a_perturbed_model():
    """``even_part_met`` reads the run's own evaluation prompts and compares the mean even energy with a tenth of
    the claim's standard error over its prompts: zero passes, a visible even part does not."""
    assert cor3_1.even_part_met(2000)(_models(3, 0.0)) is True
    assert cor3_1.even_part_met(2000)(_models(3, 0.05)) is False
