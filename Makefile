# The two set-up commands of the README:
#   make book   -> creates .venv, installs the pinned stack, executes every notebook, renders _build/html
#   make test   -> creates .venv, installs the pinned stack, runs the whole test suite
# Everything is installed from constraints.txt (exact versions), so a fresh machine gets the same stack.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.companion-installed

.PHONY: book test install clean benchmark

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt -e ".[book,test]"
	touch $(STAMP)

book: $(STAMP)
	$(PY) -m companion book

test: $(STAMP)
	$(PY) -m pytest

benchmark: $(STAMP)
	$(PY) benchmarks/bench_mesa.py
	$(PY) benchmarks/bench_cot.py

clean:
	rm -rf _build
