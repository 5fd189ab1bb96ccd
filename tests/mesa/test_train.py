"""companion.mesa.train: GD semantics, masking, initialisations, validation, divergence, run cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from companion import cache
from companion.mesa import theory as th
from companion.mesa import train as train_module
from companion.mesa.data import generate
from companion.mesa.empirical import diagonal_gd, diagonal_stats
from companion.mesa.model import loss_and_grad, per_sequence_loss
from companion.mesa.train import RunConfig, TrainingDiverged, init_diagonal, offdiag_mask, run, train
from companion.params import ParameterError

SMALL = dict(d=3, T=8, m=60, m_test=30, seed=4)


def test_one_epoch_is_one_gd_step():
    r = run(law="gaussian", scale=1.0, a0=0.3, b0=0.7, lr=1e-3, epochs=1, dtype="complex128", **SMALL)
    data = generate("gaussian", 60, 3, 8, 1.0, np.random.default_rng([4, 0]), torch.complex128)
    W_KQ, W_PV = init_diagonal(3, 0.3, 0.7, torch.complex128)
    L, gA, gP = loss_and_grad(data, W_KQ, W_PV)
    assert np.allclose(r.W_KQ, (W_KQ - 1e-3 * gA).numpy(), atol=1e-14)
    assert np.allclose(r.W_PV, (W_PV - 1e-3 * gP).numpy(), atol=1e-14)
    assert r.train_loss[0] == pytest.approx(float(L), rel=1e-12)


def test_complex64_training_tracks_complex128():
    kw = dict(law="sparse", scale=1.0, a0=0.5, b0=1.5, lr=1e-2, epochs=40, **SMALL)
    r64 = run(dtype="complex64", **kw)
    r128 = run(dtype="complex128", **kw)
    assert np.allclose(r64.ab, r128.ab, rtol=1e-4)


def test_mask_and_restricted_gd():
    """The mask keeps the red off-diagonals at zero; the first step from the diagonal init moves the
    diagonal exactly as the restricted GD of companion.mesa.empirical (later the free other blocks, which
    pick up finite-sample gradients, make the two differ)."""
    kw = dict(law="gaussian", scale=1.0, a0=0.5, b0=1.5, lr=2e-3, epochs=30, mask=True, dtype="complex128", **SMALL)
    r = run(**kw)
    assert r.offdiag_kq.max() == 0 and r.offdiag_pv.max() == 0
    mk, mp = offdiag_mask(3)
    assert np.all(r.W_KQ[mk.numpy()] == 0) and np.all(r.W_PV[mp.numpy()] == 0)
    data = generate("gaussian", 60, 3, 8, 1.0, np.random.default_rng([4, 0]), torch.complex128)
    Q, P = diagonal_stats(data, 1)
    ab = diagonal_gd(0.5, 1.5, 2e-3, 30, Q[0], P[0])
    assert abs(r.ab[1] - ab[1]) <= 1e-12 * abs(ab[1])


def test_gaussian_init_and_ratio():
    r = run(law="gaussian", scale=1.0, init="gaussian", sigma_w=0.1, lr=1e-3, epochs=3, **SMALL)
    assert np.abs(r.W_KQ0).max() > 0 and np.abs(r.W_PV0[:, 3:]).max() > 0
    assert r.ratio is not None and len(r.ratio) == len(r.test_epochs) == 2  # epochs 0 and 3 (test_every 10)
    assert run(law="sparse", scale=1.0, a0=0.1, b0=0.1, lr=1e-3, epochs=2, **SMALL).ratio is None


def test_validation_and_divergence():
    with pytest.raises(ParameterError, match="'law'.*did you mean 'gaussian'"):
        run(law="gausian", lr=1e-3, epochs=1, **SMALL)
    with pytest.raises(ParameterError, match="'lr'"):
        run(law="gaussian", lr=-1.0, epochs=1, **SMALL)
    with pytest.raises(ParameterError, match="'epoch'|unknown run option"):
        run(law="gaussian", lr=1e-3, epoch=1, **SMALL)
    al, be = th.alpha_beta("sparse", 1.0, 3, 8)
    bad = 3.0 / (al * 2 * 1.2**2)
    with pytest.raises(ParameterError, match="'lr'.*stability bound"):
        run(law="sparse", scale=1.0, a0=1.2, b0=1.2, lr=bad, epochs=50, **SMALL)
    with pytest.raises(TrainingDiverged, match="'lr'"):
        run(law="sparse", scale=1.0, a0=1.2, b0=1.2, lr=bad, epochs=200, check_lr=False, **SMALL)


def test_run_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPANION_CACHE_DIR", str(tmp_path))
    kw = dict(law="gaussian", scale=1.0, a0=0.1, b0=0.1, lr=1e-3, epochs=2, **SMALL)
    r1 = run(**kw)
    assert any(tmp_path.rglob("*.pkl")) or any(tmp_path.rglob("output.pkl"))
    # one folder, named by the training module and its import closure (the name companion book's pruning reads)
    assert [p.name for p in tmp_path.iterdir()] == [train_module.cache_dir().name]
    assert train_module.cache_dir().name == "mesa.train-" + cache.source_hash(train_module.RUN_SOURCES)
    r2 = run(**kw)
    assert np.array_equal(r1.ab, r2.ab) and np.array_equal(r1.W_KQ, r2.W_KQ)
    r3 = run(**dict(kw, seed=5))
    assert not np.array_equal(r1.ab, r3.ab)


def test_config_roundtrip():
    cfg = RunConfig(law="full_one", lr=5e-4, epochs=0, **SMALL)
    r = train(cfg)
    assert r.ab[0] == pytest.approx(0.01) and len(r.ab) == 1


def test_gaussian_init_has_its_own_seed_stream():
    """Streams of a run with seed s: training data [s, 0], test data [s, 1], Gaussian init [s, 2]. An init
    drawn from the data's stream would be correlated with the first training sequences."""
    from companion.mesa.train import init_gaussian

    d, s, sw = 3, 5, 0.1
    r = run(law="gaussian", scale=1.0, d=d, T=6, m=20, m_test=10, init="gaussian", sigma_w=sw, lr=1e-4, epochs=1, seed=s)
    for stream, same in ((0, False), (1, False), (2, True)):
        W_KQ, W_PV = init_gaussian(d, sw, np.random.default_rng([s, stream]), torch.complex128)
        match = np.allclose(r.W_KQ0, W_KQ.numpy()) and np.allclose(r.W_PV0, W_PV.numpy())
        assert match == same, f"stream [{s}, {stream}]"


def test_test_set_is_not_the_training_set():
    """The logged test loss is on the test stream [seed, 1], not on the training set [seed, 0]."""
    from companion.mesa.analysis import test_data, train_data, weights

    r = run(law="gaussian", scale=1.0, d=3, T=8, m=60, m_test=50, a0=0.5, b0=1.5, lr=1e-3, epochs=3, seed=4)
    te, tr = test_data(r), train_data(r)
    L_te = float(per_sequence_loss(te, *weights(r)).mean())
    L_tr = float(per_sequence_loss(tr.subset(slice(0, 50)), *weights(r)).mean())
    assert r.test_loss[-1] == pytest.approx(L_te, rel=1e-5)
    assert abs(L_te - L_tr) > 1e-3 * L_te
    assert not torch.allclose(te.x1, tr.x1[:50])


@pytest.mark.parametrize("d", [1, 2, 5, 8])
def test_the_records_reduced_in_stacks_of_epochs_equal_those_of_one_epoch_at_a_time(d):
    """The trainer reduces its per-epoch records (diagonals, largest off-diagonal, other and imaginary entries) in
    stacks of epochs (``train._red_other_stacked``): bit for bit what the per-epoch reduction gives."""
    import numpy as np
    import torch

    from companion.mesa import train as tr

    g = torch.Generator().manual_seed(d)
    for dt in (torch.complex64, torch.complex128):
        KQ = torch.randn(7, 2 * d, 2 * d, dtype=dt, generator=g)
        PV = torch.randn(7, d, 2 * d, dtype=dt, generator=g)
        a, b, okq, opv, oth, im = tr._red_other_stacked(KQ, PV, d)
        for i in range(7):
            a1, b1, okq1, opv1, oth1, im1 = tr._red_other(KQ[i], PV[i], d)
            assert torch.equal(a[i], a1) and torch.equal(b[i], b1)
            assert float(a[i].double().mean()) == float(a.double().mean(1)[i])
            assert (okq[i], opv[i], oth[i], im[i]) == (okq1, opv1, oth1, im1)
            assert np.array_equal((a[i] * b[i]).double().numpy(), (a * b).double().numpy()[i])


def test_a_runs_records_have_one_entry_per_epoch_from_the_init_to_the_last_weights():
    # 300 epochs: the records are reduced in stacks of 256 epochs and a last stack of 45
    import numpy as np

    from companion.mesa.train import RunConfig, train

    d, E = 3, 300
    r = train(RunConfig(law="gaussian", scale=1.0, d=d, T=12, m=160, m_test=20, a0=0.5, b0=1.5, lr=1e-3, epochs=E, seed=4))
    for name in ("ab", "a_mean", "b_mean", "offdiag_kq", "offdiag_pv", "other_max", "imag_max", "train_loss"):
        assert len(getattr(r, name)) == E + 1, name
    assert r.ab_diag.shape == (E + 1, d)
    assert (r.a_mean[0], r.b_mean[0]) == (0.5, 1.5) and r.ab[0] == np.float32(0.5) * np.float32(1.5)
    a, b = np.diag(r.W_KQ[d:, :d]).real, np.diag(r.W_PV[:, :d]).real
    assert r.a_mean[-1] == pytest.approx(a.astype(float).mean(), rel=1e-15)
    assert r.b_mean[-1] == pytest.approx(b.astype(float).mean(), rel=1e-15)
    assert np.array_equal(r.ab_diag[-1], (a * b).astype(float))
    assert r.other_max[-1] == np.abs(np.concatenate([r.W_KQ[:d].ravel(), r.W_KQ[d:, d:].ravel(), r.W_PV[:, d:].ravel()])).max()


def test_a_tilted_set_is_an_unbiased_importance_sample_of_the_gaussian_law():
    """The weights w_n = E r^6 / r_n^6 of a set tilted by r^6 (companion.mesa.data.generate): weighted means of r^k
    are unbiased for the Gaussian law's moments (E r^2 = d, E r^4 = d(d+2)), within 4 of their SEs; w r^6 is the
    constant E r^6. Fails if the radius is drawn from another chi law or the weights use another power or mean."""
    d = 4
    data = generate("gaussian", 200_000, d, 3, 1.0, np.random.default_rng(9), torch.complex128, tilt=6)
    r = np.linalg.norm(data.x1.real.numpy(), axis=1)
    w = data.w.numpy()
    for k, exact in ((0, 1.0), (2, d), (4, d * (d + 2))):
        v = w * r**k
        assert abs(v.mean() - exact) < 4 * v.std() / np.sqrt(len(v)), k
    assert np.allclose(w * r**6, d * (d + 2) * (d + 4), rtol=1e-9)
    u = data.x1.real.numpy() / r[:, None]  # the directions stay uniform: their second moment is I/d
    assert np.allclose(u.T @ u / len(u), np.eye(d) / d, atol=4e-3)
    assert generate("gaussian", 50, d, 3, 1.0, 2, tilt=0).w is None
    with pytest.raises(ParameterError, match="'tilt'"):
        generate("sparse", 50, d, 3, 1.0, 2, tilt=6)
    with pytest.raises(ParameterError, match="'tilt'"):
        run(law="rademacher", lr=1e-3, epochs=1, tilt=6, **SMALL)


def test_a_tilted_sparse_gaussian_set_keeps_one_signed_axis_and_reweights_its_radius():
    """x_1 = g e_J tilted by r^6 (r = |g|, r^2 ~ chi^2_1 at scale 1, tilted to chi^2_7): one nonzero coordinate per
    sequence on a uniform axis with a uniform sign; weighted means of g^2, g^4 are the law's 1 and 3 within 4 SEs
    and w g^6 is the constant E g^6 = 15. Fails if the radius gets the Gaussian's d degrees of freedom, if the axis
    or sign is not uniform, or if the scale is applied twice."""
    d, s = 5, 1.7
    data = generate("sparse_gaussian", 200_000, d, 3, s, np.random.default_rng(4), torch.complex128, tilt=6)
    x = data.x1.real.numpy() / s
    w = data.w.numpy()
    assert np.all((x != 0).sum(axis=1) == 1)
    g = x.sum(axis=1)
    for k, exact in ((0, 1.0), (2, 1.0), (4, 3.0)):
        v = w * g**k
        assert abs(v.mean() - exact) < 4 * v.std() / np.sqrt(len(v)), k
    assert np.allclose(w * g**6, 15.0, rtol=1e-9)
    axis = np.abs(x).argmax(axis=1)
    assert np.allclose(np.bincount(axis, minlength=d) / len(x), 1 / d, atol=5e-3)
    assert abs(np.mean(np.sign(g))) < 5e-3
    assert run(law="sparse_gaussian", lr=1e-3, epochs=1, tilt=6, **SMALL).config["tilt"] == 6


def test_the_loss_of_a_tilted_set_is_its_weighted_mean_over_m_and_one_epoch_is_the_restricted_step():
    """A tilted training set's loss is (1/m) sum_n w_n l_n (not divided by the sum of the weights: the unbiased
    estimate of the population loss), its first GD step is the restricted GD's on the weighted statistics
    (companion.mesa.empirical.diagonal_stats), and the run trains on that set (fails if the run, the loss or the
    statistics drop or self-normalise the weights)."""
    kw = dict(law="gaussian", scale=1.0, a0=0.5, b0=1.5, lr=2e-3, epochs=1, dtype="complex128", tilt=6, **SMALL)
    r = run(**kw)
    data = generate("gaussian", 60, 3, 8, 1.0, np.random.default_rng([4, 0]), torch.complex128, tilt=6)
    W_KQ, W_PV = init_diagonal(3, 0.5, 1.5, torch.complex128)
    per = per_sequence_loss(data, W_KQ, W_PV)
    L, gA, gP = loss_and_grad(data, W_KQ, W_PV)
    assert float(L) == pytest.approx(float((data.w.numpy() * per).sum() / 60), rel=1e-12)
    assert float(data.w.sum()) != pytest.approx(60, rel=1e-3)  # self-normalising would differ
    assert r.train_loss[0] == pytest.approx(float(L), rel=1e-12)
    assert np.allclose(r.W_KQ, (W_KQ - 2e-3 * gA).numpy(), atol=1e-14)
    Q, P = diagonal_stats(data, 1)
    ab = diagonal_gd(0.5, 1.5, 2e-3, 1, Q[0], P[0])
    assert abs(r.ab[1] - ab[1]) <= 1e-12 * abs(ab[1])
    with pytest.raises(ParameterError, match="'weights'"):
        loss_and_grad(data, W_KQ, W_PV, weights=np.ones(60))
