"""``companion calibrate``: one notebook at one point of its domain over many seeds, through the sweep runner.

The seeds' runs go to a sweep folder (``_build/calibration/<notebook>__<point>``, resumable with ``--resume``,
locked while it runs, local or on a Dask scheduler); when they are done, their statistical records are reduced to
a calibration file (``calibration/<notebook>__<point>.json``, :mod:`companion.calibration`) stamped with the code
version of the notebook's claims and the commit. A folder whose runs were made by other code is refused instead
of mixed.

Points: ``smoke`` (``tests/smoke/<paper>.yaml``, what the tests run), ``domain:I`` (the I-th point of
``tests/domain/<paper>.yaml``) and ``paper`` (the notebook's defaults, the paper's settings).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import subprocess
import time
from pathlib import Path

import yaml

from .. import notebooks as nbs
from ..calibration import FIRST_SEED, calibration_dir, code_version, collect, file_name, median
from ..paths import repo_root
from .inputs import SweepError
from .store import read_results
from .sweep import run_sweep

__all__ = ["POINTS", "point_parameters", "domain_points", "calibrate", "runs_dir", "dumps"]

#: the kinds of point a calibration runs at
POINTS = ("smoke", "domain:I", "paper")
_POINT_RE = re.compile(r"^(smoke|paper|domain:(\d+))$")


def _points(kind: str, notebook: str) -> tuple[Path, dict]:
    """The points file of one kind (``smoke``, ``domain``) for ``notebook``'s paper, and its table."""
    path = repo_root() / "tests" / kind / f"{notebook.split('/', 1)[0]}.yaml"
    return path, (yaml.safe_load(path.read_text()) if path.is_file() else None) or {}


def point_parameters(notebook: str, point: str) -> dict:
    """The parameters of ``notebook`` at ``point`` (``smoke``, ``domain:I``, ``paper``); one line naming the
    point and what is allowed otherwise."""
    m = _POINT_RE.match(point)
    if not m:
        raise SweepError(f"--point {point!r}: give smoke, paper or domain:I (I = 0, 1, ...)")
    if point == "paper":
        return {}
    kind = "smoke" if point == "smoke" else "domain"
    path, table = _points(kind, notebook)
    if notebook not in table:
        raise SweepError(f"--point {point}: {notebook} has no {kind} point in {path.name}")
    if kind == "smoke":
        return dict(table[notebook] or {})
    i, points = int(m.group(2)), table[notebook]
    if i >= len(points):
        raise SweepError(f"--point {point}: {notebook} has {len(points)} domain point(s), domain:0 ... "
                         f"domain:{len(points) - 1}")
    return dict(points[i] or {})


def domain_points(notebook: str) -> list[str]:
    """``domain:0``, ``domain:1``, ... for every domain point of ``notebook`` the tests run."""
    return [f"domain:{i}" for i in range(len(_points("domain", notebook)[1].get(notebook) or []))]


def runs_dir(notebook: str, point: str, out: str | Path | None = None) -> Path:
    """Where the seeds' runs of one calibration go (not committed: only the calibration file is):
    ``_build/calibration/<notebook>__<point>``, or ``<out>/runs/...`` for a calibration written to ``out``."""
    base = repo_root() / "_build" / "calibration" if out is None else Path(out) / "runs"
    return base / file_name(notebook, point).removesuffix(".json")


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo_root(), capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo_root(),
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (out.stdout.strip() or "unknown") + ("+dirty" if dirty else "")


def calibrate(notebook: str, point: str = "smoke", seeds: int = 100, first_seed: int = FIRST_SEED, *,
              workers: int = 2, scheduler: str | None = None, resume: bool = False, progress: bool = True,
              out: str | Path | None = None, log=None) -> Path:
    """Run ``notebook`` at ``point`` for seeds ``first_seed ... first_seed + seeds - 1`` and write its calibration
    file (into ``out``, default the committed set); returns the file's path."""
    log = log or (lambda msg: None)
    name = nbs.name_of(nbs.resolve(notebook))
    if seeds < 2:
        raise SweepError(f"--seeds must be >= 2; got {seeds}")
    if first_seed < 0:
        raise SweepError(f"--first-seed must be >= 0; got {first_seed}")
    params = point_parameters(name, point)
    params.pop("seed", None)  # a domain point's own seed: a calibration varies it
    version = code_version(name)
    folder = runs_dir(name, point, out)
    stamp = folder / "calibration.json"
    if resume and stamp.is_file():
        old = json.loads(stamp.read_text())
        if old.get("code_version") != version:
            raise SweepError(f"--resume: the runs in {folder} were made by other code (version "
                             f"{old.get('code_version')}, now {version}); remove the folder to start again")
    elif not resume and folder.exists() and any(folder.iterdir()):
        raise SweepError(f"{folder}: holds an earlier calibration; pass --resume to continue it or remove it")
    folder.mkdir(parents=True, exist_ok=True)
    meta = json.loads(stamp.read_text()) if resume and stamp.is_file() else {}
    meta.update(notebook=name, point=point, code_version=version)
    meta.setdefault("commit", _commit())  # the commit the first runs were made at
    stamp.write_text(json.dumps(meta))
    points = [dict(params, seed=s) for s in range(first_seed, first_seed + seeds)]
    t0 = time.perf_counter()
    summary = run_sweep(name, points, folder, workers=workers, resume=resume, scheduler=scheduler,
                        progress=progress, swept=["seed"], log=log, max_points=None)
    if summary["skipped"] == 0:  # one uninterrupted run of every seed: its wall time is the cost
        meta.update(wall_seconds=round(time.perf_counter() - t0, 1), workers=workers if scheduler is None else None)
        stamp.write_text(json.dumps(meta))
    target = Path(out) if out is not None else calibration_dir()
    path = target / file_name(name, point)
    if "wall_seconds" not in meta and path.is_file():  # runs made before the stamp kept it: the file did
        earlier = json.loads(path.read_text())
        if earlier.get("code_version") == version and earlier.get("wall_seconds"):
            meta.update(wall_seconds=earlier["wall_seconds"], workers=earlier.get("workers"))
    finished = [p for p in read_results(folder).values() if p.get("parameters", {}).get("seed") in
                range(first_seed, first_seed + seeds)]
    data = {
        "notebook": name, "point": point, "parameters": params, "code_version": version,
        "commit": meta["commit"], "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "runs": {"total": len(points), **{k: sum(1 for p in finished if p.get("status") == k)
                                          for k in ("ok", "failed", "error")}},
        "seconds_per_run": _rounded(median([p.get("seconds") for p in finished])),
        "wall_seconds": meta.get("wall_seconds"), "workers": meta.get("workers"),
        **collect(finished),
    }
    target.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(dumps(data))
    os.replace(tmp, path)
    return path


def dumps(data: dict) -> str:
    """A calibration file's JSON: one line per field and per claim, so that a diff shows which claims moved."""
    lines = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in data.items() if k != "claims"]
    claims = [f"  {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in data["claims"].items()]
    return "{\n" + ",\n".join(lines + [' "claims": {\n' + ",\n".join(claims) + "\n }"]) + "\n}\n"


def _rounded(x: float) -> float | None:
    return round(x, 2) if math.isfinite(x) else None
