"""The cot trainer's torch path (``train_full(device=...)``, :mod:`companion.cot.grads_torch`), which runs on a GPU:
its gradients against autograd, and its training runs against the NumPy path, here on the CPU (``"cpu:0"`` takes
the torch path); on a machine with CUDA the same run on ``"cuda"``.

Meant to fail on: a transposed weight block or Gram matrix in the torch port, a prefix mask off by one, a
replicate's rows mixed with another's, the minibatch or the Adam moments left on another device, a device
argument that is silently ignored (the NumPy path taken), a CUDA request without CUDA that is not refused."""

from __future__ import annotations

import pytest
import torch

import companion.cot.grads_torch as grads_torch
from companion.cot import make_generator, outcome_loss, sample_prompts, teacher_forced_loss
from companion.cot.data import gd_trajectory
from companion.cot.train import train_full
from companion.params import ParameterError

RTOL = 1e-10
SHAPES = [(2, 3, 1, 4, None), (3, 5, 4, 6, None), (4, 9, 6, 3, 3), (3, 4, 7, 4, 2)]  # d, n, k, B per model, R


def _weights(d, R, seed, scale=0.4):
    g = make_generator(seed)
    D = 2 * d + 2
    shape = (D, D) if R is None else (R, D, D)
    return [(scale * torch.randn(shape, generator=g, dtype=torch.float64)).requires_grad_() for _ in range(2)]


def _assert_grads(closed, loss, params):
    ref = torch.autograd.grad(loss, params)
    assert float(closed[0]) == pytest.approx(float(loss.detach()), rel=RTOL, abs=0)
    for c, a in zip(closed[1:], ref):
        assert c.shape == a.shape and c.dtype == torch.float64
        torch.testing.assert_close(c, a, rtol=RTOL, atol=1e-13 * float(a.abs().max()))


@pytest.mark.parametrize("d,n,k,B,R", SHAPES)
def test_torch_gradients_equal_autograd(d, n, k, B, R):
    """Every loss the book trains (CoT on the step's own GD trajectory, no-CoT, looped with k layers)."""
    p = sample_prompts(B * (R or 1), d, n, make_generator(d + 10 * k))
    W_KQ, W_PV = _weights(d, R, k)
    K, V = W_KQ.detach(), W_PV.detach()
    loss = teacher_forced_loss(p, gd_trajectory(p, 0.4, k), W_KQ, W_PV, k)
    _assert_grads(grads_torch.cot_step_grads(p, 0.4, k, K, V), loss, [W_KQ, W_PV])
    W_KQ, W_PV = _weights(d, R, k + 1, scale=0.25)  # looped: f applied up to 4 times stays O(1) at this scale
    K, V = W_KQ.detach(), W_PV.detach()
    for objective, loops in (("no_cot", 1), ("looped", 1), ("looped", 2), ("looped", min(k, 4))):
        _assert_grads(grads_torch.outcome_loss_grads(p, K, V, loops, objective),
                      outcome_loss(p, W_KQ, W_PV, loops, objective), [W_KQ, W_PV])


def test_torch_gradients_refuse_an_unknown_objective():
    p = sample_prompts(2, 2, 3, make_generator(0))
    K, V = (w.detach() for w in _weights(2, None, 0))
    with pytest.raises(ParameterError, match="parameter 'objective'"):
        grads_torch.outcome_loss_grads(p, K, V, 1, "cot")


@pytest.mark.parametrize("objective,k,R", [("cot", 3, 1), ("cot", 4, 3), ("no_cot", 1, 2), ("looped", 3, 2)])
def test_training_on_a_torch_device_equals_the_numpy_path(monkeypatch, objective, k, R):
    """``device="cpu:0"`` trains through the torch gradients (counted) and gives the NumPy path's model, losses and
    snapshots to 1e-10; the weights come back on the CPU."""
    calls = []
    for name in ("cot_step_grads", "outcome_loss_grads"):
        real = getattr(grads_torch, name)
        monkeypatch.setattr(grads_torch, name, lambda *a, _f=real, **kw: calls.append(1) or _f(*a, **kw))
    kw = dict(steps=50, lr=0.02, lr_final=0.3, batch=6, seed=4, eval_every=20, eval_batch=15, replicates=R)
    ref = train_full(objective, 3, 6, k, 0.35, **kw)
    assert not calls
    dev = train_full(objective, 3, 6, k, 0.35, **kw, device="cpu:0")
    assert len(calls) == 50
    assert dev.W_KQ.device.type == "cpu"
    for a, b in ((dev.W_KQ, ref.W_KQ), (dev.W_PV, ref.W_PV)):
        torch.testing.assert_close(a, b, rtol=RTOL, atol=RTOL)
    for a, b in ((dev.train_loss, ref.train_loss), (dev.eval_loss, ref.eval_loss)):
        torch.testing.assert_close(torch.as_tensor(a), torch.as_tensor(b), rtol=RTOL, atol=0)
    assert float(abs(ref.W_KQ - torch.as_tensor(ref.snapshots[0][0])).max()) > 1e-3  # the run moved the weights


def test_a_device_that_is_not_one_is_refused_naming_device():
    with pytest.raises(ParameterError, match="parameter 'device'"):
        train_full("cot", 2, 4, 2, steps=2, device="gpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_refused_naming_device():
    with pytest.raises(ParameterError, match="parameter 'device'.*is_available"):
        train_full("cot", 2, 4, 2, steps=2, device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_training_on_cuda_equals_the_numpy_path():
    kw = dict(steps=80, lr=0.02, batch=16, seed=1, eval_every=40, eval_batch=50, replicates=3)
    ref, gpu = train_full("cot", 4, 10, 4, 0.3, **kw), train_full("cot", 4, 10, 4, 0.3, **kw, device="cuda")
    torch.testing.assert_close(gpu.W_KQ, ref.W_KQ, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(gpu.W_PV, ref.W_PV, rtol=1e-9, atol=1e-9)
