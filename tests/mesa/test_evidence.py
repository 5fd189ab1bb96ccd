"""The evidence the mesa results share (companion.mesa.evidence): the falsifiers, the replicate designs and their
extrapolation in m, the jackknife of the restricted GD, the off-manifold feedback, and the equivariant population GD
beyond Assumption 4.1 (the prediction of Proposition 4.2 and Theorem 4.3).

The off-manifold feedback: after one epoch from a diagonal init the full model's diagonal update *is* the restricted
GD's first step (the diagonal gradient at a diagonal point is the restricted gradient), so the two ab agree to
complex64 round-off: this fails if the restricted GD reads another training set (seed stream), rescales its
statistics with the wrong powers of the scale, or starts from another init or step. After many epochs the
off-manifold parameters have fitted the sample and the two differ. The same for the masked training of Theorem 4.3
(x_1 = 1, off-diagonal red entries clipped): the mask changes neither prediction nor loss, so the restricted masked
GD is the restricted GD on the same (Q, P), cross terms k != l included (fails if they are dropped), and its
feedback comes from the other blocks alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from companion import stats
from companion.mesa import data, evidence, train
from companion.mesa import theory as th
from companion.mesa.data import generate
from companion.mesa.empirical import diagonal_stats, exact_population, sampling_spread
from companion.mesa.evidence import OffManifold, offmanifold_floor, offmanifold_residual, offmanifold_words, restricted_ab
from companion.mesa.model import loss_grad_fast, per_sequence_loss
from companion.mesa.train import init_diagonal


def test_the_falsifier_alpha_is_the_T_infinity_constant_or_independent_coordinates():
    d, T = 5, 20
    name, al_f = evidence.falsifier_alpha("gaussian", 2.0, d, T)
    _, be = th.alpha_beta("gaussian", 2.0, d, T)
    assert be / al_f == pytest.approx(1 / (5 * 2.0**2), rel=1e-14) and "\\infty" in name
    name, al_f = evidence.falsifier_alpha("sparse", 1.0, d, T)
    al, be = th.alpha_beta("sparse", 1.0, d, T)
    assert al_f > al and "independent" in name  # sparse: m24 = 0, the falsifier puts m2 m4 in its place


def test_replicate_training_sets_of_nearby_seeds_are_distinct():
    """Seed s's replicates are not seed s+1's (a plain offset ``seed + k`` would give seed 2's replicates 0.. to
    seed 1's 1..): every training set of seeds 1..4 is its own."""
    seeds = [seed for s in range(1, 5) for _, seed in evidence.replicate_sets(400, 16, s)]
    assert len(seeds) == len(set(seeds)) == 4 * 32


def test_richardson_extrapolation_arithmetic(monkeypatch):
    """(4 mean(m) - mean(m/4)) / 3 (a 1/m bias) with the SE of the replicate means added in quadrature
    (4 se(m) / 3, se(m/4) / 3) and their Welch degrees of freedom; the replicates are the seeds of
    replicate_sets, independent at the two sizes."""
    from companion import replicate_seed

    class R:
        def __init__(self, v):
            self.ab = np.array([0.0, v])
            self.W_KQ, self.W_PV = np.zeros((10, 10), complex), np.zeros((5, 10), complex)

    vals = {}

    def fake_run(**kw):
        vals.setdefault(kw["m"], []).append(kw["seed"])
        base = 0.2 + (0.01 if kw["m"] == 1000 else 0.04)
        return R(base + 0.001 * (kw["seed"] % 3))

    monkeypatch.setattr(train, "run", fake_run)
    q = evidence.extrapolated_ab(evidence.Replicates("gaussian", 1.0, 5, 20, 0.5, 1.5, 1e-4, 1, 1000, 3, 7))
    big = [0.21 + 0.001 * (replicate_seed(7, 1 + k) % 3) for k in range(3)]
    small = [0.24 + 0.001 * (replicate_seed(7, 17 + k) % 3) for k in range(3)]
    assert q.measured == pytest.approx((4 * np.mean(big) - np.mean(small)) / 3)
    se, dof = stats.welch((4 * stats.replicate_se(big)[1] / 3, 2), (stats.replicate_se(small)[1] / 3, 2))
    assert q.se == pytest.approx(se) and q.dof == pytest.approx(dof)
    assert set(vals[1000]).isdisjoint(vals[250])  # independent training sets at the two sizes


def test_jackknife_se_of_the_restricted_gd_covers_its_spread():
    """The delete-one-batch jackknife SE of the restricted GD's ab matches the spread of ab over independent
    training sets (an SE inflated by sqrt(G) = 3.2 or deflated by it fails)."""
    d, T, m, G, E = 2, 6, 300, 10, 40
    al, be = th.alpha_beta("gaussian", 1.0, d, T)
    lr = 0.25 * 2 / (al * (0.5**2 + 1.5**2))  # a quarter of the stability bound
    ab, se = [], []
    for s in range(40):
        data = generate("gaussian", m, d, T, 1.0, np.random.default_rng([s, 0]), torch.complex128)
        full, sd = sampling_spread(None, 0.5, 1.5, lr, E, batch_stats=diagonal_stats(data, G))
        ab.append(full[-1])
        se.append(sd[-1])
    ratio = np.std(ab, ddof=1) / np.sqrt(np.mean(np.square(se)))
    assert 0.6 < ratio < 1.6, ratio


def _run(epochs: int, seed: int, law: str = "gaussian", scale: float = 1.7, m: int = 200, mask: bool = False):
    return train.run(law=law, scale=scale, d=3, T=8, m=m, m_test=10, a0=0.5, b0=1.5, lr=2e-4 / scale**6 * 8,
                     epochs=epochs, seed=seed, mask=mask)


@pytest.mark.parametrize("law", ["gaussian", "sparse"])
def test_one_epoch_of_the_full_model_is_the_restricted_step(law):
    r = _run(1, 3, law)
    assert restricted_ab(r) == pytest.approx(float(r.ab[-1]), rel=2e-6)
    assert restricted_ab(r) != pytest.approx(float(r.ab[0]), rel=1e-4)  # the step moved ab


def test_the_off_manifold_feedback_grows_with_training_and_its_residual_is_the_richardson_of_the_differences():
    big = [_run(200, s, m=400) for s in (11, 12, 13)]
    small = [_run(200, s, m=100) for s in (21, 22, 23)]
    o_big = np.array([r.ab[-1] - restricted_ab(r) for r in big])
    o_small = np.array([r.ab[-1] - restricted_ab(r) for r in small])
    assert np.all(np.abs(o_big) > 1e-4 * np.abs([r.ab[-1] for r in big]))  # not round-off: the feedback exists
    out = offmanifold_residual(big, small)
    ref = stats.richardson(o_big, o_small)
    assert out.measured == pytest.approx(ref["measured"], rel=1e-12)
    assert out.ratio == pytest.approx(o_small.mean() / o_big.mean(), rel=1e-12)


@pytest.mark.parametrize("law", ["full_one", "gaussian"])
def test_one_epoch_of_the_masked_model_is_the_restricted_masked_step(law):
    r = _run(1, 3, law, mask=True)
    assert r.config["mask"]
    assert restricted_ab(r) == pytest.approx(float(r.ab[-1]), rel=2e-6)
    assert restricted_ab(r) != pytest.approx(float(r.ab[0]), rel=1e-4)  # the step moved ab


def test_the_masked_feedback_is_the_other_blocks_alone_and_grows_with_training():
    masked = _run(200, 5, "full_one", m=400, mask=True)
    unmasked = _run(200, 5, "full_one", m=400)
    assert restricted_ab(masked) == restricted_ab(unmasked)  # the mask leaves the restricted GD alone
    assert masked.offdiag_kq[-1] == 0 and masked.offdiag_pv[-1] == 0  # clipped: only the other blocks moved
    assert masked.other_max[-1] > 0
    o = masked.ab[-1] - restricted_ab(masked)
    assert abs(o) > 1e-4 * abs(masked.ab[-1])  # not round-off: the other blocks' feedback exists
    assert abs(unmasked.ab[-1] - masked.ab[-1]) > abs(o)  # for x_1 = 1 the off-diagonal red entries do more


def test_the_band_adds_the_measured_feedback_in_absolute_value_and_the_reason_names_it():
    res = OffManifold(measured=-3e-5, se=1e-5, dof=4.0, mean_big=0.0, mean_small=0.0, ratio=2.5)  # extrapolated
    assert offmanifold_floor(1e-6, res) == 1e-6 + 3e-5
    assert offmanifold_floor(1e-6, -2e-4) == 1e-6 + 2e-4  # one run's ab - ab_diag (ab_evidence's "off")
    assert offmanifold_words(res, se=1e-5) == ("what the extrapolation leaves of the off-manifold feedback, measured "
                                               "(-3e-05, -3.00 SE; its decay ratio from $m/4$ to $m$ is 2.50, 4 for a $1/m$ law)")
    assert offmanifold_words(-2e-4, predicted=0.1, see="mesa/thm4_1_emergence").endswith(
        "same training set (-0.0002, -0.20 %; see mesa/thm4_1_emergence)")
    with pytest.raises(ValueError):
        offmanifold_words(res)  # r in standard errors needs the claim's SE
    with pytest.raises(ValueError):
        offmanifold_words(-2e-4)  # o in % needs the prediction


def _exact_equivariant_moments(d, T):
    """G, h, E|Y|^2 of the equivariant red blocks on the exact full-one population (phase grid)."""
    data, w = exact_population("full_one", d, T)
    from companion.mesa.model import predict_fast

    eye, off = np.eye(d), np.ones((d, d)) - np.eye(d)
    F = []
    for A, B in [(A, B) for A in (eye, off) for B in (eye, off)]:
        W_KQ = torch.zeros(2 * d, 2 * d, dtype=torch.complex128)
        W_PV = torch.zeros(d, 2 * d, dtype=torch.complex128)
        W_KQ[d:, :d], W_PV[:, :d] = torch.from_numpy(A), torch.from_numpy(B)
        F.append(predict_fast(data, W_KQ, W_PV).reshape(data.m, -1))
    F = torch.stack(F, 1)
    Y = data.tables(np.arange(2, T))[2].reshape(data.m, -1)
    wn = (w / w.sum()).numpy()
    G = np.einsum("n,nkl->kl", wn, torch.einsum("nkp,nlp->nkl", F.conj(), F).real.numpy())
    h = np.einsum("n,nk->k", wn, torch.einsum("nkp,np->nk", F.conj(), Y).real.numpy())
    return data, w, G, h


def test_equivariant_gd_is_full_parameter_population_gd_for_full_one():
    """Thm 4.3 page: unmasked population GD of every parameter from (a0 I, b0 I), on the exact full-one population,
    stays on aI + a'(J-I), bI + b'(J-I) and moves as theory.equivariant_gd says (step factors 1/d and 1/(d(d-1)));
    a wrong factor or a wrong unit order in the moments is off at O(1)."""
    d, T, lr, steps = 3, 5, 0.05, 6
    data, w, G, h = _exact_equivariant_moments(d, T)
    path = th.equivariant_gd(0.5, 1.5, lr, steps, G, h, d)
    W_KQ, W_PV = init_diagonal(d, 0.5, 1.5, torch.complex128)
    off = ~np.eye(d, dtype=bool)
    for _ in range(steps):
        _, gA, gP = loss_grad_fast(data, W_KQ, W_PV, weights=w)
        W_KQ, W_PV = W_KQ - lr * gA, W_PV - lr * gP
    kq, pv = W_KQ[d:, :d].numpy(), W_PV[:, :d].numpy()
    a, ap, b, bp = path[-1]
    assert np.abs(np.diag(kq) - a).max() < 1e-10 and np.abs(kq[off] - ap).max() < 1e-10
    assert np.abs(np.diag(pv) - b).max() < 1e-10 and np.abs(pv[off] - bp).max() < 1e-10
    assert abs(ap) > 1e-4  # it does leave the diagonal manifold
    rest = torch.cat([W_KQ[:d].reshape(-1), W_KQ[d:, d:].reshape(-1), W_PV[:, d:].reshape(-1)])
    assert float(rest.abs().max()) < 1e-12


def test_masked_equivariant_gd_is_the_reduced_system():
    d, T = 4, 12
    al, be = th.alpha_beta("full_one", 1.0, d, T)
    G, h = np.diag([d * al, 1.0, 2.0, 3.0]), np.array([d * be, 0.3, 0.2, 0.1])
    x = th.equivariant_gd(0.5, 1.5, 2e-3, 40, G, h, d, masked=True)
    a, b, _ = th.reduced_gd(0.5, 1.5, 2e-3, 40, al, be)
    assert np.abs(x[:, 0] - a).max() < 1e-13 and np.abs(x[:, 2] - b).max() < 1e-13 and not x[:, [1, 3]].any()


def test_equivariant_moments_give_each_sequence_its_exact_loss():
    """l_n(c) = (c'G_n c - 2 h_n'c + y_n)/2 is the model's per-sequence loss at the equivariant weights."""
    d, T = 3, 9
    mo = evidence.equivariant_moments("full_one", d, T, 50, 4, chunk=20)
    a, ap, b, bp = 0.7, -0.1, 0.9, 0.05
    c = th.equivariant_c(a, ap, b, bp)
    from_moments = 0.5 * (np.einsum("k,nkl,l->n", c, mo["G"], c) - 2 * mo["h"] @ c + mo["y"])
    data = generate("full_one", 50, d, T, 1.0, np.random.default_rng([4, 9]), torch.complex128)
    W_KQ = torch.zeros(2 * d, 2 * d, dtype=torch.complex128)
    W_PV = torch.zeros(d, 2 * d, dtype=torch.complex128)
    W_KQ[d:, :d] = torch.from_numpy(a * np.eye(d) + ap * (np.ones((d, d)) - np.eye(d)))
    W_PV[:, :d] = torch.from_numpy(b * np.eye(d) + bp * (np.ones((d, d)) - np.eye(d)))
    direct = per_sequence_loss(data, W_KQ, W_PV)
    assert np.abs(from_moments - direct).max() <= 1e-10 * np.abs(direct).max()


def test_equivariant_ab_is_the_endpoint_product_with_a_jackknife_se():
    """evidence.equivariant_ab: ab = a b at the last epoch of theory.equivariant_gd on the mean moments; identical
    per-sequence moments give SE 0, moments that differ between groups a positive SE equal to the jackknife of a b."""
    d, T = 3, 7
    _, _, G, h = _exact_equivariant_moments(d, T)
    same = dict(G=np.repeat(G[None], 40, 0), h=np.repeat(h[None], 40, 0))
    q = evidence.equivariant_ab(d, T, 0.5, 1.5, 0.02, 30, same, n_groups=20)
    path = th.equivariant_gd(0.5, 1.5, 0.02, 30, G, h, d)
    assert q.ab == pytest.approx(path[-1, 0] * path[-1, 2], rel=1e-12) and q.dof == 19
    assert abs(path[-1, 1]) > 1e-4 and q.ab != pytest.approx(path[-1, 0] * path[-1, 1], rel=1e-3)  # not a b'
    assert q.se_ab < 1e-12
    rng = np.random.default_rng(3)
    noisy = dict(G=same["G"] * (1 + 0.05 * rng.normal(size=(40, 1, 1))), h=same["h"])
    q = evidence.equivariant_ab(d, T, 0.5, 1.5, 0.02, 30, noisy, n_groups=20)
    loo = [th.equivariant_gd(0.5, 1.5, 0.02, 30, np.delete(noisy["G"], ix, 0).mean(0), h, d)[-1]
           for ix in np.array_split(np.arange(40), 20)]
    assert q.se_ab == pytest.approx(stats.jackknife_se(0.0, [x[0] * x[2] for x in loo])[1], rel=1e-10) and q.se_ab > 0


@pytest.mark.parametrize("positions", [None, [6, 9]])
def test_the_population_loss_terms_are_the_loss_and_its_derivatives_in_ab(positions):
    """``population_loss_terms``: the closed-form loss (whole sequence or summed positions) at ab = c, its slope and
    curvature, against central differences of :func:`companion.mesa.theory.population_loss` / ``position_loss``."""
    law, s, d, T, c, h = "rademacher", 1.3, 4, 11, 0.21, 1e-4

    def L(x):
        if positions is None:
            return float(th.population_loss(law, s, d, T, x))
        return float(np.sum(th.position_loss(law, s, d, np.array(positions, float), x)))

    pred, slope, curv = evidence.population_loss_terms(law, s, d, T, c, positions)
    assert pred == pytest.approx(L(c), rel=1e-12)
    assert slope == pytest.approx((L(c + h) - L(c - h)) / (2 * h), rel=1e-6)
    assert curv == pytest.approx((L(c + h) - 2 * L(c) + L(c - h)) / h**2, rel=1e-4)


def test_the_sparse_gaussian_start_integrates_its_radius_exactly_with_one_degree_of_freedom():
    """x_1 = g e_J has the radius |g|, g^2 ~ chi^2_1 (``companion.mesa.data.RADIAL_DOF``): on the diagonal manifold at c* the radial
    per-sequence losses are the population loss to round-off (the plain mean misses it by several of its SEs of
    a degree-6 quantity); with the Gaussian's d degrees of freedom they would be far off."""
    from companion.mesa.analysis import radial_losses

    d, T = 5, 12
    td = generate("sparse_gaussian", 4000, d, T, 1.0, np.random.default_rng(3), torch.complex128)
    c = th.c_star("sparse_gaussian", 1.0, d, T)
    W = init_diagonal(d, 1.0, c, torch.complex128)
    exact = float(th.population_loss("sparse_gaussian", 1.0, d, T, c))
    assert data.RADIAL_DOF["sparse_gaussian"](d) == 1
    assert radial_losses(td, *W, 1.0, dof=1).mean() == pytest.approx(exact, rel=1e-10)
    assert abs(radial_losses(td, *W, 1.0, dof=d).mean() / exact - 1) > 0.5


@pytest.mark.parametrize("law", ["gaussian", "rademacher"])
def test_the_replicate_loss_is_the_richardson_combination_of_the_replicates_losses_on_one_test_set(law):
    """``replicate_loss``: each replicate's mean loss on the common test set (stream MESA_LOSS_EVAL of the design's
    seed; the Gaussian's radius integrated), combined as (4 L(m) - L(m/4)) / 3; the prediction is the population loss
    at the population-GD ab of the same step and epochs; the floor is |L'| |r| plus the extrapolated cost of the
    entries off the manifold."""
    from companion.mesa.analysis import manifold_part, radial_losses, weights
    from companion.seeds import MESA_LOSS_EVAL

    rep = evidence.Replicates(law, 1.0, 3, 8, 0.5, 1.5, 1e-3, 15, 200, 3, 11, tilt=6 if law == "gaussian" else 0)
    ab = evidence.extrapolated_ab(rep, offmanifold=True)
    q = evidence.replicate_loss(rep, ab, 150, [7])
    td = generate(law, 150, 3, 8, 1.0, MESA_LOSS_EVAL.rng(11), torch.complex128)

    def loss(K, P):
        return radial_losses(td, K, P, 1.0, positions=[7]) if law == "gaussian" else per_sequence_loss(td, K, P, positions=[7])

    big = [train.run(**kw) for kw in rep.big]
    small = [train.run(**kw) for kw in rep.small]
    mean = [np.mean([loss(*weights(r)).mean() for r in rs]) for rs in (big, small)]
    assert q.loss.measured == pytest.approx((4 * mean[0] - mean[1]) / 3, rel=1e-10)
    off = [np.mean([(loss(*weights(r)) - loss(*manifold_part(*weights(r)))).mean() for r in rs]) for rs in (big, small)]
    assert q.off_entries.measured == pytest.approx((4 * off[0] - off[1]) / 3, rel=1e-8, abs=1e-14)
    assert q.predicted == pytest.approx(float(th.position_loss(law, 1.0, 3, 7.0, ab.predicted)), rel=1e-12)
    assert q.floor == pytest.approx(abs(q.slope) * abs(ab.off.measured) + abs(q.off_entries.measured), rel=1e-12)
    assert q.loss.se >= stats.richardson([loss(*weights(r)).mean() for r in big],
                                         [loss(*weights(r)).mean() for r in small])["se"]
