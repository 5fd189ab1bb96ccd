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

def smoke_parameters() -> dict[str, dict]:
    params: dict[str, dict] = {}
    for f in sorted(SMOKE_DIR.glob("*.yaml")):
        params.update(yaml.safe_load(f.read_text()) or {})
    return params


def run_cli(*args: str, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "companion", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def read_run(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())
