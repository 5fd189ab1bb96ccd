"""The Dask side of a sweep: reaching a scheduler, its workers' thread budgets, and quiet logs."""

from __future__ import annotations

import inspect
import logging
import os

from ..threads import available_cores, threads_env, user_threads
from .inputs import SweepError

__all__ = ["CONNECT_TIMEOUT", "MALLOC_TRIM", "connect", "local_cluster", "nanny_variables", "cluster_client", "close",
           "threads_per_worker", "quiet_logs"]


CONNECT_TIMEOUT = 10  # seconds to reach a --scheduler


def connect(scheduler: str):
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


#: the variable a Dask nanny sets in its worker's environment (``distributed.nanny.pre-spawn-environ``: glibc
#: returns freed memory above 64 KiB to the system at once) and that the runs of a sweep must not inherit: their
#: NumPy and torch temporaries are then mapped and faulted in afresh at every step. Measured on 2 cores (the looped
#: page's sparse-block training, 1600 steps of small batched products, one thread): 6.2 s without it, 22.8 s with
#: it; the looped page's smoke point went from 42.6 to 15.9 s a run under `companion calibrate` (4 seeds).
MALLOC_TRIM = "MALLOC_TRIM_THRESHOLD_"


def local_cluster(n_workers: int, allowed_failures: int):
    """A sweep's own Dask cluster on this machine: ``n_workers`` processes of one thread each (a point's run uses
    its share of the cores itself); a point may lose its worker ``allowed_failures`` times before it is an error.
    Its nannies do not set :data:`MALLOC_TRIM`: a nanny sets its worker's variables in its own process first (Dask's
    caveat of ``distributed.nanny.pre-spawn-environ``), here the process that asked for the cluster, and every
    process that one started later would inherit it (a user's own value stays as it is)."""
    import dask
    from dask.distributed import LocalCluster

    with dask.config.set({"distributed.scheduler.allowed-failures": allowed_failures,
                          f"distributed.nanny.pre-spawn-environ.{MALLOC_TRIM}": None}):
        return LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None,
                            silence_logs=logging.ERROR)


def nanny_variables() -> tuple[str, ...]:
    """The variables of this process's environment that a Dask nanny put there for its worker and that a run
    started from it must not inherit (:data:`MALLOC_TRIM`, when it has the value of Dask's configuration: a worker
    of the sweep's own cluster or of one the user started; a value of the user's own is kept)."""
    value = os.environ.get(MALLOC_TRIM)
    if value is None:
        return ()
    try:
        import dask
        import distributed  # noqa: F401 - its configuration's defaults, where the nanny's variables are

        dask_value = (dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {}).get(MALLOC_TRIM)
    except ImportError:  # no Dask: no nanny set it
        return ()
    return (MALLOC_TRIM,) if dask_value is not None and str(dask_value) == value else ()


def cluster_client(cluster):
    from dask.distributed import Client

    return Client(cluster)


def close(client, cluster=None) -> None:
    """Close the client, and the cluster when it is the sweep's own (whose closing chatter is not the user's:
    :func:`quiet_logs` runs on its workers and nannies first)."""
    if cluster is not None:
        for nanny in (False, True):
            try:
                client.run(quiet_logs, nanny=nanny, on_error="ignore")
            except Exception:  # noqa: BLE001 - a cluster already going down: nothing left to quiet
                pass
    client.close()
    if cluster is not None:
        cluster.close()


def threads_per_worker(client) -> tuple[dict[str, int], str]:
    """COMPANION_THREADS for the points of each worker: the user's setting, or each host's cores divided
    among the Dask worker threads on that host."""
    if user_threads() is not None:
        n, why = threads_env(1)
        return {"default": n}, why
    info = (client.scheduler_info(n_workers=-1) if _takes_n_workers(client) else client.scheduler_info())["workers"]
    cores = client.run(available_cores)
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


def quiet_logs() -> None:
    """Run on each worker and nanny of a sweep's own cluster as it closes: a worker whose heartbeat meets the
    scheduler already gone logs an ERROR with a traceback on the sweep's stderr (seen once in CI after SIGTERM),
    which is shutdown chatter, not news; the sweep reports every point's fate itself."""
    logger = logging.getLogger("distributed")
    logger.setLevel(logging.CRITICAL)
    for handler in logger.handlers:
        handler.setLevel(logging.CRITICAL)
