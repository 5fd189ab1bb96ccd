"""Training: full-parameter Adam/GD from random initialisation (fresh prompts every step, float64).

The restricted gradient flow of {prf:ref}`cot-thm-4-1` is theory and lives in :mod:`companion.cot.theory`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from companion import replicate_seed
from companion.cache import cached
from companion.params import ParameterError, choice, integer, real

from .data import Prompts, gd_trajectory, make_generator, sample_prompts
from .model import (
    cot_inference,
    looped_predict,
    no_cot_predict,
    outcome_loss,
    per_prompt_error,
    teacher_forced_loss,
)

__all__ = ["TrainResult", "train_full", "cached_train_full", "evaluate", "replicate_seed", "train_looped_isotropic"]


class threads1:
    """Context manager: torch on one thread (tiny matrices: one thread is faster and does not fight other
    processes on a shared machine)."""

    def __enter__(self):
        self.n = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc):
        torch.set_num_threads(self.n)


@dataclass
class TrainResult:
    """One trained model, or R replicates trained side by side (``replicates=R``): then ``W_KQ``, ``W_PV`` are
    (R, D, D), ``eval_loss`` is (len(steps), R), ``train_loss`` the replicates' mean, and :meth:`replicate`
    gives one of them as a single-model result."""

    W_KQ: torch.Tensor
    W_PV: torch.Tensor
    steps: np.ndarray  # steps at which the evaluation loss was recorded
    eval_loss: np.ndarray  # evaluation loss (7) on a fixed seeded set, at ``steps``
    train_loss: np.ndarray  # training loss of every step's minibatch
    snapshots: list = field(default_factory=list)  # (W_KQ, W_PV) as numpy arrays at ``steps``
    config: dict = field(default_factory=dict)

    @property
    def replicates(self) -> int:
        return self.W_KQ.shape[0] if self.W_KQ.dim() == 3 else 1

    def replicate(self, r: int) -> "TrainResult":
        """Replicate ``r`` as a single-model result."""
        if self.W_KQ.dim() == 2:
            if r != 0:
                raise IndexError(f"a single-model result has only replicate 0; got {r}")
            return self
        return TrainResult(self.W_KQ[r], self.W_PV[r], self.steps, self.eval_loss[:, r], self.train_loss,
                           [(a[r], b[r]) for a, b in self.snapshots], dict(self.config, replicate=r))


def evaluate(objective: str, prompts, W_KQ, W_PV, k: int) -> torch.Tensor:
    """Per-prompt ||w_hat - w*||^2 of the model's final estimate (CoT: autoregressive k steps); with R stacked
    replicate models (weights (R, D, D)) every model meets the same prompts and the result is (R, B)."""
    if W_KQ.dim() == 3:
        R = W_KQ.shape[0]
        prompts = Prompts(prompts.X.repeat(R, 1, 1), prompts.w_star.repeat(R, 1))
    with torch.no_grad():
        if objective == "cot":
            w_hat = cot_inference(prompts, W_KQ, W_PV, k)[:, -1]
        elif objective == "no_cot":
            w_hat = no_cot_predict(prompts, W_KQ, W_PV)
        else:
            w_hat = looped_predict(prompts, W_KQ, W_PV, k)
        e = per_prompt_error(w_hat, prompts)
        return e.reshape(W_KQ.shape[0], -1) if W_KQ.dim() == 3 else e


def train_full(objective: str, d: int, n: int, k: int, eta: float = 0.3, *, steps: int = 3000, lr: float = 1e-3,
               batch: int = 64, seed: int = 0, init_scale: float = 0.1, optimizer: str = "adam",
               lr_final: float = 1.0, eval_every: int = 100, eval_batch: int = 1000, clip: float | None = None,
               blowup: float = 1e4, replicates: int = 1) -> TrainResult:
    """Train all (2d+2)^2 entries of W_KQ and W_PV from W ~ N(0, init_scale^2 / D) on fresh minibatches.

    ``objective``: ``"cot"`` (teacher-forced loss (6), k positions, GD step ``eta`` in the data),
    ``"no_cot"`` (one layer, target w*) or ``"looped"`` (f applied k times, target w*). The learning rate
    decays geometrically from ``lr`` to ``lr * lr_final``. Raises :class:`ParameterError` naming ``lr``
    if the training loss becomes non-finite or grows by more than ``blowup`` over its initial value.

    ``replicates=R > 1`` trains R independent models side by side in one vectorised run (a leading replicate
    dimension): replicate r has its own initialisation and minibatches from the seed :func:`replicate_seed`
    (seed, r), so replicate 0 is the single run with ``seed``; Adam acts entry-wise, and the summed loss gives
    each replicate exactly its own gradient, so the replicates are independent training runs.
    """
    objective = choice("objective", objective, ["cot", "no_cot", "looped"])
    d = integer("d", d, min=1)
    n = integer("n", n, min=1)
    k = integer("k", k, min=1)
    eta = real("eta", eta, min=0, min_open=True)
    steps = integer("steps", steps, min=1)
    lr = real("lr", lr, min=0, min_open=True)
    batch = integer("batch", batch, min=1)
    init_scale = real("init_scale", init_scale, min=0)
    optimizer = choice("optimizer", optimizer, ["adam", "gd"])
    lr_final = real("lr_final", lr_final, min=0, max=1, min_open=True)
    eval_every = integer("eval_every", eval_every, min=1)
    eval_batch = integer("eval_batch", eval_batch, min=1)
    replicates = integer("replicates", replicates, min=1)
    with threads1():
        return _train_full(objective, d, n, k, eta, steps, lr, batch, seed, init_scale, optimizer, lr_final,
                           eval_every, eval_batch, clip, blowup, replicates)


def _stack_prompts(parts: list) -> Prompts:
    return parts[0] if len(parts) == 1 else Prompts(torch.cat([p.X for p in parts]), torch.cat([p.w_star for p in parts]))


def _train_full(objective, d, n, k, eta, steps, lr, batch, seed, init_scale, optimizer, lr_final, eval_every,
                eval_batch, clip, blowup, R) -> TrainResult:
    D = 2 * d + 2
    gens = [make_generator(replicate_seed(seed, r)) for r in range(R)]
    inits = [[init_scale / math.sqrt(D) * torch.randn(D, D, generator=g, dtype=torch.float64) for _ in range(2)]
             for g in gens]
    W_KQ = torch.stack([a for a, _ in inits]).squeeze(0).requires_grad_()  # (D, D) for one model, else (R, D, D)
    W_PV = torch.stack([b for _, b in inits]).squeeze(0).requires_grad_()
    g_eval = make_generator(seed + 10_000_019)
    eval_prompts = sample_prompts(eval_batch, d, n, g_eval)
    params = [W_KQ, W_PV]
    opt = torch.optim.Adam(params, lr=lr) if optimizer == "adam" else torch.optim.SGD(params, lr=lr)
    gamma = lr_final ** (1.0 / steps)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma)
    train_loss = np.empty(steps)
    ev_steps, ev_loss, snaps = [], [], []
    first = None
    for step in range(steps + 1):
        if step % eval_every == 0 or step == steps:
            ev_steps.append(step)
            ev_loss.append(evaluate(objective, eval_prompts, W_KQ, W_PV, k).mean(-1).numpy())
            snaps.append((W_KQ.detach().numpy().copy(), W_PV.detach().numpy().copy()))
        if step == steps:
            break
        prompts = _stack_prompts([sample_prompts(batch, d, n, g) for g in gens])
        if objective == "cot":
            W_traj = gd_trajectory(prompts, eta, k)
            loss = teacher_forced_loss(prompts, W_traj, W_KQ, W_PV, k)
        else:
            loss = outcome_loss(prompts, W_KQ, W_PV, k, objective)
        loss = loss * R  # the sum of the replicates' mean losses: each replicate gets exactly its own gradient
        val = float(loss.detach()) / R
        if first is None:
            first = val
        if not math.isfinite(val) or val > blowup * max(first, 1e-12):
            raise ParameterError(
                "lr", f"training diverged at step {step} (loss {val:.3g}, initial {first:.3g}) with lr = {lr:g}; "
                "use a smaller lr (or a smaller eta, see the stability condition eta * lambda_max(S) < 2)")
        train_loss[step] = val
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        sched.step()
    return TrainResult(W_KQ.detach(), W_PV.detach(), np.array(ev_steps), np.array(ev_loss), train_loss, snaps,
                       dict(objective=objective, d=d, n=n, k=k, eta=eta, steps=steps, lr=lr, batch=batch, seed=seed,
                            replicates=R))


def train_looped_isotropic(d: int, n: int, k: int, *, steps: int, lr: float, lr_final: float = 1.0, batch: int = 64,
                           seed: int = 0, replicates: int = 1) -> tuple[np.ndarray, np.ndarray]:
    r"""Train the looped LSA on its isotropic sparse parameters, :math:`V_{31} = vI`, :math:`W_{13} = wI`,
    :math:`W_{24} = -1` (part (b) of {prf:ref}`cot-prop-looped`), by Adam on fresh minibatches of ``batch`` prompts, from
    a random start :math:`v \sim N(0, 0.1^2)`, :math:`w \sim N(1, 0.1^2)`; ``replicates`` independent runs side by side
    (replicate r from :func:`replicate_seed` (seed, r)).

    On these parameters the data columns are fixed points of the layer, so k loops are exactly the recursion
    :math:`\hat w \leftarrow \hat w + vS(w\hat w - w^\star)` from :math:`\hat w = 0`, which is what is differentiated here;
    the loss is :math:`\tfrac12\|\hat w_k - w^\star\|^2` (the training loss of :func:`train_full`'s ``"looped"``
    objective restricted to these parameters).

    Returns:
        ``(v, w)``: arrays of shape (replicates,).
    """
    d, n, k = integer("d", d, min=1), integer("n", n, min=1), integer("k", k, min=1)
    steps, batch = integer("steps", steps, min=1), integer("batch", batch, min=1)
    lr = real("lr", lr, min=0, min_open=True)
    lr_final = real("lr_final", lr_final, min=0, max=1, min_open=True)
    R = integer("replicates", replicates, min=1)
    gens = [make_generator(replicate_seed(seed, r)) for r in range(R)]
    init = torch.stack([0.1 * torch.randn(2, generator=g, dtype=torch.float64) for g in gens])
    v = init[:, 0].clone().requires_grad_()
    w = (1.0 + init[:, 1]).requires_grad_()
    opt = torch.optim.Adam([v, w], lr=lr)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, lr_final ** (1.0 / steps))
    with threads1():
        for step in range(steps):
            p = _stack_prompts([sample_prompts(batch, d, n, g) for g in gens])
            S, ws = p.S.reshape(R, batch, d, d), p.w_star.reshape(R, batch, d)
            w_hat = torch.zeros_like(ws)
            for _ in range(k):
                w_hat = w_hat + v[:, None, None] * torch.einsum("rbij,rbj->rbi", S, w[:, None, None] * w_hat - ws)
            loss = 0.5 * ((w_hat - ws) ** 2).sum(-1).mean(1).sum()  # replicates' losses summed: own gradients
            if not math.isfinite(float(loss.detach())):
                raise ParameterError("lr", f"looped training diverged at step {step} with lr = {lr:g}; use a smaller lr")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    return v.detach().numpy(), w.detach().numpy()


# ----------------------------------------------------------------------------- run cache
#: :func:`train_full` through the book's content-addressed run cache (:mod:`companion.cache`).
cached_train_full = cached(train_full)
