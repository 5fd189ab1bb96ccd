"""The run server: ``python -m companion run --serve`` answers run requests on a pipe with one warm kernel
(:func:`serve_runs`); :class:`RunServer` is the client side that a sweep worker keeps."""

from __future__ import annotations

import json
import os
import queue
import select
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Mapping

from ..params import InputError
from ..threads import threads_env, use_threads
from .execute import NotebookFailed, run_notebook
from .inputs import load_param_file
from .jupyter_kernel import SOCKETS_ENV, WarmKernel
from .process import kill_tree

__all__ = ["serve_runs", "RunServer", "SERVE_IDLE_SECONDS", "SERVER_PREFIX", "remove_stale_socket_folders"]


#: a run server (:func:`serve_runs`) with no request for this long exits, and its kernel with it
SERVE_IDLE_SECONDS = 120


def serve_runs(rfile=None, wfile=None, idle: float = SERVE_IDLE_SECONDS) -> int:
    """Run notebooks on request, one after another, in one warm kernel (``companion run --serve``).

    A sweep worker starts one such server and sends it its points: one JSON line per point on stdin,
    ``{"notebook": ..., "params_file": ..., "output": ...}``; the server runs it as ``companion run NOTEBOOK -f
    PARAMS_FILE -o OUTPUT --overwrite --quiet`` would (same checks, same atomic output, same ``run.json``) and
    answers one JSON line on stdout, ``{"rc": 0|1|2, "error": "..."}`` (rc as ``companion run``'s exit status).
    The kernel (:class:`WarmKernel`) stays up between points, so a point costs its own work, not a process
    start, imports and kernel compilation. The server exits, killing its kernel, when stdin closes (the worker
    that started it died, however it died), and after ``idle`` seconds without a request."""
    rfd = 0 if rfile is None else rfile.fileno()
    if wfile is None:  # the protocol keeps the real stdout; anything else printed goes to stderr
        wfile = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
    out = wfile
    threads, _ = threads_env(1)
    use_threads(threads)
    requests: queue.Queue = queue.Queue()
    kernel = WarmKernel()
    own_sockets = os.environ.get(SOCKETS_ENV)  # made for this server by its RunServer: removed as it exits

    def reader() -> None:
        buf = b""
        try:
            while True:
                chunk = os.read(rfd, 65536)
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    requests.put(line)
        except OSError:
            pass
        kill_tree(os.getpid(), include_self=False)  # the parent is gone: nothing of ours may outlive it
        for folder in (kernel.sockets, own_sockets):  # nor the dead kernel's socket files
            if folder:
                shutil.rmtree(folder, ignore_errors=True)
        os._exit(143)

    threading.Thread(target=reader, name="companion-serve-reader", daemon=True).start()
    try:
        while True:
            try:
                line = requests.get(timeout=idle)
            except queue.Empty:
                return 0
            try:
                req = json.loads(line)
                rc, error = _serve_one(req["notebook"], req["params_file"], req["output"], kernel)
            except (ValueError, KeyError, TypeError) as exc:
                rc, error = 2, f"bad request to the run server: {exc}"
            out.write(json.dumps({"rc": rc, "error": error}) + "\n")
            out.flush()
    finally:
        kernel.shutdown()
        if own_sockets:
            shutil.rmtree(own_sockets, ignore_errors=True)


def _serve_one(notebook: str, params_file: str, output: str, kernel: WarmKernel) -> tuple[int, str]:
    try:
        result = run_notebook(notebook, load_param_file(params_file), output, overwrite=True, kernel=kernel)
    except NotebookFailed as exc:
        if exc.refused:
            return 2, f"{exc.notebook}: {exc.evalue}"
        return 1, f"{exc.notebook} raised {exc.ename}: {exc.evalue}"
    except InputError as exc:
        return 2, str(exc)
    return (0 if result.ok else 1), ""


SERVER_PREFIX = "companion-server-"  # + the owner's pid + "-": the socket folder of a RunServer


def remove_stale_socket_folders(tmp: str | None = None) -> list[str]:
    """Remove the socket folders (``companion-server-<pid>-*`` in ``tmp``, default the temporary directory) whose
    owner process ``pid`` no longer exists: a :class:`RunServer` removes its folder however it ends, but a
    process group killed at once (a sweep's worker and its servers, SIGKILL) leaves it. Only this user's folders,
    and only those of dead owners, are touched. Returns the folders removed."""
    import psutil

    removed = []
    base = Path(tmp or tempfile.gettempdir())
    for folder in base.glob(f"{SERVER_PREFIX}*-*"):
        pid = folder.name[len(SERVER_PREFIX):].split("-", 1)[0]
        try:
            if not pid.isdigit() or psutil.pid_exists(int(pid)) or folder.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(str(folder))
    return removed


class RunServer:
    """A run server (``python -m companion run --serve``, :func:`serve_runs`) started by this process: one
    process and one warm kernel that run notebooks one after another. A sweep worker keeps one per thread;
    the test suite keeps one per notebook-run thread.

    The server dies with its kernel when this process dies (its stdin closes). ``threads`` sets its
    ``COMPANION_THREADS``; ``env`` adds to the environment it inherits, ``unset`` removes from it."""

    def __init__(self, threads: int | None = None, env: Mapping[str, str] | None = None, unset: tuple[str, ...] = ()):
        full = dict(os.environ, **(env or {}))
        for name in ("COMPANION_EXIT_WITH_STDIN", *unset):
            full.pop(name, None)
        if threads:
            full["COMPANION_THREADS"] = str(threads)
        remove_stale_socket_folders()
        self.sockets = full[SOCKETS_ENV] = tempfile.mkdtemp(prefix=f"{SERVER_PREFIX}{os.getpid()}-")
        self.proc = subprocess.Popen([sys.executable, "-m", "companion", "run", "--serve", "-"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=full)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, notebook: str, params_file, output, stop=lambda: None) -> tuple[dict, str | None]:
        """Run ``notebook`` with the parameters of the YAML file ``params_file`` into ``output`` (as ``companion
        run NOTEBOOK -f PARAMS_FILE -o OUTPUT --overwrite --quiet``) and wait for it. ``stop()`` is asked every
        second: a reason it returns abandons the run (the caller then kills the server, :meth:`kill`).

        Returns ``(reply, cause)``: the server's reply ``{"rc", "error", "served": True}``, or, when it died
        first, ``{"rc", "error", "served": False}``; ``cause`` is ``stop()``'s reason or None."""
        line = json.dumps({"notebook": str(notebook), "params_file": str(params_file), "output": str(output)})
        try:
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except OSError:  # died between runs: the empty read below says so
            pass
        while True:
            ready, _, _ = select.select([self.proc.stdout], [], [], 1.0)
            if ready:
                text = self.proc.stdout.readline()
                try:
                    reply = json.loads(text) if text else None
                except ValueError:
                    reply = None
                if reply is not None:
                    return dict(reply, served=True), None
                self.proc.wait()
                code = self.proc.returncode
                return {"rc": code or 1, "error": f"the run server died (exit status {code})", "served": False}, None
            cause = stop()
            if cause:
                return {"rc": None, "error": cause, "served": False}, cause

    def kill(self) -> None:
        kill_tree(self.proc.pid)
        self.proc.wait()
        shutil.rmtree(self.sockets, ignore_errors=True)

    def close(self) -> None:
        """Let the server finish and exit (its stdin closes), killing it if it does not within 10 s."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()
        shutil.rmtree(self.sockets, ignore_errors=True)
