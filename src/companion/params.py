"""Validation of notebook parameters.

Every notebook has one ``parameters`` cell of ``name: type = value  # help`` lines (papermill injects
overrides after it) followed by a validation cell that calls the checks below. A bad value raises
:class:`ParameterError`, whose message names the parameter, the allowed range and the value received;
``companion run`` prints exactly that message (no traceback) and exits with status 2.

Type checks are strict: ``bool`` is not accepted where an ``int`` is expected, ``float('nan')`` is
never in range, and an ``int`` is accepted where a ``float`` is expected.

Misspelled names are caught even when a notebook is run by papermill directly (papermill only warns
and runs with the default): the first check called in a kernel looks for papermill's injected
``# Parameters`` cell in the kernel's input history and raises :class:`ParameterError` for any injected
name that the notebook's ``parameters`` cell does not declare (:func:`reject_unknown`).
"""

from __future__ import annotations

import ast
import difflib
import math
import os
from collections.abc import Iterable, Sequence
from numbers import Integral, Real
from typing import Any

__all__ = [
    "InputError",
    "ParameterError",
    "TrainingDiverged",
    "PARAMETER_ERRORS",
    "integer",
    "real",
    "choice",
    "boolean",
    "text",
    "real_list",
    "integer_list",
    "require",
    "reject_unknown",
    "memory",
    "seed",
]


class InputError(ValueError):
    """Bad input that is not a notebook parameter (a path, a file, an option): the message names it and
    says what is allowed. ``companion`` prints it as one line and exits with status 2."""


class ParameterError(ValueError):
    """A notebook or API parameter is outside its allowed range (the message says which and why)."""

    def __init__(self, name: str, message: str):
        self.name = name
        self.message = message
        super().__init__(f"parameter '{name}': {message}")

    def __reduce__(self):  # rebuilt from (name, message) when it crosses a process boundary
        return (self.__class__, (self.name, self.message))


class TrainingDiverged(ParameterError):
    """GD blew up (non-finite or exploding loss); names the step size ``lr``.

    Raised by both papers' trainers (:func:`companion.mesa.train.train`, :func:`companion.cot.train.train_full`,
    :func:`companion.cot.train.train_looped_isotropic`), so that a caller tells a diverged run from other bad input by
    its type; as a :class:`ParameterError` it is still the one-line refusal of bad input."""

    def __init__(self, message: str):
        super().__init__("lr", message)

    def __reduce__(self):
        return (self.__class__, (self.message,))


#: the names of :class:`ParameterError` and its subclasses: a notebook that raises one of them refused its input,
#: and ``companion run`` prints its one line and exits with status 2 (the runner sees only the name of a kernel's
#: exception, :attr:`companion.run.execute.NotebookFailed.refused`)
PARAMETER_ERRORS = frozenset({"ParameterError", "TrainingDiverged"})


def _assigned_names(source: str, annotated_only: bool) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = []
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
        elif not annotated_only and isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return names


def reject_unknown(history: Sequence[str] | None = None) -> None:
    """Raise if papermill injected a parameter that the ``parameters`` cell does not declare.

    ``history`` is the kernel's list of executed cell sources (IPython's ``In``); by default it is
    read from the running kernel. Outside a kernel, or without an injected cell, this does nothing.
    """
    if history is None:
        try:
            from IPython import get_ipython
        except ImportError:  # pragma: no cover
            return
        shell = get_ipython()
        if shell is None:
            return
        history = list(shell.user_ns.get("In", []))
    for i, src in enumerate(history):
        if not src.lstrip().startswith("# Parameters") or i == 0:
            continue
        declared = set(_assigned_names(history[i - 1], annotated_only=True))
        if not declared:
            continue
        for name in _assigned_names(src, annotated_only=False):
            if name not in declared:
                close = difflib.get_close_matches(name, sorted(declared), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise ParameterError(
                    name, f"is not a parameter of this notebook{hint}; its parameters are: {', '.join(sorted(declared))}"
                )


_checked_injection = False


def _once() -> None:
    global _checked_injection
    if not _checked_injection:
        _checked_injection = True
        reject_unknown()


def _interval(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    if lo is None and hi is None:
        return "any finite value"
    if hi is None:
        return f"{'>' if lo_open else '>='} {lo:g}"
    if lo is None:
        return f"{'<' if hi_open else '<='} {hi:g}"
    return f"in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"


def _check_range(name: str, value: float, kind: str, lo, hi, lo_open, hi_open) -> None:
    ok = math.isfinite(value)
    if ok and lo is not None:
        ok = value > lo if lo_open else value >= lo
    if ok and hi is not None:
        ok = value < hi if hi_open else value <= hi
    if not ok:
        raise ParameterError(name, f"must be {kind} {_interval(lo, hi, lo_open, hi_open)}; got {value!r}")


def integer(name: str, value: Any, *, min: int | None = None, max: int | None = None) -> int:
    """Check that ``value`` is an integer in ``[min, max]`` and return it as ``int``."""
    _once()
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ParameterError(name, f"must be an integer; got {value!r} ({type(value).__name__})")
    value = int(value)
    _check_range(name, value, "an integer", min, max, False, False)
    return value


def real(
    name: str,
    value: Any,
    *,
    min: float | None = None,
    max: float | None = None,
    min_open: bool = False,
    max_open: bool = False,
) -> float:
    """Check that ``value`` is a finite real number in the given interval and return it as ``float``."""
    _once()
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ParameterError(name, f"must be a real number; got {value!r} ({type(value).__name__})")
    value = float(value)
    _check_range(name, value, "a finite number", min, max, min_open, max_open)
    return value


def choice(name: str, value: Any, allowed: Iterable[Any]) -> Any:
    """Check that ``value`` is one of ``allowed`` (with a did-you-mean hint for strings)."""
    _once()
    allowed = list(allowed)
    if value in allowed:
        return value
    hint = ""
    if isinstance(value, str):
        close = difflib.get_close_matches(value, [str(a) for a in allowed], n=1)
        if close:
            hint = f" (did you mean {close[0]!r}?)"
    raise ParameterError(name, f"must be one of {allowed}; got {value!r}{hint}")


def boolean(name: str, value: Any) -> bool:
    _once()
    if not isinstance(value, bool):
        raise ParameterError(name, f"must be True or False; got {value!r} ({type(value).__name__})")
    return value


def text(name: str, value: Any) -> str:
    _once()
    if not isinstance(value, str):
        raise ParameterError(name, f"must be a string; got {value!r} ({type(value).__name__})")
    return value


def _sequence(name: str, value: Any, min_len: int) -> Sequence:
    _once()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ParameterError(name, f"must be a list; got {value!r} ({type(value).__name__})")
    if len(value) < min_len:
        raise ParameterError(name, f"must have at least {min_len} element(s); got {len(value)}")
    return value


def real_list(
    name: str,
    value: Any,
    *,
    min: float | None = None,
    max: float | None = None,
    min_open: bool = False,
    max_open: bool = False,
    min_len: int = 1,
) -> list[float]:
    """Check a list of reals, each in the interval; element errors name ``name[i]``."""
    seq = _sequence(name, value, min_len)
    return [
        real(f"{name}[{i}]", v, min=min, max=max, min_open=min_open, max_open=max_open)
        for i, v in enumerate(seq)
    ]


def integer_list(
    name: str, value: Any, *, min: int | None = None, max: int | None = None, min_len: int = 1
) -> list[int]:
    seq = _sequence(name, value, min_len)
    return [integer(f"{name}[{i}]", v, min=min, max=max) for i, v in enumerate(seq)]


def require(condition: bool, name: str, message: str) -> None:
    """Cross-parameter constraint, e.g. ``require(n >= d, "n", f"must be >= d = {d} ...")``."""
    _once()
    if not condition:
        raise ParameterError(name, message)


#: Memory a single notebook may ask for before its first allocation (a quarter of this 24 GiB class of
#: machine; override with $COMPANION_MAX_BYTES).
def _max_bytes() -> int:

    raw = os.environ.get("COMPANION_MAX_BYTES", "")
    if raw.strip():
        try:
            return int(float(raw))
        except ValueError:
            raise ParameterError("COMPANION_MAX_BYTES", f"must be a number of bytes; got {raw!r}") from None
    return 6 * 2**30


def memory(name: str, nbytes: float, what: str = "") -> None:
    """Refuse, before any allocation, a size that needs more memory than a notebook may use.

    ``name`` is the parameter to blame (e.g. ``"m"`` or ``"d, n"``); ``nbytes`` the estimate of the largest
    allocation the parameters imply; ``what`` says what would be allocated."""
    _once()
    limit = _max_bytes()
    if not (nbytes <= limit):
        need = nbytes / 2**30
        raise ParameterError(
            name, f"needs about {need:.3g} GiB{' for ' + what if what else ''}; at most {limit / 2**30:.3g} GiB "
                  "is allowed (set COMPANION_MAX_BYTES to raise it)")


def seed(name: str, value: Any) -> int:
    """A seed for numpy and torch generators: an integer in [0, 2**32 - 1]."""
    return integer(name, value, min=0, max=2**32 - 1)
