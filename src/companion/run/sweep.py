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

Limits, checked before any work: at most ``max_points`` points (:data:`companion.run.grid.MAX_POINTS` by default; the
count comes from the grid's sizes, before a point is built) and at most as many local workers as the
machine has cores (:func:`companion.threads.available_cores`; more are capped with a note).

Each worker thread runs its points in a run server of its own (``python -m companion run --serve``,
:func:`companion.run.server.serve_runs`): one process and one warm kernel for all its points, the namespace
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

import json
import threading
import time
from pathlib import Path
from typing import Sequence

import yaml

from .. import notebooks as nbs
from ..threads import available_cores
from .cluster import close, cluster_client, connect, local_cluster, nanny_variables, threads_per_worker
from .grid import MAX_POINTS, check_point_count, point_id
from .inputs import SweepError
from .server import RunServer
from .store import Appender, SweepLock, clear_partials, read_results, repair_results

__all__ = ["run_sweep", "worker_count", "ALLOWED_FAILURES"]


ALLOWED_FAILURES = 2  # times a point may lose its worker before it is recorded as an error


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
    """This worker thread's run server (:class:`companion.run.server.RunServer`), started on first use and again
    after it died or was killed. ``warm=False``: a new server for this point alone (a fresh process and
    kernel, as a single ``companion run`` gets)."""
    key = (threading.get_ident(), threads)
    with _SERVERS_LOCK:
        server = _SERVERS.get(key) if warm else None
        if server is None or not server.alive():
            server = RunServer(threads, unset=nanny_variables())  # not the nanny's allocator setting
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
    """Run one point in this worker's run server (a warm kernel: :func:`companion.run.server.serve_runs`); return
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
    locked (:class:`~companion.run.store.SweepLock`) from the first read of it to the end."""
    log = log or (lambda msg: None)
    name, path, out, ids, swept, n_workers, note = _plan(notebook, points, out, workers, scheduler, swept, max_points)
    results_path = out / "results.jsonl"
    created, lock = _lock_folder(out)
    client = cluster = None
    wrote = False
    try:
        _check_folder(out, name, resume)
        # connect before writing anything: a wrong --scheduler leaves no trace behind
        if scheduler:
            client = connect(scheduler)
        _write_manifest(out, name, len(points), swept)
        wrote = True
        _clear_and_repair(out, log)
        # finished = executed to a verdict (passed or failed); crashed points ("error") run again
        done = {pid for pid, rec in read_results(out).items() if rec.get("status") in ("ok", "failed")} if resume else set()
        todo = [(pid, p) for pid, p in zip(ids, points) if pid not in done]
        counts = {"ok": 0, "failed": 0, "error": 0, "skipped": len(points) - len(todo)}
        if todo:
            if client is None:
                if note:
                    log(note)
                cluster = local_cluster(max(1, min(n_workers, len(todo))), ALLOWED_FAILURES)
                client = cluster_client(cluster)
            _drive(client, path, name, out, todo, len(points), timeout, counts, progress, log)
    finally:
        if client is not None:
            close(client, cluster)
        if wrote:
            clear_partials(out)  # the runs of points cut short by a timeout or an interrupt
        lock.release()
        if not wrote:
            _remove_empty(created)
    return {"out": str(out), "results": str(results_path), "total": len(points), **counts}


def _plan(notebook, points, out, workers, scheduler, swept, max_points):
    """Everything that is checked before the folder is touched: the notebook, the output path, the point count,
    the workers, the points' ids (one per point). Returns (name, path, out, ids, swept, n_workers, note)."""
    path = nbs.resolve(notebook)
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
    return nbs.name_of(path), path, out, ids, swept, n_workers, note


def _lock_folder(out: Path) -> tuple[list[Path], SweepLock]:
    """Create ``out`` and take its lock, first of all: every later check reads the folder, and a sweep running on it
    is reported as such. Returns the folders this call created (removed again if nothing is written) and the lock."""
    existing = next((p for p in [out, *out.parents] if p.exists()), None)
    created = [q for q in [out, *out.parents] if existing is None or len(q.parts) > len(existing.parts)]
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
    return created, lock


def _check_folder(out: Path, name: str, resume: bool) -> None:
    """Refuse a folder that holds another sweep: a finished one without ``--resume``, another notebook's."""
    if (out / "results.jsonl").exists() and not resume and read_results(out):
        raise SweepError(f"--out '{out}': already holds a sweep; pass --resume to continue it or choose another --out")
    mpath = out / "sweep.json"
    if resume and mpath.is_file():
        try:
            old = json.loads(mpath.read_text())
        except ValueError:
            old = {}
        if old.get("notebook") not in (None, name):
            raise SweepError(f"--out '{out}': holds a sweep of {old.get('notebook')}, not {name}")


def _write_manifest(out: Path, name: str, n_points: int, swept: Sequence[str]) -> None:
    try:
        (out / "sweep.json").write_text(json.dumps({"notebook": name, "points": n_points, "swept": list(swept)},
                                                   indent=2))
    except OSError as exc:
        raise SweepError(f"--out '{out}': cannot be written ({exc.strerror or exc}); give a writable directory") from None


def _clear_and_repair(out: Path, log) -> None:
    """Leftovers of interrupted runs go; torn or foreign lines of ``results.jsonl`` are moved aside (their points run
    again)."""
    stale = clear_partials(out)
    if stale:
        log(f"removed {len(stale)} leftover(s) of interrupted runs from {out / 'points'}")
    for lineno, why in repair_results(out):
        log(f"{out / 'results.jsonl'} line {lineno}: {why}; moved aside to {out / 'results.rejected'}, "
            "its point runs again")


def _drive(client, path: Path, name: str, out: Path, todo: list, total: int, timeout, counts: dict, progress: bool,
           log) -> None:
    """Submit every point still to do and append each one's line to ``results.jsonl`` the moment it completes
    (``counts`` is updated in place)."""
    from dask.distributed import as_completed
    from tqdm import tqdm

    threads_by_worker, why = threads_per_worker(client)
    log(why)
    futures = {
        client.submit(
            _run_point_on_worker, str(path), p, str(out / "points" / pid), timeout, threads_by_worker,
            f"point-{pid}", key=f"point-{pid}", pure=False,
        ): (pid, p)
        for pid, p in todo
    }
    append = Appender(out / "results.jsonl")
    bar = tqdm(total=total, initial=counts["skipped"], desc=name, unit="pt", disable=not progress)
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
        append({"point": pid, "notebook": name, "parameters": p, "status": status, "error": rec.get("error"),
                "seconds": rec.get("seconds"), "output_dir": str(out / "points" / pid),
                "records": rec.get("records", [])})
        bar.update(1)
        bar.set_postfix(ok=counts["ok"], failed=counts["failed"] + counts["error"])
    bar.close()


def _remove_empty(dirs: Sequence[Path]) -> None:
    """Remove the folders this sweep created (deepest first) if nothing else was put there."""
    for d in dirs:
        try:
            d.rmdir()
        except OSError:
            return
