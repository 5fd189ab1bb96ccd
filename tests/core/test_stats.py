"""The noise model behind the statistical claims: each standard error covers its estimator on replicated
draws (about 95 % of |estimate - truth| <= 2 se over many replicates)."""

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

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


def test_critical_is_the_t_quantile_at_the_normal_level():
    assert stats.critical(4.0) == 4.0 and stats.critical(4.0, math.inf) == 4.0
    assert stats.critical(4.0, 4) == pytest.approx(17.45, abs=0.01)
    assert stats.critical(4.0, 2) == pytest.approx(125.6, abs=0.1)
    assert stats.critical(4.0, 1e6) == pytest.approx(4.0, abs=1e-3)
    with pytest.raises(ValueError, match="degrees of freedom"):
        stats.critical(4.0, 0)


def test_welch_degrees_of_freedom():
    se, dof = stats.welch((1.0, 4), (1.0, 4))  # two equal terms: twice the degrees of freedom
    assert se == pytest.approx(math.sqrt(2)) and dof == pytest.approx(8)
    se, dof = stats.welch((2.0, 2), (1e-9, math.inf))  # a negligible exact term changes nothing
    assert dof == pytest.approx(2)
    assert stats.welch((1.0, math.inf), (1.0, math.inf))[1] == math.inf


def test_replicate_claims_keep_their_level_with_few_replicates():
    """Three replicates per experiment, 20000 experiments with no effect: the share of false alarms at the
    critical value of z = 2 (two-sided level 4.55 %) is the nominal one with 2 degrees of freedom, and
    about four times it with the normal z (the defect the degrees of freedom fix)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((20000, 3))
    mu, se = stats.replicate_se(x, axis=1)
    t = np.abs(mu) / se
    level = 2 * scipy_stats.norm.sf(2.0)
    ok = np.mean(t > stats.critical(2.0, 2))
    naive = np.mean(t > 2.0)
    assert abs(ok - level) < 4 * math.sqrt(level * (1 - level) / 20000), ok
    assert naive > 3 * level, naive


def test_false_alarm_matches_the_critical_value():
    assert stats.false_alarm(4.0) == pytest.approx(6.334e-5, rel=1e-3)
    for nu in (2, 4, 10):
        assert stats.false_alarm(stats.critical(4.0, nu), nu) == pytest.approx(stats.false_alarm(4.0), rel=1e-6)
    assert stats.false_alarm(4.0, 2) == pytest.approx(0.0572, abs=1e-3)


def test_richardson_removes_a_one_over_m_bias():
    """Replicates with a 1/m bias B/m (+ noise): the combination is unbiased over many experiments, and its SE
    and dof are those of the Welch combination; the m^-1/2 combination 2 x(m) - x(m/4) would leave -2 B/m."""
    rng = np.random.default_rng(7)
    m, B, theta = 1000, 50.0, 1.0
    est, z = [], []
    for _ in range(4000):
        big = theta + B / m + rng.normal(0, 0.01, 8)
        small = theta + 4 * B / m + rng.normal(0, 0.02, 8)
        r = stats.richardson(big, small)
        est.append(r["measured"])
        z.append(abs(r["measured"] - theta) / (stats.critical(3.0, r["dof"]) * r["se"]))
    assert abs(np.mean(est) - theta) < 4 * np.std(est) / math.sqrt(len(est))
    assert np.mean(np.array(z) > 1) < 0.01  # the t band at z = 3 (level 0.27 %) keeps its level
    r = stats.richardson([1.0, 1.1], [2.0, 2.2])
    assert r["measured"] == pytest.approx((4 * 1.05 - 2.1) / 3)
    assert r["se"] == pytest.approx(math.sqrt(16 * 0.05**2 + 0.1**2) / 3) and r["dof"] == pytest.approx(
        (16 * 0.05**2 + 0.1**2) ** 2 / ((16 * 0.05**2) ** 2 + 0.1**4))


def test_combine_and_welch_do_not_overflow():
    """Medians of errors that reach diverging prompts (cot/thm4_2_ood beyond the boundary) have standard errors
    of 1e200 and more: their squares overflow a float, so the sums are scaled before squaring."""
    assert stats.combine(1e200, 1e200) == pytest.approx(math.sqrt(2) * 1e200)
    assert stats.combine(1e300, 1e308, 1e308) == pytest.approx(math.sqrt(2) * 1e308)  # finite, near the largest float
    assert stats.combine(1.5e308, 1.5e308) == math.inf  # beyond it: infinite, not an OverflowError
    se, dof = stats.welch((1e200, 3), (1e200, 3))
    assert se == pytest.approx(math.sqrt(2) * 1e200) and dof == pytest.approx(6)
    assert stats.welch((math.inf, 3), (1.0, 2))[0] == math.inf


def test_controlled_mean_removes_the_explained_spread_and_keeps_its_level():
    """Control variates of exactly known mean 0: an exact linear dependence leaves the intercept (not the plain
    mean, which moves with the controls' sample mean; a sign error in the coefficient moves it twice as far); on
    noisy replicates the estimator is unbiased, its t band on R - 1 - k dof keeps the level, its SE is the
    residual one; with too few dof it is the plain mean."""
    rng = np.random.default_rng(11)
    x = rng.normal(0, 1, (16, 2))
    y = 2.0 + 3.0 * x[:, 0] - 0.5 * x[:, 1]
    mu, se, dof, k = stats.controlled_mean(y, x)
    assert mu == pytest.approx(2.0, abs=1e-12) and se < 1e-12 and (dof, k) == (13, 2)
    assert abs(y.mean() - 2.0) > 0.1  # the plain mean is off by 3 mean(x0) - 0.5 mean(x1)
    est, z, ratio = [], [], []
    for _ in range(3000):
        x = rng.normal(0, 1, (16, 2))
        y = 1.0 + 0.8 * x[:, 0] + 0.3 * x[:, 1] + rng.normal(0, 0.1, 16)
        mu, se, dof, k = stats.controlled_mean(y, x)
        est.append(mu)
        z.append(abs(mu - 1.0) / (stats.critical(3.0, dof) * se))
        ratio.append(se / stats.replicate_se(y)[1])
    assert abs(np.mean(est) - 1.0) < 4 * np.std(est) / math.sqrt(len(est))
    assert np.mean(np.array(z) > 1) < 0.01
    assert np.median(ratio) < 0.2  # 0.1 of residual noise against sqrt(0.8^2 + 0.3^2 + 0.1^2) of spread
    y = np.array([1.0, 1.2, 0.9, 1.1])
    assert stats.controlled_mean(y, rng.normal(0, 1, (4, 2))) == (pytest.approx(1.05), pytest.approx(
        stats.replicate_se(y)[1]), 3.0, 0)


def test_controlled_richardson_combines_the_two_sizes_like_richardson():
    rng = np.random.default_rng(5)
    xb, xs = rng.normal(0, 1, (12, 1)), rng.normal(0, 1, (12, 1))
    big, small = 1.0 + 0.05 + 2 * xb[:, 0], 1.0 + 0.2 + 4 * xs[:, 0]
    r = stats.controlled_richardson(big, small, xb, xs)
    assert r["measured"] == pytest.approx(1.0, abs=1e-12) and r["se"] < 1e-12 and (r["k_big"], r["k_small"]) == (1, 1)
    plain = stats.controlled_richardson(big, small)  # no controls: exactly richardson
    ref = stats.richardson(big, small)
    assert all(plain[key] == pytest.approx(ref[key]) for key in ("measured", "se", "dof"))


def test_controlled_mean_with_fixed_coefficients_is_the_mean_of_the_adjusted_replicates():
    """Fixed coefficients: the mean of y - X coef on R - 1 dof (exactly unbiased for E y since E X = 0); a sign
    error (y + X coef) or a fit would give another number."""
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, (10, 2))
    y = 1.0 + x @ np.array([0.5, -0.2]) + rng.normal(0, 0.01, 10)
    mu, se, dof, k = stats.controlled_mean(y, x, coef=[0.5, -0.2])
    adj = y - x @ np.array([0.5, -0.2])
    assert (mu, se, dof, k) == (pytest.approx(adj.mean()), pytest.approx(adj.std(ddof=1) / math.sqrt(10)), 9.0, 2)
    assert se < 0.01 and abs(mu - 1.0) < 0.02
    r = stats.controlled_richardson(y, y, x, x, coef=[0.5, -0.2])
    assert r["measured"] == pytest.approx(adj.mean()) and r["dof"] == pytest.approx(9 * 17**2 / (16**2 + 1))  # Welch


def test_the_level_splits_the_error_budget_over_the_claims_of_a_build():
    """``Z_LEVEL`` is the normal quantile at which ``BUILD_CLAIMS`` correct claims fail together with probability
    at most ``BUILD_FALSE_FAIL`` (Bonferroni), and it is the default level of every banded verdict."""
    import inspect

    from scipy import stats as st

    from companion.verdict import Verdict

    assert stats.level(0.01, 100) == pytest.approx(st.norm.isf(0.01 / 200), rel=1e-12)
    assert stats.BUILD_CLAIMS * stats.false_alarm(stats.Z_LEVEL) == pytest.approx(stats.BUILD_FALSE_FAIL, rel=1e-9)
    assert stats.level(0.01, 1000) > stats.Z_LEVEL > stats.level(0.05, stats.BUILD_CLAIMS)  # more claims, wider
    for method in (Verdict.statistical, Verdict.bound):
        assert inspect.signature(method).parameters["z"].default == stats.Z_LEVEL
    for bad in ((0.0, 10), (1.0, 10), (0.01, 0)):
        with pytest.raises(ValueError, match="budget"):
            stats.level(*bad)
