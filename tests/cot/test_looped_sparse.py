"""The sparse-block looped transformers of the looped page (companion.cot.results.looped.train_looped_sparse): only the
blocks W13 and V31 move, the masked transformer gradient is the gradient of the sparse recursion, and the replicates
are independent runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from companion.cot.data import make_generator, sample_prompts
from companion.cot.grads import outcome_loss_grads
from companion.cot.model import sparse_parameters
from companion.cot.results.looped import train_looped_sparse
from companion.params import TrainingDiverged
from companion.seeds import replicate_seed

KW = dict(steps=20, lr=0.01, lr_final=0.5, batch=8)


def test_only_the_sparse_blocks_train():
    d = 3
    W_KQ, W_PV = train_looped_sparse(d, 7, 2, replicates=2, seed=5, **KW)
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


def test_replicates_are_independent_runs():
    W_KQ, W_PV = train_looped_sparse(2, 5, 2, replicates=2, seed=4, **KW)
    for r in range(2):
        one_KQ, one_PV = train_looped_sparse(2, 5, 2, replicates=1, seed=replicate_seed(4, r), **KW)
        assert torch.allclose(W_KQ[r], one_KQ[0], rtol=1e-9, atol=1e-12)
        assert torch.allclose(W_PV[r], one_PV[0], rtol=1e-9, atol=1e-12)


def test_divergence_raises():
    with np.errstate(all="ignore"), pytest.raises(TrainingDiverged, match="sparse looped models diverged"):
        train_looped_sparse(3, 6, 20, replicates=1, seed=0, steps=50, lr=1e6, lr_final=1.0, batch=8)
