"""Parameter sweeps: the cartesian product of a grid, executed in parallel through Dask.

Layout of a sweep directory::

    OUT/
      sweep.json                  notebook, grid, fixed parameters (written once; --resume checks it)
      results.jsonl               one line per finished point, appended atomically as it completes
      points/<id>/                one directory per point: executed notebook, run.json, records

Each point runs in its own process (``python -m companion run ...``), so kernels of different points
never share a ZMQ context, and the runner retries a kernel that fails to start. A point that fails is
recorded with its error and the others go on. ``--resume`` skips every point whose last line in
``results.jsonl`` says it finished (status ``ok`` or ``failed``: it ran to its verdict) and runs the
others (never started, interrupted, or crashed with status ``error``); nothing that finished is ever lost, because a point's line is
written (and fsync'ed) by the driver the moment it completes.

By default the points run on an embedded ``dask.distributed.LocalCluster``; pass the address of a
running scheduler (``--scheduler tcp://host:8786``) to spread a sweep over a cluster without changes.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from . import notebooks as nbs
from .runner import coerce_parameters

__all__ = ["SweepError", "parse_grid", "expand_grid", "point_id", "run_sweep", "read_results", "flat_rows"]


class SweepError(ValueError):
    pass


def parse_grid(items: Sequence[str]) -> dict[str, list[str]]:
    """``["T=20,50", "seed=1,2"]`` -> ``{"T": ["20", "50"], "seed": ["1", "2"]}`` (text values)."""
    grid: dict[str, list[str]] = {}
    for item in items:
        if "=" not in item:
            raise SweepError(f"--grid expects NAME=V1,V2,...; got {item!r}")
        name, values = item.split("=", 1)
        name = name.strip()
        vals = _split_values(values)
        if not name or not vals:
            raise SweepError(f"--grid expects NAME=V1,V2,...; got {item!r}")
        if name in grid:
            raise SweepError(f"--grid names {name!r} twice")
        grid[name] = vals
    return grid


def _split_values(text: str) -> list[str]:
    """Split on commas that are not inside brackets, so list values like [1,2] survive."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return [v for v in out if v]


def expand_grid(
    notebook: str,
    text_grid: Mapping[str, list[str]] | None = None,
    typed_grid: Mapping[str, list[Any]] | None = None,
    fixed: Mapping[str, Any] | None = None,
    fixed_text: Mapping[str, str] | None = None,
) -> list[dict]:
    """Validate every value against the notebook's parameters cell and return the list of points."""
    name = nbs.name_of(nbs.resolve(notebook))
    specs = nbs.parameters(notebook)
    axes: dict[str, list[Any]] = {}
    for grid, from_text in ((typed_grid or {}, False), (text_grid or {}, True)):
        for pname, values in grid.items():
            if not isinstance(values, list) or not values:
                raise SweepError(f"grid entry {pname!r} must be a non-empty list of values")
            if pname in axes:
                raise SweepError(f"grid names {pname!r} twice")
            axes[pname] = [
                coerce_parameters(name, specs, {} if from_text else {pname: v}, {pname: v} if from_text else None)[
                    pname
                ]
                for v in values
            ]
    base = coerce_parameters(name, specs, dict(fixed or {}), fixed_text)
    overlap = set(base) & set(axes)
    if overlap:
        raise SweepError(f"parameter(s) {sorted(overlap)} are both fixed and swept")
    if "results_dir" in axes or "results_dir" in base:
        raise SweepError("results_dir is set by the sweep (one directory per point)")
    names = list(axes)
    return [dict(base, **dict(zip(names, combo))) for combo in itertools.product(*(axes[n] for n in names))]


def point_id(params: Mapping[str, Any]) -> str:
    """A stable, readable id: a hash of the canonical JSON plus a short name=value summary."""
    canon = json.dumps(params, sort_keys=True, default=str)
    digest = hashlib.sha1(canon.encode()).hexdigest()[:10]
    summary = "_".join(f"{k}={v}" for k, v in params.items())
    summary = "".join(c if c.isalnum() or c in "=._-" else "-" for c in summary)[:60]
    return f"{digest}_{summary}" if summary else digest


def read_results(out: str | Path) -> dict[str, dict]:
    """The last record of every point in ``OUT/results.jsonl`` (later lines win)."""
    path = Path(out) / "results.jsonl"
    last: dict[str, dict] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # a torn last line after a hard kill: ignore it
                continue
            last[rec["point"]] = rec
    return last


def flat_rows(out: str | Path) -> list[dict]:
    """One row per (point, claim) of a sweep: the point's parameters, then the claim's numbers.
    A point that produced no record (it crashed) gives one row with its status and error."""
    rows = []
    for pid, rec in read_results(out).items():
        params = {k: v for k, v in rec.get("parameters", {}).items() if k != "results_dir"}
        claims = rec.get("records") or [None]
        for r in claims:
            row = {"point": pid, **params, "status": rec.get("status")}
            if r is None:
                row["error"] = rec.get("error")
            else:
                row.update({k: r.get(k) for k in ("claim", "predicted", "measured", "tolerance", "comparison", "passed")})
            rows.append(row)
    return rows


class _Appender:
    """Appends one JSON line per finished point with O_APPEND + fsync, from the driver only."""

    def __init__(self, path: Path):
        self.path = path
        self.lock = threading.Lock()

    def __call__(self, record: dict) -> None:
        data = (json.dumps(record, default=str) + "\n").encode()
        with self.lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)


def _execute_point(notebook: str, params: dict, point_dir: str, timeout: float | None) -> dict:
    """Run one point in a fresh process; return its run.json (or an error record)."""
    pdir = Path(point_dir)
    pdir.mkdir(parents=True, exist_ok=True)
    pfile = pdir / "params.yaml"
    pfile.write_text(yaml.safe_dump(params, sort_keys=False))
    cmd = [sys.executable, "-m", "companion", "run", notebook, "-f", str(pfile), "-o", str(pdir), "--quiet"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    run_json = pdir / "run.json"
    if run_json.is_file():
        rec = json.loads(run_json.read_text())
    else:
        rec = {"status": "error", "records": [], "parameters": params}
    if proc.returncode != 0 and not rec.get("error"):
        rec["error"] = (proc.stderr.strip().splitlines() or ["exit status %d" % proc.returncode])[-1]
        rec["status"] = "error" if rec.get("status") == "ok" else rec.get("status", "error")
    rec["returncode"] = proc.returncode
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec


def run_sweep(
    notebook: str,
    points: list[dict],
    out: str | Path,
    *,
    workers: int = 2,
    resume: bool = False,
    scheduler: str | None = None,
    timeout: float | None = None,
    progress: bool = True,
) -> dict:
    """Execute ``points`` of ``notebook`` in parallel; returns a summary dict (counts, paths)."""
    from dask.distributed import Client, LocalCluster, as_completed
    from tqdm import tqdm

    path = nbs.resolve(notebook)
    name = nbs.name_of(path)
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"notebook": name, "points": len(points)}
    mpath = out / "sweep.json"
    results_path = out / "results.jsonl"
    if results_path.exists() and not resume and read_results(out):
        raise SweepError(f"{out} already holds a sweep; pass --resume to continue it or choose another --out")
    if resume and mpath.is_file():
        old = json.loads(mpath.read_text())
        if old.get("notebook") != name:
            raise SweepError(f"{out} holds a sweep of {old.get('notebook')}, not {name}")
    mpath.write_text(json.dumps(manifest, indent=2))

    # finished = executed to a verdict (passed or failed); crashed points ("error") run again
    done = {pid for pid, rec in read_results(out).items() if rec.get("status") in ("ok", "failed")} if resume else set()
    todo = [(point_id(p), p) for p in points]
    skipped = sum(1 for pid, _ in todo if pid in done)
    todo = [(pid, p) for pid, p in todo if pid not in done]
    append = _Appender(results_path)
    counts = {"ok": 0, "failed": 0, "error": 0, "skipped": skipped}

    if todo:
        if scheduler:
            client = Client(scheduler)
            cluster = None
        else:
            import logging

            cluster = LocalCluster(
                n_workers=max(1, int(workers)),
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
            client = Client(cluster)
        try:
            futures = {
                client.submit(
                    _execute_point, str(path), p, str(out / "points" / pid), timeout, key=f"point-{pid}", pure=False
                ): (pid, p)
                for pid, p in todo
            }
            bar = tqdm(total=len(points), initial=skipped, desc=name, unit="pt", disable=not progress)
            for fut in as_completed(futures):
                pid, p = futures[fut]
                try:
                    rec = fut.result()
                except Exception as exc:  # the worker itself failed (not the notebook)
                    rec = {"status": "error", "error": f"{type(exc).__name__}: {exc}", "records": []}
                status = rec.get("status", "error")
                counts[status] = counts.get(status, 0) + 1
                append(
                    {
                        "point": pid,
                        "notebook": name,
                        "parameters": p,
                        "status": status,
                        "error": rec.get("error"),
                        "seconds": rec.get("seconds"),
                        "output_dir": str(out / "points" / pid),
                        "records": rec.get("records", []),
                    }
                )
                bar.update(1)
                bar.set_postfix(ok=counts["ok"], failed=counts["failed"] + counts["error"])
            bar.close()
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    return {"out": str(out), "results": str(results_path), "total": len(points), **counts}
