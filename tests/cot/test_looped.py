"""The looped transformer (companion.cot.theory.loops, companion.cot.results.looped): the optimal loop step c_k
(exactly at k = 2, on plain and importance-weighted samples), the optimum (c, b) with a trained W13 scale, the best
residual polynomial, and the sparse-block looped transformers trained through their own gradient.

Each test is meant to fail on a plausible bug: a quartic with a wrong moment, a weighted optimum that ignores its
weights, (1 - c lambda)^2k for the ^k of the two-parameter model, a best polynomial of the wrong degree, a trained
entry outside the two blocks, a masked gradient that is not the sparse recursion's, replicates that share a seed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from companion.cot.data import make_generator, sample_prompts
from companion.cot.grads import outcome_loss_grads
from companion.cot.model import sparse_parameters
from companion.cot.results import looped
from companion.cot.theory import loops, no_cot, wishart
from companion.cot.theory.gd import gd_trace
from companion.params import TrainingDiverged
from companion.seeds import replicate_seed


# ----------------------------------------------------------------------------- part (a): W13 = I
def test_looped_optimum_exact_k2_matches_sample_and_k1_is_eta_star():
    c2, l2 = loops.looped_optimum_exact_k2(10, 20)
    assert c2 == pytest.approx(0.628, abs=2e-3) and l2 == pytest.approx(2.11, abs=0.01)
    eigs = wishart.sample_S_eigs(10, 20, 20_000, np.random.default_rng(5))
    c1, _ = loops.looped_optimum(1, eigs)
    assert c1 == pytest.approx(no_cot.eta_star(10, 20), abs=0.01)


def test_heavy_tail_aware_optimum_matches_the_exact_quartic():
    rng = np.random.default_rng(9)
    e, w = wishart.wishart_is_sample(6, 12, 30_000, rng)
    c, c_se, L, L_se = loops.looped_is_optimum(2, e, w)
    c2, L2 = loops.looped_optimum_exact_k2(6, 12)
    assert abs(c - c2) <= 4 * c_se and c_se < 0.01
    assert abs(L - L2) <= 4 * L_se + 1e-3 * L2


def test_weighted_optimum_takes_its_standard_error_from_the_weighted_derivatives():
    e, w = wishart.wishart_is_sample(4, 10, 4000, np.random.default_rng(13))
    c, c_se, _, _ = loops.looped_is_optimum(3, e, w)
    base = 1 - c * e  # F(c) = E w tr(I - cS)^6: F' and F'' per sample, weighted
    first = w * np.sum(-6 * e * base**5, axis=1)
    second = w * np.sum(30 * e**2 * base**4, axis=1)
    strata = (first[:2000], first[2000:])  # W(I), then W(tau I): half and half
    se_mean = np.sqrt(sum(0.25 * f.var(ddof=1) / 2000 for f in strata))
    assert c_se == pytest.approx(se_mean / second.mean(), rel=1e-10)
    assert c_se != pytest.approx(loops.looped_optimum_se(c, 3, e), rel=1e-2)  # the weights matter


def test_unit_weights_give_the_plain_optimum_and_a_standard_error_near_the_plain_one():
    """On an i.i.d. sample the two halves have one law: the stratified standard error estimates the same spread."""
    eigs = wishart.sample_S_eigs(4, 10, 5000, np.random.default_rng(11))
    ones = np.ones(len(eigs))
    c, c_se, L, _ = loops.looped_is_optimum(3, eigs, ones)
    assert (c, L) == pytest.approx(loops.looped_optimum(3, eigs), rel=1e-12)
    assert c_se == pytest.approx(loops.looped_optimum_se(c, 3, eigs), rel=0.1)


def test_the_importance_sample_is_stratified_and_its_standard_error_says_so():
    """Over repeated samples of wishart_is_sample at d = 6, n = 12 the weighted mean of tr(I - c S)^4 scatters as
    is_mean_se says; the i.i.d. formula, which adds the spread between the two components' means that a
    half-and-half draw does not have, says more."""
    rng = np.random.default_rng(3)
    c2, _ = loops.looped_optimum_exact_k2(6, 12)
    est = [loops.looped_is_loss(c2, 2, *wishart.wishart_is_sample(6, 12, 2000, rng)) for _ in range(150)]
    spread = np.std([m for m, _ in est], ddof=1)
    assert 0.85 < np.mean([se for _, se in est]) / spread < 1.2
    e, w = wishart.wishart_is_sample(6, 12, 2000, rng)
    v = w * gd_trace(c2, e, 2)
    assert loops.is_mean_se(v)[0] == pytest.approx(v.mean()) and np.std(v, ddof=1) / np.sqrt(2000) > 1.4 * spread


# ----------------------------------------------------------------------------- part (b): a trained W13 scale
def test_two_param_optimum_gives_the_one_step_floor_at_k_1_and_beats_w13_fixed_beyond():
    d, n = 6, 12
    eigs = wishart.sample_S_eigs(d, n, 40_000, np.random.default_rng(7))
    # k = 1 gives back the one-step floor, and k >= 2 improves on W13 = I
    assert loops.looped_two_param_optimum(1, eigs)[2] == pytest.approx(loops.looped_optimum(1, eigs)[1], rel=1e-8)
    c, b, L = loops.looped_two_param_optimum(3, eigs)
    assert L < loops.looped_optimum(3, eigs)[1] and b > 1


def test_two_param_errors_average_to_the_loss_at_the_best_scale():
    # E sum_j (1 - b h_j)^2 = d - 2 b m1 + b^2 m2, which at b* = m1 / m2 is the loss d - m1^2 / m2
    eigs = wishart.sample_S_eigs(5, 11, 2000, np.random.default_rng(12))
    for k, c in ((2, 0.5), (4, 0.3)):
        loss, b = loops.looped_two_param_loss(c, k, eigs)
        assert np.mean(loops.looped_two_param_errors(c, b, k, eigs)) == pytest.approx(loss, rel=1e-12)


# ----------------------------------------------------------------------------- the best residual polynomial
def test_best_polynomial_degree_one_is_the_floor_and_degree_two_beats_two_loops():
    for d, n in [(10, 20), (3, 8), (5, 5)]:
        assert looped.best_polynomial_loss(1, d, n) == pytest.approx(no_cot.no_cot_floor(d, n), rel=1e-12)
        # (1 - c lambda)^2 is one degree-2 residual polynomial: the minimum over all of them is lower
        assert looped.best_polynomial_loss(2, d, n) < loops.looped_optimum_exact_k2(d, n)[1]
        assert looped.best_polynomial_loss(3, d, n) < looped.best_polynomial_loss(2, d, n)


def test_best_polynomial_against_monte_carlo_least_squares():
    # min_q E sum_j q(lambda_j)^2 over q(0) = 1, deg q <= 3, on an independent spectrum sample (4 SE)
    d, n, k = 4, 10, 3
    eigs = wishart.sample_S_eigs(d, n, 200_000, np.random.default_rng(5))
    P = np.stack([eigs**i for i in range(1, k + 1)], axis=-1)  # (num, d, k)
    M = np.einsum("bji,bjl->il", P, P) / len(eigs)
    v = P.sum(axis=1).mean(axis=0)
    c = np.linalg.solve(M, -v)
    per = np.sum((1 + P @ c) ** 2, axis=1)
    assert abs(per.mean() - looped.best_polynomial_loss(k, d, n)) <= 4 * per.std(ddof=1) / np.sqrt(len(per))


# ----------------------------------------------------------------------------- sparse-block looped transformers
KW = dict(steps=20, lr=0.01, lr_final=0.5, batch=8)


def test_only_the_sparse_blocks_train():
    d = 3
    W_KQ, W_PV = looped.train_looped_sparse(d, 7, 2, replicates=2, seed=5, **KW)
    mask_KQ, mask_PV = sparse_parameters(np.ones((d, d)), np.ones((d, d)), 0.0)
    for r in range(2):
        assert torch.all(W_KQ[r][mask_KQ == 0] == sparse_parameters(np.zeros((d, d)), np.zeros((d, d)))[0][mask_KQ == 0])
        assert torch.all(W_PV[r][mask_PV == 0] == 0)
        assert W_KQ[r, d, 2 * d + 1] == -1.0  # W24 fixed
    assert not torch.allclose(W_KQ[0], W_KQ[1])


def test_masked_gradient_is_the_sparse_recursion_gradient():
    d, n, k = 3, 6, 3
    g = torch.Generator().manual_seed(1)
    V = (0.3 * torch.randn(d, d, generator=g, dtype=torch.float64)).requires_grad_()
    W = (torch.eye(d, dtype=torch.float64) + 0.2 * torch.randn(d, d, generator=g, dtype=torch.float64)).requires_grad_()
    pr = sample_prompts(5, d, n, make_generator(2))
    S = pr.X @ pr.X.transpose(1, 2) / n
    w_hat = torch.zeros_like(pr.w_star)
    for _ in range(k):  # w <- w + V S (W w - w*): the data columns are fixed points on the sparse blocks
        w_hat = w_hat + ((W @ w_hat[..., None] - pr.w_star[..., None]).transpose(1, 2) @ S.transpose(1, 2) @ V.T)[:, 0]
    (0.5 * ((w_hat - pr.w_star) ** 2).sum(-1).mean()).backward()
    W_KQ, W_PV = sparse_parameters(V.detach().numpy(), W.detach().numpy())
    _, g_KQ, g_PV = outcome_loss_grads(pr, W_KQ, W_PV, k, "looped")
    assert torch.allclose(g_KQ[:d, d + 1 : 2 * d + 1], W.grad, rtol=1e-9, atol=1e-12)
    assert torch.allclose(g_PV[d + 1 : 2 * d + 1, :d], V.grad, rtol=1e-9, atol=1e-12)


def test_sparse_replicates_are_independent_runs():
    W_KQ, W_PV = looped.train_looped_sparse(2, 5, 2, replicates=2, seed=4, **KW)
    for r in range(2):
        one_KQ, one_PV = looped.train_looped_sparse(2, 5, 2, replicates=1, seed=replicate_seed(4, r), **KW)
        assert torch.allclose(W_KQ[r], one_KQ[0], rtol=1e-9, atol=1e-12)
        assert torch.allclose(W_PV[r], one_PV[0], rtol=1e-9, atol=1e-12)


def test_sparse_training_that_diverges_raises():
    with np.errstate(all="ignore"), pytest.raises(TrainingDiverged, match="sparse looped models diverged"):
        looped.train_looped_sparse(3, 6, 20, replicates=1, seed=0, steps=50, lr=1e6, lr_final=1.0, batch=8)


# ----------------------------------------------------------------------------- the paired test of part (b)
def _iso_at(monkeypatch, v, w):
    """The isotropic training replaced by models at (v, w): every replicate the same."""
    monkeypatch.setattr(looped, "train_looped_isotropic",
                        lambda d, n, k, *, replicates, **kw: (np.full(replicates, v), np.full(replicates, w)))


def test_trained_models_are_paired_with_the_optimum_and_the_falsifier_on_the_same_prompts(monkeypatch):
    """A "trained" model at the optimum (b) has exactly the optimum model's mean error, one at part (a)'s answer
    exactly the falsifier's: the three run on the same prompts (a prompt stream of their own for either would fail),
    and the band is the standard error of the paired differences, far below the prompts' own spread."""
    d, n, k = 3, 8, 2
    eigs = wishart.sample_S_eigs(d, n, 4000, np.random.default_rng(1))
    c, b, _ = loops.looped_two_param_optimum(k, eigs)
    c_a = loops.looped_optimum(k, eigs)[0]
    opt = (c, b)
    kw = dict(steps=1, lr=0.01, lr_final=1.0, replicates=4, num=800, seed=3)
    _iso_at(monkeypatch, -c * b, 1 / b)  # v = -c b, w = 1/b
    m = looped.looped_trained_vs_optimum(d, n, k, opt, c_a, **kw)["m"]
    assert m["mean"] == m["pred"] and m["falsifier"] > m["pred"] and m["se"] == 0.0
    _iso_at(monkeypatch, -c_a, 1.0)
    m = looped.looped_trained_vs_optimum(d, n, k, opt, c_a, **kw)["m"]
    assert m["mean"] == m["falsifier"]
    _iso_at(monkeypatch, -c * b * 1.02, 1 / b)  # near the optimum: the paired band is much tighter than the prompts'
    out = looped.looped_trained_vs_optimum(d, n, k, opt, c_a, **kw)
    pr = [sample_prompts(200, d, n, make_generator(looped.COT_ISO_EVAL.replicate(3, r))) for r in range(4)]
    from companion.cot.model import looped_predict, per_prompt_error
    W_KQ, W_PV = sparse_parameters(-c * b * 1.02 * np.eye(d), np.eye(d) / b, -1.0)
    e = np.concatenate([per_prompt_error(looped_predict(p, W_KQ, W_PV, k), p).numpy() for p in pr])
    assert out["m"]["mean"] == pytest.approx(e.mean(), rel=1e-12)
    assert 0 < out["m"]["se"] < 0.2 * e.std(ddof=1) / np.sqrt(len(e))



def _S(d, n, num, seed=0):
    return wishart.sample_S(d, n, num, np.random.default_rng(seed))


def test_sparse_errors_are_the_real_looped_lsa_prompt_by_prompt():
    # the summed series against the looped transformer itself, on blocks with no structure: each prompt's X run with
    # w* = e_1 .. e_d, whose errors sum to the error averaged over w* ~ N(0, I), ||Y||_F^2
    from companion.cot.data import Prompts
    from companion.cot.model import looped_predict, per_prompt_error

    d, n, k, num = 3, 7, 3, 20
    g = np.random.default_rng(5)
    W13, V31 = np.eye(d) + 0.2 * g.standard_normal((d, d)), -0.5 * np.eye(d) + 0.2 * g.standard_normal((d, d))
    X = sample_prompts(num, d, n, make_generator(3)).X
    pr = Prompts(X.repeat_interleave(d, dim=0), torch.eye(d, dtype=X.dtype).repeat(num, 1))
    with torch.no_grad():
        lsa = per_prompt_error(looped_predict(pr, *sparse_parameters(V31, W13, -1.0), k), pr).numpy()
    S = (X @ X.transpose(1, 2)).numpy() / n
    np.testing.assert_allclose(lsa.reshape(num, d).sum(axis=1),
                               loops.looped_sparse_errors(W13 @ V31, np.linalg.inv(W13), k, S), rtol=1e-10)
    # on the isotropic blocks, the spectral formula of part (b)
    c, b = 0.4, 1.2
    np.testing.assert_allclose(loops.looped_sparse_errors(-c * np.eye(d), b * np.eye(d), k, S),
                               loops.looped_two_param_errors(c, b, k, np.linalg.eigvalsh(S)), rtol=1e-10)


def test_rotation_basis_is_a_commuting_algebra():
    for d in (2, 5, 6):
        basis = loops.rotation_basis(d)
        P, J = basis[0], basis[1]
        assert np.allclose(J @ J, -P) and np.allclose(P @ J, J) and np.allclose(J @ P, J)
        assert np.allclose(sum(B for B in basis if B is not J), np.eye(d))  # P (+ E) = I
        for B in basis:
            assert np.allclose(B @ J, J @ B)
    assert len(loops.rotation_basis(1)) == 1


@pytest.mark.parametrize("d", [4, 5])
def test_a_rotation_beats_the_isotropic_optimum_at_three_loops_not_at_two(d):
    S = _S(d, 12, 4000)
    eigs = np.linalg.eigvalsh(S)
    for k, rotates in ((3, True), (2, False)):
        c, b, loss_b = loops.looped_two_param_optimum(k, eigs)
        opt = looped.sparse_optimum(k, S, (c, b), (loss_b, 0.01))
        assert opt["rotates"] is rotates, (d, k, opt["gain"])
        if rotates:
            assert abs(opt["rot"]["beta"]) > 0.1 and opt["pred"][0] < loss_b - 4 * opt["gain"][1]
        else:  # (b) itself, its number untouched
            assert abs(opt["rot"]["beta"]) < 1e-3 and opt["pred"] == (loss_b, 0.01)
            # the family contains (b); an odd d's own step for its last coordinate fits the sample a little better
            assert loss_b - 1e-4 < opt["rot"]["loss"] <= loss_b + 1e-9


@pytest.mark.parametrize("d", [4, 5])
def test_the_rotation_optimum_turned_to_other_planes_keeps_its_loss_and_follows_them(d):
    n, k = 12, 3
    S = _S(d, n, 4000)
    c, b, _ = loops.looped_two_param_optimum(k, np.linalg.eigvalsh(S))
    opt = loops.looped_rotation_optimum(k, S, (c, b))
    U, _ = np.linalg.qr(np.random.default_rng(2).standard_normal((d, d)))
    D = np.diag([1.0, 1.0, 1.0, -1.0, 1.0][:d])  # a reflection too: the second plane turns the other way
    Q_like = U @ D @ opt["Q"] @ D @ U.T
    Q, A = loops.rotation_aligned(opt, Q_like)
    np.testing.assert_allclose(Q, Q_like, atol=1e-10)  # the orbit point is the turned optimum itself
    np.testing.assert_allclose(A, U @ D @ opt["A"] @ D @ U.T, atol=1e-10)
    # any orbit point has the optimum's expected error: on fresh matrices, the same loss within the sampling error
    S2 = _S(d, n, 20000, seed=9)
    e0 = loops.looped_sparse_errors(opt["Q"], opt["A"], k, S2)
    e1 = loops.looped_sparse_errors(Q, A, k, S2)
    assert abs(e1.mean() - e0.mean()) < 4 * np.std(e1 - e0) / np.sqrt(len(e0))


# ----------------------------------------------------------------------------- the full-parameter looped models
def _full_models(models, **config):
    """A replicated TrainResult holding the given (W_KQ, W_PV) pairs, itself its snapshots at steps 0, 8 and 10."""
    from companion.cot.train import TrainResult
    W_KQ = torch.stack([torch.as_tensor(a) for a, _ in models])
    W_PV = torch.stack([torch.as_tensor(b) for _, b in models])
    snap = (W_KQ.numpy(), W_PV.numpy())
    return TrainResult(W_KQ, W_PV, np.array([0, 8, 10]), np.zeros((3, len(models))), np.zeros(10), [snap] * 3,
                       dict(d=W_KQ.shape[-1] // 2 - 1, **config))


def test_full_models_each_meet_their_own_prompts_and_the_seed_spread_sets_the_band():
    """Two models at an isotropic step and one at zero (error about d): the mean is their mean over each one's own
    prompts (replicate_errors), one replicate lies above the floor, and the band is the seeds' spread on R - 1 = 2
    degrees of freedom."""
    from companion.cot.stats import replicate_errors
    d, n, k, num, seed = 4, 12, 2, 3000, 5
    good = sparse_parameters(-0.5 * np.eye(d), np.eye(d), -1.0)
    zero = (np.zeros_like(good[0]), np.zeros_like(good[1]))
    res = _full_models([good, good, zero], n=n, seed=seed)
    tr = looped.full_vs_floor(res, d, n, k, num, seed)
    e = replicate_errors("looped", res, k, num // 3, seed)
    assert tr["mean"] == pytest.approx(e.mean(), rel=1e-12) and e[2].mean() == pytest.approx(d, rel=0.1)
    assert not np.allclose(e[0], e[1])  # two identical models on different prompts
    assert tr["models"] == 3 and tr["above"] == 1 and tr["dof"] == 2
    assert tr["se"] == pytest.approx(np.std(e.mean(axis=1), ddof=1) / np.sqrt(3), rel=1e-9)
    assert not tr["still_falling"] and tr["undecided"] is None and tr["drop"][0] == 0


@pytest.mark.parametrize("earlier_step, falling", [(0.0, True), (0.49, False)])
def test_full_models_are_still_training_when_the_last_fifth_moved_them_by_more_than_the_band(earlier_step, falling):
    """Four models at the step 0.5, their snapshot at four fifths of the steps at zero weights (a drop of about d - 1,
    far beyond the band) or at the step 0.49 (a drop of many of its own standard errors, on 3000 shared prompts, but
    inside the claim's band): only the first is still training."""
    from companion.cot.stats import replicate_errors
    from companion.cot.train import TrainResult
    from companion.stats import Z_LEVEL
    d, n, k, num, seed = 4, 12, 2, 3000, 5
    good = sparse_parameters(-0.5 * np.eye(d), np.eye(d), -1.0)
    res = _full_models([good] * 4, n=n, seed=seed)
    then = sparse_parameters(-earlier_step * np.eye(d), np.eye(d), -1.0)
    res.snapshots[1] = (np.stack([then[0].numpy()] * 4), np.stack([then[1].numpy()] * 4))  # at 4/5 of the steps
    tr = looped.full_vs_floor(res, d, n, k, num, seed)
    earlier = TrainResult(*(torch.from_numpy(w) for w in res.snapshots[1]), res.steps, res.eval_loss, res.train_loss,
                          config=res.config)
    drop = replicate_errors("looped", earlier, k, num // 4, seed) - replicate_errors("looped", res, k, num // 4, seed)
    assert tr["drop"][0] == pytest.approx(drop.mean(), rel=1e-9) and (tr["drop_from"], tr["drop_to"]) == (8, 10)
    assert tr["drop"][0] > Z_LEVEL * tr["drop"][1]  # real either way, at the level full_vs_floor tests
    assert tr["still_falling"] is falling and (tr["undecided"] is not None) is falling
    assert (tr["drop"][0] > tr["band"]) is falling
