"""Execute one notebook with papermill, after validating its parameters.

``run_notebook("mesa/setup", {"T": 20}, "runs/t20")`` checks every parameter name and type against the
notebook's ``parameters`` cell *before any kernel starts* (papermill itself only warns about an
unknown name and silently runs with the default), executes the notebook in its own directory, keeps
the executed copy in the output directory, and returns the verdict records the notebook wrote.

Exit statuses of ``companion run`` (see :mod:`companion.cli`): 0 all claims passed, 1 the notebook
raised (a failed verdict or any other error: its own message is printed), 2 bad parameters.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

import nbformat

from .. import notebooks as nbs
from ..params import PARAMETER_ERRORS
from ..text import slug
from .inputs import coerce_parameters
from .jupyter_kernel import KERNEL_ARGUMENTS, WarmKernel
from .outputs import OWNER_FILE, holds_a_run, move_into_place, prepare_output, read_records

__all__ = ["NotebookFailed", "RunResult", "run_notebook", "KERNEL_START_RETRIES"]


KERNEL_START_RETRIES = 3


class NotebookFailed(RuntimeError):
    """The notebook raised; ``ename``/``evalue`` are the notebook's own exception name and message."""

    def __init__(self, notebook: str, ename: str, evalue: str, executed: Path | None):
        self.notebook, self.ename, self.evalue, self.executed = notebook, ename, evalue, executed
        where = f" (executed notebook kept at {executed})" if executed else ""
        super().__init__(f"{notebook} failed: {ename}: {evalue}{where}")

    @property
    def refused(self) -> bool:
        """The notebook refused its input: it raised a :class:`companion.params.ParameterError` (or a subclass such as
        :class:`companion.params.TrainingDiverged`; :data:`companion.params.PARAMETER_ERRORS`)."""
        return self.ename in PARAMETER_ERRORS


@dataclass
class RunResult:
    notebook: str
    parameters: dict
    output_dir: str
    executed: str
    status: str  # "ok" | "failed" | "error"
    error: str | None = None
    records: list = field(default_factory=list)
    started: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _is_kernel_start_failure(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(
        s in text
        for s in (
            "address already in use",
            "kernel died before replying",
            "kernel didn't respond",
            "timeout waiting for kernel_info",
            "zmqerror",
            "kernel failed to start",
        )
    )


def run_notebook(
    notebook: str | Path,
    parameters: Mapping[str, Any] | None = None,
    output_dir: str | Path | None = None,
    *,
    text_parameters: Mapping[str, str] | None = None,
    kernel_name: str = "python3",
    timeout: float | None = 1800,
    log_output: bool = False,
    overwrite: bool = False,
    kernel: "WarmKernel | None" = None,
) -> RunResult:
    """Validate parameters, execute the notebook with papermill, and return what it produced.

    ``kernel``: a :class:`WarmKernel` to run in (its namespace is reset first) instead of a new kernel; a
    sweep worker's server (:func:`companion.run.server.serve_runs`) passes one, so that its points share the imports and the
    compiled kernels of the first.

    Raises :class:`ParameterSpecError` (nothing executed) or :class:`NotebookFailed` (the notebook
    raised; the executed notebook and ``run.json`` are kept for inspection).

    Outputs are atomic. The notebook runs in a private folder next to ``output_dir`` that is moved into
    place when the run is over. An ``output_dir`` holding a previous run (its ``run.json``) is refused
    unless ``overwrite``; even then
    the previous run is replaced only by a run that reached its verdict (passed or failed): a run
    refused by the notebook's range checks leaves nothing behind, and one that crashed is kept in
    ``<output_dir>.failed-<time>`` beside the previous run instead of over it.
    """
    path = nbs.resolve(notebook)
    name = nbs.name_of(path)
    specs = nbs.parameters(path)
    params = coerce_parameters(name, specs, dict(parameters or {}), text_parameters)

    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(output_dir) if output_dir else Path("runs") / slug(name) / stamp
    out = out.absolute()
    work = prepare_output(out, overwrite)
    our_results_dir = "results_dir" in specs and "results_dir" not in params
    if our_results_dir:
        params["results_dir"] = str(work)

    src_nb = nbs.load(path)
    input_path = work / f"{path.stem}.input.ipynb"
    executed_tmp = work / f"{path.stem}.ipynb"
    nbformat.write(src_nb, input_path)

    started = _dt.datetime.now().isoformat(timespec="seconds")
    t0 = time.perf_counter()
    shown = dict(params, results_dir=str(out)) if our_results_dir else params
    result = RunResult(name, _jsonable(shown), str(out), str(out / executed_tmp.name), "error", started=started)
    error = _execute(input_path, executed_tmp, path, name, params, kernel_name, timeout, log_output, kernel)
    input_path.unlink(missing_ok=True)
    result.seconds = round(time.perf_counter() - t0, 3)
    result.records = read_records(work, name)
    _set_status(result, error)

    if isinstance(error, NotebookFailed) and error.refused:
        shutil.rmtree(work, ignore_errors=True)  # refused by the notebook's range checks: nothing ran
        raise error
    final = out
    if result.status == "error" and out.is_dir() and holds_a_run(out):
        final = out.with_name(f"{out.name}.failed-{stamp}")  # never over a previous run
        result.output_dir = str(final)
        result.executed = str(final / executed_tmp.name)
    (work / OWNER_FILE).unlink(missing_ok=True)  # not part of the output
    (work / "run.json").write_text(json.dumps(asdict(result), indent=2))
    move_into_place(work, final)
    executed = final / executed_tmp.name
    if error is not None:
        if isinstance(error, NotebookFailed):
            error.executed = executed if executed.exists() else None
            raise error
        raise NotebookFailed(name, type(error).__name__, str(error), executed if executed.exists() else None)
    return result


def _execute(input_path: Path, executed: Path, path: Path, name: str, params: dict, kernel_name: str,
             timeout: float | None, log_output: bool, kernel: "WarmKernel | None") -> Exception | None:
    """papermill over ``input_path`` into ``executed`` (in the warm ``kernel``, or in a new one of its kind that is
    shut down after the run: IPC sockets, so that a kernel started beside others cannot lose a TCP port to them,
    which a heartbeat thread reports as a traceback on the run's stderr); a kernel that fails to start is tried
    again, up to :data:`KERNEL_START_RETRIES` times. Returns the error: None, a :class:`NotebookFailed` (the notebook
    raised), or the kernel's own."""
    own = kernel is None
    if own:
        kernel = WarmKernel(kernel_name)
    try:
        return _execute_in(input_path, executed, path, name, params, kernel_name, timeout, log_output, kernel)
    finally:
        if own:
            kernel.shutdown()


def _execute_in(input_path: Path, executed: Path, path: Path, name: str, params: dict, kernel_name: str,
                timeout: float | None, log_output: bool, kernel: "WarmKernel") -> Exception | None:
    import papermill
    from papermill.exceptions import PapermillExecutionError

    error: Exception | None = None
    for attempt in range(1, KERNEL_START_RETRIES + 1):
        try:
            warm = kernel.engine_arguments(str(path.parent))
            papermill.execute_notebook(
                str(input_path), str(executed), parameters=params, kernel_name=kernel_name, cwd=str(path.parent),
                progress_bar=False, log_output=log_output, execution_timeout=timeout, start_timeout=120,
                extra_arguments=KERNEL_ARGUMENTS, **warm,
            )
            return None
        except PapermillExecutionError as exc:
            return NotebookFailed(name, exc.ename, _clean(exc.evalue), None)
        except Exception as exc:  # kernel start failures are retried
            error = exc
            kernel.shutdown()  # a kernel that failed a run is not reused
            if not _is_kernel_start_failure(exc) or attempt == KERNEL_START_RETRIES:
                break
            time.sleep(0.5 * attempt)
    return error


def _set_status(result: RunResult, error: Exception | None) -> None:
    """ok (no claim failed), failed (a claim failed: the notebook's VerdictError, or a record whose status is failed) or
    error (anything else), with the error's one line."""
    if error is None:
        result.status = "failed" if [r for r in result.records if r.get("status") == "failed"] else "ok"
    elif isinstance(error, NotebookFailed):
        result.status = "failed" if error.ename == "VerdictError" else "error"
        result.error = f"{error.ename}: {error.evalue}"
    else:
        result.error = f"{type(error).__name__}: {error}"


def _clean(text: str) -> str:
    """The notebook's own message without ANSI colour codes."""

    return re.sub(r"\x1b\[[0-9;]*m", "", str(text)).strip()


def _jsonable(params: Mapping[str, Any]) -> dict:
    return json.loads(json.dumps(dict(params), default=str))
