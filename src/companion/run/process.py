"""Process lifetime: a process that exits when its parent's pipe closes, and killing a process tree."""

from __future__ import annotations

import os
import threading

__all__ = ["exit_when_stdin_closes", "kill_tree"]


def exit_when_stdin_closes() -> None:
    """Tie this process to its parent: when the pipe on stdin closes (the parent died, however it
    died), kill this process's children (the kernel) and exit at once. A sweep starts every
    ``companion run`` like this, so a killed worker or client leaves no run or kernel behind."""

    def watch() -> None:
        # the raw descriptor, not sys.stdin: a daemon thread blocked inside sys.stdin's buffer would
        # abort the interpreter at its normal exit ("could not acquire lock for <stdin>")
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        kill_tree(os.getpid(), include_self=False)
        os._exit(143)

    threading.Thread(target=watch, name="companion-exit-with-parent", daemon=True).start()


def kill_tree(pid: int, include_self: bool = True) -> None:
    """SIGKILL a process and all its descendants (children first found, then killed together)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        procs = proc.children(recursive=True) + ([proc] if include_self else [])
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=5)
