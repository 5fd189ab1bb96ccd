"""Benchmark of the mesa epoch in torch (companion.mesa.torch_epoch) on a GPU and on the CPU (not a timed test).

One epoch is the AR loss and its gradients with respect to W_KQ and W_PV over m sequences of length T at
every position, the work of one training step; the data tables are built once (timed apart), as in training.
For each device (``cuda`` when available, then ``cpu``) and dtype (complex64, complex128: the model is
complex) it prints the median of ``--reps`` epochs after ``--warmup`` (``torch.cuda.synchronize`` around
each), and on a GPU checks that the epoch there agrees with the CPU one (relative differences of the loss and
the gradients). ``--out`` writes the numbers as JSON.

Standalone on purpose: it needs torch and NumPy only. ``companion.mesa.torch_epoch`` is loaded from its file
(``importlib.util.spec_from_file_location``), so the package ``companion.mesa`` (data, model, theory, train)
is not imported; the module itself imports only torch, NumPy and ``companion.params`` (whose package
``__init__`` imports NumPy and ``companion.seeds``). No numba, llvmlite, scipy or papermill.

Run from the repository root::

    PYTHONPATH=src python3 benchmarks/bench_gpu.py --out gpu.json           # paper size, m = 10^4
    PYTHONPATH=src python3 benchmarks/bench_gpu.py --m 500 --device cpu     # a quick check
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
# NumPy and torch load inside the functions: a refused option answers before they do

ROOT = Path(__file__).resolve().parents[1]


def load_torch_epoch():
    """companion.mesa.torch_epoch, loaded from its file without the package companion.mesa."""
    if str(ROOT / "src") not in sys.path:
        sys.path.insert(0, str(ROOT / "src"))
    path = ROOT / "src" / "companion" / "mesa" / "torch_epoch.py"
    spec = importlib.util.spec_from_file_location("companion_mesa_torch_epoch", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def cpu_name() -> str:
    """The CPU's model name (Linux), else what :mod:`platform` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _sync(dev: torch.device) -> None:
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    import torch

    a, b = a.cpu().to(torch.complex128), b.cpu().to(torch.complex128)
    return float((a - b).abs().max() / b.abs().max())


def time_epoch(te, theta, x1, W_KQ, W_PV, T: int, dtype, device: str, chunk: int, warmup: int, reps: int,
               max_seconds: float):
    """Build the tables on ``device`` and time epochs there: (row of the table, (L, gA, gP) of the last epoch)."""
    import numpy as np
    import torch

    dev = torch.device(device)
    _sync(dev)
    t0 = time.perf_counter()
    ep = te.Epoch(theta, x1, np.arange(2, T), dtype, dev, chunk)
    _sync(dev)
    tables_s = time.perf_counter() - t0
    A, Pm = W_KQ.to(device=dev, dtype=dtype), W_PV.to(device=dev, dtype=dtype)
    for _ in range(warmup):
        out = ep(A, Pm)
    _sync(dev)
    times = []
    start = time.perf_counter()
    while len(times) < reps and (len(times) < 3 or time.perf_counter() - start < max_seconds):
        t0 = time.perf_counter()
        out = ep(A, Pm)
        _sync(dev)
        times.append(time.perf_counter() - t0)
    row = dict(device=device, dtype=str(dtype).replace("torch.", ""), chunk=chunk, tables_s=round(tables_s, 4),
               median_ms=round(1e3 * statistics.median(times), 3), min_ms=round(1e3 * min(times), 3), reps=len(times),
               loss=float(out[0]))
    if dev.type == "cpu":
        row["threads"] = torch.get_num_threads()
    del ep
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return row, tuple(t.cpu() for t in out[:3])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--m", type=int, default=10_000, help="sequences (paper: 10000)")
    ap.add_argument("--T", type=int, default=100, help="sequence length (paper: 100)")
    ap.add_argument("--d", type=int, default=5, help="dimension (paper: 5)")
    ap.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                    help="auto: cuda (when available) and cpu; cuda or cpu: that one only")
    ap.add_argument("--reps", type=int, default=20, help="timed epochs per configuration (median printed)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--max-seconds", type=float, default=20.0,
                    help="stop timing a configuration after this long (at least 3 epochs)")
    ap.add_argument("--chunk", type=int, default=0, help="sequences per batched product (0: m on cuda, "
                                                         "the module's default on cpu)")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    import numpy as np
    import torch

    t_all = time.perf_counter()
    te = load_torch_epoch()
    heavy = sorted(k for k in ("numba", "llvmlite", "scipy", "papermill", "companion.mesa") if k in sys.modules)
    cuda = torch.cuda.is_available()
    if args.device == "cuda" and not cuda:
        sys.exit("bench_gpu: --device cuda, but torch.cuda.is_available() is False")
    devices = {"auto": (["cuda"] if cuda else []) + ["cpu"], "cuda": ["cuda"], "cpu": ["cpu"]}[args.device]

    rng = np.random.default_rng(0)
    theta = rng.uniform(0.0, 2 * np.pi, (args.m, args.d))
    x1 = rng.standard_normal((args.m, args.d)).astype(complex)
    g = torch.Generator().manual_seed(1)
    W_KQ = torch.complex(0.1 * torch.randn(2 * args.d, 2 * args.d, dtype=torch.float64, generator=g),
                         0.01 * torch.randn(2 * args.d, 2 * args.d, dtype=torch.float64, generator=g))
    W_PV = torch.complex(0.1 * torch.randn(args.d, 2 * args.d, dtype=torch.float64, generator=g),
                         0.01 * torch.randn(args.d, 2 * args.d, dtype=torch.float64, generator=g))

    rows, outs = [], {}
    for device in devices:
        chunk = args.chunk or (args.m if device == "cuda" else te.DEFAULT_CHUNK)
        for dtype in (torch.complex64, torch.complex128):
            row, out = time_epoch(te, theta, x1, W_KQ, W_PV, args.T, dtype, device, chunk, args.warmup,
                                  args.reps, args.max_seconds)
            rows.append(row)
            outs[device, dtype] = out
            print(f"  {device:4s} {row['dtype']:10s} epoch {row['median_ms']:10.3f} ms (median of {row['reps']}, "
                  f"min {row['min_ms']:.3f}); tables {row['tables_s']:.3f} s", flush=True)

    agree = {}
    ref = outs.get(("cpu", torch.complex128))
    for (device, dtype), out in outs.items():
        if ref is None or out is ref:
            continue
        agree[f"{device} {str(dtype).replace('torch.', '')} vs cpu complex128"] = dict(
            loss=abs(float(out[0]) - float(ref[0])) / abs(float(ref[0])), gA=_rel(out[1], ref[1]),
            gP=_rel(out[2], ref[2]))

    res = dict(
        benchmark="mesa epoch in torch (companion.mesa.torch_epoch): loss + gradients, all positions",
        m=args.m, T=args.T, d=args.d, torch=torch.__version__, python=platform.python_version(),
        cpu=cpu_name(), cuda_available=cuda,
        gpu=torch.cuda.get_device_name(0) if cuda else None, heavy_modules_imported=heavy,
        rows=rows, agreement=agree, seconds=round(time.perf_counter() - t_all, 2),
    )
    print()
    print(f"mesa epoch, m = {args.m}, T = {args.T}, d = {args.d}; torch {torch.__version__}"
          + (f"; GPU {res['gpu']}" if cuda else "; no CUDA device"))
    print(f"{'device':6s} {'dtype':10s} {'chunk':>6s} {'epoch ms':>10s} {'tables s':>9s}")
    for r in rows:
        print(f"{r['device']:6s} {r['dtype']:10s} {r['chunk']:6d} {r['median_ms']:10.3f} {r['tables_s']:9.3f}")
    by = {(r["device"], r["dtype"]): r["median_ms"] for r in rows}
    for dt in ("complex64", "complex128"):
        if ("cuda", dt) in by and ("cpu", dt) in by:
            print(f"cpu / cuda ({dt}): {by['cpu', dt] / by['cuda', dt]:.1f}x")
    for k, v in agree.items():
        print(f"agreement {k}: loss {v['loss']:.1e}, gA {v['gA']:.1e}, gP {v['gP']:.1e}")
    print(f"imported beyond torch/numpy: {', '.join(heavy) or 'none of numba, llvmlite, scipy, papermill, companion.mesa'}"
          f"; total {res['seconds']:.1f} s")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=2) + "\n")
        print(f"wrote {args.out}")
    return res


if __name__ == "__main__":
    main()
