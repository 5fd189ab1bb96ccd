r"""Training: full-parameter Adam/GD from random initialisation (fresh prompts every step, float64).

The gradients are the closed forms of :mod:`companion.cot.grads` (no autograd) and the optimiser is written out
here (:class:`Optimizer`, no ``torch.optim``, so a training process never imports ``torch._dynamo``). For
parameters :math:`\theta` (each block on its own, entry-wise) with gradient :math:`g_s` at step
:math:`s = 1, 2, \dots` and learning rate :math:`\alpha_s = \alpha\,\gamma^{s-1}` (geometric decay,
:math:`\gamma = {\rm lr\_final}^{1/{\rm steps}}`), Adam with :math:`\beta_1 = 0.9`, :math:`\beta_2 = 0.999`,
:math:`\epsilon = 10^{-8}` is

.. math::

    m_s = \beta_1 m_{s-1} + (1-\beta_1) g_s, \qquad v_s = \beta_2 v_{s-1} + (1-\beta_2) g_s^2, \qquad
    m_0 = v_0 = 0,

    \theta_s = \theta_{s-1} - \frac{\alpha_s}{1-\beta_1^s}\,
    \frac{m_s}{\sqrt{v_s}/\sqrt{1-\beta_2^s} + \epsilon},

and plain GD is :math:`\theta_s = \theta_{s-1} - \alpha_s g_s`; the operations are those of
``torch.optim.Adam`` / ``SGD`` with ``ExponentialLR``, so both give the same parameters up to round-off. The
autograd + ``torch.optim`` path is kept as the tests' reference in :mod:`companion.cot.reference`.

The restricted gradient flow of :prf:ref:`cot-thm-4-1` is theory and lives in :mod:`companion.cot.theory.dynamics`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from companion import replicate_seed
from companion.cache import cached
from companion.devices import check_device
from companion.params import TrainingDiverged, choice, integer, real
from companion.seeds import COT_PROMPTS, COT_TRAIN_EVAL

from . import grads_torch
from .data import Prompts, make_generator, sample_prompts, sample_replicate_prompts
from .grads import cot_step_grads, looped_isotropic_grads, outcome_loss_grads
from .model import cot_inference, looped_predict, no_cot_predict, per_prompt_error

__all__ = ["TrainResult", "Optimizer", "threads1", "train_full", "cached_train_full", "evaluate", "replicate_seed",
           "train_looped_isotropic"]


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


class Optimizer:
    r"""Adam (``kind="adam"``, :math:`\beta_1 = 0.9`, :math:`\beta_2 = 0.999`, :math:`\epsilon = 10^{-8}`) or plain
    GD (``"gd"``) on a list of parameter tensors, updated in place, with the learning rate decaying by ``gamma``
    after every step: the update of the module docstring, op for op as ``torch.optim.Adam`` / ``SGD`` and
    ``ExponentialLR`` compute it.

    ``clip``: if given, the gradients are first scaled by :math:`\min(1, c / (\|g\| + 10^{-6}))` with
    :math:`\|g\|` the norm of all of them together (``torch.nn.utils.clip_grad_norm_``); with stacked replicates
    that norm covers every replicate, so clipping couples them (the book trains without it).

    Parameters
    ----------
    params : list of torch.Tensor
        The parameters, updated in place by :meth:`step`.
    kind : {"adam", "gd"}
        The update rule.
    lr : float
        The learning rate of the first step.
    gamma : float
        The learning rate's factor after every step.
    clip : float, optional
        The largest gradient norm.
    """

    betas = (0.9, 0.999)
    eps = 1e-8

    def __init__(self, params: list, kind: str, lr: float, gamma: float = 1.0, clip: float | None = None):
        self.params, self.kind, self.lr, self.gamma, self.clip = params, kind, lr, gamma, clip
        self.m = [_zeros_like(p) for p in params]
        self.v = [_zeros_like(p) for p in params]
        self.t = 0

    def step(self, grads: list) -> None:
        """One update of every parameter with its gradient, then the learning-rate decay (for CPU tensors in NumPy
        on the tensors' memory: a dozen element-wise operations on a few thousand numbers cost less there than in
        torch; on another device the same operations in torch, where the tensors live)."""
        if self.clip is not None:
            total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g, 2) for g in grads]), 2)
            coef = torch.clamp(self.clip / (total + 1e-6), max=1.0)
            grads = [g * coef for g in grads]
        self.t += 1
        b1, b2 = self.betas
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            on_cpu = p.device.type == "cpu"
            if on_cpu:
                p, g = p.numpy(), g.numpy()  # p: a view, updated in place
            if self.kind == "gd":
                p -= self.lr * g
                continue
            m += (1 - b1) * (g - m)  # m <- b1 m + (1 - b1) g  (torch's lerp)
            v *= b2
            v += (1 - b2) * (g * g)  # v <- b2 v + (1 - b2) g^2
            denom = np.sqrt(v) if on_cpu else torch.sqrt(v)
            denom /= (1 - b2 ** self.t) ** 0.5
            denom += self.eps
            p -= self.lr / (1 - b1 ** self.t) * (m / denom)
        self.lr *= self.gamma


def _zeros_like(p: torch.Tensor):
    """Adam's moment buffer for parameter ``p``: a NumPy array for a CPU tensor, a tensor on its device otherwise."""
    return np.zeros(tuple(p.shape)) if p.device.type == "cpu" else torch.zeros_like(p)


def _closed_form_full(objective: str, prompts: Prompts, eta: float, W_KQ, W_PV, k: int):
    """Loss and closed-form gradients (:mod:`companion.cot.grads`) of the training loss of ``objective``."""
    if objective == "cot":
        return cot_step_grads(prompts, eta, k, W_KQ, W_PV)
    return outcome_loss_grads(prompts, W_KQ, W_PV, k, objective)


def _torch_full(objective: str, prompts: Prompts, eta: float, W_KQ, W_PV, k: int):
    """The same in torch operations on the device of the tensors (:mod:`companion.cot.grads_torch`)."""
    if objective == "cot":
        return grads_torch.cot_step_grads(prompts, eta, k, W_KQ, W_PV)
    return grads_torch.outcome_loss_grads(prompts, W_KQ, W_PV, k, objective)


@dataclass(frozen=True)
class _Engine:
    """How a training step gets its gradients and applies them: ``full(objective, prompts, eta, W_KQ, W_PV, k)``
    and ``isotropic(S, w_star, v, w, k)`` return ``(loss, *gradients)``; ``optimizer(params, kind, lr, gamma,
    clip)`` returns an object whose ``step(grads)`` updates ``params`` in place."""

    full: Callable
    isotropic: Callable
    optimizer: Callable


CLOSED_FORM = _Engine(_closed_form_full, looped_isotropic_grads, Optimizer)
#: the closed forms in torch, for a device other than ``"cpu"`` (the isotropic model has two parameters: CPU only)
ON_DEVICE = _Engine(_torch_full, looped_isotropic_grads, Optimizer)


def train_full(objective: str, d: int, n: int, k: int, eta: float = 0.3, *, steps: int = 3000, lr: float = 1e-3,
               batch: int = 64, seed: int = 0, init_scale: float = 0.1, optimizer: str = "adam",
               lr_final: float = 1.0, eval_every: int = 100, eval_batch: int = 1000, clip: float | None = None,
               blowup: float = 1e4, replicates: int = 1, device: str = "cpu") -> TrainResult:
    """Train all (2d+2)^2 entries of W_KQ and W_PV from W ~ N(0, init_scale^2 / D) on fresh minibatches.

    ``objective``: ``"cot"`` (teacher-forced loss (6), k positions, GD step ``eta`` in the data),
    ``"no_cot"`` (one layer, target w*) or ``"looped"`` (f applied k times, target w*). The learning rate
    decays geometrically from ``lr`` to ``lr * lr_final``. Raises :class:`~companion.params.TrainingDiverged` (a
    :class:`~companion.params.ParameterError` naming ``lr``) if the training loss becomes non-finite or grows by more than ``blowup`` over its initial value.
    Gradients in closed form (:mod:`companion.cot.grads`), the optimiser :class:`Optimizer`.

    ``replicates=R > 1`` trains R independent models side by side in one vectorised run (a leading replicate
    dimension): replicate r has its own initialisation and minibatches from the seed :func:`replicate_seed`
    (seed, r), so replicate 0 is the single run with ``seed``; Adam acts entry-wise, and the summed loss gives
    each replicate exactly its own gradient, so the replicates are independent training runs.

    ``device``: ``"cpu"`` (the default) computes the gradients in NumPy (:mod:`companion.cot.grads`); any other
    torch device (``"cuda"``, or ``"cpu:0"`` for this path on the CPU) keeps the weights, the minibatches, the
    gradients (:mod:`companion.cot.grads_torch`) and Adam's moments there. The prompts are drawn on the CPU from the
    same seed streams either way, and the evaluation runs on the CPU, so both give the same model up to round-off.
    """
    engine = CLOSED_FORM if device == "cpu" else ON_DEVICE
    return _train_full_checked(engine, objective, d, n, k, eta, steps, lr, batch, seed, init_scale, optimizer,
                               lr_final, eval_every, eval_batch, clip, blowup, replicates, device)


def _train_full_checked(engine: _Engine, objective, d, n, k, eta, steps, lr, batch, seed, init_scale, optimizer,
                        lr_final, eval_every, eval_batch, clip, blowup, replicates, device="cpu") -> TrainResult:
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
    dev = check_device(device)
    with threads1():
        return _train_full(engine, objective, d, n, k, eta, steps, lr, batch, seed, init_scale, optimizer, lr_final,
                           eval_every, eval_batch, clip, blowup, replicates, dev)


def _train_full(engine, objective, d, n, k, eta, steps, lr, batch, seed, init_scale, optimizer, lr_final, eval_every,
                eval_batch, clip, blowup, R, dev) -> TrainResult:
    D = 2 * d + 2
    gens = [make_generator(COT_PROMPTS.replicate(seed, r)) for r in range(R)]
    inits = [[init_scale / math.sqrt(D) * torch.randn(D, D, generator=g, dtype=torch.float64) for _ in range(2)]
             for g in gens]
    W_KQ = torch.stack([a for a, _ in inits]).squeeze(0).to(dev)  # (D, D) for one model, else (R, D, D)
    W_PV = torch.stack([b for _, b in inits]).squeeze(0).to(dev)
    g_eval = make_generator(COT_TRAIN_EVAL(seed))
    eval_prompts = sample_prompts(eval_batch, d, n, g_eval)
    opt = engine.optimizer([W_KQ, W_PV], optimizer, lr, lr_final ** (1.0 / steps), clip)
    train_loss = np.empty(steps)
    ev_steps, ev_loss, snaps = [], [], []
    first = None
    for step in range(steps + 1):
        if step % eval_every == 0 or step == steps:
            ev_steps.append(step)
            K_cpu, V_cpu = W_KQ.cpu(), W_PV.cpu()  # the evaluation runs on the CPU (NumPy)
            ev_loss.append(evaluate(objective, eval_prompts, K_cpu, V_cpu, k).mean(-1).numpy())
            snaps.append((K_cpu.numpy().copy(), V_cpu.numpy().copy()))
        if step == steps:
            break
        prompts = sample_replicate_prompts(batch, d, n, gens)
        if dev.type != "cpu":
            prompts = Prompts(prompts.X.to(dev), prompts.w_star.to(dev))
        loss, g_KQ, g_PV = engine.full(objective, prompts, eta, W_KQ, W_PV, k)
        # the sum of the replicates' mean losses: each replicate gets exactly its own gradient
        val = float(loss * R) / R
        if first is None:
            first = val
        if not math.isfinite(val) or val > blowup * max(first, 1e-12):
            raise TrainingDiverged(
                f"training diverged at step {step} (loss {val:.3g}, initial {first:.3g}) with lr = {lr:g}; "
                "use a smaller lr (or a smaller eta, see the stability condition eta * lambda_max(S) < 2)")
        train_loss[step] = val
        opt.step([g_KQ * R, g_PV * R] if R > 1 else [g_KQ, g_PV])
    return TrainResult(W_KQ.cpu(), W_PV.cpu(), np.array(ev_steps), np.array(ev_loss), train_loss, snaps,
                       dict(objective=objective, d=d, n=n, k=k, eta=eta, steps=steps, lr=lr, batch=batch, seed=seed,
                            replicates=R))


def train_looped_isotropic(d: int, n: int, k: int, *, steps: int, lr: float, lr_final: float = 1.0, batch: int = 64,
                           seed: int = 0, replicates: int = 1) -> tuple[np.ndarray, np.ndarray]:
    r"""Train the looped LSA on its isotropic sparse parameters, :math:`V_{31} = vI`, :math:`W_{13} = wI`,
    :math:`W_{24} = -1` (part (b) of :prf:ref:`cot-prop-looped`), by Adam on fresh minibatches of ``batch`` prompts, from
    a random start :math:`v \sim N(0, 0.1^2)`, :math:`w \sim N(1, 0.1^2)`; ``replicates`` independent runs side by side
    (replicate r from :func:`replicate_seed` (seed, r)).

    On these parameters the data columns are fixed points of the layer, so k loops are exactly the recursion
    :math:`\hat w \leftarrow \hat w + vS(w\hat w - w^\star)` from :math:`\hat w = 0`, which is what is differentiated here
    (in closed form, :func:`companion.cot.grads.looped_isotropic_grads`); the loss is
    :math:`\tfrac12\|\hat w_k - w^\star\|^2` (the training loss of :func:`train_full`'s ``"looped"``
    objective restricted to these parameters). Raises :class:`~companion.params.TrainingDiverged` (naming ``lr``) if
    the loss becomes non-finite.

    Returns
    -------
    tuple of numpy.ndarray
        ``(v, w)``, each of shape (replicates,).
    """
    return _train_looped_isotropic(CLOSED_FORM, d, n, k, steps, lr, lr_final, batch, seed, replicates)


def _train_looped_isotropic(engine: _Engine, d, n, k, steps, lr, lr_final, batch, seed,
                            replicates) -> tuple[np.ndarray, np.ndarray]:
    d, n, k = integer("d", d, min=1), integer("n", n, min=1), integer("k", k, min=1)
    steps, batch = integer("steps", steps, min=1), integer("batch", batch, min=1)
    lr = real("lr", lr, min=0, min_open=True)
    lr_final = real("lr_final", lr_final, min=0, max=1, min_open=True)
    R = integer("replicates", replicates, min=1)
    gens = [make_generator(COT_PROMPTS.replicate(seed, r)) for r in range(R)]
    init = torch.stack([0.1 * torch.randn(2, generator=g, dtype=torch.float64) for g in gens])
    v = init[:, 0].clone()
    w = 1.0 + init[:, 1]
    opt = engine.optimizer([v, w], "adam", lr, lr_final ** (1.0 / steps))
    with threads1():
        for step in range(steps):
            p = sample_replicate_prompts(batch, d, n, gens)
            loss, g_v, g_w = engine.isotropic(p.S.reshape(R, batch, d, d), p.w_star.reshape(R, batch, d), v, w, k)
            if not math.isfinite(float(loss)):
                raise TrainingDiverged(f"looped training diverged at step {step} with lr = {lr:g}; use a smaller lr")
            opt.step([g_v, g_w])
    return v.numpy(), w.numpy()


# ----------------------------------------------------------------------------- run cache
#: :func:`train_full` through the book's content-addressed run cache (:mod:`companion.cache`).
cached_train_full = cached(train_full)
