"""The host side of the fused mesa kernel: the closed-form forward/backward pass of :mod:`companion.mesa.model`,
sequence by sequence, with every intermediate in L1 cache; this module lays out the tables, spreads the blocks of
sequences over threads and calls the compiled code of :mod:`companion.mesa.lanes`.

:func:`companion.mesa.model.loss_grad_fast` reduces the model to a handful of per-sequence d x d maps and
per-position vectors (see the module docstring of :mod:`companion.mesa.model`). Written with batched torch
products, that costs ~20 tiny complex matrix products per epoch whose operands do not fit in cache. The
kernel does the same arithmetic in registers: sixteen sequences share one SIMD vector (one per lane), every
coordinate loop is unrolled, and the code is LLVM IR generated per d and compiled for the host CPU
(:mod:`companion.mesa.lanes`, which also gives the layout). Blocks of sixteen sequences are spread over
threads (Python threads; the compiled code runs without the GIL).

Notation as in :mod:`companion.mesa.model`, per sequence:

* tables (data only): ``x_{t,k}``, ``lam_k^t``, ``y_{t,k} = x_{t+1,k}`` (targets) at the positions t;
* per-sequence maps (weights and data): ``C = [Ma^T | Mb^T | Ma^T 1 | N^T conj(z)]`` (d x (2d+2)),
  the Cauchy-like ``K`` (d x d), ``Rv = [(R diag z)^T ; (W_PV1 z)^T]`` ((d+1) x d);
* forward: ``F = C^T x_t`` gives ``a, K a, s, s'``; ``w_j = t a_j + lam_j^t (K (conj(lam^t) a))_j - (K a)_j - s``;
  ``yhat = Rv^T [w; s'] / (t-1)``; residual ``r = yhat - y_t``; loss ``1/2 sum_t |r_t|^2``;
* backward (``mode = 1``): the adjoints of the same maps, giving ``dL/dC`` and ``dL/dRv`` per sequence
  (PyTorch's complex convention), mapped back to ``W_KQ`` and ``W_PV`` per sequence and summed over the
  sixteen lanes of a block in float64.

Results do not depend on the number of threads (each block of sequences is done by one thread, in a fixed
order, and writes its own slot). The tests compare this kernel with the batched torch version of the same
formulas, with autograd and with a deliberately naive per-prefix implementation.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from companion.mesa.lanes import layout
from companion.mesa.lanes.jit import compiled
from companion.threads import kernel_threads

_THREADS: int | None = None  # set by set_threads; None: $COMPANION_THREADS (default 1)
_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}


def threads() -> int:
    """Threads :func:`sweep` uses: the last :func:`set_threads`, else :func:`companion.threads.kernel_threads`."""
    return _THREADS if _THREADS is not None else kernel_threads()


def set_threads(n: int | None) -> int | None:
    """Set the threads of :func:`sweep` (None: back to ``$COMPANION_THREADS``); returns the previous setting."""
    global _THREADS
    old, _THREADS = _THREADS, (None if n is None else max(1, int(n)))
    return old


def sweep(TB, SQ, tpos, inv_rho, W_KQ, W_PV, wn, mode: int, loss, gA, gP, pred) -> None:
    """One pass over all sequences.

    TB, SQ: the tables and the sequences (x_1, lam, K) in the lane layout of :func:`tables` (nb blocks of
    16 sequences); tpos, inv_rho: (N,) positions t and 1/(t-1); W_KQ (2d, 2d), W_PV (d, 2d) complex;
    wn: (m,) weights of the sequences (for the gradient).
    mode 0: per-sequence loss only; 1: also the gradients, one slot per block of 16 sequences,
    gA (nb, 2d, 2d) and gP (nb, d, 2d) (complex128; the caller sums over blocks, so the result does not
    depend on the number of threads); 2: also the predictions into pred (2, m, d, N) (real, imaginary).
    loss (m,) receives ``1/2 sum_t |r_t|^2`` (unweighted).

    The blocks are split into :func:`threads` contiguous ranges, each on its own thread (the compiled kernel
    runs without the GIL); every block writes only its own slots.
    """
    rdt = TB.dtype
    nblocks, N = TB.shape[0], TB.shape[1]
    d = W_PV.shape[0]
    m = loss.shape[0]
    _check_sweep(TB, SQ, tpos, inv_rho, W_KQ, W_PV, wn, mode, loss, gA, gP, pred)
    fn = compiled(d, "float" if rdt == np.float32 else "double")
    W = np.concatenate([W_KQ.real.ravel(), W_KQ.imag.ravel(), W_PV.real.ravel(), W_PV.imag.ravel()]).astype(rdt)
    WL = np.zeros(nblocks * layout.NL, rdt)
    WL[:m] = wn
    LS = np.empty((nblocks, layout.NL))
    GO = np.empty((nblocks, layout.gradient_slots(d))) if mode == 1 else np.empty(1)
    PR = np.empty((nblocks, N, 2 * d, layout.NL), rdt) if mode == 2 else np.empty(1, rdt)
    tpos = np.ascontiguousarray(tpos, dtype=rdt)
    inv_rho = np.ascontiguousarray(inv_rho, dtype=rdt)
    n = min(threads(), nblocks)
    scratch = [np.empty(layout.scratch_rows(d) * layout.NL, rdt) for _ in range(max(n, 1))]
    ptrs = [a.ctypes.data for a in (TB, SQ, tpos, inv_rho, W, WL, LS, GO, PR)]
    if n <= 1:
        fn(0, nblocks, N, mode, *ptrs, scratch[0].ctypes.data)
    else:
        key = (os.getpid(), n)  # a forked child inherits the pool object but not its threads: it makes its own
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="mesa-sweep")
        cuts = [i * nblocks // n for i in range(n + 1)]
        for f in [pool.submit(fn, cuts[i], cuts[i + 1], N, mode, *ptrs, scratch[i].ctypes.data) for i in range(n)]:
            f.result()
    loss[:] = LS.reshape(-1)[:m]
    if mode == 1:
        D = 2 * d
        g = GO.view(np.complex128)
        gA[:] = g[:, : D * D].reshape(nblocks, D, D)
        gP[:] = g[:, D * D:].reshape(nblocks, d, D)
    elif mode == 2:
        pred[:] = PR.reshape(nblocks, N, 2, d, layout.NL).transpose(2, 0, 4, 3, 1).reshape(2, -1, d, N)[:, :m]


def _check_sweep(TB, SQ, tpos, inv_rho, W_KQ, W_PV, wn, mode, loss, gA, gP, pred) -> None:
    """The compiled kernel reads and writes through raw pointers: every array must have the layout it
    assumes, or it would touch memory outside them. Raises ValueError naming the first argument that does not."""
    d, nb, N = W_PV.shape[0], TB.shape[0], TB.shape[1]
    rdt = TB.dtype
    m = loss.shape[0]
    want = {
        "TB": (TB, (nb, N, layout.table_rows(d) * _NL), rdt),
        "SQ": (SQ, (nb, layout.sequence_rows(d) * _NL), rdt),
        "tpos": (np.asarray(tpos), (N,), None),
        "inv_rho": (np.asarray(inv_rho), (N,), None),
        "W_KQ": (W_KQ, (2 * d, 2 * d), None),
        "W_PV": (W_PV, (d, 2 * d), None),
        "wn": (np.asarray(wn), (m,), None),
        "loss": (loss, (m,), np.float64),
    }
    if mode == 1:
        want["gA"] = (gA, (nb, 2 * d, 2 * d), np.complex128)
        want["gP"] = (gP, (nb, d, 2 * d), np.complex128)
    if mode == 2:
        want["pred"] = (pred, (2, m, d, N), None)
    if rdt not in (np.float32, np.float64):
        raise ValueError(f"TB: must be float32 or float64; got {rdt}")
    if mode not in (0, 1, 2):
        raise ValueError(f"mode: must be 0 (loss), 1 (and gradients) or 2 (and predictions); got {mode!r}")
    if not (nb - 1) * _NL < m <= nb * _NL:
        raise ValueError(f"loss: {m} sequences do not fill {nb} blocks of {_NL}")
    for name, (a, shape, dtype) in want.items():
        if tuple(a.shape) != shape:
            raise ValueError(f"{name}: must have shape {shape}; got {tuple(a.shape)}")
        if dtype is not None and (a.dtype != dtype or not a.flags.c_contiguous):
            raise ValueError(f"{name}: must be C-contiguous {np.dtype(dtype)}; got {a.dtype}")


_NL = layout.NL


@njit(cache=True)
def _tables(theta, x1r, x1i, pos, TB):
    """TB[b, p, (q d + k) 16 + l] for sequence n = 16 b + l: q = 0, 1 x_t (re, im), 2, 3 lam^t, 4, 5 x_{t+1}
    at t = pos[p], computed in float64 and stored in TB's dtype; padding lanes (n >= m) have phase 0 and
    x_1 = 0, so lam^t = 1 and x = 0 there."""
    m, d = theta.shape
    N = pos.shape[0]
    th = np.zeros(_NL)
    a = np.zeros(_NL)
    bb = np.zeros(_NL)
    c = np.zeros(_NL)
    s = np.zeros(_NL)
    for b in range(TB.shape[0]):
        for k in range(d):
            for l in range(_NL):
                n = b * _NL + l
                th[l] = theta[n, k] if n < m else 0.0
                a[l] = x1r[n, k] if n < m else 0.0
                bb[l] = x1i[n, k] if n < m else 0.0
            c1, s1 = np.cos(th), np.sin(th)
            for p in range(N):
                if p == 0 or pos[p] != pos[p - 1] + 1:  # lam^t directly, then by rotation along a run of t
                    c, s = np.cos(th * pos[p]), np.sin(th * pos[p])
                else:
                    c, s = c * c1 - s * s1, s * c1 + c * s1
                row = TB[b, p]
                for l in range(_NL):
                    cq, sq = c[l] * c1[l] + s[l] * s1[l], s[l] * c1[l] - c[l] * s1[l]  # lam^(t-1)
                    row[k * _NL + l] = a[l] * cq - bb[l] * sq
                    row[(d + k) * _NL + l] = a[l] * sq + bb[l] * cq
                    row[(2 * d + k) * _NL + l] = c[l]
                    row[(3 * d + k) * _NL + l] = s[l]
                    row[(4 * d + k) * _NL + l] = a[l] * c[l] - bb[l] * s[l]
                    row[(5 * d + k) * _NL + l] = a[l] * s[l] + bb[l] * c[l]


def tables(theta: np.ndarray, x1: np.ndarray, lam: np.ndarray, K: np.ndarray, positions: np.ndarray,
           real_dtype) -> tuple[np.ndarray, np.ndarray]:
    """(TB, SQ) in the lane layout of :mod:`companion.mesa.lanes`, padded to a multiple of 16 sequences:
    TB (nb, N, 6 d 16) holds x_t, lam^t and x_{t+1} at the positions t (computed in float64 from the phases,
    lam^t by rotation along runs of consecutive positions, relative error ~ N 1e-16, then cast to
    ``real_dtype``); SQ holds the sequences' x_1, lam and K (complex (m, d), (m, d), (m, d, d))."""
    m, d = theta.shape
    N = len(positions)
    TB = np.empty((-(-m // _NL), N, layout.table_rows(d) * _NL), real_dtype)
    x1 = np.asarray(x1)
    _tables(np.ascontiguousarray(theta, dtype=float), np.ascontiguousarray(x1.real, dtype=float),
            np.ascontiguousarray(x1.imag, dtype=float), np.asarray(positions, dtype=np.int64), TB)
    return TB, layout.lane_sequences(x1, np.asarray(lam), np.asarray(K), real_dtype)


def warm_up(dims=(5,)) -> float:
    """Compile the kernels (or load them from the on-disk cache) for coordinate dimensions ``dims`` in both
    dtypes, so that the first training run does not pay the compilation (about a second per version on a
    2-core machine; loading a cached version takes milliseconds). Returns the seconds spent."""

    t0 = time.perf_counter()
    for d in dims:
        for F in ("float", "double"):
            compiled(d, F)
        for rdt in (np.float32, np.float64):
            tables(np.zeros((1, d)), np.ones((1, d), complex), np.ones((1, d), complex), np.zeros((1, d, d), complex),
                   np.arange(2, 4), rdt)
    return time.perf_counter() - t0


if __name__ == "__main__":  # pragma: no cover
    print(f"mesa kernels ready (d = 5, float32 and float64) in {warm_up():.1f} s")
