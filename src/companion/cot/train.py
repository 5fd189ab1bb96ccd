"""Training: full-parameter Adam/GD from random initialisation (fresh prompts every step, float64).

The restricted gradient flow of {prf:ref}`cot-thm-4-1` is theory and lives in :mod:`companion.cot.theory`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from companion.cache import cached
from companion.params import ParameterError, choice, integer, real

from .data import gd_trajectory, make_generator, sample_prompts
from .model import (
    cot_inference,
    looped_predict,
    no_cot_predict,
    outcome_loss,
    per_prompt_error,
    teacher_forced_loss,
)

__all__ = ["TrainResult", "train_full", "cached_train_full", "evaluate"]


@dataclass
class TrainResult:
    W_KQ: torch.Tensor
    W_PV: torch.Tensor
    steps: np.ndarray  # steps at which the evaluation loss was recorded
    eval_loss: np.ndarray  # evaluation loss (7) on a fixed seeded set, at ``steps``
    train_loss: np.ndarray  # training loss of every step's minibatch
    snapshots: list = field(default_factory=list)  # (W_KQ, W_PV) as numpy arrays at ``steps``
    config: dict = field(default_factory=dict)


def evaluate(objective: str, prompts, W_KQ, W_PV, k: int) -> torch.Tensor:
    """Per-prompt ||w_hat - w*||^2 of the model's final estimate (CoT: autoregressive k steps)."""
    with torch.no_grad():
        if objective == "cot":
            w_hat = cot_inference(prompts, W_KQ, W_PV, k)[:, -1]
        elif objective == "no_cot":
            w_hat = no_cot_predict(prompts, W_KQ, W_PV)
        else:
            w_hat = looped_predict(prompts, W_KQ, W_PV, k)
        return per_prompt_error(w_hat, prompts)


def train_full(objective: str, d: int, n: int, k: int, eta: float = 0.3, *, steps: int = 3000, lr: float = 1e-3,
               batch: int = 64, seed: int = 0, init_scale: float = 0.1, optimizer: str = "adam",
               lr_final: float = 1.0, eval_every: int = 100, eval_batch: int = 1000, clip: float | None = None,
               blowup: float = 1e4) -> TrainResult:
    """Train all (2d+2)^2 entries of W_KQ and W_PV from W ~ N(0, init_scale^2 / D) on fresh minibatches.

    ``objective``: ``"cot"`` (teacher-forced loss (6), k positions, GD step ``eta`` in the data),
    ``"no_cot"`` (one layer, target w*) or ``"looped"`` (f applied k times, target w*). The learning rate
    decays geometrically from ``lr`` to ``lr * lr_final``. Raises :class:`ParameterError` naming ``lr``
    if the training loss becomes non-finite or grows by more than ``blowup`` over its initial value.
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
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is faster and does not fight other processes
    try:
        return _train_full(objective, d, n, k, eta, steps, lr, batch, seed, init_scale, optimizer, lr_final,
                           eval_every, eval_batch, clip, blowup)
    finally:
        torch.set_num_threads(threads)


def _train_full(objective, d, n, k, eta, steps, lr, batch, seed, init_scale, optimizer, lr_final, eval_every,
                eval_batch, clip, blowup) -> TrainResult:
    D = 2 * d + 2
    g = make_generator(seed)
    W_KQ = (init_scale / math.sqrt(D) * torch.randn(D, D, generator=g, dtype=torch.float64)).requires_grad_()
    W_PV = (init_scale / math.sqrt(D) * torch.randn(D, D, generator=g, dtype=torch.float64)).requires_grad_()
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
            ev_loss.append(float(evaluate(objective, eval_prompts, W_KQ, W_PV, k).mean()))
            snaps.append((W_KQ.detach().numpy().copy(), W_PV.detach().numpy().copy()))
        if step == steps:
            break
        prompts = sample_prompts(batch, d, n, g)
        if objective == "cot":
            W_traj = gd_trajectory(prompts, eta, k)
            loss = teacher_forced_loss(prompts, W_traj, W_KQ, W_PV, k)
        else:
            loss = outcome_loss(prompts, W_KQ, W_PV, k, objective)
        val = float(loss.detach())
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
                       dict(objective=objective, d=d, n=n, k=k, eta=eta, steps=steps, lr=lr, batch=batch, seed=seed))


# ----------------------------------------------------------------------------- run cache
#: :func:`train_full` through the book's content-addressed run cache (:mod:`companion.cache`).
cached_train_full = cached(train_full)
