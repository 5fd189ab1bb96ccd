"""Benchmark of the cot part (a script, not a timed test).

1. The teacher-forced CoT loss (6) and its gradient for one batch (d = 10, n = 20, k = 20, batch 64):
   the fast batched implementation (companion.cot.teacher_forced_loss) against the deliberately naive
   per-position reference of tests/test_cot_model.py. Prints both times, the ratio (target >= 10x) and the
   differences of the numbers (identical up to float64 round-off).
2. The wall time of every cot notebook at its book (default) settings, executed through `companion run`
   with the run cache disabled (cold), and the total (target <= 2 minutes on a 2-core machine, issue 10); beside
   each wall time the CPU time of the run (user + sys of its processes: about the wall time on a quiet machine)
   and the load average, since the machine is shared.

Usage:  .venv/bin/python benchmarks/bench_cot.py [--skip-notebooks] [--fresh-cache] [--jobs 2]
(``--fresh-cache``: the runs share an empty run cache, as in a first ``make book``, instead of running cold;
``--jobs 2``: two notebooks side by side, as ``companion book`` runs them on a 2-core machine.)
Timings are noisy on a shared machine; the script reports the best of several repeats for part 1.
"""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ["setup", "thm3_1_no_cot", "cor3_1_floor", "thm3_2_construction", "thm4_1_dynamics", "thm4_2_ood",
             "looped", "experiments"]


def _naive():
    spec = importlib.util.spec_from_file_location("test_cot_model", ROOT / "tests" / "test_cot_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.naive_teacher_forced_loss


def bench_loss(d=10, n=20, k=20, batch=64, eta=0.3, repeats=5):
    from companion.cot import gd_trajectory, make_generator, sample_prompts, teacher_forced_loss

    torch.set_num_threads(1)
    naive = _naive()
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

    def best(f, reps):
        f()
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            out = f()
            times.append(time.perf_counter() - t)
        return min(times), out

    t_fast, (lf, gf) = best(fast, 20 * repeats)
    t_slow, (ls, gs) = best(slow, repeats)
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


if __name__ == "__main__":
    bench_loss()
    if "--skip-notebooks" not in sys.argv:
        jobs = int(sys.argv[sys.argv.index("--jobs") + 1]) if "--jobs" in sys.argv else 1
        bench_notebooks(fresh_cache="--fresh-cache" in sys.argv, jobs=jobs)
