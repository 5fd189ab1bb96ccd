"""The thread budget, in one place: how many threads a process may use, and the environment that says so.

``COMPANION_THREADS`` is the user's budget per process, read by :func:`user_threads` only. The mesa kernels and
the cot trainer use :func:`kernel_threads` (the user's setting, else 1: the processes of a sweep or a book build
share the cores); the command line and a sweep divide the cores among their workers (:func:`threads_env`, per
host on a cluster in :func:`companion.run.cluster.threads_per_worker`); :func:`use_threads` hands a budget to
the kernels a process starts, with the variables of NumPy's OpenBLAS, torch's OpenMP pool and MKL.
"""

from __future__ import annotations

import os

from .params import InputError, ParameterError

__all__ = ["THREAD_VARIABLES", "user_threads", "kernel_threads", "threads_env", "use_threads", "available_cores"]


#: the thread counts a kernel reads when its libraries load: NumPy's OpenBLAS, torch's OpenMP pool (its intra-op
#: threads: every core unless told) and MKL (torch's BLAS on x86)
THREAD_VARIABLES = ("COMPANION_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def use_threads(n: int) -> None:
    """The kernels this process starts get ``n`` threads: ``COMPANION_THREADS`` (the mesa kernel, the cot
    trainer) and the variables NumPy's OpenBLAS, torch's OpenMP pool and MKL read when they load
    (:data:`THREAD_VARIABLES`). A library left to thread over every core spin-waits against the other processes
    sharing them: two cot trainings side by side on 2 cores took 45 ms per step with OpenBLAS on every core and
    22 ms with one BLAS thread each; the Thm 4.1 and Prop 4.1 pages side by side took 32 and 37 s with torch's
    pool on every core and 11.3 and 10.4 s with one torch thread each (9.8 and 8.7 s alone)."""
    for name in THREAD_VARIABLES:
        os.environ[name] = str(n)


_RULE = "must be an integer >= 1"


def user_threads() -> int | None:
    """The user's ``$COMPANION_THREADS``, None when it is unset or empty; anything but an integer >= 1 raises
    :class:`companion.params.ParameterError` naming the variable (inside a notebook: a refused run)."""
    raw = os.environ.get("COMPANION_THREADS")
    if raw is None or not raw.strip():
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ParameterError("COMPANION_THREADS", f"{_RULE} (environment variable); got {raw!r}")
    return n


def kernel_threads() -> int:
    """Threads of a compute kernel (the fused mesa sweep, torch in a trainer): the user's setting, else 1, so that
    the processes of a parallel sweep do not oversubscribe the cores (``companion run`` sets the machine's cores,
    ``companion book`` its own budget). The mesa kernel scales about linearly: 34 ms -> 18 ms per paper-size epoch
    with 2 threads, measured on 2 cores."""
    return user_threads() or 1


def threads_env(workers: int = 1) -> tuple[int, str]:
    """Threads each process should use (``COMPANION_THREADS``) and a one-line account of the choice:
    the user's setting if there is one, else the cores this process may use divided among ``workers``.
    A bad setting raises :class:`companion.params.InputError` (the command line's one-line refusal)."""
    try:
        n = user_threads()
    except ParameterError:
        raw = os.environ["COMPANION_THREADS"]
        raise InputError(f"COMPANION_THREADS (environment variable): {_RULE}; got {raw!r}") from None
    if n is not None:
        return n, f"COMPANION_THREADS={n} (from the environment)"
    cores = available_cores()
    n = max(1, cores // max(1, workers))
    if workers > 1:
        return n, f"COMPANION_THREADS={n}: {cores} cores shared by {workers} workers (set COMPANION_THREADS to choose)"
    return n, f"COMPANION_THREADS={n}: every core of this machine (set COMPANION_THREADS to choose)"


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity; all of them where that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1
