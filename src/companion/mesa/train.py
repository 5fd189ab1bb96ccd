"""Full-batch GD training of the linear attention model, with recorded trajectories and a run cache.

One GD step per epoch on ``L = (1/m) sum_n sum_{t=2}^{T-1} 1/2 |yhat_t - x_{t+1}|^2``, with PyTorch's complex
gradient convention (dL/dRe + i dL/dIm), exactly like ``torch.optim.SGD`` on complex parameters.
Initialisations: Assumption 3.1 (``init="diagonal"``: W_KQ21 = a0 I, W_PV11 = b0 I, all else 0) or a
standard Gaussian init (``init="gaussian"``: every entry real N(0, sigma_w^2)).
``mask=True`` is the official "clip" option: the off-diagonal entries of the two red blocks are set to
zero after every step (equivalently their gradients are masked), the other blocks train freely.
"""

from __future__ import annotations

import difflib
import json
import os
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from companion import params
from companion.cache import import_closure as _import_closure
from companion.cache import module_cache_dir as _module_cache_dir
from companion.mesa import theory, torch_epoch
from companion.mesa.data import ARData, check_law, check_tilt, generate
from companion.mesa.lanes import host
from companion.mesa.model import loss_fast, loss_grad_fast, ratio_entries
from companion.params import TrainingDiverged  # re-exported: companion.mesa.train.TrainingDiverged
from companion.seeds import MESA_INIT, MESA_TEST_DATA, MESA_TRAIN_DATA
from companion.threads import kernel_threads

__all__ = [
    "TrainingDiverged",
    "RunConfig",
    "TrainResult",
    "init_diagonal",
    "init_gaussian",
    "offdiag_mask",
    "train",
    "run",
    "cache_dir",
    "last_position_ratio",
    "test_loss",
]


@dataclass(frozen=True)
class RunConfig:
    law: str = "gaussian"
    d: int = 5
    T: int = 100
    m: int = 10_000
    scale: float = 1.0
    a0: float = 0.1
    b0: float = 0.1
    lr: float = 1e-4
    epochs: int = 200
    seed: int = 1
    mask: bool = False
    init: str = "diagonal"  # or "gaussian"
    sigma_w: float = 0.01  # std of every entry for init="gaussian"
    m_test: int = 10_000
    test_every: int = 10  # test loss and ratio every k epochs (and at the last epoch)
    dtype: str = "complex64"
    check_lr: bool = True  # refuse step sizes beyond the stability bound before training (diagonal init)
    chunk: int = 10_000  # sequences per kernel call (memory only; results do not depend on it)
    device: str = "cpu"  # "cpu": the fused kernel; any other torch device ("cuda", "cpu:0"): the torch epoch on it
    tilt: int = 0  # > 0: the training set is the law's importance sample tilted by r^tilt (data.generate)

    def validated(self) -> RunConfig:
        law = check_law(self.law)
        if callable(law):
            raise params.ParameterError("law", "run() needs a registered law name (register_law) for caching")
        params.integer("d", self.d, min=1)
        params.integer("T", self.T, min=3)
        params.integer("m", self.m, min=1)
        params.real("scale", self.scale, min=0, min_open=True)
        params.real("a0", self.a0)
        params.real("b0", self.b0)
        params.real("lr", self.lr, min=0, min_open=True)
        params.integer("epochs", self.epochs, min=0)
        params.integer("seed", self.seed, min=0)
        params.boolean("mask", self.mask)
        params.choice("init", self.init, ["diagonal", "gaussian"])
        params.real("sigma_w", self.sigma_w, min=0, min_open=True)
        params.integer("m_test", self.m_test, min=1)
        params.integer("test_every", self.test_every, min=1)
        params.choice("dtype", self.dtype, ["complex64", "complex128"])
        params.integer("chunk", self.chunk, min=1)
        params.boolean("check_lr", self.check_lr)
        torch_epoch.check_device(self.device)
        check_tilt(self.law, self.tilt)
        return self


@dataclass
class TrainResult:
    config: dict
    ab: np.ndarray  # (epochs+1,) mean_j Re(W_KQ21)_jj Re(W_PV11)_jj (the official metric)
    ab_diag: np.ndarray  # (epochs+1, d) the per-coordinate products
    a_mean: np.ndarray  # mean_j Re(W_KQ21)_jj
    b_mean: np.ndarray  # mean_j Re(W_PV11)_jj
    train_loss: np.ndarray  # (epochs+1,) training loss at the parameters of each epoch
    ratio: np.ndarray | None  # at test_epochs: Re mean(yhat_{T-1}/(x_T + 1e-5)) on the test set (not for "sparse")
    test_epochs: np.ndarray  # every test_every epochs and the last
    test_loss: np.ndarray  # whole-sequence test AR loss at test_epochs
    offdiag_kq: np.ndarray  # (epochs+1,) max |Re| of the off-diagonal entries of the red KQ block
    offdiag_pv: np.ndarray
    other_max: np.ndarray  # (epochs+1,) max |entry| outside the red blocks
    imag_max: np.ndarray  # (epochs+1,) max |Im| over the red blocks
    W_KQ: np.ndarray  # final weights (complex)
    W_PV: np.ndarray
    W_KQ0: np.ndarray
    W_PV0: np.ndarray
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def init_diagonal(d: int, a0: float, b0: float, dtype=torch.complex64):
    """Assumption 3.1: W_KQ = [[0, 0], [a0 I, 0]], W_PV = [b0 I, 0]."""
    d = params.integer("d", d, min=1)
    W_KQ = torch.zeros(2 * d, 2 * d, dtype=dtype)
    W_PV = torch.zeros(d, 2 * d, dtype=dtype)
    W_KQ[d:, :d] = params.real("a0", a0) * torch.eye(d, dtype=dtype)
    W_PV[:, :d] = params.real("b0", b0) * torch.eye(d, dtype=dtype)
    return W_KQ, W_PV


def init_gaussian(d: int, sigma_w: float, rng: np.random.Generator, dtype=torch.complex64):
    """Standard Gaussian init: every entry real N(0, sigma_w^2) (zero imaginary part)."""
    d = params.integer("d", d, min=1)
    s = params.real("sigma_w", sigma_w, min=0, min_open=True)
    W_KQ = torch.from_numpy(s * rng.standard_normal((2 * d, 2 * d))).to(dtype)
    W_PV = torch.from_numpy(s * rng.standard_normal((d, 2 * d))).to(dtype)
    return W_KQ, W_PV


def offdiag_mask(d: int):
    """Boolean masks of the entries zeroed by the "clip" option (off-diagonals of the two red blocks)."""
    mk = torch.zeros(2 * d, 2 * d, dtype=torch.bool)
    mp = torch.zeros(d, 2 * d, dtype=torch.bool)
    off = ~torch.eye(d, dtype=torch.bool)
    mk[d:, :d] = off
    mp[:, :d] = off
    return mk, mp


def _red_other(W_KQ: torch.Tensor, W_PV: torch.Tensor, d: int):
    """The per-epoch records of one pair of weights: the red diagonals (a, b), the largest off-diagonal red entry
    of each block, the largest entry outside the red blocks and the largest imaginary part. The reference of
    :func:`_red_other_stacked` (which the trainer uses, in stacks of epochs; the tests compare the two)."""
    kq, pv = W_KQ[d:, :d], W_PV[:, :d]
    off = ~torch.eye(d, dtype=torch.bool)
    other = torch.cat([W_KQ[:d, :].reshape(-1), W_KQ[d:, d:].reshape(-1), W_PV[:, d:].reshape(-1)])
    return (
        torch.diagonal(kq).real,
        torch.diagonal(pv).real,
        kq.real[off].abs().max().item() if d > 1 else 0.0,
        pv.real[off].abs().max().item() if d > 1 else 0.0,
        other.abs().max().item(),
        max(kq.imag.abs().max().item(), pv.imag.abs().max().item()),
    )


def _red_other_stacked(KQ: torch.Tensor, PV: torch.Tensor, d: int):
    """:func:`_red_other` for a stack of weights (n, 2d, 2d) and (n, d, 2d), every output with a leading axis of
    length n: the same operations on the same values, so the same numbers (the per-epoch records of a run are
    reduced in stacks of epochs instead of one epoch at a time)."""
    kq, pv = KQ[:, d:, :d], PV[:, :, :d]
    off = ~torch.eye(d, dtype=torch.bool)
    n = KQ.shape[0]
    other = torch.cat([KQ[:, :d, :].reshape(n, -1), KQ[:, d:, d:].reshape(n, -1), PV[:, :, d:].reshape(n, -1)], dim=1)
    zero = np.zeros(n)
    return (
        torch.diagonal(kq, dim1=1, dim2=2).real,
        torch.diagonal(pv, dim1=1, dim2=2).real,
        kq.real[:, off].abs().amax(1).numpy().astype(float) if d > 1 else zero,
        pv.real[:, off].abs().amax(1).numpy().astype(float) if d > 1 else zero,
        other.abs().amax(1).numpy().astype(float),
        np.maximum(kq.imag.abs().reshape(n, -1).amax(1).numpy(), pv.imag.abs().reshape(n, -1).amax(1).numpy()).astype(float),
    )


def last_position_ratio(data: ARData, W_KQ, W_PV) -> float:
    """The official "ratio of pred/true at T_te": Re mean_{n,j} yhat_{T-1,j} / (x_{T,j} + 1e-5)."""
    return float(ratio_entries(data, W_KQ, W_PV).mean())


def _chunked_loss(data: ARData, W_KQ, W_PV, chunk: int) -> float:
    tot = 0.0
    for i in range(0, data.m, chunk):
        sub = data.subset(slice(i, i + chunk))
        tot += loss_fast(sub, W_KQ, W_PV) * sub.m
    return tot / data.m


def test_loss(data: ARData, W_KQ, W_PV, chunk: int = 2500) -> float:
    """Whole-sequence AR loss ``(1/m) sum_n sum_{t=2}^{T-1} 1/2 |yhat_t - x_{t+1}|^2`` on a data set."""
    with torch.no_grad():
        return _chunked_loss(data, W_KQ, W_PV, chunk)


_DATASETS: OrderedDict = OrderedDict()


def _dataset(law: str, m: int, d: int, T: int, scale: float, seed: tuple, dtype, tilt: int = 0) -> ARData:
    """The seeded data set of a run, kept for the next runs on the same data (a few, least recently used
    dropped): runs that differ only in init, step size or mask share the data and its position tables."""
    key = (law, m, d, T, float(scale), seed, str(dtype), tilt)
    if key in _DATASETS:
        _DATASETS.move_to_end(key)
        return _DATASETS[key]
    data = generate(law, m, d, T, scale, np.random.default_rng(list(seed)), dtype, tilt)
    _DATASETS[key] = data
    while len(_DATASETS) > 4:
        _DATASETS.popitem(last=False)
    return data


def train(cfg: RunConfig) -> TrainResult:
    """Full-batch GD (no cache). Raises ParameterError('lr') for an unstable step size and
    TrainingDiverged if the loss becomes non-finite or explodes."""
    cfg = cfg.validated()

    old = torch.get_num_threads()
    n = kernel_threads()  # torch and the fused kernel
    torch.set_num_threads(n)
    old_k = host.set_threads(n)
    try:
        return _train(cfg)
    finally:
        torch.set_num_threads(old)
        host.set_threads(old_k)


def _initial_weights(cfg: RunConfig, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """W_KQ(0), W_PV(0): the diagonal start (a0, b0), its step size checked against the closed-form stability
    bound when ``check_lr``, or a Gaussian start of scale ``sigma_w`` from the ``MESA_INIT`` stream."""
    if cfg.init == "diagonal":
        al, be = theory.alpha_beta(cfg.law, cfg.scale, cfg.d, cfg.T)
        if cfg.check_lr:
            theory.check_stability(cfg.lr, al, be, cfg.a0, cfg.b0)
        return init_diagonal(cfg.d, cfg.a0, cfg.b0, dtype)
    return init_gaussian(cfg.d, cfg.sigma_w, MESA_INIT.rng(cfg.seed), dtype)


def _chunks(data: ARData, chunk: int) -> list[ARData]:
    if chunk >= data.m:
        return [data]  # keeps the data set's cached tables
    return [data.subset(slice(i, i + chunk)) for i in range(0, data.m, chunk)]


def _full_batch(chunks: list[ARData], W_KQ, W_PV, m: int, device: str):
    """The full-batch loss and gradients, L = sum over chunks of (m_c/m) L_c (same for the gradients)."""
    tot = 0.0
    gA = torch.zeros_like(W_KQ)
    gP = torch.zeros_like(W_PV)
    for sub in chunks:
        if device == "cpu":
            L, a_, p_ = loss_grad_fast(sub, W_KQ, W_PV)
        else:
            L, a_, p_ = torch_epoch.loss_grad(sub, W_KQ, W_PV, device=device)
        w = sub.m / m
        gA += w * a_
        gP += w * p_
        tot += w * float(L)
    return tot, gA, gP


class _Trajectory:
    """What a run records per epoch: the diagonal products a_i b_i and the off-diagonal and imaginary sizes of the
    weights (reduced 256 epochs at a time; the held tensors are never changed in place), the training loss, and
    every ``test_every`` epochs the test loss and the last-position ratio."""

    def __init__(self, cfg: RunConfig, test_data: ARData, test_chunks: list[ARData]):
        self.cfg, self.test_data, self.test_chunks = cfg, test_data, test_chunks
        self.rec = {k: [] for k in ("ab_diag", "a", "b", "okq", "opv", "other", "imag", "train_loss", "ratio")}
        self.test_epochs: list[int] = []
        self.test_losses: list[float] = []
        self.want_ratio = cfg.law not in ("sparse", "sparse_gaussian")
        self.held: list = []

    def _reduce_held(self) -> None:
        if not self.held:
            return
        a, b, okq, opv, oth, im = _red_other_stacked(torch.stack([w[0] for w in self.held]),
                                                     torch.stack([w[1] for w in self.held]), self.cfg.d)
        rec = self.rec
        rec["ab_diag"].extend((a * b).double().numpy())
        rec["a"].extend(a.double().mean(1).tolist())
        rec["b"].extend(b.double().mean(1).tolist())
        for key, vals in (("okq", okq), ("opv", opv), ("other", oth), ("imag", im)):
            rec[key].extend(vals.tolist())
        self.held.clear()

    def weights(self, k: int, W_KQ, W_PV) -> None:
        E = self.cfg.epochs
        self.held.append((W_KQ, W_PV))
        if len(self.held) == 256 or k == E:
            self._reduce_held()
        if k % self.cfg.test_every == 0 or k == E:
            self.test_epochs.append(k)
            if self.want_ratio:
                self.rec["ratio"].append(last_position_ratio(self.test_data, W_KQ, W_PV))
            with torch.no_grad():
                self.test_losses.append(sum(loss_fast(c, W_KQ, W_PV) * c.m for c in self.test_chunks) / self.cfg.m_test)

    def result(self, cfg: RunConfig, W_KQ, W_PV, W_KQ0, W_PV0, seconds: float) -> TrainResult:
        rec = self.rec
        return TrainResult(
            config=asdict(cfg),
            ab=np.array([x.mean() for x in rec["ab_diag"]]),
            ab_diag=np.array(rec["ab_diag"]),
            a_mean=np.array(rec["a"]),
            b_mean=np.array(rec["b"]),
            train_loss=np.array(rec["train_loss"]),
            ratio=np.array(rec["ratio"]) if self.want_ratio else None,
            test_epochs=np.array(self.test_epochs),
            test_loss=np.array(self.test_losses),
            offdiag_kq=np.array(rec["okq"]),
            offdiag_pv=np.array(rec["opv"]),
            other_max=np.array(rec["other"]),
            imag_max=np.array(rec["imag"]),
            W_KQ=W_KQ.numpy().copy(),
            W_PV=W_PV.numpy().copy(),
            W_KQ0=W_KQ0.numpy().copy(),
            W_PV0=W_PV0.numpy().copy(),
            seconds=seconds,
        )


def _train(cfg: RunConfig) -> TrainResult:
    """Full-batch GD from the run's start on its training set (``MESA_TRAIN_DATA``), tested on its test set
    (``MESA_TEST_DATA``), the off-diagonal blocks kept at 0 when ``mask``; a non-finite or exploding loss or
    gradient raises :class:`TrainingDiverged`."""
    t_start = time.perf_counter()
    dtype = getattr(torch, cfg.dtype)
    d = cfg.d
    W_KQ, W_PV = _initial_weights(cfg, dtype)
    train_data = _dataset(cfg.law, cfg.m, d, cfg.T, cfg.scale, MESA_TRAIN_DATA.entropy(cfg.seed), dtype, cfg.tilt)
    test_data = _dataset(cfg.law, cfg.m_test, d, cfg.T, cfg.scale, MESA_TEST_DATA.entropy(cfg.seed), dtype)
    mk, mp = offdiag_mask(d)
    if cfg.mask:
        W_KQ[mk] = 0
        W_PV[mp] = 0
    W_KQ0, W_PV0 = W_KQ.clone(), W_PV.clone()
    chunks = _chunks(train_data, cfg.chunk)
    trajectory = _Trajectory(cfg, test_data, _chunks(test_data, cfg.chunk))
    first = None
    for k in range(cfg.epochs + 1):
        trajectory.weights(k, W_KQ, W_PV)
        tot, gA, gP = _full_batch(chunks, W_KQ, W_PV, cfg.m, cfg.device)
        if first is None:
            first = tot
        if not np.isfinite(tot) or tot > 1e6 * max(first, 1e-30) or not (np.isfinite(gA.numpy()).all() and np.isfinite(gP.numpy()).all()):
            raise TrainingDiverged(
                f"training diverged at epoch {k} (loss {tot:.3g}, initial {first:.3g}) with lr = {cfg.lr:g}; "
                "use a smaller step size lr"
            )
        trajectory.rec["train_loss"].append(tot)
        if k == cfg.epochs:
            break
        with torch.no_grad():
            W_KQ = W_KQ - cfg.lr * gA
            W_PV = W_PV - cfg.lr * gP
            if cfg.mask:
                W_KQ[mk] = 0
                W_PV[mp] = 0
    return trajectory.result(cfg, W_KQ, W_PV, W_KQ0, W_PV0, time.perf_counter() - t_start)


# ---------------------------------------------------------------------------------------------- cache
#: exactly the sources a training run depends on, read from the import statements (no hand-kept list): edits
#: elsewhere in the package (e.g. the other paper's code) keep the mesa runs, and no edit that could change a
#: run is missed.
RUN_SOURCES = _import_closure("companion.mesa.train")


def cache_dir():
    """Where runs are cached (see :mod:`companion.cache`): ``<base>/mesa.train-<hash of RUN_SOURCES>``, or
    ``None`` when ``$COMPANION_CACHE_DIR`` disables caching."""
    return _module_cache_dir(__name__)


_MEMO = {}


def run(**kwargs) -> TrainResult:
    """Validated, cached training run: ``run(law="gaussian", scale=1.0, a0=0.1, b0=0.1, lr=1e-4, ...)``.

    The cache key is the full configuration plus the hash of the package sources (joblib.Memory in
    :func:`cache_dir`), so a code change never serves a stale run."""
    bad = set(kwargs) - set(RunConfig.__dataclass_fields__)
    if bad:
        name = sorted(bad)[0]

        close = difflib.get_close_matches(name, list(RunConfig.__dataclass_fields__), n=1)
        raise params.ParameterError(name, "unknown run option" + (f" (did you mean {close[0]!r}?)" if close else ""))
    cfg = RunConfig(**kwargs).validated()
    t0 = time.perf_counter()
    loc = cache_dir()
    if loc is None:
        res = train(cfg)
        _log_run(kwargs, res, time.perf_counter() - t0)
        return res
    key = (str(loc), tuple(sorted(asdict(cfg).items())))
    if key in _MEMO:
        return _MEMO[key]
    from joblib import Memory

    mem = Memory(location=str(loc), verbose=0)
    res = mem.cache(_train_cached)(tuple(sorted(asdict(cfg).items())))
    _MEMO[key] = res
    _log_run(kwargs, res, time.perf_counter() - t0)
    return res


def _log_run(kwargs: dict, res: TrainResult, seconds: float) -> None:
    """With ``$COMPANION_RUN_LOG`` set to a file, append one JSON line per run: the keyword arguments, the
    wall time of this call and of the training (a cached run costs the first, not the second)."""
    path = os.environ.get("COMPANION_RUN_LOG", "").strip()
    if not path:
        return

    with open(path, "a") as fh:
        fh.write(json.dumps(dict(kwargs=kwargs, seconds=round(seconds, 3), trained=round(res.seconds, 3),
                                 cached=seconds < 0.5 * res.seconds)) + "\n")


def _train_cached(items: tuple) -> TrainResult:
    return train(RunConfig(**dict(items)))
