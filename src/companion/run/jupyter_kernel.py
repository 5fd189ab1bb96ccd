"""The warm kernel: one Jupyter kernel kept alive across notebook runs, reset between them, and the papermill
engine that executes a notebook in it."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

__all__ = ["WarmKernel", "KERNEL_ARGUMENTS", "RESET_CODE", "MODULE_ATTRIBUTES", "SOCKETS_ENV", "WARM_ENGINE"]


#: the kernel logs a transport warning at every start, and "KeyboardInterrupt caught in kernel" (ERROR) when
#: papermill stops it after a failed cell; and its event loop (tornado) may log a callback's traceback from a
#: stream closed while papermill shuts it down, onto the run's own stderr: the cell's own error is what counts,
#: reported through papermill (a refused parameter is one line, never a traceback)
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=CRITICAL",
                    "--IPKernelApp.exec_lines=__import__('logging').getLogger('tornado').setLevel(50)"]


#: the attributes of the kernel's ``__main__`` module that the shell's reset deletes with the user's names and
#: that :data:`RESET_CODE` puts back: without ``__spec__``, ``multiprocessing``'s spawn start method cannot prepare a
#: child (``get_preparation_data`` reads it), and a notebook that starts processes (a local Dask cluster, as the
#: Sweeps page does; Dask reports "Nanny failed to start") could not run after another notebook in the same kernel
MODULE_ATTRIBUTES = ("__doc__", "__loader__", "__package__", "__spec__")


#: what a warm kernel runs before each notebook: the previous run's figures and names go. Figures are closed
#: first; then the shell's hard reset (what ``%reset -f`` runs), whose output-cache flush collects the garbage
#: once, and the module attributes it deletes (:data:`MODULE_ATTRIBUTES`) are put back as they were (one
#: expression: the reset also deletes every name the cell could have kept them in). The magic itself would collect
#: twice more, about 0.1 s each in a kernel that has imported torch.
RESET_CODE = ("import sys as _s\n"
              "if 'matplotlib.pyplot' in _s.modules: _s.modules['matplotlib.pyplot'].close('all')\n"
              "(lambda ns, keep: (get_ipython().reset(new_session=False), ns.update(keep)))"
              f"(globals(), {{k: globals()[k] for k in {MODULE_ATTRIBUTES!r} if k in globals()}});")  # ";": no output


#: the folder under which a :class:`WarmKernel` puts its socket folder: a :class:`RunServer` names one of its
#: own and removes it when the server ends, however it ends (a killed server cannot clean up after itself)
SOCKETS_ENV = "COMPANION_KERNEL_SOCKETS"


class WarmKernel:
    """A Jupyter kernel kept alive between notebook runs in one process (a sweep worker's run server).

    :meth:`ready` returns the kernel manager of a live kernel in ``cwd`` (a new one if there is none or if it
    died; a kernel whose previous run was in another folder changes its directory), after running ``RESET_CODE``
    in it: ``%reset -f`` and every figure closed, so a run sees none of the previous run's names. What stays is what makes the next run
    cheap: imported modules, compiled kernels, the run cache's memory. Every notebook seeds its own
    generators from its parameters, so a run in a warm kernel records what a run in a new one records
    (checked by ``benchmarks/bench_sweep.py`` and ``tests/run/test_sweep.py``).

    One kernel client (``kc``) stays connected to the kernel from its start to its shutdown, and every run
    goes through it (:meth:`engine_arguments`, papermill's engine ``WARM_ENGINE``): a new client per run would
    wait for the kernel twice per run (``wait_for_ready`` drains the IOPub channel for 0.2 s each time, once
    for the reset and once in papermill), about 0.4 s of every sweep point, and leave its channels open."""

    def __init__(self, kernel_name: str = "python3"):
        self.kernel_name = kernel_name
        self.km = None
        self.kc = None
        self.sockets: str | None = None
        self.cwd: str | None = None
        self.runs = 0

    def ready(self, cwd: str):
        from jupyter_client.manager import KernelManager

        if self.km is not None and not self.km.is_alive():
            self.shutdown()
        if self.km is None:
            # IPC sockets in a folder of this kernel's own: kernels started at the same moment on one host (a
            # sweep's workers) cannot collide on a port, as TCP ports picked free and bound later can
            self.sockets = tempfile.mkdtemp(prefix="companion-kernel-", dir=os.environ.get(SOCKETS_ENV) or None)
            self.km = KernelManager(kernel_name=self.kernel_name, transport="ipc",
                                    ip=os.path.join(self.sockets, "k"))
            self.km.start_kernel(cwd=cwd, extra_arguments=KERNEL_ARGUMENTS)
            self.cwd = cwd
            self.kc = self.km.client()
            self.kc.start_channels()
            try:
                self.kc.wait_for_ready(timeout=120)
            except Exception:
                self.shutdown()
                raise
            self.kc.allow_stdin = False
        else:
            # another folder's notebook: the kernel changes its directory (its imports and compiled kernels stay)
            move = f"import os as _o\n_o.chdir({cwd!r})\n" if cwd != self.cwd else ""
            reply = self.kc.execute_interactive(move + RESET_CODE, store_history=False, timeout=60,
                                                output_hook=lambda m: None)
            self.cwd = cwd
            if reply["content"].get("status") != "ok":  # pragma: no cover - a kernel that cannot reset
                self.shutdown()
                return self.ready(cwd)
        self.runs += 1
        return self.km

    def engine_arguments(self, cwd: str) -> dict:
        """The arguments of ``papermill.execute_notebook`` that run a notebook in this kernel, reset and
        ready in ``cwd``, through its connected client."""
        _register_warm_engine()
        km = self.ready(cwd)
        return {"engine_name": WARM_ENGINE, "km": km, "kc": self.kc}

    def shutdown(self) -> None:
        if self.kc is not None:
            try:
                self.kc.stop_channels()
            except Exception:  # already closed
                pass
        if self.km is not None:
            try:
                self.km.shutdown_kernel(now=True)
            except Exception:  # already dead
                pass
        if self.sockets is not None:
            shutil.rmtree(self.sockets, ignore_errors=True)
        self.km, self.kc, self.sockets, self.cwd = None, None, None, None


#: papermill's engine for runs in a :class:`WarmKernel` (registered on first use)
WARM_ENGINE = "companion-warm"


def _register_warm_engine() -> None:
    """Register ``WARM_ENGINE`` with papermill: its nbclient engine, except that the notebook client runs
    through a kernel client given as ``kc`` (already connected and ready) instead of starting one.
    papermill (an optional heavy dependency of the runner) is imported here, on first use."""
    from papermill.clientwrap import PapermillNotebookClient
    from papermill.engines import NBClientEngine, papermill_engines

    if WARM_ENGINE in papermill_engines._engines:
        return

    class WarmClientEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, log_output=False, stdout_file=None,
                                     stderr_file=None, start_timeout=60, execution_timeout=None, kc=None,
                                     km=None, extra_arguments=None, **kwargs):
            client = PapermillNotebookClient(
                nb_man, km=km, timeout=execution_timeout, startup_timeout=start_timeout, kernel_name=kernel_name,
                log=logging.getLogger("papermill"), log_output=log_output, stdout_file=stdout_file,
                stderr_file=stderr_file, extra_arguments=extra_arguments or [])
            client.kc = kc  # nbclient starts no client of its own when it has one
            return client.execute()

    papermill_engines.register(WARM_ENGINE, WarmClientEngine)
