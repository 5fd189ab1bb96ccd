"""Helpers shared by the tests (imported as ``from _util import ...``)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
SMOKE_DIR = ROOT / "tests" / "smoke"
DOMAIN_DIR = ROOT / "tests" / "domain"
#: the jupytext header of a MyST notebook written by a test
MYST_HEADER = """---
jupytext:
  text_representation: {extension: .md, format_name: myst, format_version: 0.13}
kernelspec: {display_name: Python 3, language: python, name: python3}
---
"""


def smoke_parameters() -> dict[str, dict]:
    params: dict[str, dict] = {}
    for f in sorted(SMOKE_DIR.glob("*.yaml")):
        params.update(yaml.safe_load(f.read_text()) or {})
    return params


def domain_points() -> dict[str, list[dict]]:
    """Two further points of each notebook's parameter domain (beside its smoke point) that move its main
    dimensions: ``tests/domain/<paper>.yaml`` maps a notebook to a list of two parameter dicts."""
    points: dict[str, list[dict]] = {}
    for f in sorted(DOMAIN_DIR.glob("*.yaml")):
        points.update(yaml.safe_load(f.read_text()) or {})
    return points


def run_cli(*args: str, cwd: Path = ROOT, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-m", "companion", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env=None if env is None else {**os.environ, **env},
    )


def read_run(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())


def cmdline(proc) -> str:
    """The command line of a ``psutil.Process`` as one string, or "" once the process is gone (a child listed a
    moment ago may exit before it is read: psutil then raises, which made the SIGTERM test fail at random)."""
    import psutil

    try:
        return " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return ""


def word_problems(r: dict) -> list[str]:
    """What a reader would trip over in a record's words: a reason longer than two lines
    (:data:`companion.verdict.REASON_MAX` characters as typeset), ASCII maths outside ``$...$``."""
    from companion.text import ascii_math, plain_text
    from companion.verdict import REASON_MAX

    out = []
    if len(plain_text(r.get("reason") or "")) > REASON_MAX:
        out.append(f"{r['claim']}: a reason of {len(plain_text(r['reason']))} characters (at most {REASON_MAX}; "
                   "the method goes to detail=)")
    for key in ("quantity", "reason", "falsifier", "detail", "note"):
        found = ascii_math(r.get(key) or "")
        if found:
            out.append(f"{r['claim']}.{key}: ASCII maths {found}")
    return out


def slow_toy(folder):
    """The toy notebook with a ``hold`` parameter: seconds to sleep before its verdict (so that a point
    is still running when a test kills something)."""
    src = (FIXTURES / "toy.md").read_text()
    hold = "hold: float = 0.0  # seconds to sleep before the verdict\n"
    src = src.replace('results_dir: str = ""', hold + 'results_dir: str = ""')
    src = src.replace("rng = np.random.default_rng(seed)", "import time\ntime.sleep(hold)\nrng = np.random.default_rng(seed)")
    assert "time.sleep(hold)" in src and "hold: float" in src
    path = folder / "slow" / "toy.md"  # named toy, as its verdict records
    path.parent.mkdir(exist_ok=True)
    path.write_text(src)
    return str(path)


@contextlib.contextmanager
def one_worker_scheduler():
    """A running Dask scheduler with one worker process (one thread), as on a cluster (Dask's defaults, as a user's
    cluster has them): yields its address. The variables its nanny sets for the worker leak into this process's
    environment (Dask's caveat of ``distributed.nanny.pre-spawn-environ``), where the commands later tests start
    would inherit them: the environment is put back as it was."""
    import logging

    from dask.distributed import LocalCluster

    before = dict(os.environ)
    try:
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                          silence_logs=logging.ERROR) as cluster:
            yield cluster.scheduler_address
    finally:
        os.environ.clear()
        os.environ.update(before)
