"""Parameters in: bad-input errors, YAML reading, parameter types and their coercion, the seed's range.

Every value a user gives (a ``-p`` option, a parameter file, a sweep grid) is read here into the type the
notebook's ``parameters`` cell declares, or refused with one line naming it (:class:`InputError`, exit 2).
"""

from __future__ import annotations

import difflib
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Mapping

import yaml

from .. import notebooks as nbs
from ..params import InputError

__all__ = [
    "InputError", "ParameterSpecError", "coerce_parameters", "load_param_file", "yaml_load", "SEED_MAX",
    "check_seed", "read_yaml_file", "SweepError", "text_parameters"
]


class ParameterSpecError(InputError):
    """Unknown parameter name or a value of the wrong type (raised before any kernel starts)."""


#: every notebook seeds numpy (which takes seeds in [0, 2**32)) from its ``seed`` parameter
SEED_MAX = 2**32 - 1


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


def text_parameters(pairs) -> dict[str, str]:
    """``-p NAME VALUE`` pairs as a mapping of texts (typed later against the notebook); a name given twice is
    refused."""
    out: dict[str, str] = {}
    for name, value in pairs or []:
        if name in out:
            raise ParameterSpecError(f"parameter '{name}' is given twice with -p; give it once")
        out[name] = value
    return out


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


# from sweep
class SweepError(InputError):
    """Bad sweep input (grid, files, output directory, scheduler): one line, exit status 2."""
