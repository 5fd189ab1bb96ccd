"""Helpers shared by the tests (imported as ``from _util import ...``)."""

from __future__ import annotations

import json
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
