"""A paper-scale mesa training run on a GPU against the CPU kernel (not a timed test).

``companion.mesa.train.run`` with ``device="cuda"`` trains through the torch epoch
(:mod:`companion.mesa.torch_epoch`) on the GPU; ``device="cpu"`` through the fused CPU kernel. Both runs use
the same data, initialisation and schedule (Fig. 1a's Gaussian run: d = 5, T = 100, m = 10^4, 200 epochs, init
(0.5, 1.5), lr 1e-4 at the default; ``--epochs`` and ``--m`` shrink it), so their trajectories of ab must agree
to round-off; the script prints the wall time of each and the largest difference of ab, and ``--out`` writes
them as JSON. Needs the whole package (numba/llvmlite for the CPU kernel, scipy); the run cache is switched off.

    PYTHONPATH=src python3 benchmarks/bench_gpu_train.py --out gpu_train.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ["COMPANION_CACHE_DIR"] = "off"
# NumPy, torch and the package load after the options are parsed: a refused option answers before they do


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--m", type=int, default=10_000)
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--dtype", default="complex64", choices=["complex64", "complex128"])
    ap.add_argument("--devices", default="cuda,cpu", help="comma-separated; 'cpu' is the fused kernel")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    import numpy as np
    import torch

    from companion.mesa.train import RunConfig, train

    base = dict(law="gaussian", d=5, T=100, m=args.m, m_test=1000, a0=0.5, b0=1.5, lr=1e-4, epochs=args.epochs,
                test_every=50, dtype=args.dtype, seed=1)
    out = {"config": base, "runs": {}}
    results = {}
    for dev in args.devices.split(","):
        if dev.startswith("cuda") and not torch.cuda.is_available():
            print(f"{dev}: no CUDA device; skipped")
            continue
        t0 = time.perf_counter()
        res = train(RunConfig(**base, device=dev))
        wall = time.perf_counter() - t0
        results[dev] = res
        out["runs"][dev] = {"wall_s": wall, "per_epoch_ms": 1e3 * wall / max(args.epochs, 1), "final_ab": float(res.ab[-1])}
        print(f"{dev:6s}: {wall:7.2f} s for {args.epochs} epochs ({1e3 * wall / max(args.epochs, 1):.1f} ms/epoch), "
              f"final ab {res.ab[-1]:.6f}", flush=True)
    if len(results) == 2:
        a, b = results.values()
        out["max_abs_diff_ab"] = float(np.max(np.abs(a.ab - b.ab)))
        print(f"largest |ab difference| over the trajectory: {out['max_abs_diff_ab']:.3e}")
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
    if args.out:
        args.out.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
