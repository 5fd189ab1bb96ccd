"""Theorem 4.1 (companion.mesa.results.thm4_1): the runs of the page (one design for the figures, the replicates,
the step-size checks and the paper plan), the control variates of its trained-ab claims (the training sets' sample
moments minus the law's, with expectation exactly 0) and the delta-method SE of the noise model."""

import math

import numpy as np
import pytest
import torch

from companion import replicate_seed, stats
from companion.mesa.results import thm4_1
from companion.mesa.train import _dataset
from companion.seeds import MESA_TRAIN_DATA


def test_the_design_gives_each_setting_its_replicate_rule_and_every_figure_run_the_page_seed():
    """Every figure run trains on the page's seed at m; the Gaussian middle scale has n_rep_dev replicate sets (the
    one-step-GD deviation), each sparse scale n_rep_sparse at m_rep_sparse, every other setting n_rep at m_rep; at m the
    seeds are replicates 1.. of the setting's base seed, at m/4 replicates 17..: the page's seed for the Gaussian
    middle scale, replicate 64 i of it for the i-th other setting, so no two settings share a training set; the
    step-size checks see exactly these runs."""
    inits = [(0.1, 0.1), (0.5, 1.5), (2.0, 2.0)]
    design = thm4_1.design([0.5, 1.0, 2.0], [1e-3, 1e-4, 2e-6], [0.5, 1.0], [3e-2, 1e-3], inits, 5, 12, 400, 100, 30, 7,
                           m_rep=800, n_rep=3, n_rep_dev=5, m_rep_sparse=320, n_rep_sparse=4)
    assert design.s_mid == 1.0 and design.init_mid == (0.5, 1.5)
    figure = design.figure()
    assert len(figure) == 5 * 3 and all(kw["seed"] == 7 and kw["m"] == 400 for kw in figure.values())
    want = {("gaussian", 0.5): (3, 800), ("gaussian", 1.0): (5, 800), ("gaussian", 2.0): (3, 800),
            ("sparse", 0.5): (4, 320), ("sparse", 1.0): (4, 320)}
    base = {("gaussian", 0.5): replicate_seed(7, 64), ("gaussian", 1.0): 7, ("gaussian", 2.0): replicate_seed(7, 128),
            ("sparse", 0.5): replicate_seed(7, 192), ("sparse", 1.0): replicate_seed(7, 256)}
    for key, (n, m) in want.items():
        rep = design.replicates[key]
        assert (rep.n_rep, rep.m, rep.m_small, rep.a0, rep.b0, rep.lr) == (n, m, m // 4, 0.5, 1.5, dict(
            zip([0.5, 1.0, 2.0], [1e-3, 1e-4, 2e-6]) if key[0] == "gaussian" else zip([0.5, 1.0], [3e-2, 1e-3]))[key[1]])
        assert [s for _, s in rep.sets] == [replicate_seed(base[key], k) for k in range(1, n + 1)] + [
            replicate_seed(base[key], 17 + k) for k in range(n)]
    seeds = [s for rep in design.replicates.values() for _, s in rep.sets]
    assert len(seeds) == len(set(seeds))  # no training set read by two settings
    runs = design.runs()
    assert len(runs) == 15 + 2 * (3 + 5 + 3 + 4 + 4)
    assert [{k: v for k, v in kw.items() if k not in ("param", "what")} for kw in design.checked_runs()] == runs
    assert {kw["param"] for kw in design.checked_runs() if kw["law"] == "sparse"} == {"lrs_sparse"}
    # the Gaussian replicates train on tilted sets, the sparse ones and the figure runs on plain samples
    assert {rep.tilt for (law, _), rep in design.replicates.items() if law == "gaussian"} == {thm4_1.GAUSSIAN_TILT}
    assert {rep.tilt for (law, _), rep in design.replicates.items() if law == "sparse"} == {0}
    assert thm4_1.GAUSSIAN_TILT > 0 and all(kw.get("tilt", 0) == 0 for kw in figure.values())
    assert all(kw["tilt"] == (thm4_1.GAUSSIAN_TILT if kw["law"] == "gaussian" else 0)
               for rep in design.replicates.values() for kw in rep.runs())


def test_x1_controls_are_the_training_sets_moments_minus_the_laws():
    """Against the training set that a run trains on (the trainer's own data path, complex64) at scale 2: the
    moments are taken at scale 1 (a missing rescaling would be off by 2^4 and 2^6)."""
    sets = [(50, 7), (80, 9)]
    X = thm4_1.x1_controls("gaussian", 2.0, 3, 6, sets)
    for row, (m, sd) in zip(X, sets):
        x = _dataset("gaussian", m, 3, 6, 2.0, MESA_TRAIN_DATA.entropy(sd), torch.complex64).x1.real.double().numpy() / 2
        assert row == pytest.approx([(x**4).mean() - 3.0, (x**6).mean() - 15.0], rel=1e-5, abs=1e-5)


def test_tilted_x1_controls_are_the_weighted_moments_of_the_set_a_run_trains_on():
    """On a tilted set (companion.mesa.data.generate) the controls are the importance-weighted moments of the very
    set the run trains on, minus the law's: fails if the controls read a plain set, drop the weights or divide by
    their sum; over many sets their mean is 0."""
    sets = [(50, 7), (80, 9)]
    X = thm4_1.x1_controls("gaussian", 2.0, 3, 6, sets, tilt=6)
    for row, (m, sd) in zip(X, sets):
        data = _dataset("gaussian", m, 3, 6, 2.0, MESA_TRAIN_DATA.entropy(sd), torch.complex64, 6)
        x, w = data.x1.real.double().numpy() / 2, data.w.numpy()[:, None]
        assert row == pytest.approx([(w * x**4).mean() - 3.0, (w * x**6).mean() - 15.0], rel=1e-5, abs=1e-5)
    assert not np.allclose(X, thm4_1.x1_controls("gaussian", 2.0, 3, 6, sets))
    X = thm4_1.x1_controls("gaussian", 1.0, 2, 4, [(100, s) for s in range(300)], tilt=6)
    mean, se = X.mean(0), X.std(0, ddof=1) / math.sqrt(len(X))
    assert np.all(np.abs(mean) < 4 * se), (mean, se)


def test_x1_controls_have_mean_zero():
    X = thm4_1.x1_controls("gaussian", 1.0, 2, 4, [(100, s) for s in range(300)])
    mean, se = X.mean(0), X.std(0, ddof=1) / math.sqrt(len(X))
    assert np.all(np.abs(mean) < 4 * se), (mean, se)
    assert np.all(se > 0)


def test_sparse_controls_are_exactly_zero_and_dropped():
    """x_1 = +-c e_k: every sequence has one coordinate c^p, so the pooled moments are exactly m_p = c^p / d;
    the estimator drops such controls (no singular fit) and is the plain mean."""
    X = thm4_1.x1_controls("sparse", 1.0, 5, 4, [(37, s) for s in range(16)])
    assert np.abs(X).max() < 1e-15
    y = np.linspace(0.0, 1.0, 16)
    assert stats.controlled_mean(y, X)[3] == 0 and stats.controlled_mean(y, X)[0] == pytest.approx(0.5)


def test_control_coefficients_are_the_population_gd_sensitivity():
    """Against the closed form at convergence: after many epochs ab_E = c* = N m4 / (N m6 + (d-1) H m24), so
    g = (dc*/dm4, dc*/dm6) = (N / alpha', -c* N / alpha') at scale 1 (alpha' = alpha / s^6 ...); at scale s the
    coefficients carry s^-2 (c* ~ s^-2)."""
    from companion.mesa import theory as th

    d, T, s = 3, 8, 1.5
    N, H = T - 2, th.harmonic(T - 2)
    al1 = N * 15 + (d - 1) * H * 3  # scale-1 alpha of the Gaussian
    c1 = N * 3 / al1
    al, be = th.alpha_beta("gaussian", s, d, T)
    lr = 0.2 / al  # well inside the stability bound; 3000 steps converge
    g = thm4_1.control_coefficients("gaussian", s, d, T, 0.5, 1.5, lr, 3000)
    assert g == pytest.approx([N / al1 / s**2, -c1 * N / al1 / s**2], rel=1e-5)


def test_moment_ratio_rel_se_matches_monte_carlo():
    rng = np.random.default_rng(5)
    n = 4000
    x = rng.normal(size=(400, n))
    ratios = (x**4).mean(1) / (x**6).mean(1)
    assert np.std(ratios) / np.mean(ratios) == pytest.approx(thm4_1.moment_ratio_rel_se(n), rel=0.15)
