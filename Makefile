# The two set-up commands of the README:
#   make book   -> creates .venv, installs the pinned stack, executes every notebook, renders _build/html
#   make test   -> creates .venv, installs the pinned stack, runs the whole test suite
# Everything is installed from constraints.txt (exact versions), so a fresh machine gets the same stack.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.companion-installed
BROWSER := $(VENV)/.browser-checked

# The compiled mesa kernels (companion.mesa.lanes.jit, keyed by their IR, the CPU and the LLVM version) in a
# per-user cache, as pip keeps wheels: a second clone on this machine compiles nothing. Only where the folder can be
# made and written; else (and when you set NUMBA_CACHE_DIR yourself) the kernels go where jit._cache_dir says.
ifndef NUMBA_CACHE_DIR
NUMBA_CACHE_DIR := $(shell d="$${XDG_CACHE_HOME:-$$HOME/.cache}/companion/kernels"; \
                     mkdir -p "$$d" 2>/dev/null && [ -w "$$d" ] && echo "$$d")
endif
export NUMBA_CACHE_DIR

.PHONY: book test test-fast lint mutants install setup clean benchmark results calibrate

install: $(STAMP)

# the venv and Chromium at once (two jobs): apt fetches and unpacks Chromium while pip installs the stack
setup:
	@$(MAKE) --no-print-directory -j2 $(STAMP) $(BROWSER)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt -e ".[book,test]"
	touch $(STAMP)

# Headless Chromium (Debian's package) typesets the book (its TeX checked) and prints its PDF. Its stamp lives in
# the venv, so a new venv checks again; it does not wait for the venv's packages (see setup).
$(BROWSER):
	@mkdir -p $(VENV)
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null); } || \
	  echo "note: could not install chromium; formulas will not be checked in a browser"
	@touch $@

book: setup
	$(PY) -m companion book

test: setup
	$(PY) tools/run_suite.py

# The fast suite: unit tests of the maths, data, training and verdict machinery; no notebook, papermill,
# Dask, browser or numba-compile test (those are marked slow), on two processes (pytest-xdist). About 25 s on a
# 2-core AMD EPYC once the kernels are cached (benchmarks/README.md). NumPy's BLAS and torch's OpenMP pool on
# one thread per process unless you chose (two processes share the cores; companion.threads.use_threads says why).
test-fast: $(STAMP)
	OPENBLAS_NUM_THREADS=$${OPENBLAS_NUM_THREADS:-1} OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} \
	  MKL_NUM_THREADS=$${MKL_NUM_THREADS:-1} $(PY) -m pytest -m "not slow" -q -n 2

# ruff (pyflakes, pycodestyle, bugbear, isort rules; configured in pyproject.toml)
lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks tools

# RESULTS.md, the map of every result, from the registries (tests/site/test_where.py fails while it is stale)
results: $(STAMP)
	$(PY) tools/results_map.py

# The committed calibration set (calibration/*.json): every notebook's smoke point and each domain point over the
# command's default seeds (companion.calibration.default_seeds: 100 and 50), through the sweep runner (resumable:
# rerun to continue); then the held-out check, every smoke point at 20 seeds the set does not hold
# (calibration/heldout/; companion.calibration.HELDOUT_*). Hours on two cores; not part of book/test.
calibrate: $(STAMP)
	$(PY) -m companion calibrate all --resume
	$(PY) -m companion calibrate all --point domain --resume
	$(PY) -m companion calibrate mesa/appendix_experiments --point paper --resume
	$(PY) -m companion calibrate all --seeds 20 --first-seed 7000 -o calibration/heldout --resume

# Seeded bugs, one at a time in a copy of the package: how many does the fast suite kill?
mutants: $(STAMP)
	$(PY) tools/mutants.py

benchmark: $(STAMP)
	$(PY) benchmarks/bench_mesa.py
	$(PY) benchmarks/bench_cot.py
	$(PY) benchmarks/bench_sweep.py  # 100 paper-scale points: about 20 min on 2 cores
	@if $(PY) -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then \
	  $(PY) benchmarks/bench_gpu.py && $(PY) benchmarks/bench_gpu_train.py && $(PY) benchmarks/bench_cot_gpu.py; \
	else echo "benchmark: no CUDA device here; the GPU path (device='cuda') is not timed (H100 and H200 numbers: benchmarks/results/ and benchmarks/README.md)"; fi

clean:
	rm -rf _build
