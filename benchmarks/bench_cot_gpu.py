"""cot training on a GPU against the CPU path (not a timed test).

``companion.cot.train.train_full`` with ``device="cuda"`` keeps the weights, the minibatches, the closed-form
gradients (:mod:`companion.cot.grads_torch`) and Adam's moments on the GPU; ``device="cpu"`` computes the
gradients in NumPy (:mod:`companion.cot.grads`), one thread. For the book's training runs (the cot pages' sizes,
:mod:`companion.cot.paper`) and for a run of 100 replicates side by side (a sweep's worth of models), the script
trains the same models from the same seeds on both, prints the milliseconds per step of each, the ratio, and the
largest difference of the trained weights (round-off: the two paths order their sums differently), and ``--out``
writes them as JSON. The evaluation (on the CPU in both paths) is done at the first and last step only, on 100
prompts.

    PYTHONPATH=src python3 benchmarks/bench_cot_gpu.py --out cot_gpu.json      # needs CUDA
    PYTHONPATH=src python3 benchmarks/bench_cot_gpu.py --device cpu:0 --steps 5  # the torch path on the CPU
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ["COMPANION_CACHE_DIR"] = "off"

# torch and the package load after the options are parsed: a refused option answers before they do


def _runs() -> list:
    """(label, objective, d, n, k, replicates) of every timed run."""
    from companion.cot.paper import COMMON, COT_TRAIN

    D, N, K = COMMON["d"], COMMON["n"], COMMON["k"]
    R = COT_TRAIN["replicates"]
    return [("CoT, the Thm 4.1 page's run", "cot", D, N, K, R),
            ("no-CoT, the Thm 3.1 page's run", "no_cot", D, N, 1, R),
            ("looped, 3 layers", "looped", D, N, 3, 1),
            ("CoT, 100 replicates", "cot", D, N, K, 100)]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="the torch device of the second path (default cuda)")
    ap.add_argument("--steps", type=int, default=200, help="training steps per run (default 200)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch

    from companion.cot.paper import COMMON, COT_TRAIN
    from companion.cot.train import train_full

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"{args.device}: no CUDA device here; nothing to time")
        return {}
    out = {"steps": args.steps, "device": args.device, "runs": []}
    if args.device.startswith("cuda"):
        out["gpu"] = torch.cuda.get_device_name(torch.device(args.device))
    print(f"cot training, {args.steps} steps, batch {COT_TRAIN['batch']} per replicate, float64: "
          f"cpu (NumPy, 1 thread) vs {args.device} {out.get('gpu', '')}")
    for label, objective, d, n, k, reps in _runs():
        kw = dict(steps=args.steps, lr=COT_TRAIN["lr"], lr_final=COT_TRAIN["lr_final"], batch=COT_TRAIN["batch"],
                  seed=COMMON["seed"], eval_every=args.steps, eval_batch=100, replicates=reps)
        train_full(objective, d, n, k, COMMON["eta"], **dict(kw, steps=2), device=args.device)  # CUDA context
        row = {"label": label, "objective": objective, "d": d, "n": n, "k": k, "replicates": reps}
        res = {}
        for dev in ("cpu", args.device):
            t0 = time.perf_counter()
            res[dev] = train_full(objective, d, n, k, COMMON["eta"], **kw, device=dev)
            row[f"{dev}_ms_per_step"] = 1e3 * (time.perf_counter() - t0) / args.steps
        a, b = res["cpu"], res[args.device]
        row["max_abs_diff_W"] = float(max((a.W_KQ - b.W_KQ).abs().max(), (a.W_PV - b.W_PV).abs().max()))
        row["ratio"] = row["cpu_ms_per_step"] / row[f"{args.device}_ms_per_step"]
        out["runs"].append(row)
        print(f"  {label:32s} d={d} n={n} k={k:2d} R={reps:3d}: {row['cpu_ms_per_step']:8.2f} ms vs "
              f"{row[f'{args.device}_ms_per_step']:7.2f} ms per step ({row['ratio']:5.1f}x), "
              f"weights differ by {row['max_abs_diff_W']:.1e}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
