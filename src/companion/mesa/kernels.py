"""Fused per-sequence kernel of the closed-form forward/backward pass (numba).

:func:`companion.mesa.model.loss_grad_fast` reduces the model to a handful of per-sequence d x d maps and
per-position vectors (see the module docstring of :mod:`companion.mesa.model`). Written with batched torch
products, that costs ~20 tiny complex matrix products per epoch whose operands do not fit in cache: the
arithmetic (about 250 complex multiply-adds per position and sequence) is a small part of the time. This
kernel does the same arithmetic sequence by sequence with every intermediate in L1 cache, real and imaginary
parts split so the position loop vectorises, and blocks of sequences spread over threads (Python threads;
the compiled kernel releases the GIL).

Notation as in :mod:`companion.mesa.model`, per sequence, positions t along the last axis:

* tables (data only): ``X[k, t] = x_{t,k}``, ``P[k, t] = lam_k^t``, ``Y[k, t] = x_{t+1,k}`` (targets);
* per-sequence maps (weights and data): ``C = [Ma^T | Mb^T | Ma^T 1 | N^T conj(z)]`` (d x (2d+2)),
  the Cauchy-like ``K`` (d x d), ``Rv = [(R diag z)^T ; (W_PV1 z)^T]`` ((d+1) x d);
* forward: ``F = C^T X`` gives ``a, K a, s, s'``; ``w_j = t a_j + lam_j^t (K (conj(lam^t) a))_j - (K a)_j - s``;
  ``yhat = Rv^T [w; s'] / (t-1)``; residual ``r = yhat - Y``; loss ``1/2 sum |r|^2``;
* backward (``mode = 1``): the adjoints of the same maps, giving ``dL/dC`` and ``dL/dRv`` per sequence
  (PyTorch's complex convention), which :mod:`companion.mesa.model` maps back to ``W_KQ`` and ``W_PV``.

Results do not depend on the number of threads (each sequence is done by one thread, in a fixed order).
The tests compare this kernel with the batched torch version of the same formulas, with autograd and
with a deliberately naive per-prefix implementation.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

# IEEE-safe fast math: reassociation lets the position loops vectorise; NaN/Inf semantics are kept, so a
# diverging run still shows up as a non-finite loss.
_FLAGS = {"contract", "reassoc", "nsz", "arcp"}


@njit(fastmath=_FLAGS, cache=True, inline="always")
def _maps(dims, W_KQ, W_PV, zn, ln, Kn, C, Rv):
    """Per-sequence maps C (d, 2d+2) and Rv (d+1, d) from the weights (see :func:`companion.mesa.model._maps`)."""
    d = len(dims)
    zero = zn[0] - zn[0]  # a zero of the complex dtype (no promotion; x_1 is finite, C may be uninitialised)
    for i in range(d):
        for k in range(d):
            lck = np.conj(ln[k])
            Nik = W_KQ[i, k] + W_KQ[i, d + k] * lck
            Mik = Nik + ln[i] * (W_KQ[d + i, k] + W_KQ[d + i, d + k] * lck)
            C[k, i] = np.conj(zn[i]) * Mik  # Ma^T[k, i], Ma = diag(conj z) M
            Rv[k, i] = (W_PV[i, k] + W_PV[i, d + k] * lck) * zn[k]  # (R diag z)^T
    for k in range(d):
        s = zero
        wp = zero
        for j in range(d):
            s += C[k, j]
            acc = zero
            for l in range(d):
                acc += C[k, l] * Kn[j, l]
            C[k, d + j] = acc  # (K Ma)^T[k, j]
            wp += (W_KQ[j, k] + W_KQ[j, d + k] * np.conj(ln[k])) * np.conj(zn[j])  # (N^T conj z)_k
        C[k, 2 * d] = s
        C[k, 2 * d + 1] = wp
    for a in range(d):
        v = zero
        for j in range(d):
            v += W_PV[a, j] * zn[j]
        Rv[d, a] = v


@njit(fastmath=_FLAGS, cache=True, inline="always")
def _lift(dims, zn, ln, Kn, gC, gRv, gA, gP):
    """Add this sequence's dL/dW_KQ, dL/dW_PV (from dL/dC, dL/dRv) to the accumulators gA, gP."""
    d = len(dims)
    for k in range(d):
        for j in range(d):
            acc = gC[k, j] + gC[k, 2 * d]
            for l in range(d):
                acc += gC[k, d + l] * np.conj(Kn[l, j])
            gM = acc * zn[j]  # dL/dM[j, k]
            gN = gM + zn[j] * gC[k, 2 * d + 1]  # dL/dN[j, k]
            lk = ln[k]
            lcj = np.conj(ln[j])
            gA[j, k] += gN
            gA[j, d + k] += gN * lk
            gA[d + j, k] += lcj * gM
            gA[d + j, d + k] += lcj * gM * lk
    for a in range(d):
        for j in range(d):
            gR = gRv[j, a] * np.conj(zn[j])
            gP[a, j] += gR + gRv[d, a] * np.conj(zn[j])
            gP[a, d + j] += gR * ln[j]


@njit(fastmath=_FLAGS, cache=True, inline="always")
def _cdot4(ar, ai, Br, Bi, r0, zero):
    """sum_t conj(a_t) B[r0 + q, t] for q = 0..3 (complex, split parts): one pass over t for four rows, so a
    vector loop's set-up, horizontal sum and remainder are paid once per four sums, not per sum."""
    s0r = zero
    s0i = zero
    s1r = zero
    s1i = zero
    s2r = zero
    s2i = zero
    s3r = zero
    s3i = zero
    for t in range(ar.shape[0]):
        vr = ar[t]
        vi = ai[t]
        s0r += vr * Br[r0, t] + vi * Bi[r0, t]
        s0i += vr * Bi[r0, t] - vi * Br[r0, t]
        s1r += vr * Br[r0 + 1, t] + vi * Bi[r0 + 1, t]
        s1i += vr * Bi[r0 + 1, t] - vi * Br[r0 + 1, t]
        s2r += vr * Br[r0 + 2, t] + vi * Bi[r0 + 2, t]
        s2i += vr * Bi[r0 + 2, t] - vi * Br[r0 + 2, t]
        s3r += vr * Br[r0 + 3, t] + vi * Bi[r0 + 3, t]
        s3i += vr * Bi[r0 + 3, t] - vi * Br[r0 + 3, t]
    return complex(s0r, s0i), complex(s1r, s1i), complex(s2r, s2i), complex(s3r, s3i)


@njit(fastmath=_FLAGS, cache=True, inline="always")
def _store4(out, i, c0, n, sums):
    """out[i, c0 + q] = sums[q] for the q < 4 with c0 + q < n (the rows past n are padding)."""
    out[i, c0] = sums[0]
    if c0 + 1 < n:
        out[i, c0 + 1] = sums[1]
    if c0 + 2 < n:
        out[i, c0 + 2] = sums[2]
    if c0 + 3 < n:
        out[i, c0 + 3] = sums[3]


@njit(fastmath=_FLAGS, cache=True, inline="always")
def _sequence(dims, mode, xr, xi, pr_, pi_, yr, yi, tpos, inv_rho, Cr, Ci, Kr, Ki, Vr, Vi, wgt,
              Fr, Fi, ur, ui, wr, wi, gr, gi, qr, qi, gC, gRv):  # noqa: C901
    """Forward (and for mode 1 backward) pass of one sequence; returns its loss 1/2 sum_t |r_t|^2.

    Inlined into :func:`sweep` (no call or reference-counting cost per sequence). Every array argument is a
    distinct buffer. Reads: the tables xr..yi (d, N), tpos, inv_rho (N,), the maps
    Cr, Ci (2d+2, d), Kr, Ki (d, d), Vr, Vi (d, d+1); scratch: Fr..gi (Fr, Fi with 2d+2 rows rounded up to a multiple of 4); writes qr, qi (predictions, mode 2)
    and gC (d, 2d+2), gRv (d+1, d) (mode 1)."""
    d = len(dims)
    nc = 2 * d + 2
    N = xr.shape[1]
    zero = xr[0, 0] - xr[0, 0]  # a zero of the table dtype (keeps float32 arithmetic in float32)
    one = zero + 1
    # ---- F[c, t] = sum_k C[k, c] X[k, t]   (columns a, K a, s, s')
    for c in range(nc):
        for t in range(N):
            sr = zero
            si = zero
            for k in range(d):
                sr += xr[k, t] * Cr[c, k] - xi[k, t] * Ci[c, k]
                si += xr[k, t] * Ci[c, k] + xi[k, t] * Cr[c, k]
            Fr[c, t] = sr
            Fi[c, t] = si
    # ---- u = conj(lam^t) * a
    for k in range(d):
        for t in range(N):
            ur[k, t] = pr_[k, t] * Fr[k, t] + pi_[k, t] * Fi[k, t]
            ui[k, t] = pr_[k, t] * Fi[k, t] - pi_[k, t] * Fr[k, t]
    # ---- w_j = t a_j + lam_j^t (K u)_j - (K a)_j - s ;  w_d = s'
    for j in range(d):
        for t in range(N):
            hr = zero
            hi = zero
            for k in range(d):
                hr += Kr[j, k] * ur[k, t] - Ki[j, k] * ui[k, t]
                hi += Kr[j, k] * ui[k, t] + Ki[j, k] * ur[k, t]
            wr[j, t] = tpos[t] * Fr[j, t] + pr_[j, t] * hr - pi_[j, t] * hi - Fr[d + j, t] - Fr[2 * d, t]
            wi[j, t] = tpos[t] * Fi[j, t] + pr_[j, t] * hi + pi_[j, t] * hr - Fi[d + j, t] - Fi[2 * d, t]
    for t in range(N):
        wr[d, t] = Fr[2 * d + 1, t]
        wi[d, t] = Fi[2 * d + 1, t]
    # ---- yhat_a = sum_i Rv[i, a] w_i / (t-1); residual r = yhat - x_{t+1} (in gr, gi)
    L = 0.0
    for a in range(d):
        acc = zero
        for t in range(N):
            hr = zero
            hi = zero
            for i in range(d + 1):
                hr += wr[i, t] * Vr[a, i] - wi[i, t] * Vi[a, i]
                hi += wr[i, t] * Vi[a, i] + wi[i, t] * Vr[a, i]
            rr = hr * inv_rho[t] - yr[a, t]
            ri = hi * inv_rho[t] - yi[a, t]
            acc += rr * rr + ri * ri
            sc = inv_rho[t] * wgt if mode == 1 else one  # mode 1: g = r wn / (t-1) at once (no second pass)
            gr[a, t] = rr * sc
            gi[a, t] = ri * sc
        L += acc
    if mode == 2:  # predictions yhat = r + x_{t+1}
        for a in range(d):
            for t in range(N):
                qr[a, t] = gr[a, t] + yr[a, t]
                qi[a, t] = gi[a, t] + yi[a, t]
    if mode != 1:
        return 0.5 * L
    # ---- dL/dRv[i, a] = sum_t conj(w_i) g_a, four rows a per pass over t (g padded with zero rows)
    dp = gr.shape[0]
    for a in range(d, dp):
        for t in range(N):
            gr[a, t] = zero
            gi[a, t] = zero
    for i in range(d + 1):
        for a0 in range(0, dp, 4):
            _store4(gRv, i, a0, d, _cdot4(wr[i], wi[i], gr, gi, a0, zero))
    # ---- g_w[i] = sum_a g_a conj(Rv[i, a])  (into wr, wi: w is no longer needed)
    for i in range(d + 1):
        for t in range(N):
            hr = zero
            hi = zero
            for a in range(d):
                hr += gr[a, t] * Vr[a, i] + gi[a, t] * Vi[a, i]
                hi += gi[a, t] * Vr[a, i] - gr[a, t] * Vi[a, i]
            wr[i, t] = hr
            wi[i, t] = hi
    # ---- u = conj(lam^t) g_w;  g_b_k = sum_j conj(K[j, k]) u_j;
    #      dL/dF = [t g_w + lam^t g_b, -g_w, -sum_j g_w_j, g_s']  (only the first block and the sum
    #      are stored; the rest are read from g_w)
    for j in range(d):
        for t in range(N):
            ur[j, t] = pr_[j, t] * wr[j, t] + pi_[j, t] * wi[j, t]
            ui[j, t] = pr_[j, t] * wi[j, t] - pi_[j, t] * wr[j, t]
    for k in range(d):
        for t in range(N):
            hr = zero
            hi = zero
            for j in range(d):
                hr += Kr[j, k] * ur[j, t] + Ki[j, k] * ui[j, t]
                hi += Kr[j, k] * ui[j, t] - Ki[j, k] * ur[j, t]
            Fr[k, t] = tpos[t] * wr[k, t] + pr_[k, t] * hr - pi_[k, t] * hi
            Fi[k, t] = tpos[t] * wi[k, t] + pr_[k, t] * hi + pi_[k, t] * hr
    for t in range(N):
        sr = zero
        si = zero
        for j in range(d):
            sr -= wr[j, t]
            si -= wi[j, t]
        Fr[2 * d, t] = sr
        Fi[2 * d, t] = si
    # ---- dL/dF of the columns d..2d-1 (-g_w) and 2d+1 (g_s') into F too, then zero columns up to a multiple of 4
    for j in range(d):
        for t in range(N):
            Fr[d + j, t] = -wr[j, t]
            Fi[d + j, t] = -wi[j, t]
    for t in range(N):
        Fr[2 * d + 1, t] = wr[d, t]
        Fi[2 * d + 1, t] = wi[d, t]
    ncp = Fr.shape[0]
    for c in range(nc, ncp):
        for t in range(N):
            Fr[c, t] = zero
            Fi[c, t] = zero
    # ---- dL/dC[k, c] = sum_t conj(X[k, t]) dL/dF[c, t], four columns per pass over t (one pass per sum paid
    #      a vector loop's set-up, horizontal sum and remainder 90 times per sequence with dL/dRv; grouped, and
    #      with g scaled in the residual pass, a paper-size epoch is 1.16-1.18x faster, A/B measured)
    for k in range(d):
        for c0 in range(0, ncp, 4):
            _store4(gC, k, c0, nc, _cdot4(xr[k], xi[k], Fr, Fi, c0, zero))
    return 0.5 * L


@njit(fastmath=_FLAGS, cache=True, nogil=True)
def _sweep_blocks(b0, b1, Xr, Xi, Pr, Pi, Yr, Yi, tpos, inv_rho, W_KQ, W_PV, z, lam, K, wn, mode, loss, gA, gP, pred,
                  dims):
    """Blocks b0..b1-1 of :func:`sweep` (compiled without numba's parallel backend, which tripled the
    compile time; :func:`sweep` runs block ranges on threads, the GIL released). Arguments as in
    :func:`sweep`.
    """
    m, _, N = Xr.shape
    d = len(dims)
    nc = 2 * d + 2
    nblocks = gA.shape[0]
    for blk in range(b0, b1):
        dt = Xr.dtype
        cdt = z.dtype
        C = np.empty((d, nc), cdt)
        Rv = np.empty((d + 1, d), cdt)
        gC = np.empty((d, nc), cdt)
        gRv = np.empty((d + 1, d), cdt)
        Cr = np.empty((nc, d), dt)
        Ci = np.empty((nc, d), dt)
        Kr = np.empty((d, d), dt)
        Ki = np.empty((d, d), dt)
        Vr = np.empty((d, d + 1), dt)
        Vi = np.empty((d, d + 1), dt)
        ncp = 4 * ((nc + 3) // 4)  # F padded to a multiple of 4 columns (the dL/dC passes)
        Fr = np.empty((ncp, N), dt)
        Fi = np.empty((ncp, N), dt)
        ur = np.empty((d, N), dt)
        ui = np.empty((d, N), dt)
        wr = np.empty((d + 1, N), dt)
        wi = np.empty((d + 1, N), dt)
        gr = np.empty((4 * ((d + 3) // 4), N), dt)  # rows rounded up to a multiple of 4 (the dL/dRv passes)
        gi = np.empty((4 * ((d + 3) // 4), N), dt)
        qr = np.empty((d, N if mode == 2 else 1), dt)
        qi = np.empty((d, N if mode == 2 else 1), dt)
        for n in range(blk * m // nblocks, (blk + 1) * m // nblocks):
            Kn = K[n]
            _maps(dims, W_KQ, W_PV, z[n], lam[n], Kn, C, Rv)
            for k in range(d):
                for c in range(nc):
                    Cr[c, k] = C[k, c].real
                    Ci[c, k] = C[k, c].imag
                for j in range(d):
                    Kr[k, j] = Kn[k, j].real
                    Ki[k, j] = Kn[k, j].imag
            for a in range(d):
                for i in range(d + 1):
                    Vr[a, i] = Rv[i, a].real
                    Vi[a, i] = Rv[i, a].imag
            loss[n] = _sequence(dims, mode, Xr[n], Xi[n], Pr[n], Pi[n], Yr[n], Yi[n], tpos, inv_rho, Cr, Ci, Kr, Ki,
                                Vr, Vi, wn[n], Fr, Fi, ur, ui, wr, wi, gr, gi, qr, qi, gC, gRv)
            if mode == 1:
                _lift(dims, z[n], lam[n], Kn, gC, gRv, gA[blk], gP[blk])
            elif mode == 2:
                pred[0, n] = qr
                pred[1, n] = qi


_THREADS: int | None = None  # set by set_threads; None: $COMPANION_THREADS (default 1)
_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}


def env_threads() -> int:
    """``$COMPANION_THREADS``, default 1 so that the processes of a parallel sweep do not oversubscribe the
    cores (``companion run`` sets it to the cores of the machine, ``companion book`` to 1 per page); anything
    but an integer >= 1 raises :class:`companion.params.ParameterError` naming the variable. The kernel
    scales about linearly: 62 ms -> 31 ms per paper-size epoch with 2 threads, measured."""
    from companion.params import ParameterError

    raw = os.environ.get("COMPANION_THREADS", "1")
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ParameterError("COMPANION_THREADS", f"must be an integer >= 1 (environment variable); got {raw!r}")
    return n


def threads() -> int:
    """Threads :func:`sweep` uses: the last :func:`set_threads`, else :func:`env_threads`."""
    return _THREADS if _THREADS is not None else env_threads()


def set_threads(n: int | None) -> int | None:
    """Set the threads of :func:`sweep` (None: back to ``$COMPANION_THREADS``); returns the previous setting."""
    global _THREADS
    old, _THREADS = _THREADS, (None if n is None else max(1, int(n)))
    return old


def sweep(Xr, Xi, Pr, Pi, Yr, Yi, tpos, inv_rho, W_KQ, W_PV, z, lam, K, wn, mode, loss, gA, gP, pred, dims):
    """One pass over all sequences.

    Xr..Yi: (m, d, N) real tables; tpos, inv_rho: (N,) positions t and 1/(t-1); W_KQ (2d, 2d), W_PV (d, 2d),
    z = x_1 (m, d), lam (m, d), K (m, d, d) complex; wn: (m,) weights of the sequences (for the gradient).
    mode 0: per-sequence loss only; 1: also the gradients, accumulated per block of sequences into
    gA (nblocks, 2d, 2d) and gP (nblocks, d, 2d) (complex128; the caller sums over blocks, so the result does
    not depend on the number of threads); 2: also the predictions into pred (2, m, d, N).
    loss (m,) receives 1/2 sum_t |r_t|^2 (unweighted).
    ``dims`` is any tuple of length d: its length is a compile-time constant, so the small loops over
    coordinates inside each position loop are unrolled and the position loops vectorise (one compiled
    version per d).

    The blocks are split into :func:`threads` contiguous ranges, each run by :func:`_sweep_blocks` on its own
    thread (the kernel releases the GIL); every block writes only its own slots, so the result is the same
    for any number of threads.
    """
    args = (Xr, Xi, Pr, Pi, Yr, Yi, tpos, inv_rho, W_KQ, W_PV, z, lam, K, wn, mode, loss, gA, gP, pred, dims)
    nblocks = gA.shape[0]
    n = min(threads(), nblocks)
    if n <= 1:
        _sweep_blocks(0, nblocks, *args)
        return
    key = (os.getpid(), n)  # a forked child inherits the pool object but not its threads: it makes its own
    pool = _POOLS.get(key)
    if pool is None:
        pool = _POOLS[key] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="mesa-sweep")
    cuts = [i * nblocks // n for i in range(n + 1)]
    for f in [pool.submit(_sweep_blocks, cuts[i], cuts[i + 1], *args) for i in range(n)]:
        f.result()


@njit(cache=True)
def _tables(theta, x1r, x1i, pos, Xr, Xi, Pr, Pi, Yr, Yi):
    m, d = theta.shape
    N = pos.shape[0]
    for n in range(m):
        for k in range(d):
            th = theta[n, k]
            c1, s1 = np.cos(th), np.sin(th)
            c, s = 1.0, 0.0
            for p in range(N):
                if p == 0 or pos[p] != pos[p - 1] + 1:  # lam^t directly, then by rotation along a run of t
                    c, s = np.cos(th * pos[p]), np.sin(th * pos[p])
                else:
                    c, s = c * c1 - s * s1, s * c1 + c * s1
                cq, sq = c * c1 + s * s1, s * c1 - c * s1  # lam^(t-1)
                a, b = x1r[n, k], x1i[n, k]
                Pr[n, k, p], Pi[n, k, p] = c, s
                Xr[n, k, p], Xi[n, k, p] = a * cq - b * sq, a * sq + b * cq
                Yr[n, k, p], Yi[n, k, p] = a * c - b * s, a * s + b * c


def split_tables(theta: np.ndarray, x1: np.ndarray, positions: np.ndarray, real_dtype) -> tuple:
    """(Xr, Xi, Pr, Pi, Yr, Yi), each (m, d, N): x_t, lam^t and x_{t+1} at the positions t, computed in
    float64 from the phases (lam^t by rotation along runs of consecutive positions; relative error
    ~ N * 1e-16) and then cast."""
    m, d = theta.shape
    N = len(positions)
    out = tuple(np.empty((m, d, N)) for _ in range(6))
    x1 = np.asarray(x1)
    _tables(np.ascontiguousarray(theta, dtype=float), np.ascontiguousarray(x1.real, dtype=float),
            np.ascontiguousarray(x1.imag, dtype=float), np.asarray(positions, dtype=np.int64), *out)
    if real_dtype == np.float64:
        return out
    return tuple(a.astype(real_dtype) for a in out)


def warm_up(dims=(5,)) -> float:
    """Compile the kernels (or load them from numba's on-disk cache) for coordinate dimensions ``dims`` in
    both dtypes, so that the first training run does not pay the compilation (about 10-20 s per version
    on a 2-core machine; loading a cached version takes well under a second). Returns the seconds spent.

    Numpy in, numpy out: the inputs are built here with the dtypes :mod:`companion.mesa.model` passes
    (this module imports nothing of the model, so there is no import loop)."""
    import time

    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    m, T = 3, 5
    pos = np.arange(2, T)
    for d in dims:
        theta = rng.uniform(0.0, 2 * np.pi, (m, d))
        x1 = rng.standard_normal((m, d)).astype(complex)
        lam = np.exp(1j * theta)
        prod = lam[:, :, None] * lam.conj()[:, None, :]
        K = np.where(np.eye(d, dtype=bool), 0.0, 1.0 / np.where(np.eye(d, dtype=bool), 2.0, prod - 1.0))
        for cdt, rdt in ((np.complex64, np.float32), (np.complex128, np.float64)):
            sweep(*split_tables(theta, x1, pos, rdt), pos.astype(rdt), (1.0 / (pos - 1)).astype(rdt),
                  np.zeros((2 * d, 2 * d), cdt), np.zeros((d, 2 * d), cdt), np.ascontiguousarray(x1.astype(cdt)),
                  np.ascontiguousarray(lam.astype(cdt)), np.ascontiguousarray(K.astype(cdt)), np.full(m, 1.0 / m, rdt), 1,
                  np.empty(m), np.zeros((m, 2 * d, 2 * d), np.complex128), np.zeros((m, d, 2 * d), np.complex128),
                  np.empty((1, 1, 1, 1), rdt), (0,) * d)
    return time.perf_counter() - t0


if __name__ == "__main__":  # pragma: no cover
    print(f"mesa kernels ready (d = 5, complex64 and complex128) in {warm_up():.1f} s")
