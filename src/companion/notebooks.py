"""The book's notebooks: discovery, loading (jupytext, in memory) and their parameters.

A notebook is named by its path below ``notebooks/`` without the extension, e.g. ``mesa/setup``.
Parameters are read with papermill's ``inspect_notebook`` (papermill reads only ``.ipynb`` paths, so
the MyST file is converted in memory by jupytext and inspected from a temporary copy). papermill's
parser skips a line whose help comment contains ``=``; such lines are completed from a plain
``ast`` parse of the same cell, so no parameter is ever invisible to the runner.
"""

from __future__ import annotations

import ast
import difflib
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import yaml

from .paths import notebooks_dir, repo_root

__all__ = [
    "ParamSpec",
    "NotebookNotFound",
    "resolve",
    "name_of",
    "all_notebooks",
    "load",
    "parameters",
]


class NotebookNotFound(LookupError):
    pass


@dataclass(frozen=True)
class ParamSpec:
    name: str
    type: str  # annotation text: int, float, bool, str, list, list[float], ... ("None" if absent)
    default: str  # source text of the default value
    help: str

    @property
    def default_value(self) -> Any:
        try:
            return ast.literal_eval(self.default)
        except (ValueError, SyntaxError):
            return self.default


def all_notebooks(root: Path | None = None, toc_only: bool = False) -> list[str]:
    """Names of the notebooks in book order (``_toc.yml``), then (unless ``toc_only``) any others
    found on disk."""
    root = root or repo_root()
    names: list[str] = []
    toc = yaml.safe_load((root / "_toc.yml").read_text())

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            f = node.get("file")
            if isinstance(f, str) and f.startswith("notebooks/"):
                names.append(f[len("notebooks/") :].removesuffix(".md"))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(toc)
    nb_dir = root / "notebooks"
    on_disk = sorted(str(p.relative_to(nb_dir).with_suffix("")) for p in nb_dir.rglob("*.md"))
    existing = [n for n in names if n in on_disk]
    if toc_only:
        return existing
    return existing + [n for n in on_disk if n not in existing]


def resolve(notebook: str | Path) -> Path:
    """Path of a notebook given as a name (``mesa/setup``), a relative or an absolute path."""
    p = Path(notebook)
    candidates = [p, p.with_suffix(".md")] if p.suffix != ".md" else [p]
    for c in candidates:
        if c.is_file():
            return c.resolve()
    base = notebooks_dir()
    name = str(notebook).removeprefix("notebooks/").removesuffix(".md")
    c = base / f"{name}.md"
    if c.is_file():
        return c.resolve()
    known = all_notebooks()
    close = difflib.get_close_matches(name, known, n=3)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise NotebookNotFound(f"no notebook named {str(notebook)!r}.{hint} (`companion list` shows all)")


def name_of(path: str | Path) -> str:
    path = Path(path).resolve()
    try:
        return str(path.relative_to(notebooks_dir()).with_suffix(""))
    except ValueError:
        return path.stem


def load(notebook: str | Path) -> nbformat.NotebookNode:
    """Read a MyST notebook into an nbformat notebook (no outputs)."""
    import jupytext

    path = resolve(notebook)
    nb = jupytext.read(path)
    nb.metadata.setdefault("kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"})
    return nb


def _parameter_cell(nb: nbformat.NotebookNode):
    cells = [c for c in nb.cells if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])]
    return cells


def _ast_parameters(source: str) -> list[ParamSpec]:
    specs = []
    lines = source.splitlines()
    for node in ast.parse(source).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            line = lines[node.lineno - 1]
            help_ = line.split("#", 1)[1].strip() if "#" in line[node.value.end_col_offset :] else ""
            specs.append(
                ParamSpec(
                    node.target.id,
                    ast.unparse(node.annotation),
                    ast.get_source_segment(source, node.value) or "",
                    help_,
                )
            )
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            line = lines[node.lineno - 1]
            help_ = line.split("#", 1)[1].strip() if "#" in line else ""
            specs.append(
                ParamSpec(node.targets[0].id, "None", ast.get_source_segment(source, node.value) or "", help_)
            )
    return specs


def parameters(notebook: str | Path) -> dict[str, ParamSpec]:
    """The parameters of a notebook, in cell order: name -> ParamSpec."""
    import papermill

    nb = load(notebook)
    cells = _parameter_cell(nb)
    if not cells:
        return {}
    if len(cells) > 1:
        raise ValueError(f"{name_of(resolve(notebook))}: more than one cell is tagged 'parameters'")
    with tempfile.TemporaryDirectory() as tmp:
        tmp_nb = Path(tmp) / "nb.ipynb"
        nbformat.write(nb, tmp_nb)

        # papermill logs a warning for lines it cannot parse; the ast pass below covers them.
        logging.getLogger("papermill").setLevel(logging.ERROR)
        inspected = papermill.inspect_notebook(str(tmp_nb))
    from_ast = {s.name: s for s in _ast_parameters(cells[0].source)}
    out: dict[str, ParamSpec] = {}
    for name, spec in from_ast.items():
        if name in inspected:
            p = inspected[name]
            out[name] = ParamSpec(name, p["inferred_type_name"], p["default"], p["help"])
        else:
            out[name] = spec
    return out


def repo_relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(repo_root()))
    except ValueError:
        return str(path)
