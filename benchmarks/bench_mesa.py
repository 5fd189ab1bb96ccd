"""Benchmark of companion.mesa (not a timed test).

1. One full-batch epoch (loss + all gradients) at d=5, T=100, m=10^4 with the fast closed-form
   implementation (its two backends: the fused kernel used for training (generated SIMD code, companion.mesa.lanes), and the same formulas as
   batched torch products), against two references that evaluate the model prefix by prefix:
   * the deliberately naive reference companion.mesa.reference.naive_loss_and_grad (one sequence and one prefix at a
     time, autograd), timed on a few sequences and scaled linearly to m (its cost is linear in m);
   * a straightforward prefix loop vectorised over sequences (like the reference code's forward_train:
     loop over t, E_t E_t^H batched over sequences, autograd), timed on a subset and scaled linearly.
   Both references are compared with the fast implementation on the same sequences (complex128).
2. With --paper: the wall time of every paper-scale run of the mesa notebooks (companion.mesa.results.plan),
   computed from scratch (run cache disabled), and with --notebooks also the wall time of executing the
   seven mesa notebooks at their default (paper) parameters with an empty run cache (after compiling the
   fused kernels, as `companion book` does, timed separately); ``--jobs 2`` executes them as ``companion book``
   does on 2 cores (the shared runs first, then two notebooks at a time).

Timings are noisy on a shared 2-core machine; medians of a few repeats are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def prefix_loop_loss_and_grad(data, W_KQ, W_PV):
    """Straightforward reference: loop over prefixes t, batched over sequences, autograd."""
    import torch

    from companion.mesa.data import embed

    A = W_KQ.clone().requires_grad_(True)
    P = W_PV.clone().requires_grad_(True)
    x = data.tokens()
    e = embed(x)
    total = 0.0
    for t in range(2, data.T):
        E = e[:, :t]  # (m, t, 2d)
        S = E.transpose(1, 2) @ E.conj() / (t - 1)  # sum_i e_i e_i^H / (t-1)
        y = (S @ (e[:, t - 1] @ A.T).unsqueeze(-1)).squeeze(-1) @ P.T
        total = total + 0.5 * ((y - x[:, t]).abs() ** 2).sum() / data.m
    gA, gP = torch.autograd.grad(total, (A, P))
    return total.detach(), gA, gP


def timed(f, repeats):
    ts = []
    out = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = f()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out


def epoch_benchmark(m: int, T: int, d: int, n_naive: int, n_loop: int, repeats: int) -> None:
    import torch

    from companion.mesa.data import generate
    from companion.mesa.lanes import host as kernels
    from companion.mesa.model import loss_grad_fast
    from companion.mesa.reference import naive_loss_and_grad

    threads = int(os.environ.get("COMPANION_THREADS", "1"))
    torch.set_num_threads(threads)
    kernels.set_threads(threads)
    print(f"threads (torch / fused kernel): {torch.get_num_threads()} / {kernels.threads()}")
    g = torch.Generator().manual_seed(0)
    t_fast = {}
    for dtype in (torch.complex64, torch.complex128):
        data = generate("gaussian", m, d, T, 1.0, rng=1, dtype=dtype)
        chunks = [data.subset(slice(i, i + 1000)) for i in range(0, m, 1000)]
        A = (0.1 * torch.randn(2 * d, 2 * d, dtype=torch.complex128, generator=g)).to(dtype)
        P = (0.1 * torch.randn(d, 2 * d, dtype=torch.complex128, generator=g)).to(dtype)
        for backend, parts in (("fused", [data]), ("torch", chunks)):

            def epoch():
                return [loss_grad_fast(c, A, P, backend=backend) for c in parts]  # noqa: B023 - called at once

            epoch()  # warm-up: compiles / loads the kernel, builds the cached position tables
            t, _ = timed(epoch, repeats)
            t_fast[backend, dtype] = t
            print(f"closed form, {backend:5s} backend, {str(dtype):16s}: {t * 1e3:8.1f} ms per full-batch epoch (m={m}, T={T}, d={d})")
    for dtype in (torch.complex64, torch.complex128):
        print(f"fused kernel vs batched torch products ({dtype}): {t_fast['torch', dtype] / t_fast['fused', dtype]:.1f}x")
    t_fast128 = t_fast["fused", torch.complex128]
    t_fast64 = t_fast["fused", torch.complex64]

    data = generate("gaussian", m, d, T, 1.0, rng=1, dtype=torch.complex128)
    A = 0.1 * torch.randn(2 * d, 2 * d, dtype=torch.complex128, generator=g)
    P = 0.1 * torch.randn(d, 2 * d, dtype=torch.complex128, generator=g)

    small = data.subset(slice(0, n_naive))
    t_naive, (L0, gA0, gP0, _) = timed(lambda: naive_loss_and_grad(small, A, P), 1)
    L1, gA1, gP1 = loss_grad_fast(small, A, P)
    rel = lambda u, v: float((u - v).abs().max() / v.abs().max())  # noqa: E731
    t_naive_full = t_naive * m / n_naive
    print(f"naive per-prefix reference (complex128): {t_naive:.2f} s for {n_naive} sequences -> {t_naive_full:.0f} s per epoch at m={m} (linear scaling)")
    print(f"  same numbers: loss rel. diff {abs(float(L1) - float(L0)) / float(L0):.1e}, grad W_KQ {rel(gA1, gA0):.1e}, grad W_PV {rel(gP1, gP0):.1e}")

    sub = data.subset(slice(0, n_loop))
    t_loop, (L2, gA2, gP2) = timed(lambda: prefix_loop_loss_and_grad(sub, A, P), 1)
    L3, gA3, gP3 = loss_grad_fast(sub, A, P)
    t_loop_full = t_loop * m / n_loop
    print(f"prefix loop vectorised over sequences (complex128): {t_loop:.2f} s for {n_loop} sequences -> {t_loop_full:.1f} s per epoch at m={m}")
    print(f"  same numbers: loss rel. diff {abs(float(L3) - float(L2)) / float(L2):.1e}, grad W_KQ {rel(gA3, gA2):.1e}, grad W_PV {rel(gP3, gP2):.1e}")
    print(f"speed-up of the fast complex128 epoch: {t_naive_full / t_fast128:.0f}x vs naive, {t_loop_full / t_fast128:.0f}x vs prefix loop")
    print(f"speed-up of the fast complex64 epoch (used for training): {t_naive_full / t_fast64:.0f}x vs naive, {t_loop_full / t_fast64:.0f}x vs prefix loop")


def paper_benchmark() -> None:
    os.environ["COMPANION_CACHE_DIR"] = "off"
    from companion.mesa.results.plan import paper_runs
    from companion.mesa.train import run

    t0 = time.perf_counter()
    for kw in paper_runs():
        t1 = time.perf_counter()
        r = run(**kw)
        print(f"{time.perf_counter() - t1:7.1f} s  {kw['law']:10s} scale={kw['scale']:<4g} T={kw['T']:<4d} epochs={kw['epochs']} "
              f"init={kw.get('init', 'diagonal')} ({kw.get('a0', '')}, {kw.get('b0', '')}) lr={kw['lr']:.3g} mask={kw.get('mask', False)}: ab={r.ab[-1]:.5f}",
              flush=True)
    print(f"all {len(paper_runs())} paper-scale runs: {time.perf_counter() - t0:.0f} s")


def _size(kw: dict) -> float:
    """Sequence-positions x epochs of a run, in units of one paper run (m = 1e4, T = 100, 200 epochs)."""
    from companion.mesa.train import RunConfig

    c = RunConfig(**kw)
    return c.m * (c.T - 2) * c.epochs / (1e4 * 98 * 200)


def notebooks_benchmark(keep: str = "") -> None:
    names = ["setup", "thm4_1_emergence", "thm4_2_capability", "prop4_1_gaussian", "prop4_2_beyond", "thm4_3_masking",
             "appendix_experiments"]
    from companion.mesa.lanes.host import warm_up

    # as in `companion book`: the kernels are compiled (or loaded from numba's disk cache) before the notebooks
    print(f"{warm_up():7.1f} s  compiling / loading the fused mesa kernels (d = 5, both dtypes)", flush=True)
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as tmp:
        out = keep or tmp  # --out keeps the executed notebooks (e.g. to look at the figures)
        env = dict(os.environ, COMPANION_CACHE_DIR=cache)
        total = time.perf_counter()
        for n in names:
            t0 = time.perf_counter()
            log = Path(out) / f"{n}.runs.jsonl"
            proc = subprocess.run([sys.executable, "-m", "companion", "run", f"mesa/{n}", "-o", f"{out}/{n}", "--quiet"],
                                  env=dict(env, COMPANION_RUN_LOG=str(log)), capture_output=True, text=True)
            runs = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
            new = [r for r in runs if not r["cached"]]
            print(f"{time.perf_counter() - t0:7.1f} s  mesa/{n} (exit {proc.returncode}, load {os.getloadavg()[0]:.1f}): "
                  f"{len(new)} runs trained "
                  f"({sum(r['trained'] for r in new):.0f} s, {sum(_size(r['kwargs']) for r in new):.1f} "
                  f"paper-run equivalents), {len(runs) - len(new)} from the cache", flush=True)
        print(f"all mesa notebooks at paper settings, empty run cache at start: {time.perf_counter() - total:.0f} s "
              f"(load average 1/5/15 min at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}; shared machine)")


def notebooks_parallel(jobs: int) -> None:
    """The seven mesa notebooks as ``companion book`` executes them on a 2-core machine, from an empty run cache:
    every shared run of :func:`companion.mesa.results.plan.warm_run_cache` first (``jobs`` processes, one kernel thread
    each), then the notebooks ``jobs`` at a time (``COMPANION_THREADS=1``). Prints both stages and the total."""
    from concurrent.futures import ThreadPoolExecutor

    from companion.mesa.lanes.host import warm_up

    names = ["thm4_2_capability", "thm4_1_emergence", "thm4_3_masking", "appendix_experiments", "prop4_1_gaussian",
             "setup", "prop4_2_beyond"]
    print(f"{warm_up():7.1f} s  compiling / loading the fused mesa kernels (d = 5, both dtypes)", flush=True)
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out:
        os.environ["COMPANION_CACHE_DIR"] = cache
        from companion.mesa.results.plan import paper_runs, warm_run_cache

        t0 = time.perf_counter()
        sec = warm_run_cache(jobs, log=None)
        print(f"{sec:7.1f} s  {len(paper_runs())} shared runs, {jobs} processes", flush=True)
        env = dict(os.environ, COMPANION_THREADS="1")

        def one(n):
            t = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "companion", "run", f"mesa/{n}", "-o", f"{out}/{n}", "--quiet"],
                               env=env, capture_output=True, text=True)
            return n, time.perf_counter() - t, p.returncode

        t1 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for n, dt, code in pool.map(one, names):
                print(f"{dt:7.1f} s  mesa/{n} (exit {code})", flush=True)
        print(f"{time.perf_counter() - t1:7.1f} s  the 7 notebooks, {jobs} at a time")
        print(f"all mesa notebooks at paper settings, empty run cache at start, {jobs} at a time: "
              f"{time.perf_counter() - t0:.0f} s (load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=10_000)
    ap.add_argument("--T", type=int, default=100)
    ap.add_argument("--d", type=int, default=5)
    ap.add_argument("--n-naive", type=int, default=20, help="sequences for the naive reference (scaled to m)")
    ap.add_argument("--n-loop", type=int, default=1000, help="sequences for the prefix loop (scaled to m)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--paper", action="store_true", help="also time every paper-scale run from scratch")
    ap.add_argument("--notebooks", action="store_true", help="also execute the 7 mesa notebooks at paper settings")
    ap.add_argument("--out", default="", help="with --notebooks: keep the executed notebooks in this directory")
    ap.add_argument("--no-epoch", action="store_true", help="skip the epoch benchmark")
    ap.add_argument("--jobs", type=int, default=1, help="with --notebooks: 2 = as `companion book` on 2 cores (the "
                    "shared runs first, 2 processes, then the notebooks 2 at a time)")
    a = ap.parse_args()
    if not a.no_epoch:
        epoch_benchmark(a.m, a.T, a.d, a.n_naive, a.n_loop, a.repeats)
    if a.paper:
        paper_benchmark()
    if a.notebooks:
        notebooks_benchmark(a.out) if a.jobs <= 1 else notebooks_parallel(a.jobs)
