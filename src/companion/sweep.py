"""Parameter sweeps: the cartesian product of a grid, executed in parallel through Dask.

Layout of a sweep directory::

    OUT/
      sweep.json                  notebook, grid, fixed parameters (written once; --resume checks it)
      results.jsonl               one line per finished point, appended atomically as it completes
      points/<id>/                one directory per point: executed notebook, run.json, records
      sweep.lock                  while a sweep runs: the pid of the process that holds the folder

One sweep at a time per folder: :func:`run_sweep` takes ``OUT/sweep.lock`` (an exclusive ``flock`` on a
file holding its pid; the kernel releases it when the holder dies, however it dies, so a lock left by a
killed sweep is taken over) before it reads or writes anything there; a second sweep on the same folder
is refused with the holder's pid. The holder clears the stale ``.<id>.partial-*`` folders (and parameter
files) that runs of a killed sweep leave in ``points/``, when it starts and when it ends.

Limits, checked before any work: at most ``max_points`` points (:data:`MAX_POINTS` by default; the
count comes from the grid's sizes, before a point is built) and at most as many local workers as the
machine has cores (``companion.runner.available_cores()``; more are capped with a note).

Each worker thread runs its points in a run server of its own (``python -m companion run --serve``,
:func:`companion.runner.serve_runs`): one process and one warm kernel for all its points, the namespace
reset between them, so a point costs its own work and not a process start, the imports and the kernels'
compilation again. Kernels of different workers never share a process or a ZMQ context, and the runner
retries a kernel that fails to start. A point that fails is
recorded with its error and the others go on. ``--resume`` skips every point whose last line in
``results.jsonl`` says it finished (status ``ok`` or ``failed``: it ran to its verdict) and runs the
others (never started, interrupted, or crashed with status ``error``); nothing that finished is ever
lost, because a point's line is written (and fsync'ed) by the driver the moment it completes.

By default the points run on an embedded ``dask.distributed.LocalCluster``; pass the address of a
running scheduler (``--scheduler tcp://host:8786``) to spread a sweep over a cluster without changes.

Faults:

* a torn or foreign line in ``results.jsonl`` (a crash mid-write, junk) is reported, moved aside to
  ``results.rejected`` (with its line number) and its point is re-run; the good lines are kept byte for byte;
* a dead worker: Dask re-runs its point on another worker, at most ``allowed-failures`` times (2 for the
  embedded cluster; a scheduler's own setting otherwise), then the point is recorded as an error
  (``KilledWorker``) and ``--resume`` runs it again;
* a killed client: every run server of a sweep reads a pipe from the worker that started it and exits,
  killing its kernel, when that worker dies; the embedded cluster's workers die with the client,
  and on an external cluster a point whose client has gone is cancelled by the worker within a second.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import inspect
import itertools
import json
import logging
import math
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from . import notebooks as nbs
from .runner import InputError, RunServer, available_cores, coerce_parameters, threads_env
from .text import safe_name

__all__ = ["SweepError", "parse_grid", "count_points", "expand_grid", "point_id", "run_sweep", "read_results",
           "scan_results", "repair_results", "flat_rows", "worker_count", "SweepLock", "clear_partials",
           "MAX_POINTS"]


class SweepError(InputError):
    """Bad sweep input (grid, files, output directory, scheduler): one line, exit status 2."""


ALLOWED_FAILURES = 2  # times a point may lose its worker before it is recorded as an error
CONNECT_TIMEOUT = 10  # seconds to reach a --scheduler
#: points a sweep may have unless --max-points says otherwise (a 10^4-point grid of the fastest page
#: already takes hours on two cores)
MAX_POINTS = 10_000
LOCK_NAME = "sweep.lock"


def count_points(*grids: Mapping[str, Sequence] | None) -> int:
    """The number of points of the cartesian product of the grids' value lists (0 without any axis),
    computed from their sizes alone: nothing is validated or built."""
    sizes = [len(v) if isinstance(v, (list, tuple)) else 1 for g in grids for v in (g or {}).values()]
    return math.prod(sizes) if sizes else 0


def check_point_count(n: int, max_points: int) -> None:
    """Refuse more than ``max_points`` points in one line (the count and the limit)."""
    if n > max_points:
        raise SweepError(
            f"--max-points: the grid has {n} points, more than the limit of {max_points}; sweep fewer values "
            "or raise --max-points"
        )


def worker_count(workers: int, cores: int | None = None) -> tuple[int, str | None]:
    """Local worker processes for ``workers`` asked on a machine of ``cores`` cores: never more than the
    cores (each point's run already uses its share of them). Returns the count and a one-line note when
    the request was capped (None otherwise)."""
    cores = available_cores() if cores is None else cores
    if workers < 1:
        raise SweepError(f"--workers must be >= 1; got {workers}")
    if workers > cores:
        return cores, f"--workers {workers}: this machine has {cores} cores; using {cores} local workers"
    return workers, None


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
        if any(not v for v in vals):
            raise SweepError(f"--grid {name}: empty value in {values!r}; give NAME=V1,V2,... without empty elements")
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
    if cur.strip() or out:
        out.append(cur.strip())
    return out


def expand_grid(
    notebook: str,
    text_grid: Mapping[str, list[str]] | None = None,
    typed_grid: Mapping[str, list[Any]] | None = None,
    fixed: Mapping[str, Any] | None = None,
    fixed_text: Mapping[str, str] | None = None,
    max_points: int | None = None,
) -> list[dict]:
    """Validate every value against the notebook's parameters cell and return the list of points.

    With ``max_points``, a grid of more points is refused (:class:`SweepError`) from its sizes, before a
    value is validated or a point built."""
    if max_points is not None:
        check_point_count(count_points(text_grid, typed_grid), max_points)
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
            seen: list = []
            for v in axes[pname]:
                if v in seen:
                    raise SweepError(f"grid {pname}: value {v!r} is given twice; each value once")
                seen.append(v)
    base = coerce_parameters(name, specs, dict(fixed or {}), fixed_text)
    overlap = set(base) & set(axes)
    if overlap:
        raise SweepError(f"parameter(s) {sorted(overlap)} are both fixed and swept")
    if "results_dir" in axes or "results_dir" in base:
        raise SweepError("results_dir is set by the sweep (one directory per point)")
    names = list(axes)
    return [dict(base, **dict(zip(names, combo))) for combo in itertools.product(*(axes[n] for n in names))]


def point_id(params: Mapping[str, Any], swept: Sequence[str] | None = None) -> str:
    """A stable, readable id: a hash of all the parameters (canonical JSON) and the ``name=value`` of
    the swept ones (all of them if ``swept`` is None), whole, so a point's folder shows where it lies
    in the grid. Only a summary longer than 180 characters is cut (the hash still tells points apart)."""
    canon = json.dumps(params, sort_keys=True, default=str)
    digest = hashlib.sha1(canon.encode()).hexdigest()[:10]
    keys = [k for k in params if swept is None or k in swept]
    summary = "_".join(f"{k}={v}" for k, v in ((k, params[k]) for k in keys))
    summary = safe_name(summary)[:180]
    return f"{digest}_{summary}" if summary else digest


def scan_results(path: str | Path) -> tuple[list[tuple[int, bytes, dict]], list[tuple[int, bytes, str]]]:
    """Every line of a ``results.jsonl``: ``(good, bad)``, good as ``(line number, raw bytes, record)``,
    bad as ``(line number, raw bytes, why)``. A line is good if it is UTF-8 JSON of an object with a
    string ``point`` and a ``status``; anything else (a torn write, junk, ``{}``, a list) is bad."""
    path = Path(path)
    good, bad = [], []
    if not path.is_file():
        return good, bad
    data = path.read_bytes()
    lines = data.split(b"\n")
    for i, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        torn = i == len(lines)  # no newline after it: the write was cut
        try:
            rec = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            bad.append((i, raw, "not UTF-8 text"))
            continue
        except json.JSONDecodeError:
            bad.append((i, raw, "cut short by a crash mid-write" if torn else "not valid JSON"))
            continue
        if not isinstance(rec, dict):
            bad.append((i, raw, f"a JSON {type(rec).__name__}, not a point's record"))
        elif not isinstance(rec.get("point"), str) or "status" not in rec:
            bad.append((i, raw, "a JSON object without 'point' and 'status'"))
        elif torn:
            bad.append((i, raw, "no newline after it (cut short by a crash mid-write?)"))
        else:
            good.append((i, raw, rec))
    return good, bad


def repair_results(out: str | Path) -> list[tuple[int, str]]:
    """Move the bad lines of ``OUT/results.jsonl`` aside (appended to ``OUT/results.rejected`` with
    their line numbers) and rewrite the file with its good lines, byte for byte, atomically. Their points
    have no record any more, so the sweep runs them again. Returns ``[(line number, why)]``."""
    out = Path(out)
    path = out / "results.jsonl"
    good, bad = scan_results(path)
    if not bad:
        return []
    with open(out / "results.rejected", "ab") as fh:
        for i, raw, why in bad:
            fh.write(f"# {path.name} line {i}: {why}\n".encode() + raw + b"\n")
        fh.flush()
        os.fsync(fh.fileno())
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(b"".join(raw + b"\n" for _, raw, _ in good))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return [(i, why) for i, _, why in bad]


def read_results(out: str | Path) -> dict[str, dict]:
    """The last record of every point in ``OUT/results.jsonl`` (later lines win; bad lines are left out:
    :func:`scan_results` names them)."""
    good, _ = scan_results(Path(out) / "results.jsonl")
    return {rec["point"]: rec for _, _, rec in good}


def flat_rows(out: str | Path) -> list[dict]:
    """One row per (point, claim) of a sweep: the point's parameters, then the claim's numbers.
    A point that produced no record (it crashed) gives one row with its status and error."""
    rows = []
    for pid, rec in read_results(out).items():
        params = rec.get("parameters") if isinstance(rec.get("parameters"), dict) else {}
        params = {k: v for k, v in params.items() if k != "results_dir"}
        claims = [r for r in (rec.get("records") or []) if isinstance(r, dict)] or [None]
        for r in claims:
            row = {"point": pid, **params, "status": rec.get("status")}
            if r is None:
                row["error"] = rec.get("error")
            else:
                row.update({k: r.get(k) for k in ("claim", "predicted", "measured", "tolerance", "comparison",
                                                  "passed")})
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
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    data = b"\n" + data  # never glue a record onto a torn line
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)


class SweepLock:
    """The lock of a sweep folder: ``OUT/sweep.lock``, held with an exclusive ``flock`` and holding the pid
    of its holder. The kernel drops the ``flock`` when the holder dies, so a lock left by a killed sweep is
    simply taken over; a live holder makes :meth:`SweepLock.acquire` raise :class:`SweepError` naming the lock and
    the holder's pid.

    Parameters
    ----------
    out : Path
        The sweep folder (it must exist)."""

    def __init__(self, out: str | Path):
        self.out = Path(out)
        self.path = self.out / LOCK_NAME
        self.fd: int | None = None

    def holder(self) -> str:
        """The pid written in the lock file ('unknown' while its holder has not written it yet)."""
        for _ in range(20):
            try:
                text = self.path.read_text().strip()
            except OSError:
                text = ""
            if text:
                return text
            time.sleep(0.01)
        return "unknown"

    def acquire(self) -> SweepLock:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise SweepError(
                        f"--out '{self.out}': another sweep is running on it (lock {self.path} held by pid "
                        f"{self.holder()}); wait for it to end or give another --out"
                    ) from None
                raise SweepError(f"--out '{self.out}': cannot lock {self.path} ({exc.strerror or exc})") from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # the previous holder removed the file between our open and our lock: retry
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            os.fsync(fd)
            self.fd = fd
            return self

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            self.path.unlink()  # while still holding it: a waiter that opened it sees another inode and retries
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


def clear_partials(out: str | Path) -> list[str]:
    """Remove what the runs of an earlier, killed sweep left in ``OUT/points/``: the private
    ``.<id>.partial-*`` and ``.<id>.old-*`` folders of :func:`companion.runner.run_notebook` and the
    ``.<id>.params.yaml`` files. Call it only while holding the folder's :class:`SweepLock` and with no
    point running. Returns the names removed."""

    points = Path(out) / "points"
    removed: list[str] = []
    if not points.is_dir():
        return removed
    for entry in sorted(points.iterdir()):
        if not entry.name.startswith("."):
            continue
        if entry.is_dir() and (".partial-" in entry.name or ".old-" in entry.name):
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.is_file() and entry.name.endswith(".params.yaml"):
            entry.unlink(missing_ok=True)
        else:
            continue
        removed.append(entry.name)
    return removed


def _still_wanted(key: str | None) -> bool:
    """False once the scheduler has cancelled this task (its client went away)."""
    if key is None:
        return True
    try:
        from distributed import get_worker

        ts = get_worker().state.tasks.get(key)
    except Exception:  # not on a Dask worker (called directly)
        return True
    return ts is not None and ts.state not in ("cancelled", "released", "forgotten")


#: the run servers of this process (a Dask worker's), one per worker thread and thread setting
_SERVERS: dict[tuple, RunServer] = {}
_SERVERS_LOCK = threading.Lock()


def _server(threads: int | None, warm: bool) -> RunServer:
    """This worker thread's run server (:class:`companion.runner.RunServer`), started on first use and again
    after it died or was killed. ``warm=False``: a new server for this point alone (a fresh process and
    kernel, as a single ``companion run`` gets)."""
    key = (threading.get_ident(), threads)
    with _SERVERS_LOCK:
        server = _SERVERS.get(key) if warm else None
        if server is None or not server.alive():
            server = RunServer(threads)
            if warm:
                _SERVERS[key] = server
    return server


def _forget(server: RunServer) -> None:
    server.kill()
    with _SERVERS_LOCK:
        for k in [k for k, v in _SERVERS.items() if v is server]:
            del _SERVERS[k]


def _execute_point(
    notebook: str, params: dict, point_dir: str, timeout: float | None, threads: int | None = None,
    key: str | None = None, warm: bool = True,
) -> dict:
    """Run one point in this worker's run server (a warm kernel: :func:`companion.runner.serve_runs`); return
    its run.json (or an error record).

    The server reads its requests from a pipe of this process and dies with its kernel when the pipe closes,
    so a worker that dies takes its point's run with it; a point that times out, or whose client has gone
    (cancelled within a second), is killed with its server, and the next point starts a new one."""
    pdir = Path(point_dir)
    pdir.parent.mkdir(parents=True, exist_ok=True)
    pfile = pdir.parent / f".{pdir.name}.params.yaml"
    pfile.write_text(yaml.safe_dump(params, sort_keys=False))
    t0 = time.perf_counter()
    wall0 = time.time()
    server = _server(threads, warm)

    def stop() -> str | None:
        if timeout is not None and time.perf_counter() - t0 > timeout:
            return f"timed out after {timeout:g} s"
        if not _still_wanted(key):
            return "cancelled (the sweep's client went away)"
        return None

    reply, cause = server.request(notebook, pfile, pdir, stop)
    if cause or not reply.get("served") or not warm:
        _forget(server)
    pfile.unlink(missing_ok=True)
    run_json = pdir / "run.json"
    rec = None
    # a run.json older than this attempt is an earlier attempt's (a refused or crashed run never
    # writes over a previous one)
    if not cause and run_json.is_file() and run_json.stat().st_mtime >= wall0 - 1:
        try:
            rec = json.loads(run_json.read_text())
        except (OSError, ValueError):
            rec = None
    if rec is None:
        rec = {"status": "error", "records": [], "parameters": params}
    returncode = None if cause else reply["rc"]
    if cause:
        rec["error"] = cause
    elif returncode != 0 and not rec.get("error"):
        rec["error"] = reply.get("error") or f"exit status {returncode}"
        rec["status"] = "error" if rec.get("status") == "ok" else rec.get("status", "error")
    rec["returncode"] = returncode
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec


def _connect(scheduler: str):
    from dask.distributed import Client

    if "://" not in scheduler and ":" not in scheduler:
        raise SweepError(f"--scheduler {scheduler!r}: expected a Dask scheduler address like tcp://HOST:8786")
    try:
        return Client(scheduler, timeout=CONNECT_TIMEOUT)
    except (OSError, TimeoutError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SweepError(
            f"--scheduler {scheduler}: no Dask scheduler answered within {CONNECT_TIMEOUT} s ({reason}); "
            "start one with `dask scheduler` or leave --scheduler out to use local workers"
        ) from None


def _threads_per_worker(client) -> tuple[dict[str, int], str]:
    """COMPANION_THREADS for the points of each worker: the user's setting, or each host's cores divided
    among the Dask worker threads on that host."""
    if os.environ.get("COMPANION_THREADS", "").strip():
        n, why = threads_env(1)
        return {"default": n}, why
    info = (client.scheduler_info(n_workers=-1) if _takes_n_workers(client) else client.scheduler_info())["workers"]
    cores = client.run(lambda: len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    per_host: dict[str, int] = {}
    for addr, w in info.items():
        host = w.get("host") or addr.rsplit(":", 1)[0]
        per_host[host] = per_host.get(host, 0) + int(w.get("nthreads", 1))
    out: dict = {}
    for addr, w in info.items():
        host = w.get("host") or addr.rsplit(":", 1)[0]
        out[addr] = max(1, int(cores.get(addr, 1)) // max(1, per_host[host]))
    shown = sorted(set(out.values()))
    n_workers = len(info)
    total = sum(w.get("nthreads", 1) for w in info.values())
    return out, (
        f"COMPANION_THREADS={'/'.join(map(str, shown))} per point: each host's cores shared by its Dask worker "
        f"threads ({n_workers} worker(s), {total} thread(s) in all; set COMPANION_THREADS to choose)"
    )


def _takes_n_workers(client) -> bool:

    return "n_workers" in inspect.signature(client.scheduler_info).parameters


def _run_point_on_worker(notebook, params, point_dir, timeout, threads_by_worker, key):
    threads = threads_by_worker.get("default")
    try:
        from distributed import get_worker

        threads = threads_by_worker.get(get_worker().address, threads)
    except Exception:  # not on a Dask worker
        pass
    return _execute_point(notebook, params, point_dir, timeout, threads, key)


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
    swept: Sequence[str] | None = None,
    log=None,
    max_points: int | None = MAX_POINTS,
) -> dict:
    """Execute ``points`` of ``notebook`` in parallel; returns a summary dict (counts, paths).

    ``swept`` names the grid's parameters (they make the point folders' names; default: those whose
    value differs between points). ``log`` receives one-line notes (cores, repaired lines, capped workers,
    cleared leftovers). More than ``max_points`` points (None: no limit) are refused, and local workers
    are capped at the machine's cores (:func:`worker_count`), before anything starts. The folder is
    locked (:class:`SweepLock`) from the first read of it to the end."""
    import dask
    from dask.distributed import as_completed
    from tqdm import tqdm

    log = log or (lambda msg: None)
    path = nbs.resolve(notebook)
    name = nbs.name_of(path)
    out = Path(out).absolute()
    if out.exists() and not out.is_dir():
        raise SweepError(f"--out '{out}': is a file; give a new directory (or a sweep's directory with --resume)")
    if max_points is not None:
        check_point_count(len(points), max_points)
    n_workers, note = (1, None) if scheduler else worker_count(int(workers))
    if swept is None:
        swept = [k for k in (points[0] if points else {})
                 if len({json.dumps(p.get(k), default=str) for p in points}) > 1]
    ids = [point_id(p, swept) for p in points]
    if len(set(ids)) != len(ids):
        raise SweepError("the grid gives the same point twice; give each value once")
    results_path = out / "results.jsonl"
    mpath = out / "sweep.json"

    # the lock first: every check below reads the folder, and a sweep running on it is reported as such
    created = next((p for p in [out, *out.parents] if p.exists()), None)
    created = [q for q in [out, *out.parents] if created is None or len(q.parts) > len(created.parts)]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SweepError(f"--out '{out}': cannot be written ({exc.strerror or exc}); give a writable directory") from None
    lock = SweepLock(out)
    try:
        lock.acquire()
    except BaseException:
        _remove_empty(created)
        raise
    client = cluster = None
    wrote = False
    try:
        if results_path.exists() and not resume and read_results(out):
            raise SweepError(f"--out '{out}': already holds a sweep; pass --resume to continue it or choose another --out")
        if resume and mpath.is_file():
            try:
                old = json.loads(mpath.read_text())
            except ValueError:
                old = {}
            if old.get("notebook") not in (None, name):
                raise SweepError(f"--out '{out}': holds a sweep of {old.get('notebook')}, not {name}")

        # connect before writing anything: a wrong --scheduler leaves no trace behind
        if scheduler:
            client = _connect(scheduler)
        try:
            mpath.write_text(json.dumps({"notebook": name, "points": len(points), "swept": list(swept)}, indent=2))
            wrote = True
        except OSError as exc:
            raise SweepError(
                f"--out '{out}': cannot be written ({exc.strerror or exc}); give a writable directory"
            ) from None
        stale = clear_partials(out)
        if stale:
            log(f"removed {len(stale)} leftover(s) of interrupted runs from {out / 'points'}")
        for lineno, why in repair_results(out):
            log(f"{results_path} line {lineno}: {why}; moved aside to {out / 'results.rejected'}, its point runs again")

        # finished = executed to a verdict (passed or failed); crashed points ("error") run again
        finished = ("ok", "failed")
        done = {pid for pid, rec in read_results(out).items() if rec.get("status") in finished} if resume else set()
        todo = [(pid, p) for pid, p in zip(ids, points) if pid not in done]
        skipped = len(points) - len(todo)
        append = _Appender(results_path)
        counts = {"ok": 0, "failed": 0, "error": 0, "skipped": skipped}
        if not todo:
            return {"out": str(out), "results": str(results_path), "total": len(points), **counts}

        if client is None:

            from dask.distributed import Client, LocalCluster

            if note:
                log(note)
            with dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES}):
                cluster = LocalCluster(
                    n_workers=max(1, min(n_workers, len(todo))),
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    silence_logs=logging.ERROR,
                )
            client = Client(cluster)
        threads_by_worker, why = _threads_per_worker(client)
        log(why)
        futures = {
            client.submit(
                _run_point_on_worker, str(path), p, str(out / "points" / pid), timeout, threads_by_worker,
                f"point-{pid}", key=f"point-{pid}", pure=False,
            ): (pid, p)
            for pid, p in todo
        }
        bar = tqdm(total=len(points), initial=skipped, desc=name, unit="pt", disable=not progress)
        for fut in as_completed(futures):
            pid, p = futures.pop(fut)
            try:
                rec = fut.result()
            except Exception as exc:  # the worker itself failed (not the notebook), e.g. KilledWorker
                msg = str(exc).splitlines()[0] if str(exc) else ""
                rec = {"status": "error", "error": f"{type(exc).__name__}: {msg}", "records": []}
            # let the cluster forget the result: a worker that dies later must not make Dask compute a
            # finished point again to restore it
            fut.release()
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
        if client is not None:
            if cluster is not None:  # our own cluster: its closing chatter is not the user's (see _quiet_logs)
                for nanny in (False, True):
                    try:
                        client.run(_quiet_logs, nanny=nanny, on_error="ignore")
                    except Exception:  # noqa: BLE001 - a cluster already going down: nothing left to quiet
                        pass
            client.close()
        if cluster is not None:
            cluster.close()
        if wrote:
            clear_partials(out)  # the runs of points cut short by a timeout or an interrupt
        lock.release()
        if not wrote:
            _remove_empty(created)
    return {"out": str(out), "results": str(results_path), "total": len(points), **counts}


def _quiet_logs() -> None:
    """Run on each worker and nanny of a sweep's own cluster as it closes: a worker whose heartbeat meets the
    scheduler already gone logs an ERROR with a traceback on the sweep's stderr (seen once in CI after SIGTERM),
    which is shutdown chatter, not news; the sweep reports every point's fate itself."""
    logger = logging.getLogger("distributed")
    logger.setLevel(logging.CRITICAL)
    for handler in logger.handlers:
        handler.setLevel(logging.CRITICAL)


def _remove_empty(dirs: Sequence[Path]) -> None:
    """Remove the folders this sweep created (deepest first) if nothing else was put there."""
    for d in dirs:
        try:
            d.rmdir()
        except OSError:
            return
