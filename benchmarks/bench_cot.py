"""Benchmark of the cot part (a script, not a timed test).

1. The teacher-forced CoT loss (6) and its gradient for one batch (d = 10, n = 20, k = 20, batch 64):
   the fast batched implementation (companion.cot.teacher_forced_loss) against the deliberately naive
   per-position reference companion.cot.reference.naive_teacher_forced_loss. Prints both times, the ratio (target >= 10x) and the
   differences of the numbers (identical up to float64 round-off).
2. One training step at the book's sizes (the cot notebooks' parameter cells: d, n, k, batch 64, replicates R) for
   every kind of training the book does: the closed-form gradients of companion.cot.grads with the written-out
   Adam of companion.cot.train against autograd + torch.optim (companion.cot.reference), on the same minibatch;
   prints both times and the ratio (target >= 5x), for the gradient + update alone and for the whole step (with the
   sampling of the minibatch and the GD trajectory). One thread on both sides (torch and NumPy's OpenBLAS).
3. Autoregressive CoT inference at the book's evaluation size (the 10 replicate models of a CoT run, 1000 evaluation
   prompts each, d = 10, n = 20, k = 20): companion.cot.cot_inference (NumPy) against a torch reference
   (companion.cot.reference.torch_cot_inference); prints both times, the ratio and the difference.
4. The wall time of every cot notebook at its book (default) settings, executed through `companion run`
   with the run cache disabled (cold), and the total (target <= 2 minutes on a 2-core machine); beside
   each wall time the CPU time of the run (user + sys of its processes: about the wall time on a quiet machine)
   and the load average, since the machine is shared.

Usage:  .venv/bin/python benchmarks/bench_cot.py [--skip-notebooks] [--fresh-cache] [--jobs 2] [--steps-only]
(``--fresh-cache``: the runs share an empty run cache, as in a first ``make book``, instead of running cold;
``--jobs 2``: two notebooks side by side, as ``companion book`` runs them on a 2-core machine.)
(``--steps-only``: part 2 alone; ``--inference-only``: part 3 alone.) Timings are noisy on a shared machine; the script reports the best of several
repeats for parts 1 and 2.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads OpenBLAS: one thread, as torch in the benchmarks
# torch and the package load inside the benchmarks: a refused option answers before they do

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ["setup", "thm3_1_no_cot", "cor3_1_floor", "thm3_2_construction", "thm4_1_dynamics", "thm4_2_ood",
             "looped", "experiments"]


def _best(f, reps):
    """The fastest of ``reps`` timed calls of ``f`` after one untimed warm-up call, and the last result."""
    f()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
    return min(times), out


def bench_loss(d=10, n=20, k=20, batch=64, eta=0.3, repeats=5):
    import torch

    from companion.cot import gd_trajectory, make_generator, sample_prompts, teacher_forced_loss

    torch.set_num_threads(1)
    from companion.cot.reference import naive_teacher_forced_loss as naive

    gen = make_generator(0)
    p = sample_prompts(batch, d, n, gen)
    D = 2 * d + 2
    W_KQ = (0.3 / math.sqrt(D) * torch.randn(D, D, generator=gen, dtype=torch.float64)).requires_grad_()
    W_PV = (0.3 / math.sqrt(D) * torch.randn(D, D, generator=gen, dtype=torch.float64)).requires_grad_()

    def fast():
        loss = teacher_forced_loss(p, gd_trajectory(p, eta, k), W_KQ, W_PV, k)
        return loss, torch.autograd.grad(loss, [W_KQ, W_PV])

    def slow():
        loss = naive(p.X, p.w_star, eta, k, W_KQ, W_PV)
        return loss, torch.autograd.grad(loss, [W_KQ, W_PV])

    t_fast, (lf, gf) = _best(fast, 20 * repeats)
    t_slow, (ls, gs) = _best(slow, repeats)
    loss_rel = abs(float(lf.detach()) - float(ls.detach())) / abs(float(ls.detach()))
    grad_rel = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(gf, gs))
    print(f"teacher-forced CoT loss + gradient, d={d} n={n} k={k} batch={batch}, float64, 1 thread")
    print(f"  fast (batched prefix sums): {t_fast * 1e3:9.3f} ms")
    print(f"  naive per-position loop:    {t_slow * 1e3:9.3f} ms")
    print(f"  speed-up: {t_slow / t_fast:.1f}x   (target >= 10x)")
    print(f"  loss fast {float(lf.detach()):.15g}  naive {float(ls.detach()):.15g}  rel. diff {loss_rel:.2e}")
    print(f"  gradient max rel. diff {grad_rel:.2e}   identical up to float64 round-off: "
          f"{'yes' if loss_rel < 1e-12 and grad_rel < 1e-12 else 'NO'}")
    return t_slow / t_fast


def _book_runs() -> list:
    """The training runs of the book (the cot notebooks' parameter cells and companion.cot.paper's run plan):
    (label, objective, d, n, k, R)."""
    from companion.cot.paper import COMMON, COT_TRAIN, NO_COT_TRAIN

    d, n, k, R_cot, R_noc = COMMON["d"], COMMON["n"], COMMON["k"], COT_TRAIN["replicates"], NO_COT_TRAIN["replicates"]
    return [
        ("thm4_1/thm4_2 CoT", "cot", d, n, k, R_cot),
        ("experiments CoT n=20", "cot", d, 20, 10, R_cot),
        ("experiments CoT n=40", "cot", d, 40, 10, R_cot),
        ("thm3_1 no-CoT", "no_cot", d, n, 1, R_noc),
        ("cor3_1 no-CoT d=10 n=40", "no_cot", 10, 40, 1, R_noc),
        ("experiments no-CoT", "no_cot", d, 20, 1, 1),
        ("looped full", "looped", d, n, 3, 1),
        ("looped isotropic", "isotropic", d, n, 3, 8),
    ]


def _step_times(objective, d, n, k, R, batch, eta, repeats, inner) -> dict:
    """Seconds per training step of each path ("cf": closed form, "ag": autograd) without and with the sampling
    of the minibatch (and, for CoT, its GD trajectory), best of ``repeats`` means of ``inner`` steps."""
    import torch

    from companion.cot import make_generator
    from companion.cot.data import sample_replicate_prompts
    from companion.cot.reference import AUTOGRAD
    from companion.cot.train import CLOSED_FORM

    gens = [make_generator(r) for r in range(R)]

    def sample():  # as the training draws a step's minibatches
        p = sample_replicate_prompts(batch, d, n, gens)
        if objective == "isotropic":
            return p.S.reshape(R, batch, d, d), p.w_star.reshape(R, batch, d)
        return (p,)

    def stepper(engine):
        if objective == "isotropic":
            params = [0.1 * torch.ones(R, dtype=torch.float64), torch.ones(R, dtype=torch.float64)]
            opt = engine.optimizer(params, "adam", 1e-4)
            return lambda S, w_star: opt.step(list(engine.isotropic(S, w_star, *params, k)[1:]))
        D = 2 * d + 2
        g = make_generator(1)
        params = [0.1 / math.sqrt(D) * torch.randn((R, D, D) if R > 1 else (D, D), generator=g, dtype=torch.float64)
                  for _ in range(2)]
        opt = engine.optimizer(params, "adam", 1e-4)
        return lambda p: opt.step(list(engine.full(objective, p, eta, *params, k)[1:]))

    fixed = sample()
    out = {}
    for name, engine in (("cf", CLOSED_FORM), ("ag", AUTOGRAD)):
        for whole in (False, True):
            step = stepper(engine)
            step(*fixed)
            times = []
            for _ in range(repeats):
                t = time.perf_counter()
                for _ in range(inner):
                    step(*(sample() if whole else fixed))
                times.append((time.perf_counter() - t) / inner)
            out[name, whole] = min(times)
    return out


def bench_train_step(batch=64, eta=0.3, repeats=7, inner=10):
    """One training step of every book run: closed-form gradients + the written-out Adam
    (companion.cot.train.CLOSED_FORM) against autograd + torch.optim (companion.cot.reference.AUTOGRAD), on the
    same minibatch and starting weights; 'grad+update' is what the two paths do differently, 'whole step' adds the
    sampling of the minibatch (and the CoT GD trajectory). 1 thread. Returns the smallest grad+update ratio."""
    import torch

    torch.set_num_threads(1)
    print(f"training step at the book's sizes (batch {batch} per replicate, float64, 1 thread, load "
          f"{os.getloadavg()[0]:.1f}; best of {repeats} means of {inner} steps), closed form vs autograd:")
    print(f"  {'run':28s} {'d':>3s} {'n':>3s} {'k':>3s} {'R':>2s}   {'grad+update ms':>21s} {'ratio':>6s}   "
          f"{'whole step ms':>19s} {'ratio':>6s}")
    ratios = []
    for label, objective, d, n, k, R in _book_runs():
        t = _step_times(objective, d, n, k, R, batch, eta, repeats, inner)
        r, rw = t["ag", False] / t["cf", False], t["ag", True] / t["cf", True]
        ratios.append(r)
        print(f"  {label:28s} {d:3d} {n:3d} {k:3d} {R:2d}   {t['cf', False] * 1e3:8.3f} vs {t['ag', False] * 1e3:8.3f} "
              f"{r:5.1f}x   {t['cf', True] * 1e3:7.3f} vs {t['ag', True] * 1e3:7.3f} {rw:5.1f}x", flush=True)
    print(f"  smallest grad+update ratio {min(ratios):.1f}x (target >= 5x)")
    return min(ratios)


def _run_one(name: str, tmp: str, env: dict) -> tuple[str, float, int, str]:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "companion", "run", f"cot/{name}", "-o", f"{tmp}/{name}", "--quiet"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    return name, time.perf_counter() - t, proc.returncode, proc.stderr[-2000:]


def bench_notebooks(fresh_cache: bool = False, jobs: int = 1):
    """``fresh_cache``: an empty run cache shared by the eight runs (a first ``make book``: thm4_2_ood reuses the
    training of thm4_1_dynamics) instead of no cache at all. ``jobs``: notebooks executed side by side (2: as
    ``companion book`` executes them on a 2-core machine, the costliest first, COMPANION_THREADS=1 as there); the
    total is then the wall time of the whole set, not the sum of the notebooks' times."""
    from concurrent.futures import ThreadPoolExecutor

    how = "an empty run cache shared by the runs" if fresh_cache else "cold: run cache off"
    print(f"cot notebooks at book settings ({how}), via `companion run`, {jobs} at a time; "
          f"load {os.getloadavg()[0]:.1f}:")
    names = [n for n in NOTEBOOKS if (ROOT / "notebooks" / "cot" / f"{n}.md").is_file()]
    if jobs > 1:  # the costliest first, so the last one to start is short
        order = ["thm4_1_dynamics", "experiments", "thm4_2_ood", "looped", "cor3_1_floor"]
        names = sorted(names, key=lambda n: order.index(n) if n in order else len(order))
    before = os.times()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, COMPANION_CACHE_DIR=f"{tmp}/cache" if fresh_cache else "off")
        if jobs > 1:
            env["COMPANION_THREADS"] = "1"
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for name, dt, code, err in pool.map(lambda n: _run_one(n, tmp, env), names):
                status = "ok" if code == 0 else f"FAILED ({code})"
                print(f"  cot/{name:22s} {dt:7.1f} s wall  load {os.getloadavg()[0]:4.1f}  {status}", flush=True)
                if code != 0:
                    print(err)
    total = time.perf_counter() - t0
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    print(f"  all {len(names)}: {total:.1f} s wall, {cpu:.1f} s CPU, {jobs} at a time   (target <= 120 s; includes "
          "kernel start-up, about 2-3 s per notebook)")
    return total


def bench_inference(d=10, n=20, k=20, per=1000, R=10, repeats=5):
    import torch

    from companion.cot import cot_inference, make_generator, sample_prompts
    from companion.cot.data import Prompts
    from companion.cot.reference import torch_cot_inference

    torch.set_num_threads(1)
    g = make_generator(1)
    p = sample_prompts(per, d, n, g)
    p = Prompts(p.X.repeat(R, 1, 1), p.w_star.repeat(R, 1))
    D = 2 * d + 2
    W_KQ = 0.03 * torch.randn(R, D, D, generator=g, dtype=torch.float64)
    W_PV = 0.03 * torch.randn(R, D, D, generator=g, dtype=torch.float64)

    t_np, a = _best(lambda: cot_inference(p, W_KQ, W_PV, k), repeats)
    t_torch, b = _best(lambda: torch_cot_inference(p, W_KQ, W_PV, k), repeats)
    rel = float((a - b).abs().max() / b.abs().max())
    print(f"CoT inference, {R} models x {per} prompts, d={d}, n={n}, k={k}: NumPy {1e3 * t_np:.0f} ms, torch "
          f"{1e3 * t_torch:.0f} ms (best of {repeats}): {t_torch / t_np:.1f}x; largest relative difference {rel:.1e}")


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1; got {text!r}")
    return int(text)


def main(argv=None) -> int:
    """Parse the options (an unknown option or a bad value is one line and exit 2, as argparse does) and run the
    parts asked for."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="Timings are noisy on a shared machine; parts 1 and 2 report the best of several repeats.")
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--steps-only", action="store_true", help="part 2 alone (the training steps)")
    only.add_argument("--inference-only", action="store_true", help="part 3 alone (CoT inference)")
    only.add_argument("--skip-notebooks", action="store_true", help="parts 1-3, not the notebooks")
    ap.add_argument("--fresh-cache", action="store_true",
                    help="part 4: the notebooks share an empty run cache, as in a first `make book` (default: cold)")
    ap.add_argument("--jobs", type=_positive, default=1,
                    help="part 4: notebooks side by side, an integer >= 1 (2: as `companion book` runs them on 2 cores)")
    args = ap.parse_args(argv)
    if args.steps_only:
        bench_train_step()
        return 0
    if args.inference_only:
        bench_inference()
        return 0
    bench_loss()
    bench_train_step()
    bench_inference()
    if not args.skip_notebooks:
        bench_notebooks(fresh_cache=args.fresh_cache, jobs=args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
