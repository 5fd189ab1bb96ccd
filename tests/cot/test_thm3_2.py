"""Theorem 3.2 (companion.cot.theory.mp, companion.cot.results.thm3_2): the Marchenko-Pastur quadrature against the
Narayana moments (also at n = d), the finite-d fit of the limit, and the competitor of the claims at k (the nearer of
the exact L_{k-1}, L_{k+1}).

Each test is meant to fail on a plausible bug: the gamma = 1 branch of the quadrature, an edge without its square
root, a fit intercept that ignores the 1/d correction, the farther neighbour taken as the competitor."""

from __future__ import annotations

import numpy as np
import pytest

from companion.cot.results import thm3_2
from companion.cot.theory import gd, mp


@pytest.mark.parametrize("gamma", [0.25, 0.5, 1.0])
def test_mp_integral_reproduces_the_narayana_moments_also_at_n_equal_d(gamma):
    for p in range(5):
        assert mp.mp_integral(lambda x, p=p: x**p, gamma) == pytest.approx(mp.mp_moment(p, gamma), rel=1e-9, abs=1e-12)
    # MP moments: 1, 1, 1 + gamma, 1 + 3 gamma + gamma^2
    assert mp.mp_moment(2, gamma) == pytest.approx(1 + gamma)
    assert mp.mp_moment(3, gamma) == pytest.approx(1 + 3 * gamma + gamma**2)


def test_mp_limit_fit_recovers_the_integral_and_the_wishart_moments():
    rng = np.random.default_rng(3)
    f = thm3_2.mp_limit_fit(2, 0.4, 4, 8, 4, 8000, rng)
    assert abs(f["a"] - mp.gd_error_mp(2, 0.4, 0.5)) <= 4 * f["a_se"]
    # the exact finite-d value (moments m_0..m_4) is a + b/d + c/d^2 to O(1/d^3): the fitted curve passes near it
    exact = gd.gd_error_wishart(2, 0.4, 16, 32) / 16
    assert abs(f["a"] + f["b"] / 16 + f["c"] / 16**2 - exact) <= 4 * f["a_se"] + 0.01 * exact
    assert f["dof"] == 1


def test_the_inverse_d_fit_extrapolates_exact_wishart_values_to_the_marchenko_pastur_integral():
    """Fed the exact finite-d errors at (d, n) = (4, 8) ... (32, 64), the fit a + b/d + c/d^2 lands on the
    integral to O(1/d^3) (3e-5); a fit a + b/d (the 1/d^2 term left out) misses it by 7e-4, about the
    intercept's Monte-Carlo standard error at the smoke point."""
    k, eta, gamma = 3, 0.3, 0.5
    ds = np.array([4, 8, 16, 32])
    exact = np.array([gd.gd_error_wishart(k, eta, int(d), int(d / gamma)) / d for d in ds])
    f = thm3_2.inverse_d_fit(ds, exact, np.full(4, 1e-3))
    assert abs(f["a"] - mp.gd_error_mp(k, eta, gamma)) < 1e-4
    assert (f["b"], f["c"]) != (0.0, 0.0) and f["dof"] == 1


def test_neighbours_take_the_nearer_exact_value():
    for k, eta in ((3, 0.3), (2, 1.2), (5, 0.05)):
        ex = thm3_2.neighbours(k, eta, 4, 12)
        km1, pred, kp1 = (gd.gd_error_wishart(j, eta, 4, 12) for j in (k - 1, k, k + 1))
        assert (ex["pred"], ex["km1"], ex["kp1"]) == (pred, km1, kp1)
        want = min((kp1, k + 1), (km1, k - 1), key=lambda t: abs(t[0] - pred))
        assert (ex["near"], ex["near_k"]) == want


def test_the_stopping_rule_starts_at_half_the_horizon_and_doubles_it():
    from companion.params import ParameterError

    assert thm3_2.rule_horizons(1500) == [750, 1500, 3000, 6000, 12000]
    assert thm3_2.rule_horizons(3) == [1, 3, 6, 12, 24]
    with pytest.raises(ParameterError, match="'steps'"):
        thm3_2.rule_horizons(1)


def _fake_training(monkeypatch, step_of, perturb_of=lambda T: 0.0, R=2):
    """Replace the trainer of ``converge_cot``: the run with horizon T is R copies of the GD construction with step
    ``step_of(T)``, every weight then moved by ``perturb_of(T)`` N(0, 1) (which leaves an even part). Returns the
    list of horizons asked for."""
    import torch

    from companion.cot.model import construction
    from companion.cot.train import TrainResult

    asked = []

    def fake(objective, d, n, k_train, eta, *, steps, seed, replicates, **kw):
        asked.append(steps)
        K, V = construction(d, step_of(steps))
        g = torch.Generator().manual_seed(0)  # the same perturbation at every horizon
        Ks = torch.stack([K + perturb_of(steps) * torch.randn(K.shape, generator=g, dtype=K.dtype) for _ in range(R)])
        Vs = torch.stack([V + perturb_of(steps) * torch.randn(V.shape, generator=g, dtype=V.dtype) for _ in range(R)])
        return TrainResult(Ks, Vs, np.array([0]), np.zeros((1, R)), np.zeros(1), [],
                           dict(objective=objective, d=d, n=n, k=k_train, eta=eta, steps=steps, seed=seed, replicates=R))

    monkeypatch.setattr(thm3_2, "cached_train_full", fake)
    return asked


_RULE = dict(steps=1500, lr=1e-3, lr_final=1.0, replicates=2, eval_batch=2000, seed=5)


def test_the_stopping_rule_stops_at_the_horizon_when_a_doubling_changes_nothing(monkeypatch):
    """Training that has converged by ``steps // 2``: the rule compares with ``steps`` and stops there (not at the
    check run, not later)."""
    asked = _fake_training(monkeypatch, lambda T: 0.3)
    out = thm3_2.converge_cot(3, 30, 4, 2, 0.3, **_RULE)
    assert asked == [750, 1500] and out["converged"] and out["steps"] == 1500 == out["runs"].config["steps"]
    assert out["change"] == 0.0 and out["even"] < 1e-20


def test_the_stopping_rule_compares_consecutive_horizons_and_either_sign_of_change(monkeypatch):
    """The step still grows up to 3000 Adam steps (the error falls: a negative change), then stays: the first
    doubling that changes nothing is 3000 -> 6000. Comparing with the first run instead, or letting a fall pass
    unsigned, stops elsewhere."""
    asked = _fake_training(monkeypatch, lambda T: 0.3 * min(1.0, 0.55 + 0.15 * T / 1000))
    out = thm3_2.converge_cot(3, 30, 4, 2, 0.3, **_RULE)
    assert asked == [750, 1500, 3000, 6000] and out["converged"] and out["steps"] == 6000
    means = [h["mean"] for h in out["history"]]
    assert means[0] > means[1] > means[2] == means[3]


def test_an_even_part_keeps_the_rule_from_stopping_and_the_claim_untested(monkeypatch):
    """The same perturbed models at every horizon: no change, but an even part in the labels, which no minimiser
    has; the rule never stops, and ``trained_cot`` returns no model to test."""
    asked = _fake_training(monkeypatch, lambda T: 0.3, lambda T: 0.03)
    out = thm3_2.converge_cot(3, 30, 4, 2, 0.3, **_RULE)
    assert asked == thm3_2.rule_horizons(1500) and not out["converged"]
    assert out["change"] == 0.0 and out["even"] > thm3_2.RULE_SHARE * out["se_rule"]
    res = thm3_2.trained_cot(3, 30, 4, 2, 0.3, **_RULE)
    assert set(res) == {"unconverged", "exact"} and res["unconverged"]["steps"] == 12000



def test_the_verdict_words_follow_the_records():
    """The verdict paragraph is composed from the records: with no trained model (replicates 0, or training that
    diverged) it says why instead of gluing NaN; the construction's and the law's statuses are the records'."""
    from types import SimpleNamespace as R

    model = dict(exact=dict(pred=1.0, km1=1.5, kp1=0.8), mean=1.01, se=0.01)
    recs = [R(claim="cot32_trained_k3", status="passed", measured=1.01, predicted=1.0, reason=""),
            R(claim="cot32_exact_k3", status="not_resolvable", measured=1.002, predicted=1.0, reason=""),
            R(claim="cot32_law_k3", status="passed"), R(claim="cot32_law_k1", status="not_resolvable")]
    words = thm3_2.verdict_words(recs, model, 3, np.array([0.29, 0.31]), eta=0.3, replicates=2, steps=100, k_train=6)
    assert "$1.0100$ against the exact $1.0000$ (**passed**)" in words and "$1.5000$ ($49$ standard errors" in words
    assert "$0.3000$ on average" in words and "$1.0020$ (**not resolvable**)" in words and "1 of the 2 claims" in words
    recs[0] = R(claim="cot32_trained_k3", status="not_applicable", measured=None, predicted=None,
                reason="no model trained at this point (`replicates` is 0)")
    words = thm3_2.verdict_words(recs, model, 3, np.array([np.nan]), eta=0.3, replicates=0, steps=100, k_train=6)
    assert "No trained model is compared" in words and "`replicates` is 0" in words and "nan" not in words.lower()


def test_the_caption_star_says_when_no_model_was_trained():
    assert thm3_2.star_words(True, 4, 3).startswith("mean of the 4 trained CoT models at $k = 3$")
    assert "not drawn here" in thm3_2.star_words(False, 0, 3)
