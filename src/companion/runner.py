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
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

import nbformat
import yaml

from . import notebooks as nbs
from .verdict import slug

__all__ = [
    "ParameterSpecError",
    "NotebookFailed",
    "RunResult",
    "coerce_parameters",
    "run_notebook",
    "load_param_file",
]

KERNEL_START_RETRIES = 3


class ParameterSpecError(ValueError):
    """Unknown parameter name or a value of the wrong type (raised before any kernel starts)."""


class NotebookFailed(RuntimeError):
    """The notebook raised; ``ename``/``evalue`` are the notebook's own exception name and message."""

    def __init__(self, notebook: str, ename: str, evalue: str, executed: Path | None):
        self.notebook, self.ename, self.evalue, self.executed = notebook, ename, evalue, executed
        where = f" (executed notebook kept at {executed})" if executed else ""
        super().__init__(f"{notebook} failed: {ename}: {evalue}{where}")


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
            try:
                return int(value.strip())
            except ValueError:
                raise bad("an int") from None
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
            if text.startswith("["):
                try:
                    value = yaml.safe_load(text)
                except yaml.YAMLError:
                    raise bad("a list, e.g. [0.5, 1, 2] or 0.5,1,2") from None
            else:
                value = [yaml.safe_load(v) for v in text.split(",") if v.strip()]
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list):
            raise bad("a list")
        if item:
            value = [_convert(f"{name}[{i}]", v, item, False) for i, v in enumerate(value)]
        return value
    if base == "dict":
        if from_text and isinstance(value, str):
            value = yaml.safe_load(value)
        if not isinstance(value, dict):
            raise bad("a dict")
        return value
    # unknown or missing annotation: literal text is parsed as YAML, anything else passes
    if from_text and isinstance(value, str):
        try:
            return yaml.safe_load(value)
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
    return out


def load_param_file(path: str | Path) -> dict:
    """Parameters from a YAML (or JSON) file: a mapping name -> value."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict):
        raise ParameterSpecError(f"{path}: expected a mapping of parameter names to values")
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


def run_notebook(
    notebook: str | Path,
    parameters: Mapping[str, Any] | None = None,
    output_dir: str | Path | None = None,
    *,
    text_parameters: Mapping[str, str] | None = None,
    kernel_name: str = "python3",
    timeout: float | None = 1800,
    log_output: bool = False,
) -> RunResult:
    """Validate parameters, execute the notebook with papermill, and return what it produced.

    Raises :class:`ParameterSpecError` (nothing executed) or :class:`NotebookFailed` (the notebook
    raised; the executed notebook and ``run.json`` stay in ``output_dir`` for inspection).
    """
    import papermill
    from papermill.exceptions import PapermillExecutionError

    path = nbs.resolve(notebook)
    name = nbs.name_of(path)
    specs = nbs.parameters(path)
    params = coerce_parameters(name, specs, dict(parameters or {}), text_parameters)

    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(output_dir) if output_dir else Path("runs") / slug(name) / stamp
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if "results_dir" in specs and "results_dir" not in params:
        params["results_dir"] = str(out)
    stale = out / f"{slug(name)}.jsonl"
    if stale.exists():
        stale.unlink()

    src_nb = nbs.load(path)
    input_path = out / f"{path.stem}.input.ipynb"
    executed = out / f"{path.stem}.ipynb"
    nbformat.write(src_nb, input_path)

    started = _dt.datetime.now().isoformat(timespec="seconds")
    t0 = time.perf_counter()
    result = RunResult(name, _jsonable(params), str(out), str(executed), "error", started=started)
    error: Exception | None = None
    for attempt in range(1, KERNEL_START_RETRIES + 1):
        try:
            papermill.execute_notebook(
                str(input_path),
                str(executed),
                parameters=params,
                kernel_name=kernel_name,
                cwd=str(path.parent),
                progress_bar=False,
                log_output=log_output,
                execution_timeout=timeout,
                start_timeout=120,
                # the kernel would log a transport warning on our stderr at every start
                extra_arguments=["--IPKernelApp.log_level=ERROR"],
            )
            error = None
            break
        except PapermillExecutionError as exc:
            error = NotebookFailed(name, exc.ename, _clean(exc.evalue), executed)
            break
        except Exception as exc:  # kernel start races (ZMQ port collisions) are retried
            error = exc
            if not _is_kernel_start_failure(exc) or attempt == KERNEL_START_RETRIES:
                break
            time.sleep(0.5 * attempt)
    input_path.unlink(missing_ok=True)
    result.seconds = round(time.perf_counter() - t0, 3)
    result.records = _read_records(out, name)
    if error is None:
        failed = [r for r in result.records if not r.get("passed")]
        result.status = "failed" if failed else "ok"
    elif isinstance(error, NotebookFailed):
        result.status = "failed" if error.ename == "VerdictError" else "error"
        result.error = f"{error.ename}: {error.evalue}"
    else:
        result.error = f"{type(error).__name__}: {error}"
    (out / "run.json").write_text(json.dumps(asdict(result), indent=2))
    if error is not None:
        if isinstance(error, NotebookFailed):
            raise error
        raise NotebookFailed(name, type(error).__name__, str(error), executed if executed.exists() else None)
    return result


def _clean(text: str) -> str:
    """The notebook's own message without ANSI colour codes."""
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", str(text)).strip()


def _jsonable(params: Mapping[str, Any]) -> dict:
    return json.loads(json.dumps(dict(params), default=str))




