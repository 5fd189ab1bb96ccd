"""Replicate training (a leading replicate dimension) and the standard errors over training seeds and prompts.

Each test is meant to fail on a plausible bug: replicates that share prompts or an initialisation, weights applied
to the wrong replicate's prompts (a reshape in the wrong order), a loss averaged instead of summed over replicates
(each replicate would get 1/R of its gradient), a standard error that ignores the spread of the seeds."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from companion.cot import cot_inference, gd_trajectory, make_generator, sample_prompts, teacher_forced_loss
from companion.cot import stats as cot_stats
from companion.cot.model import lsa, outcome_loss
from companion.cot.train import evaluate, replicate_seed, train_full, train_looped_isotropic
from companion.seeds import COT_EVAL, COT_PROMPTS
from companion.stats import critical, median_se


def _weights(R, D, seed):
    g = make_generator(seed)
    return [torch.randn(R, D, D, generator=g, dtype=torch.float64) * 0.3 for _ in range(2)]


def test_stacked_weights_act_on_their_own_replicates_prompts():
    d, n, k, R, B = 3, 7, 4, 3, 5
    A, Bm = _weights(R, 2 * d + 2, 0)
    p = sample_prompts(R * B, d, n, make_generator(1))
    W = gd_trajectory(p, 0.3, k)
    stacked = teacher_forced_loss(p, W, A, Bm, k)
    sl = [slice(r * B, (r + 1) * B) for r in range(R)]
    sub = [type(p)(p.X[s], p.w_star[s]) for s in sl]
    per = [teacher_forced_loss(q, W[s], A[r], Bm[r], k) for r, (q, s) in enumerate(zip(sub, sl))]
    assert float(stacked) == pytest.approx(float(sum(per)) / R, rel=1e-13)
    w_st = cot_inference(p, A, Bm, k)
    for r, (q, s) in enumerate(zip(sub, sl)):
        assert torch.allclose(w_st[s], cot_inference(q, A[r], Bm[r], k), rtol=1e-12, atol=1e-13)
        assert float(outcome_loss(q, A[r], Bm[r], 2, "looped")) == pytest.approx(
            float(outcome_loss(type(p)(p.X[s], p.w_star[s]), A[r], Bm[r], 2, "looped")))
    Z = torch.randn(R * B, 2 * d + 2, n + 1, dtype=torch.float64)
    out = lsa(Z, A, Bm, n)
    for r, s in enumerate(sl):
        assert torch.allclose(out[s], lsa(Z[s], A[r], Bm[r], n), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("objective, k", [("cot", 3), ("no_cot", 1), ("looped", 2)])
def test_each_replicate_is_the_independent_run_with_its_own_seed(objective, k):
    kw = dict(steps=40, lr=0.01, batch=8, eval_every=20, eval_batch=16)
    rep = train_full(objective, 2, 5, k, 0.3, seed=3, replicates=3, **kw)
    assert rep.W_KQ.shape == (3, 6, 6) and rep.eval_loss.shape == (3, 3)
    for r in range(3):
        one = train_full(objective, 2, 5, k, 0.3, seed=replicate_seed(3, r), **kw)
        assert torch.allclose(rep.W_KQ[r], one.W_KQ, rtol=1e-9, atol=1e-12)
        assert torch.allclose(rep.W_PV[r], one.W_PV, rtol=1e-9, atol=1e-12)
        ev = sample_prompts(16, 2, 5, make_generator(3 + 10_000_019))  # the run's evaluation set, shared by the replicates
        assert rep.replicate(r).eval_loss[-1] == pytest.approx(float(evaluate(objective, ev, rep.W_KQ[r], rep.W_PV[r], k).mean()))
    assert not torch.allclose(rep.W_KQ[0], rep.W_KQ[1])


def test_isotropic_looped_replicates_are_independent_runs():
    kw = dict(steps=30, lr=0.01, batch=8)
    v, w = train_looped_isotropic(2, 5, 2, seed=4, replicates=2, **kw)
    for r in range(2):
        v1, w1 = train_looped_isotropic(2, 5, 2, seed=replicate_seed(4, r), **kw)
        assert v[r] == pytest.approx(v1[0], rel=1e-10) and w[r] == pytest.approx(w1[0], rel=1e-10)


def test_replicate_errors_give_each_replicate_its_own_prompts():
    res = train_full("cot", 2, 5, 2, 0.3, steps=5, lr=0.01, batch=4, eval_every=5, eval_batch=4, seed=0, replicates=2)
    e = cot_stats.replicate_errors("cot", res, 2, 50, 9)
    assert e.shape == (2, 50)
    p1 = sample_prompts(50, 2, 5, make_generator(COT_EVAL.replicate(9, 1)))
    assert np.allclose(e[1], cot_stats.model_errors("cot", res.replicate(1), p1, 2))


def test_replicate_errors_never_judge_a_model_on_its_own_training_stream(monkeypatch):
    """The evaluation prompts of replicate r come from ``cot.eval``, not from ``cot.prompts`` of the same seed (the
    stream of replicate r's initialisation and minibatches), whichever seed the page hands over."""
    seen = []
    real = cot_stats.make_generator
    monkeypatch.setattr(cot_stats, "make_generator", lambda s: seen.append(s) or real(s))
    res = train_full("no_cot", 2, 5, 1, steps=3, lr=0.01, batch=4, eval_every=3, eval_batch=4, seed=11, replicates=3)
    cot_stats.replicate_errors("no_cot", res, 1, 20, 11)
    assert seen == [COT_EVAL.replicate(11, r) for r in range(3)]
    assert not set(seen) & {COT_PROMPTS.replicate(11, r) for r in range(3)}


def test_standard_error_over_seeds_and_prompts():
    rng = np.random.default_rng(0)
    R, N = 5, 400
    prompts_only = rng.normal(1.0, 1.0, (R, N))
    m = cot_stats.trained_vs_prediction(prompts_only, 1.0, 0.0)
    assert m["se_prompts"] == pytest.approx(prompts_only.std(ddof=1) / math.sqrt(R * N))
    # the chosen band is the wider of the seed band (t on R - 1 dof) and the prompts band (z)
    assert critical(4, m["dof"]) * m["se"] >= max(critical(4, R - 1) * m["se_seeds"], 4 * m["se_prompts"]) * (1 - 1e-12)
    seeds = prompts_only + rng.normal(0.0, 0.5, (R, 1))  # a training-seed effect 10x the prompt SE of a mean
    m = cot_stats.trained_vs_prediction(seeds, 1.0, 0.3)
    se_seeds = seeds.mean(1).std(ddof=1) / math.sqrt(R)
    assert m["se_seeds"] == pytest.approx(se_seeds) and m["se"] == pytest.approx(math.hypot(se_seeds, 0.3))
    assert R - 1 < m["dof"] < math.inf and "training seeds" in m["se_from"]  # Welch: the exact MC error adds dof


@pytest.mark.parametrize("seed_sd", [0.0, 0.2])
def test_the_replicate_band_keeps_the_level_of_four_normal_ses(seed_sd):
    """2000 replicated experiments of R = 4 seeds: |mean - truth| inside the verdict's band (the critical value
    of :func:`companion.stats.critical` at the returned degrees of freedom) in every one (nominal false-alarm
    rate 6e-5). Without a seed effect the prompts decide; when the seeds dominate, 4 replicate standard errors
    alone (the normal z on R - 1 = 3 degrees of freedom) would cover only P(|t_3| <= 4) = 97.2 %."""
    rng = np.random.default_rng(1)
    R, N, trials = 4, 200, 2000
    inside, naive = [], []
    for _ in range(trials):
        e = rng.exponential(1.0, (R, N)) + rng.normal(0, seed_sd, (R, 1))
        m = cot_stats.trained_vs_prediction(e, 1.0)
        inside.append(abs(m["mean"] - 1.0) <= critical(4, m["dof"]) * m["se"])
        naive.append(abs(m["mean"] - 1.0) <= 4 * max(m["se_seeds"], m["se_prompts"]))
    assert np.mean(inside) >= 0.998
    if seed_sd:
        assert np.mean(naive) < 0.99


def test_replicate_median_is_the_mean_of_the_medians_with_the_seed_band_when_seeds_dominate():
    rng = np.random.default_rng(2)
    e = rng.exponential(1.0, (4, 2000)) * np.array([[1.0], [1.5], [1.0], [1.5]])
    med, se, dof = cot_stats.replicate_median(e)
    meds = np.median(e, axis=1)
    assert med == pytest.approx(meds.mean(), rel=1e-2)
    assert se == pytest.approx(meds.std(ddof=1) / 2, rel=2e-2) and dof == 3  # the seeds dominate: t on 3 dof
    one = cot_stats.replicate_median(e[0])
    assert one[:2] == median_se(e[0]) and one[2] == math.inf


def test_left_saddle_keeps_the_replicates_whose_teacher_forced_loss_left_the_zero_models():
    """A model that applies the step s instead of the data's eta keeps (1 - s/eta)^2 of the zero model's teacher-forced
    loss: the construction (ratio 0) and a step 0.6 eta (0.16) have left the saddle, the zero model (1) and a step
    0.3 eta (0.49) have not; the kept result holds exactly those replicates, in order, with their curves."""
    from companion.cot.model import construction
    from companion.cot.train import TrainResult

    d, n, k, eta = 3, 8, 4, 0.3
    D = 2 * d + 2
    zero = (torch.zeros(D, D, dtype=torch.float64), torch.zeros(D, D, dtype=torch.float64))
    models = [construction(d, eta), zero, construction(d, 0.3 * eta), construction(d, 0.6 * eta)]
    K, V = torch.stack([a for a, _ in models]), torch.stack([b for _, b in models])
    curves = np.arange(12.0).reshape(3, 4)
    res = TrainResult(K, V, np.arange(3), curves, np.zeros(5), [(K.numpy(), V.numpy())],
                      dict(objective="cot", d=d, n=n, k=k, eta=eta, seed=3, replicates=4))
    esc = cot_stats.left_saddle(res, eta, k, num=400)
    assert esc.ratio == pytest.approx([0.0, 1.0, 0.49, 0.16], abs=1e-9)
    assert esc.escaped.tolist() == [True, False, False, True] and esc.count == 2
    assert esc.kept.replicates == 2 and esc.kept.config["replicates"] == 2
    assert torch.equal(esc.kept.W_KQ, K[[0, 3]]) and torch.equal(esc.kept.W_PV, V[[0, 3]])
    assert esc.kept.eval_loss.tolist() == curves[:, [0, 3]].tolist()
    assert np.array_equal(esc.kept.snapshots[0][1], V.numpy()[[0, 3]])  # (W_KQ is the same in all four)
    assert "2 of 4 replicates left the zero saddle" in esc.words()
    # a single escaped replicate has no spread over seeds: all are kept, and the words say so
    one = TrainResult(K[[0, 1, 2]], V[[0, 1, 2]], np.arange(3), curves[:, :3], np.zeros(5), [],
                      dict(objective="cot", d=d, n=n, k=k, eta=eta, seed=3, replicates=3))
    single = cot_stats.left_saddle(one, eta, k, num=400)
    assert single.kept is one and single.count == 1 and "fewer than two did: all 3 are counted" in single.words()
    # every replicate escaped (or none did): the result itself, so that the claims' numbers do not move
    full = TrainResult(K[[0, 3]], V[[0, 3]], np.arange(3), curves[:, :2], np.zeros(5), [],
                       dict(objective="cot", d=d, n=n, k=k, eta=eta, seed=3, replicates=2))
    assert cot_stats.left_saddle(full, eta, k, num=400).kept is full
    stuck = TrainResult(K[[1, 2]], V[[1, 2]], np.arange(3), curves[:, :2], np.zeros(5), [],
                        dict(objective="cot", d=d, n=n, k=k, eta=eta, seed=3, replicates=2))
    none = cot_stats.left_saddle(stuck, eta, k, num=400)
    assert none.kept is stuck and none.count == 0 and "fewer than two did: all 2 are counted" in none.words()
