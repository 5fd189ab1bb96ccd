"""The closed-form gradients of companion.cot.grads against torch autograd on the losses of companion.cot.model, and
the training functions of companion.cot.train (closed form + the written-out optimiser) against the autograd +
torch.optim path kept in companion.cot.reference.

Each test is meant to fail on a plausible bug: a transposed Gram matrix or weight block, a prefix sum that includes
the position's successor (tril off by one), a dropped 1/n, a sign or a missing term in the looped backpropagation,
a replicate's gradient taken over another replicate's prompts, an Adam bias correction or learning-rate decay one
step off."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from companion.cot import gd_trajectory, make_generator, outcome_loss, sample_prompts, teacher_forced_loss
from companion.cot.grads import cot_step_grads, looped_isotropic_grads, outcome_loss_grads, teacher_forced_loss_grads
from companion.cot.reference import (
    autograd_isotropic,
    train_full_autograd,
    train_looped_isotropic_autograd,
)
from companion.cot.train import train_full, train_looped_isotropic

RTOL = 1e-10


def _weights(d, R, seed, scale=0.4):
    """Random W_KQ, W_PV (one model when R is None, else R stacked ones) with every entry non-zero, so that no
    block's gradient vanishes by construction."""
    g = make_generator(seed)
    D = 2 * d + 2
    shape = (D, D) if R is None else (R, D, D)
    return [(scale * torch.randn(shape, generator=g, dtype=torch.float64)).requires_grad_() for _ in range(2)]


def _assert_grads(closed, loss, params):
    """Closed-form (loss, grad_W_KQ, grad_W_PV) against autograd of ``loss`` at rtol 1e-10 (atol: 1e-13 of the
    largest entry, for entries that vanish)."""
    ref = torch.autograd.grad(loss, params)
    assert float(closed[0]) == pytest.approx(float(loss.detach()), rel=RTOL, abs=0)
    for c, a in zip(closed[1:], ref):
        assert c.shape == a.shape and c.dtype == torch.float64
        torch.testing.assert_close(c, a, rtol=RTOL, atol=1e-13 * float(a.abs().max()))


SHAPES = [(2, 3, 1, 4, None), (3, 5, 4, 6, None), (4, 9, 6, 3, 3), (3, 4, 7, 4, 2)]  # d, n, k, B per model, R


@pytest.mark.parametrize("d,n,k,B,R", SHAPES)
def test_cot_teacher_forced_gradients_equal_autograd(d, n, k, B, R):
    p = sample_prompts(B * (R or 1), d, n, make_generator(d + 10 * k))
    W_KQ, W_PV = _weights(d, R, k)
    traj = gd_trajectory(p, 0.4, k + 2)  # a longer trajectory: only positions 0..k-1 count
    loss = teacher_forced_loss(p, traj, W_KQ, W_PV, k)
    _assert_grads(teacher_forced_loss_grads(p, traj, W_KQ.detach(), W_PV.detach(), k), loss, [W_KQ, W_PV])
    # the training step's own GD trajectory (step eta) gives the same loss and gradients
    loss = teacher_forced_loss(p, gd_trajectory(p, 0.4, k), W_KQ, W_PV, k)
    _assert_grads(cot_step_grads(p, 0.4, k, W_KQ.detach(), W_PV.detach()), loss, [W_KQ, W_PV])


@pytest.mark.parametrize("d,n,k,B,R", SHAPES)
def test_no_cot_and_looped_gradients_equal_autograd(d, n, k, B, R):
    p = sample_prompts(B * (R or 1), d, n, make_generator(d + 10 * k + 1))
    W_KQ, W_PV = _weights(d, R, k + 1, scale=0.25)  # looped: f applied up to 7 times stays O(1) at this scale
    for objective, loops in (("no_cot", 1), ("looped", 1), ("looped", 2), ("looped", min(k, 4))):
        loss = outcome_loss(p, W_KQ, W_PV, loops, objective)
        _assert_grads(outcome_loss_grads(p, W_KQ.detach(), W_PV.detach(), loops, objective), loss, [W_KQ, W_PV])


@pytest.mark.parametrize("R,B,k", [(1, 5, 1), (3, 4, 3), (2, 6, 5)])
def test_isotropic_looped_gradients_equal_autograd(R, B, k):
    d, n = 3, 5
    p = sample_prompts(R * B, d, n, make_generator(R + k))
    S, w_star = p.S.reshape(R, B, d, d), p.w_star.reshape(R, B, d)
    g = make_generator(7)
    v = 0.3 * torch.randn(R, generator=g, dtype=torch.float64) - 0.2
    w = 1 + 0.3 * torch.randn(R, generator=g, dtype=torch.float64)
    closed = looped_isotropic_grads(S, w_star, v, w, k)
    ref = autograd_isotropic(S, w_star, v, w, k)
    assert float(closed[0]) == pytest.approx(float(ref[0]), rel=RTOL, abs=0)
    for c, a in zip(closed[1:], ref[1:]):
        torch.testing.assert_close(c, a, rtol=RTOL, atol=0)


@pytest.mark.parametrize("objective,k,R,opt", [("cot", 3, 1, "adam"), ("cot", 4, 3, "adam"), ("no_cot", 1, 1, "adam"),
                                               ("no_cot", 1, 2, "gd"), ("looped", 2, 1, "gd"), ("looped", 3, 2, "adam")])
def test_training_equals_the_autograd_path(objective, k, R, opt):
    """The closed-form path (gradients + the written-out Adam/GD with its decay) and autograd + torch.optim give the
    same trained parameters and recorded losses to 1e-10, single models and replicates alike."""
    kw = dict(steps=60, lr=0.02 if opt == "adam" else 0.05, batch=6, seed=5, eval_every=25, eval_batch=20,
              optimizer=opt, lr_final=0.3, replicates=R)
    closed = train_full(objective, 3, 6, k, 0.35, **kw)
    auto = train_full_autograd(objective, 3, 6, k, 0.35, **kw)
    for a, b in ((closed.W_KQ, auto.W_KQ), (closed.W_PV, auto.W_PV)):
        torch.testing.assert_close(a, b, rtol=RTOL, atol=RTOL)
    assert float((closed.W_KQ - torch.as_tensor(closed.snapshots[0][0])).abs().max()) > 1e-3  # the run moved the weights
    torch.testing.assert_close(torch.as_tensor(closed.train_loss), torch.as_tensor(auto.train_loss), rtol=RTOL, atol=0)
    torch.testing.assert_close(torch.as_tensor(closed.eval_loss), torch.as_tensor(auto.eval_loss), rtol=RTOL, atol=0)


def test_clipped_training_equals_the_autograd_path():
    kw = dict(steps=40, lr=0.05, batch=5, seed=2, eval_every=40, eval_batch=10, clip=0.05, replicates=2)
    closed, auto = train_full("cot", 2, 5, 3, 0.3, **kw), train_full_autograd("cot", 2, 5, 3, 0.3, **kw)
    torch.testing.assert_close(closed.W_PV, auto.W_PV, rtol=RTOL, atol=RTOL)
    torch.testing.assert_close(closed.W_KQ, auto.W_KQ, rtol=RTOL, atol=RTOL)


def test_isotropic_training_equals_the_autograd_path():
    kw = dict(steps=80, lr=0.02, lr_final=0.1, batch=6, seed=3, replicates=3)
    v, w = train_looped_isotropic(3, 6, 3, **kw)
    v0, w0 = train_looped_isotropic_autograd(3, 6, 3, **kw)
    assert abs(v - v0).max() <= RTOL * abs(v0).max() and abs(w - w0).max() <= RTOL * abs(w0).max()


def test_training_imports_no_torch_dynamo():
    """torch.optim's optimisers import torch._dynamo (about 1 s per process); the closed-form path does not."""
    code = ("import sys\nfrom companion.cot.train import train_full, train_looped_isotropic\n"
            "train_full('cot', 2, 4, 2, steps=3, eval_every=3, eval_batch=4, batch=4, replicates=2)\n"
            "train_looped_isotropic(2, 4, 2, steps=3, lr=0.01, batch=4)\n"
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("objective,k", [("cot", 3), ("no_cot", 1), ("looped", 1), ("looped", 3)])
def test_gradients_with_rows_cut_into_pieces_equal_autograd(monkeypatch, objective, k):
    """The stacked products cut each replicate's rows into pieces (one OpenBLAS thread each) at the book's sizes only;
    force several pieces at test sizes (a piece summed twice or dropped, or rows of another replicate, would show)."""
    import companion.cot.grads as grads

    d, n, B, R = 3, 5, 6, 2
    monkeypatch.setattr(grads, "_ONE_THREAD_MNK", 1)
    assert grads._pieces(B, 10) == B  # one prompt per piece
    monkeypatch.setattr(grads, "_ONE_THREAD_MNK", 2 * (k * (2 * d + 2) ** 2 if objective != "looped" else
                                                       (n + 1) * (2 * d + 2) ** 2))
    assert grads._pieces(B, 1) == 1 and grads._pieces(B, grads._ONE_THREAD_MNK // 2) == 3  # two prompts per piece
    p = sample_prompts(B * R, d, n, make_generator(11 + k))
    W_KQ, W_PV = _weights(d, R, 3 + k, scale=0.25)
    if objective == "cot":
        loss = teacher_forced_loss(p, gd_trajectory(p, 0.4, k), W_KQ, W_PV, k)
        closed = cot_step_grads(p, 0.4, k, W_KQ.detach(), W_PV.detach())
    else:
        loss = outcome_loss(p, W_KQ, W_PV, k, objective)
        closed = outcome_loss_grads(p, W_KQ.detach(), W_PV.detach(), k, objective)
    _assert_grads(closed, loss, [W_KQ, W_PV])
