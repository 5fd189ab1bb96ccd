"""The torch epoch (companion.mesa.torch_epoch, the GPU path) against the fused CPU kernel
(companion.mesa.model.loss_grad_fast) at complex128, rtol 1e-10: d in {1, 2, 5}, several T, position subsets,
weighted sequences, chunks that split the data; against the prefix-sum definition
(companion.mesa.lanes.reference.definition) for data with coinciding phases, which the kernel does not take;
complex64; and the one-line refusal of a CUDA device where there is none. Runs on the CPU (the same code runs
on a GPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from companion.mesa import torch_epoch
from companion.mesa.data import ARData, generate
from companion.mesa.lanes.reference import definition
from companion.mesa.model import loss_grad_fast
from companion.mesa.train import init_gaussian
from companion.params import ParameterError


def _rel(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max())


def _weights(d: int, seed: int):
    A, Pm = init_gaussian(d, 0.4, np.random.default_rng(seed), torch.complex128)
    gen = torch.Generator().manual_seed(seed)
    return A + 0.3j * torch.randn(A.shape, dtype=torch.float64, generator=gen), \
        Pm + 0.2j * torch.randn(Pm.shape, dtype=torch.float64, generator=gen)


@pytest.mark.parametrize("d,T", [(1, 5), (2, 17), (5, 40), (5, 3)])
def test_equals_the_kernel_complex128(d, T):
    # 37 sequences in chunks of 10 (the last one short): a chunk offset or a lost chunk changes the sums
    m = 37
    data = generate("gaussian", m, d, T, 1.3, rng=d + T)
    A, Pm = _weights(d, 7 * d)
    w = np.random.default_rng(3).uniform(0, 2, m)
    for weights in (None, w):
        for pos in (None, [2, T - 1], [T - 1], list(range(T - 1, 1, -2))):
            L0, gA0, gP0 = loss_grad_fast(data, A, Pm, weights=weights, positions=pos)
            L1, gA1, gP1 = torch_epoch.loss_grad(data, A, Pm, weights=weights, positions=pos, chunk=10)
            assert abs(float(L1) - float(L0)) <= 1e-10 * float(L0)
            assert _rel(gA1, gA0) <= 1e-10 and _rel(gP1, gP0) <= 1e-10
            assert gA1.dtype == gP1.dtype == torch.complex128 and L1.dtype == torch.float64


def test_coinciding_phases_against_the_definition():
    # grid phases: two coordinates of a sequence share a phase, where sum_r (lam_j conj lam_k)^r = t and K has
    # no entry; the kernel refuses such data, the torch epoch takes them
    m, d, T = 6, 3, 9
    rng = np.random.default_rng(5)
    theta = rng.choice(np.array([0.0, np.pi / 2, np.pi, 3 * np.pi / 2]), size=(m, d))
    theta[:, 1] = theta[:, 0]
    x1 = rng.standard_normal((m, d)) + 0.5j * rng.standard_normal((m, d))
    A, Pm = _weights(d, 1)
    w = rng.uniform(0.5, 1.5, m)
    pos = [2, 5, 8]
    loss, gA0, gP0, _ = definition(theta, x1, pos, A.numpy(), Pm.numpy(), w / w.sum())
    data = ARData(torch.from_numpy(x1), torch.from_numpy(np.exp(1j * theta)), T, theta)
    L1, gA1, gP1 = torch_epoch.loss_grad(data, A, Pm, weights=w, positions=pos)
    assert abs(float(L1) - float(loss @ (w / w.sum()))) <= 1e-10 * float(L1)
    assert _rel(gA1, torch.from_numpy(gA0)) <= 1e-10 and _rel(gP1, torch.from_numpy(gP0)) <= 1e-10


def test_per_sequence_losses_and_complex64():
    d, T, m = 5, 100, 300
    data = generate("gaussian", m, d, T, 1.0, rng=6)
    A, Pm = _weights(d, 2)
    ep = torch_epoch.Epoch(data.theta, data.x1, np.arange(2, T), torch.complex128, "cpu", chunk=64)
    L, gA, gP, per_seq = ep(A, Pm)
    L0, gA0, gP0 = loss_grad_fast(data, A, Pm)
    assert abs(float(per_seq.mean()) - float(L0)) <= 1e-10 * float(L0)
    d32 = data.to(torch.complex64)
    L1, gA1, gP1 = torch_epoch.loss_grad(d32, A.to(torch.complex64), Pm.to(torch.complex64))
    assert gA1.dtype == torch.complex64
    # float32 round-off over ~100 positions, as for the kernel
    assert abs(float(L1) - float(L0)) <= 1e-5 * float(L0)
    assert _rel(gA1.to(torch.complex128), gA0) <= 1e-5 and _rel(gP1.to(torch.complex128), gP0) <= 1e-5


def test_refusals_name_the_parameter(monkeypatch):
    data = generate("gaussian", 4, 2, 6, 1.0, rng=0)
    A, Pm = _weights(2, 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ParameterError, match="parameter 'device'.*is_available"):
        torch_epoch.loss_grad(data, A, Pm, device="cuda")
    with pytest.raises(ParameterError, match="parameter 'device'"):
        torch_epoch.check_device("gpu")
    with pytest.raises(ParameterError, match="parameter 'positions'"):
        torch_epoch.loss_grad(data, A, Pm, positions=[6])
    with pytest.raises(ParameterError, match="parameter 'weights'"):
        torch_epoch.loss_grad(data, A, Pm, weights=[1.0, -1.0, 1.0, 1.0])
    with pytest.raises(ParameterError, match="parameter 'W_PV'"):
        torch_epoch.loss_grad(data, A, Pm[:, :2])


def test_training_on_a_torch_device_equals_the_kernel(monkeypatch):
    """``run(device=...)``: any device but "cpu" trains through the torch epoch ("cpu:0" runs it here, as
    "cuda" does on a GPU); the trained parameters equal the kernel's at complex128."""
    from companion.mesa.train import RunConfig, train

    cfg = dict(law="gaussian", d=3, T=12, m=64, m_test=32, a0=0.5, b0=1.5, lr=1e-3, epochs=6, test_every=3,
               dtype="complex128", seed=4)
    kernel = train(RunConfig(**cfg))
    calls = []
    real = torch_epoch.loss_grad
    monkeypatch.setattr(torch_epoch, "loss_grad", lambda *a, **k: calls.append(k["device"]) or real(*a, **k))
    on_torch = train(RunConfig(**cfg, device="cpu:0"))
    assert calls and set(calls) == {"cpu:0"}
    assert np.allclose(on_torch.ab, kernel.ab, rtol=1e-10, atol=0)
    assert _rel(torch.as_tensor(on_torch.W_KQ), torch.as_tensor(kernel.W_KQ)) < 1e-10
    assert np.allclose(on_torch.train_loss, kernel.train_loss, rtol=1e-10, atol=0)


def test_a_cuda_run_without_cuda_is_refused_naming_device(monkeypatch):
    from companion.mesa.train import RunConfig

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ParameterError, match="device"):
        RunConfig(device="cuda").validated()
