"""The noise model behind the statistical claims: each standard error covers its estimator on replicated
draws (about 95 % of |estimate - truth| <= 2 se over many replicates)."""

import numpy as np
import pytest

from companion import stats


def _coverage(estimates, ses, truth):
    return float(np.mean(np.abs(np.asarray(estimates) - truth) <= 2 * np.asarray(ses)))


def test_mean_se_covers_the_mean():
    rng = np.random.default_rng(0)
    est = [stats.mean_se(rng.exponential(2.0, 200)) for _ in range(2000)]
    cov = _coverage([e[0] for e in est], [e[1] for e in est], 2.0)
    assert 0.92 <= cov <= 0.975, cov


def test_mean_se_is_s_over_root_n():
    x = np.array([1.0, 2.0, 4.0, 7.0])
    assert stats.mean_se(x) == pytest.approx((3.5, np.std(x, ddof=1) / 2))


def test_median_se_covers_the_median():
    rng = np.random.default_rng(1)
    est = [stats.median_se(rng.standard_cauchy(401)) for _ in range(2000)]
    cov = _coverage([e[0] for e in est], [e[1] for e in est], 0.0)
    assert 0.90 <= cov <= 0.985, cov


def test_jackknife_covers_a_nonlinear_statistic():
    # ratio of means: theta = E[y]/E[x] = 2; groups of 50 draws, G = 20
    rng = np.random.default_rng(2)
    est, ses = [], []
    for _ in range(1000):
        x = rng.exponential(1.0, (20, 50)) + 0.5
        y = 2 * x + rng.normal(0, 1, (20, 50))
        full = y.mean() / x.mean()
        loo = [(y.sum() - y[g].sum()) / (x.sum() - x[g].sum()) for g in range(20)]
        e, s = stats.jackknife_se(full, loo)
        est.append(e)
        ses.append(s)
    cov = _coverage(est, ses, 2.0)
    assert 0.91 <= cov <= 0.98, cov


def test_jackknife_se_formula():
    loo = np.array([1.0, 2.0, 3.0])
    assert stats.jackknife_se(0.0, loo)[1] == pytest.approx(np.sqrt(2 / 3 * 2.0))


def test_batch_means_and_combine():
    rng = np.random.default_rng(3)
    est = [stats.batch_means_se(rng.normal(1.0, 1.0, 400), 20) for _ in range(2000)]
    assert 0.91 <= _coverage([e[0] for e in est], [e[1] for e in est], 1.0) <= 0.98
    assert stats.combine(3.0, 4.0) == pytest.approx(5.0)


def test_too_few_draws_are_refused():
    with pytest.raises(ValueError):
        stats.mean_se([1.0])
    with pytest.raises(ValueError):
        stats.jackknife_se(0.0, [1.0])
