#!/usr/bin/env bash
# Every measurement of benchmarks/README.md's "On a GPU" section in one command, for a machine with a CUDA GPU
# (not a test; CI never runs it). Writes into OUTDIR: env.txt (GPU, CPU, versions), epoch.json/.log
# (benchmarks/bench_gpu.py), train.json/.log (benchmarks/bench_gpu_train.py), profile.txt (where the time
# of a GPU training run goes, cProfile), sweep_cuda.log and sweep_cpu.log (benchmarks/bench_sweep.py, 100
# paper-scale points trained on the GPU, then on the host's cores), tests.log (the tests of both GPU paths, the
# CUDA ones included), cot.json/.log (benchmarks/bench_cot_gpu.py: cot training on the GPU against the CPU path).
# Each step has its own time limit, so a slow step costs only itself.
#
#   bash benchmarks/gpu_all.sh OUTDIR            # paper scale
#   QUICK=1 bash benchmarks/gpu_all.sh OUTDIR    # tiny sizes: checks that every step runs (no GPU needed)
#   ONLY="tests cot sweep_cuda" bash benchmarks/gpu_all.sh OUTDIR   # some steps only
set -u
out=${1:?usage: bash benchmarks/gpu_all.sh OUTDIR}
mkdir -p "$out"
# an absolute path: the sweep's kernels run in other folders
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
if [ -n "${QUICK:-}" ]; then
  epoch_args="--m 300 --reps 2"; train_args="--m 300 --epochs 5"; sweep_args="--points 4 --m 300 --epochs 5"
  prof_m=300; prof_epochs=5; dev=cpu:0; cpu_workers=2; cot_args="--steps 3"
else
  epoch_args=""; train_args=""; sweep_args="--points 100"; prof_m=10000; prof_epochs=50; dev=cuda; cot_args=
  cpu_workers=$(( $(getconf _NPROCESSORS_ONLN) / 2 ))
fi
{
  date -u
  nvidia-smi -L 2>&1 || true
  grep -m1 "model name" /proc/cpuinfo; echo "cores: $(getconf _NPROCESSORS_ONLN)"
  grep -m1 -o "avx512f" /proc/cpuinfo || echo "no avx512f"
  $py -c "import sys, torch, numpy, numba; print(sys.version.split()[0], 'torch', torch.__version__, 'numpy', numpy.__version__, 'numba', numba.__version__)"
} >"$out/env.txt" 2>&1
step() {  # step NAME SECONDS COMMAND...: run COMMAND under a time limit, its output in OUTDIR/NAME.log
  local name=$1 limit=$2; shift 2
  case " ${ONLY:-$name} " in *" $name "*) ;; *) return 0 ;; esac
  echo "== $name (limit ${limit} s)"
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  echo "   exit $?, $((SECONDS - t0)) s"
  tail -n 4 "$out/$name.log"
}
step tests 120 $py -m pytest -q -p no:cacheprovider -p no:xdist tests/cot/test_device.py tests/mesa/test_torch_epoch.py
step cot 150 $py benchmarks/bench_cot_gpu.py $cot_args --device "$dev" --out "$out/cot.json"
step epoch 60 $py benchmarks/bench_gpu.py $epoch_args --out "$out/epoch.json"
step train 90 $py benchmarks/bench_gpu_train.py $train_args --out "$out/train.json"
step profile 40 $py - "$dev" "$prof_m" "$prof_epochs" <<'EOF'
import cProfile, os, pstats, sys
os.environ["COMPANION_CACHE_DIR"] = "off"
from companion.mesa.train import RunConfig, train
dev, m, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cfg = dict(law="gaussian", d=5, T=100, m=m, m_test=1000, a0=0.5, b0=1.5, lr=1e-4, test_every=50, seed=1, device=dev)
train(RunConfig(**cfg, epochs=2))  # tables, kernels and CUDA context once
pr = cProfile.Profile()
pr.enable()
res = train(RunConfig(**cfg, epochs=epochs))
pr.disable()
print(f"{epochs} epochs on {dev}: {res.seconds:.2f} s ({1e3 * res.seconds / epochs:.1f} ms per epoch)")
pstats.Stats(pr).sort_stats("tottime").print_stats(25)
EOF
[ -f "$out/profile.log" ] && mv "$out/profile.log" "$out/profile.txt"
step sweep_cuda 220 $py benchmarks/bench_sweep.py $sweep_args --device "$dev" --workers 4
step sweep_cpu 130 $py benchmarks/bench_sweep.py $sweep_args --workers "$cpu_workers"
