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
import difflib
import json
import logging
import os
import queue
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Mapping

import nbformat
import yaml

from . import notebooks as nbs
from .params import PARAMETER_ERRORS
from .text import slug

__all__ = [
    "InputError",
    "ParameterSpecError",
    "NotebookFailed",
    "RunResult",
    "coerce_parameters",
    "run_notebook",
    "load_param_file",
    "yaml_load",
    "SEED_MAX",
    "WarmKernel",
    "serve_runs",
    "RunServer",
]

KERNEL_START_RETRIES = 3
#: the kernel logs a transport warning at every start, and "KeyboardInterrupt caught in kernel" (ERROR) when
#: papermill stops it after a failed cell: the cell's own error is what counts, reported through papermill
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=CRITICAL"]
#: what a warm kernel runs before each notebook: the previous run's figures and names go. Figures are closed
#: first; then the shell's hard reset (what ``%reset -f`` runs), whose output-cache flush collects the garbage
#: once. The magic itself would collect twice more, about 0.1 s each in a kernel that has imported torch.
RESET_CODE = ("import sys as _s\n"
              "if 'matplotlib.pyplot' in _s.modules: _s.modules['matplotlib.pyplot'].close('all')\n"
              "get_ipython().reset(new_session=False)")
#: a run server (:func:`serve_runs`) with no request for this long exits, and its kernel with it
SERVE_IDLE_SECONDS = 120


class InputError(ValueError):
    """Bad input that is not a notebook parameter (a path, a file, an option): the message names it and
    says what is allowed. ``companion`` prints it as one line and exits with status 2."""


class ParameterSpecError(InputError):
    """Unknown parameter name or a value of the wrong type (raised before any kernel starts)."""


#: every notebook seeds numpy (which takes seeds in [0, 2**32)) from its ``seed`` parameter
SEED_MAX = 2**32 - 1


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


# ----------------------------------------------------------------------------- parameter types
class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 floats: ``2e-3`` and ``1e5`` are numbers (PyYAML's YAML 1.1
    resolver reads them as strings, so the defaults exactly as ``companion list`` prints them were
    refused)."""


_FLOAT_RE = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
for _k, _v in list(_Loader.yaml_implicit_resolvers.items()):
    _Loader.yaml_implicit_resolvers[_k] = [(tag, rx) for tag, rx in _v if tag != "tag:yaml.org,2002:float"]
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_RE, list("-+0123456789."))


def yaml_load(text: str):
    """``yaml.safe_load`` with YAML 1.2 floats (``1e-3`` is a float)."""
    return yaml.load(text, Loader=_Loader)


def _int_from_text(text: str) -> int | None:
    """``"10"``, ``"1e1"``, ``"1.0e3"`` -> exact int (Decimal, so ``1e23`` is 10**23, not a rounded
    float); None if the text is not an integral number."""

    try:
        d = Decimal(text.strip().replace("_", ""))
    except InvalidOperation:
        return None
    if not d.is_finite() or d != d.to_integral_value() or abs(d.adjusted()) > 400:
        return None
    return int(d)


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _base_and_item(type_name: str) -> tuple[str, str | None]:
    t = type_name.replace(" ", "")
    for prefix in ("typing.", "t."):
        t = t.removeprefix(prefix)
    if "[" in t and t.endswith("]"):
        base, item = t.split("[", 1)
        return base.lower(), item[:-1].lower()
    return t.lower(), None


def _convert(name: str, value: Any, type_name: str, from_text: bool) -> Any:
    base, item = _base_and_item(type_name)

    def bad(expected: str) -> ParameterSpecError:
        return ParameterSpecError(
            f"parameter '{name}' expects {expected}; got {value!r} ({type(value).__name__})"
        )

    if base in ("int",):
        if from_text and isinstance(value, str):
            got = _int_from_text(value)
            if got is None:
                raise bad("an int") from None
            return got
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            return int(value)  # 1e3 in a YAML file is the float 1000.0: an exact integer
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an int")
        return value
    if base in ("float",):
        if from_text and isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                raise bad("a float") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a float")
        return float(value)
    if base in ("bool",):
        if from_text and isinstance(value, str):
            v = value.strip().lower()
            if v in _TRUE:
                return True
            if v in _FALSE:
                return False
            raise bad("a bool (true/false)")
        if not isinstance(value, bool):
            raise bad("a bool")
        return value
    if base in ("str",):
        if not isinstance(value, str):
            raise bad("a str")
        return value
    if base in ("list", "tuple", "sequence"):
        if from_text and isinstance(value, str):
            text = value.strip()
            try:
                if text.startswith("["):
                    value = yaml_load(text)
                else:
                    parts = [v.strip() for v in text.split(",")]
                    if any(not v for v in parts):
                        raise bad("a list without empty elements, e.g. [0.5, 1, 2] or 0.5,1,2")
                    value = [yaml_load(v) for v in parts]
            except yaml.YAMLError:
                raise bad("a list, e.g. [0.5, 1, 2] or 0.5,1,2") from None
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list):
            raise bad("a list")
        if item:
            value = [_convert(f"{name}[{i}]", v, item, False) for i, v in enumerate(value)]
        return value
    if base == "dict":
        if from_text and isinstance(value, str):
            try:
                value = yaml_load(value)
            except yaml.YAMLError:
                raise bad("a dict, e.g. {a: 1}") from None
        if not isinstance(value, dict):
            raise bad("a dict")
        return value
    # unknown or missing annotation: literal text is parsed as YAML, anything else passes
    if from_text and isinstance(value, str):
        try:
            return yaml_load(value)
        except yaml.YAMLError:
            return value
    return value


def coerce_parameters(
    notebook: str,
    specs: Mapping[str, nbs.ParamSpec],
    values: Mapping[str, Any],
    text_values: Mapping[str, str] | None = None,
) -> dict:
    """Check names and types of ``values`` (typed, e.g. from YAML) and ``text_values`` (strings from
    ``-p NAME VALUE``, converted by the declared type). Returns the typed parameters."""
    out: dict[str, Any] = {}
    for source, from_text in ((values, False), (text_values or {}, True)):
        for name, value in source.items():
            if name not in specs:
                close = difflib.get_close_matches(name, list(specs), n=1, cutoff=0.6)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                known = ", ".join(specs) or "none"
                raise ParameterSpecError(
                    f"unknown parameter '{name}' for {notebook}{hint}; its parameters are: {known}"
                )
            out[name] = _convert(name, value, specs[name].type, from_text)
    check_seed(out)
    return out


def check_seed(params: Mapping[str, Any]) -> None:
    """Every notebook seeds numpy, torch and Python from ``seed``: it must be an integer in
    [0, 2**32 - 1] (numpy's range), checked here before any kernel starts."""
    if "seed" not in params:
        return
    seed = params["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise ParameterSpecError(
            f"parameter 'seed': must be an integer in [0, {SEED_MAX}] (0 <= seed < 2**32); got {seed!r}"
        )


def read_yaml_file(path: str | Path, what: str = "a YAML mapping"):
    """A YAML (or JSON) file's content; every problem (missing, a directory, unreadable, not YAML) is an
    :class:`InputError` naming the file."""
    p = Path(path)
    try:
        text = p.read_text()
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory; expected a file with {what}") from None
    except FileNotFoundError:
        raise InputError(f"{path}: no such file; expected a file with {what}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: is not a text file; expected {what}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror}); expected a file with {what}") from None
    try:
        return yaml_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise InputError(f"{path}: is not valid YAML{where} ({problem}); expected {what}") from None


def load_param_file(path: str | Path) -> dict:
    """Parameters from a YAML (or JSON) file: a mapping name -> value."""
    data = read_yaml_file(path, "a mapping of parameter names to values") or {}
    if not isinstance(data, dict):
        raise ParameterSpecError(
            f"{path}: expected a mapping of parameter names to values; got a {type(data).__name__}"
        )
    return data


# ----------------------------------------------------------------------------- execution
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


def _read_records(output_dir: Path, notebook: str) -> list:
    path = output_dir / f"{slug(notebook)}.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _holds_a_run(out: Path) -> bool:
    return (out / "run.json").exists()


#: the file in a run's private ``.<OUT>.partial-*`` folder naming the process that writes it (removed before
#: the folder is moved into place)
OWNER_FILE = "run.pid"


def _process_start(pid: int) -> str:
    """The start time of process ``pid`` in clock ticks since boot ('' where /proc does not say): with the
    pid it names one process, not a later one that reuses the pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]


def _owner_text() -> str:
    return f"{os.getpid()} {_process_start(os.getpid()) or '-'} {socket.gethostname()}\n"


def _owner_is_dead(folder: Path) -> bool:
    """True only when ``folder``'s owner file names a process of this host that no longer runs. A folder
    without one (an older version's, a finished run between its last two renames) or of another host is
    never called dead."""
    try:
        pid_text, start, host = (folder / OWNER_FILE).read_text().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return False
    if host != socket.gethostname() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, owned by another user
        return False
    now = _process_start(pid)
    return bool(now and start != "-" and now != start)  # the pid now names another process


def clear_stale_partials(out: Path) -> list[str]:
    """Remove the private ``.<OUT>.partial-*`` folders that killed runs into ``out`` left beside it (their
    owner process is dead); a running one is never touched. Returns the names removed."""
    pattern = re.compile(rf"\.{re.escape(out.name)}\.partial-[a-z0-9_]+")
    removed = []
    try:
        entries = sorted(out.parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        if pattern.fullmatch(entry.name) and entry.is_dir() and not entry.is_symlink() and _owner_is_dead(entry):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed


def _prepare_output(out: Path, overwrite: bool) -> Path:
    """Check the output directory and create the private folder the run writes into (a sibling of
    ``out``, so that moving it into place is one rename on the same file system), with a file naming this
    process; the folders of earlier runs into ``out`` that were killed are removed first."""
    if out.exists() and not out.is_dir():
        raise InputError(f"output directory '{out}': is a file; give a new or empty directory with -o")
    if out.is_dir() and _holds_a_run(out) and not overwrite:
        raise InputError(
            f"output directory '{out}': holds a previous run (run.json); pass --overwrite to replace it "
            "once the new run has finished, or give another -o"
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        clear_stale_partials(out)
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
        (work / OWNER_FILE).write_text(_owner_text())
        umask = os.umask(0)
        os.umask(umask)
        work.chmod(0o777 & ~umask)  # mkdtemp makes it private; the output is an ordinary folder
        return work
    except OSError as exc:
        raise InputError(
            f"output directory '{out}': cannot be created ({exc.strerror or exc}); give a writable directory with -o"
        ) from None


def _move_into_place(tmp: Path, out: Path) -> None:
    """Put the run's files in ``out``. A previous run there is replaced whole, and removed only after the
    new one is in place; a folder without a run (e.g. holding the parameter file) keeps its other files,
    and gets ``run.json`` last."""
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()
    if not out.exists():
        os.rename(tmp, out)
        return
    if not _holds_a_run(out):
        for f in sorted(tmp.iterdir(), key=lambda f: f.name == "run.json"):
            os.replace(f, out / f.name)
        tmp.rmdir()
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    old.rmdir()
    os.rename(out, old)
    os.rename(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


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
    sweep worker's server (:func:`serve_runs`) passes one, so that its points share the imports and the
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
    import papermill
    from papermill.exceptions import PapermillExecutionError

    path = nbs.resolve(notebook)
    name = nbs.name_of(path)
    specs = nbs.parameters(path)
    params = coerce_parameters(name, specs, dict(parameters or {}), text_parameters)

    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(output_dir) if output_dir else Path("runs") / slug(name) / stamp
    out = out.absolute()
    work = _prepare_output(out, overwrite)
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
    error: Exception | None = None
    for attempt in range(1, KERNEL_START_RETRIES + 1):
        try:
            warm = {} if kernel is None else kernel.engine_arguments(str(path.parent))
            papermill.execute_notebook(
                str(input_path),
                str(executed_tmp),
                parameters=params,
                kernel_name=kernel_name,
                cwd=str(path.parent),
                progress_bar=False,
                log_output=log_output,
                execution_timeout=timeout,
                start_timeout=120,
                extra_arguments=KERNEL_ARGUMENTS,
                **warm,
            )
            error = None
            break
        except PapermillExecutionError as exc:
            error = NotebookFailed(name, exc.ename, _clean(exc.evalue), None)
            break
        except Exception as exc:  # kernel start races (ZMQ port collisions) are retried
            error = exc
            if kernel is not None:
                kernel.shutdown()  # a kernel that failed a run is not reused
            if not _is_kernel_start_failure(exc) or attempt == KERNEL_START_RETRIES:
                break
            time.sleep(0.5 * attempt)
    input_path.unlink(missing_ok=True)
    result.seconds = round(time.perf_counter() - t0, 3)
    result.records = _read_records(work, name)
    if error is None:
        failed = [r for r in result.records if not r.get("passed")]
        result.status = "failed" if failed else "ok"
    elif isinstance(error, NotebookFailed):
        result.status = "failed" if error.ename == "VerdictError" else "error"
        result.error = f"{error.ename}: {error.evalue}"
    else:
        result.error = f"{type(error).__name__}: {error}"

    if isinstance(error, NotebookFailed) and error.refused:
        shutil.rmtree(work, ignore_errors=True)  # refused by the notebook's range checks: nothing ran
        raise error
    final = out
    if result.status == "error" and out.is_dir() and _holds_a_run(out):
        final = out.with_name(f"{out.name}.failed-{stamp}")  # never over a previous run
        result.output_dir = str(final)
        result.executed = str(final / executed_tmp.name)
    (work / OWNER_FILE).unlink(missing_ok=True)  # not part of the output
    (work / "run.json").write_text(json.dumps(asdict(result), indent=2))
    _move_into_place(work, final)
    executed = final / executed_tmp.name
    if error is not None:
        if isinstance(error, NotebookFailed):
            error.executed = executed if executed.exists() else None
            raise error
        raise NotebookFailed(name, type(error).__name__, str(error), executed if executed.exists() else None)
    return result


def _clean(text: str) -> str:
    """The notebook's own message without ANSI colour codes."""

    return re.sub(r"\x1b\[[0-9;]*m", "", str(text)).strip()


def _jsonable(params: Mapping[str, Any]) -> dict:
    return json.loads(json.dumps(dict(params), default=str))






# ----------------------------------------------------------------------------- cores and lifetime
#: the thread counts a kernel reads when its libraries load: NumPy's OpenBLAS, torch's OpenMP pool (its intra-op
#: threads: every core unless told) and MKL (torch's BLAS on x86)
THREAD_VARIABLES = ("COMPANION_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def use_threads(n: int) -> None:
    """The kernels this process starts get ``n`` threads: ``COMPANION_THREADS`` (the mesa kernel, the cot
    trainer) and the variables NumPy's OpenBLAS, torch's OpenMP pool and MKL read when they load
    (:data:`THREAD_VARIABLES`). A library left to thread over every core spin-waits against the other processes
    sharing them: two cot trainings side by side on 2 cores ran 2.1 times slower per step (45 against 22 ms) until
    each had one BLAS thread, and the Thm 4.1 and Prop 4.1 pages side by side took 32 and 37 s (9.8 and 8.7 s
    alone) until each had one torch thread (11.3 and 10.4 s)."""
    for name in THREAD_VARIABLES:
        os.environ[name] = str(n)


def threads_env(workers: int = 1) -> tuple[int, str]:
    """Threads each process should use (``COMPANION_THREADS``) and a one-line account of the choice:
    the user's setting if there is one, else the cores this process may use divided among ``workers``."""
    raw = os.environ.get("COMPANION_THREADS")
    if raw is not None and raw.strip():
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n < 1:
            raise InputError(f"COMPANION_THREADS (environment variable): must be an integer >= 1; got {raw!r}")
        return n, f"COMPANION_THREADS={n} (from the environment)"
    cores = available_cores()
    n = max(1, cores // max(1, workers))
    if workers > 1:
        return n, f"COMPANION_THREADS={n}: {cores} cores shared by {workers} workers (set COMPANION_THREADS to choose)"
    return n, f"COMPANION_THREADS={n}: every core of this machine (set COMPANION_THREADS to choose)"


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


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


#: the folder under which a :class:`WarmKernel` puts its socket folder: a :class:`RunServer` names one of its
#: own and removes it when the server ends, however it ends (a killed server cannot clean up after itself)
SOCKETS_ENV = "COMPANION_KERNEL_SOCKETS"


class WarmKernel:
    """A Jupyter kernel kept alive between notebook runs in one process (a sweep worker's run server).

    :meth:`ready` returns the kernel manager of a live kernel started in ``cwd`` (a new one if there is none,
    if it died, or if ``cwd`` changed), after running ``RESET_CODE`` in it: ``%reset -f`` and every
    figure closed, so a run sees none of the previous run's names. What stays is what makes the next run
    cheap: imported modules, compiled kernels, the run cache's memory. Every notebook seeds its own
    generators from its parameters, so a run in a warm kernel records what a run in a new one records
    (checked by ``benchmarks/bench_sweep.py`` and ``tests/test_sweep.py``).

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

        if self.km is not None and (cwd != self.cwd or not self.km.is_alive()):
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
            reply = self.kc.execute_interactive(RESET_CODE, store_history=False, timeout=60,
                                                output_hook=lambda m: None)
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
    ``COMPANION_THREADS``; ``env`` adds to the environment it inherits."""

    def __init__(self, threads: int | None = None, env: Mapping[str, str] | None = None):
        full = dict(os.environ, **(env or {}))
        full.pop("COMPANION_EXIT_WITH_STDIN", None)
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
