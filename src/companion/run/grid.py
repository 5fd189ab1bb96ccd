"""Sweep grids: ``name=v1,v2`` options parsed, counted before they are built, expanded into points, and each
point's id."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from typing import Any, Mapping, Sequence

from .. import notebooks as nbs
from ..text import safe_name
from .inputs import SweepError, coerce_parameters, read_yaml_file

__all__ = ["parse_grid", "count_points", "expand_grid", "point_id", "MAX_POINTS", "check_point_count", "read_grid_files"]


#: points a sweep may have unless --max-points says otherwise (a 10^4-point grid of the fastest page
#: already takes hours on two cores)
MAX_POINTS = 10_000


def count_points(*grids: Mapping[str, Sequence] | None) -> int:
    """The number of points of the cartesian product of the grids' value lists (0 without any axis),
    computed from their sizes alone: nothing is validated or built."""
    sizes = [len(v) if isinstance(v, (list, tuple)) else 1 for g in grids for v in (g or {}).values()]
    return math.prod(sizes) if sizes else 0


def check_point_count(n: int, max_points: int) -> None:
    """Refuse more than ``max_points`` points in one line (the count and the limit)."""
    if n > max_points:
        raise SweepError(
            f"--max-points: the grid has {n} points, more than the limit of {max_points}; sweep fewer values "
            "or raise --max-points"
        )


def parse_grid(items: Sequence[str]) -> dict[str, list[str]]:
    """``["T=20,50", "seed=1,2"]`` -> ``{"T": ["20", "50"], "seed": ["1", "2"]}`` (text values)."""
    grid: dict[str, list[str]] = {}
    for item in items:
        if "=" not in item:
            raise SweepError(f"--grid expects NAME=V1,V2,...; got {item!r}")
        name, values = item.split("=", 1)
        name = name.strip()
        vals = _split_values(values)
        if not name or not vals:
            raise SweepError(f"--grid expects NAME=V1,V2,...; got {item!r}")
        if any(not v for v in vals):
            raise SweepError(f"--grid {name}: empty value in {values!r}; give NAME=V1,V2,... without empty elements")
        if name in grid:
            raise SweepError(f"--grid names {name!r} twice")
        grid[name] = vals
    return grid


def _split_values(text: str) -> list[str]:
    """Split on commas that are not inside brackets, so list values like [1,2] survive."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip() or out:
        out.append(cur.strip())
    return out


def read_grid_files(paths: Sequence[str]) -> tuple[dict, dict]:
    """The ``grid:`` and ``fixed:`` mappings of sweep files (``-f``), merged in order: (typed grid, fixed values).
    Values stay as YAML gives them; :func:`expand_grid` checks them against the notebook."""
    typed_grid: dict = {}
    fixed: dict = {}
    for f in paths:
        data = read_yaml_file(f, "grid: {name: [values]} and fixed: {name: value}") or {}
        if not isinstance(data, dict):
            raise SweepError(f"{f}: expected a mapping (grid: {{name: [values]}}, fixed: {{name: value}})")
        unknown = set(data) - {"grid", "fixed"}
        if unknown:
            raise SweepError(f"{f}: unknown top-level key(s) {sorted(unknown)}; use 'grid' and 'fixed'")
        for key in ("grid", "fixed"):
            if data.get(key) is not None and not isinstance(data[key], dict):
                raise SweepError(f"{f}: '{key}' must be a mapping of parameter names")
        typed_grid.update(data.get("grid") or {})
        fixed.update(data.get("fixed") or {})
    return typed_grid, fixed


def expand_grid(
    notebook: str,
    text_grid: Mapping[str, list[str]] | None = None,
    typed_grid: Mapping[str, list[Any]] | None = None,
    fixed: Mapping[str, Any] | None = None,
    fixed_text: Mapping[str, str] | None = None,
    max_points: int | None = None,
) -> list[dict]:
    """Validate every value against the notebook's parameters cell and return the list of points.

    With ``max_points``, a grid of more points is refused (:class:`SweepError`) from its sizes, before a
    value is validated or a point built."""
    if max_points is not None:
        check_point_count(count_points(text_grid, typed_grid), max_points)
    name = nbs.name_of(nbs.resolve(notebook))
    specs = nbs.parameters(notebook)
    axes: dict[str, list[Any]] = {}
    for grid, from_text in ((typed_grid or {}, False), (text_grid or {}, True)):
        for pname, values in grid.items():
            if not isinstance(values, list) or not values:
                raise SweepError(f"grid entry {pname!r} must be a non-empty list of values")
            if pname in axes:
                raise SweepError(f"grid names {pname!r} twice")
            axes[pname] = [
                coerce_parameters(name, specs, {} if from_text else {pname: v}, {pname: v} if from_text else None)[
                    pname
                ]
                for v in values
            ]
            seen: list = []
            for v in axes[pname]:
                if v in seen:
                    raise SweepError(f"grid {pname}: value {v!r} is given twice; each value once")
                seen.append(v)
    base = coerce_parameters(name, specs, dict(fixed or {}), fixed_text)
    overlap = set(base) & set(axes)
    if overlap:
        raise SweepError(f"parameter(s) {sorted(overlap)} are both fixed and swept")
    if "results_dir" in axes or "results_dir" in base:
        raise SweepError("results_dir is set by the sweep (one directory per point)")
    names = list(axes)
    return [dict(base, **dict(zip(names, combo))) for combo in itertools.product(*(axes[n] for n in names))]


def point_id(params: Mapping[str, Any], swept: Sequence[str] | None = None) -> str:
    """A stable, readable id: a hash of all the parameters (canonical JSON) and the ``name=value`` of
    the swept ones (all of them if ``swept`` is None), whole, so a point's folder shows where it lies
    in the grid. Only a summary longer than 180 characters is cut (the hash still tells points apart)."""
    canon = json.dumps(params, sort_keys=True, default=str)
    digest = hashlib.sha1(canon.encode()).hexdigest()[:10]
    keys = [k for k in params if swept is None or k in swept]
    summary = "_".join(f"{k}={v}" for k, v in ((k, params[k]) for k in keys))
    summary = safe_name(summary)[:180]
    return f"{digest}_{summary}" if summary else digest
