"""The package is layered one way, and nothing imports around the layers.

Every ``import`` in ``src/companion`` -- at module level *and* inside functions -- is read from the
sources. A module's layer follows from its folder (CONTRIBUTING.md draws them):

0. vocabulary and tools: the modules at the top of the package that the notebooks import by name (``claims``,
   ``stats``, ``params``, ``seeds``, ...) and the package ``__init__``;
1. each paper's science: ``companion/mesa/`` and ``companion/cot/`` outside ``results/``;
2. each paper's results: ``companion/<paper>/results/``;
3. records and verdicts: ``registry``, ``report`` and ``verdict`` (top-level modules that read the results);
4. running notebooks and sweeps: ``companion/run/``;
5. the site: ``companion/site/``;
6. the command line: ``cli`` and ``__main__``.

An import may go down or sideways (inside one layer), never up; the two papers never import each other;
the import graph has no cycle. Imports inside functions are kept only where they defer a heavy optional
dependency; each such dependency is listed in :data:`LAZY_OK` with its reason, and the package's own
modules are imported lazily only by the command-line entry point (so that ``--help`` and one-line
refusals answer without importing torch or Dask).
"""

from __future__ import annotations

import pytest
from _layers import MODULES, ROOT, imports, layer, package_edges, paper

# third-party dependencies that may be imported inside a function, and why
LAZY_OK = {
    "torch": "1-2 s to import; the CLI, the runner and the site never need it",
    "matplotlib": "figures only; tests and sweeps of the machinery run without it",
    "matplotlib_inline": "the notebook kernel's figure format, set when a figure is made",
    "IPython": "display inside a notebook kernel only",
    "myst_nb": "glue inside a notebook kernel only",
    "dask": "sweeps only (about 1 s to import)",
    "distributed": "sweeps only (about 1 s to import)",
    "papermill": "executing a notebook only (imports nbclient, jupyter_client, zmq)",
    "nbclient": "executing the book's pages only (imports jupyter_client, zmq)",
    "nbformat": "reading executed notebooks only",
    "jupytext": "reading MyST notebooks for execution only",
    "jupyter_cache": "the book build only",
    "jupyter_client": "the kernel of a notebook run only",
    "zmq": "the kernel of a notebook run only",
    "playwright": "the TeX check of the built site only",
    "llvmlite": "compiling the mesa kernel only",
    "numba": "the numba reference kernel only",
    "joblib": "the run cache only, when it is on",
    "psutil": "killing a worker's process tree only",
    "tqdm": "progress bars of long runs only",
    "scipy": "integrators and quadrature of the theory modules only (0.3 s to import)",
}
LAZY_PACKAGE_IMPORTERS = {"companion.cli", "companion.__main__"}


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), plus self-loops."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    for m in MODULES:
        layer(m)


def test_no_import_cycle_counting_function_level_imports():
    found = cycles(package_edges())
    assert not found, f"import cycles: {found}"


def test_imports_go_down_or_sideways_never_up_and_never_across_papers():
    bad = []
    for m, targets in package_edges().items():
        for t, line in targets.items():
            if layer(t) > layer(m):
                bad.append(f"{MODULES[m].relative_to(ROOT)}:{line}: {m} (layer {layer(m)}) imports {t} (layer {layer(t)})")
            if paper(m) and paper(t) and paper(m) != paper(t):
                bad.append(f"{MODULES[m].relative_to(ROOT)}:{line}: {m} imports the other paper's {t}")
    assert not bad, "\n".join(bad)


def test_function_level_imports_only_defer_heavy_optional_dependencies():
    bad = []
    for m in MODULES:
        for t, line, inside in imports(m):
            if not inside or t == "__future__":
                continue
            if t in MODULES:
                if m not in LAZY_PACKAGE_IMPORTERS:
                    bad.append(f"{MODULES[m].relative_to(ROOT)}:{line}: {t} imported inside a function")
            elif t not in LAZY_OK:
                bad.append(f"{MODULES[m].relative_to(ROOT)}:{line}: {t} imported inside a function (not a heavy "
                           "optional dependency: import it at the top, or add it to LAZY_OK with its reason)")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("source, expected", [
    ({"a": {"b": 1}, "b": {"a": 1}}, [["a", "b"]]),
    ({"a": {"b": 1}, "b": {"c": 1}, "c": {}}, []),
])
def test_the_cycle_finder_finds_cycles(source, expected):
    assert cycles(source) == expected


def test_the_walker_sees_function_level_and_relative_imports(tmp_path):
    """A function-level relative import that goes up a layer is caught (the walker is blind to neither)."""
    assert "companion.stats" in package_edges()["companion.verdict"]
    fake = tmp_path / "fake.py"
    fake.write_text("def f():\n    from ..run.execute import run_notebook\n    from . import model\n")
    found = list(imports("companion.mesa.fake", fake))
    assert ("companion.run.execute", 2, True) in found and ("companion.mesa.model", 3, True) in found
    assert layer("companion.run.execute") > layer("companion.mesa.fake")
