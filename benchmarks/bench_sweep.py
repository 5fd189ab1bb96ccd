"""Benchmark of a mesa sweep through `companion sweep`'s own machinery (not a test).

Every point is one paper-scale training run (d = 5, T = 100, m = 1e4, 200 epochs, the Gaussian law), executed
the way `companion sweep` executes any point: through Dask (``companion.run.sweep.run_sweep``), in its worker's run
server and warm kernel (``companion run --serve``), the cores divided among the workers. The point notebook is generated here
(it trains once with ``companion.mesa.train.train`` and records the final a·b); the grid crosses step sizes,
scales and seeds. The target is 100 points within 10 minutes on the 2-core machine.

    .venv/bin/python benchmarks/bench_sweep.py                    # 100 points at paper scale
    .venv/bin/python benchmarks/bench_sweep.py --points 4 --m 1000 --epochs 20   # a quick check

Prints the wall time against the bound 1.1 x (total training time / workers), the time per point and how it
splits between the training itself and the rest (in a warm kernel: the namespace reset, papermill, data
generation; the first point of each worker also starts its server and kernel), and the CPU. Timings are
noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

POINT_NB = """---
jupytext:
  text_representation: {{extension: .md, format_name: myst, format_version: 0.13}}
kernelspec: {{display_name: Python 3, language: python, name: python3}}
---

# One paper-scale mesa training run (benchmark point)

```{{code-cell}} ipython3
:tags: [parameters]
scale: float = 1.0  # Gaussian scale sigma
lr: float = 1e-3  # step size
seed: int = 1  # seed of the data
m: int = {m}  # training sequences
epochs: int = {epochs}  # GD epochs
results_dir: str = ""  # where to write the record
```

```{{code-cell}} ipython3
import json, os, pathlib, time
from companion.mesa.train import RunConfig, train

t0 = time.perf_counter()
res = train(RunConfig(law="gaussian", d=5, T=100, m=m, m_test=1000, scale=scale, a0=0.1, b0=0.1, lr=lr,
                      epochs=epochs, seed=seed, device="{device}"))
seconds = time.perf_counter() - t0
if results_dir:
    rec = dict(notebook="point", claim="ab_final", quantity="a·b at the last epoch", predicted=None,
               measured=float(res.ab[-1]), tolerance=None, comparison="abs", error=None, passed=True,
               reason="benchmark: no verdict", parameters=dict(scale=scale, lr=lr, seed=seed),
               train_seconds=seconds)
    pathlib.Path(results_dir, "point.jsonl").write_text(json.dumps(rec) + "\\n")
```
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=100)
    ap.add_argument("--m", type=int, default=10_000)
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--device", default="cpu",
                    help="where each point trains: 'cpu' (the fused kernel) or a torch device such as 'cuda' "
                         "(companion.mesa.torch_epoch)")
    args = ap.parse_args()

    from companion.mesa.lanes import host
    from companion.run.store import read_results
    from companion.run.sweep import run_sweep

    print(f"mesa kernels ready in {host.warm_up():.1f} s (compiled once, cached on disk)", flush=True)
    # step sizes as in Table 1 of the reference code, scaled with the Gaussian curvature alpha ~ scale^6
    # (1e-4 at scale 1): a fixed lr crossed with the scales diverges at the large ones
    base_lrs = [1e-4, 5e-5, 2e-5, 1e-5]
    scales = [0.5, 0.75, 1.0, 1.25, 1.5]
    combos = list(itertools.islice(itertools.product(range(1, 1000), base_lrs, scales), args.points))
    points = [dict(scale=s, lr=float(f"{lr / s**6:.3g}"), seed=seed) for seed, lr, s in combos]
    with tempfile.TemporaryDirectory() as tmp:
        nb = Path(tmp) / "bench" / "point.md"
        nb.parent.mkdir()
        nb.write_text(POINT_NB.format(m=args.m, epochs=args.epochs, device=args.device))
        t0 = time.perf_counter()
        summary = run_sweep(str(nb), points, Path(tmp) / "sweep", workers=args.workers, progress=True,
                            swept=["scale", "lr", "seed"], log=lambda msg: print(msg, file=sys.stderr))
        wall = time.perf_counter() - t0
        recs = list(read_results(Path(tmp) / "sweep").values())
    pairs = [(r["seconds"], r["records"][0]["train_seconds"]) for r in recs if r.get("records") and r.get("seconds")]
    train_s = [t for _, t in pairs]
    point_s = [p for p, _ in pairs]
    # the first point of each worker starts its run server and kernel (imports, the kernels from the disk
    # cache); every later point runs in that warm kernel
    extra = sorted(p - t for p, t in pairs)
    warm = extra[: max(0, len(extra) - args.workers)]
    print(json.dumps({k: summary[k] for k in ("total", "ok", "failed", "error")}))
    for r in recs:
        if r.get("status") == "error":
            print(f"error at {r.get('parameters')}: {r.get('error')}")
    print(f"{len(points)} points (d=5, T=100, m={args.m}, {args.epochs} epochs) on {args.workers} workers, "
          f"{os.cpu_count()} cores: {wall:.0f} s wall, {wall / max(1, len(points)):.1f} s per point")
    if train_s and point_s:
        bound = 1.1 * sum(train_s) / args.workers
        print(f"per point: {statistics.median(point_s):.2f} s on its worker (median), of which training "
              f"{statistics.median(train_s):.2f} s")
        if warm:
            print(f"beyond training, per point in a warm kernel: median {statistics.median(warm):.2f} s, "
                  f"max {max(warm):.2f} s (target < 0.5 s); the {len(extra) - len(warm)} first point(s) of the "
                  f"workers: {', '.join(f'{x:.1f}' for x in extra[len(warm):])} s")
        print(f"wall {wall:.0f} s against the bound 1.1 x (training {sum(train_s):.0f} s / {args.workers} workers) "
              f"= {bound:.0f} s: {'within' if wall <= bound else 'OVER'}")
    print(f"CPU: {cpu_name()}; points trained on {args.device}{gpu_name(args.device)}")
    return 0 if summary["error"] == 0 else 1


def gpu_name(device: str) -> str:
    """`` (NAME)`` of the CUDA device a run used, or nothing on the CPU."""
    if not device.startswith("cuda"):
        return ""
    import torch

    return f" ({torch.cuda.get_device_name(torch.device(device))})"


def cpu_name() -> str:
    """The CPU's model name and its widest vector extension (timings here differ by about 2x between machines)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    model = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "unknown")
    flags = set(next((ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), []))
    vec = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "AVX" if "avx" in flags else "no AVX"
    return f"{model} ({vec}), {os.cpu_count()} cores"


if __name__ == "__main__":
    sys.exit(main())
