"""Where is each result: one row per numbered result of both papers, from the registries, in two renderings.

:func:`result_rows` reads each :class:`~companion.claims.ResultSpec` of :func:`companion.registry.all_results` and
derives from the sources what the registry does not say: the tests that check the result (the test files that
import its module or name its notebook) and the training entry points it reaches (:func:`training_used`). The same
rows are rendered twice:

* :func:`results_markdown`: ``RESULTS.md`` at the repository root, plain GitHub Markdown (relative links to the
  notebooks, modules and tests), committed, so a fresh clone has the map; ``tools/results_map.py`` writes it and
  ``tests/site/test_where.py`` fails when the committed file differs;
* :func:`where_markdown`: the book's "Where is each result" page, MyST (links to the page, the statement, the API
  entry), written by the book's Sphinx extension (:mod:`companion.site.sphinx_ext`) to ``_build/where.md`` when a
  build starts and included by ``book/where.md``.

A result module added to a registry appears in both, and one removed disappears, without an edit of either.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jupytext

from ..claims import TARGETS, ResultSpec
from ..paths import repo_root
from ..registry import PAPERS, all_results

__all__ = ["Row", "result_rows", "results_markdown", "where_markdown", "write_results", "check_results",
           "RESULTS_FILE", "RESULTS_COMMAND", "names_used", "names_called", "notebook_code", "training_entry_points", "training_used",
           "tests_of", "shared_tests", "COLUMNS"]

#: the committed map, relative to the repository root
RESULTS_FILE = "RESULTS.md"
#: the command that rewrites :data:`RESULTS_FILE` (named by the test that compares it)
RESULTS_COMMAND = "make results"
#: the exception a training function raises when its loss is no longer finite: what marks a function that trains
DIVERGED = "TrainingDiverged"

_PACKAGE = Path(__file__).resolve().parents[1]  # src/companion


def _root() -> Path:
    """The checkout this package's sources live in (``src/companion`` -> the root), else the book root."""
    here = _PACKAGE.parents[1]
    return here if (here / "notebooks").is_dir() else repo_root()


# ----------------------------------------------------------------------------------------------- reading code
def _source_of(module: str) -> Path | None:
    """The source file of the package module ``module`` (a dotted name), or None."""
    parts = module.split(".")
    if parts[0] != _PACKAGE.name:
        return None
    base = _PACKAGE.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _bindings(tree: ast.AST, module: str = "", package: bool = False) -> dict[str, str]:
    """Every name the code's ``import`` statements bind (module level and inside functions), to the dotted name
    it stands for: ``from companion.cot.results import thm4_2 as R`` binds ``R`` to
    ``companion.cot.results.thm4_2``; relative imports are resolved against ``module`` (``package``: it is a
    package's ``__init__``)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for a in node.names:
                out[a.asname or a.name] = f"{base}.{a.name}"
    return out


def _chain(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; None for anything but a name and its attributes."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _resolve(dotted: str) -> str | None:
    """``module.name`` for a dotted name whose longest module prefix is a package module (``name``: the first part
    after it), or None (a module itself, or no module of the package)."""
    if _source_of(dotted) is not None:
        return None
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        if _source_of(".".join(parts[:i])) is not None:
            return ".".join(parts[: i + 1])
    return None


def _references(tree: ast.AST, bindings: dict[str, str], own: dict[str, str], *, calls: bool) -> set[str]:
    """The package objects (``module.name``) the code refers to through ``bindings`` and its own top-level names
    ``own`` (name -> ``module.name``); ``calls``: only those it calls."""
    out = set()
    for node in ast.walk(tree):
        if calls:
            if not isinstance(node, ast.Call):
                continue
            node = node.func
        chain = _chain(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if not chain:
            continue
        if chain[0] in bindings:
            target = _resolve(".".join([bindings[chain[0]], *chain[1:]]))
        else:
            target = own.get(chain[0])
        if target:
            out.add(target)
    return out


def _code(source: str) -> ast.Module:
    # a notebook's IPython lines (%magic, !shell) are not Python
    return ast.parse("\n".join(line[: len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!"))
                               else line for line in source.splitlines()))


def names_used(source: str) -> set[str]:
    """Every package object (``companion.<module>.<name>``) the code refers to through its imports, in any of the
    forms a notebook uses: ``from companion.cot.results import thm4_2`` then ``thm4_2.f``; ``... import thm4_2 as
    R`` then ``R.f``; ``from companion.cot.results.thm4_2 import f`` then ``f``; ``import companion.x`` then
    ``companion.x.f``."""
    tree = _code(source)
    return _references(tree, _bindings(tree), {}, calls=False)


def names_called(source: str) -> set[str]:
    """The package objects (``companion.<module>.<name>``) the code calls (the forms of :func:`names_used`)."""
    tree = _code(source)
    return _references(tree, _bindings(tree), {}, calls=True)


def notebook_code(path: Path) -> str:
    """The code cells of a MyST notebook, one after the other."""
    nb = jupytext.reads(path.read_text(), fmt="md:myst")
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code")


@dataclass(frozen=True, eq=False)  # hashed by identity: one per version of a file (_parse_module)
class _Parsed:
    """One package module: its top-level definitions (name -> node) and the names its imports bind."""

    defs: dict
    bindings: dict
    names: tuple  # ``__all__``, () if none


def _parsed(module: str) -> _Parsed | None:
    path = _source_of(module)
    return None if path is None else _parse_module(module, path, path.stat().st_mtime_ns)


@lru_cache(maxsize=None)
def _parse_module(module: str, path: Path, mtime: int) -> _Parsed:
    tree = ast.parse(path.read_text())
    defs, names = {}, ()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    defs[target.id] = node
                    if target.id == "__all__" and isinstance(node.value, (ast.List, ast.Tuple)):
                        names = tuple(e.value for e in node.value.elts if isinstance(e, ast.Constant))
    return _Parsed(defs, _bindings(tree, module, path.name == "__init__.py"), names)


def _inside(dotted: str) -> frozenset[str]:
    """The package objects the definition ``dotted`` (``module.name``) refers to."""
    module, _, name = dotted.rpartition(".")
    parsed = _parsed(module)
    if parsed is None or name not in parsed.defs:
        return set()
    return _inside_parsed(parsed, module, name)


@lru_cache(maxsize=None)
def _inside_parsed(parsed: _Parsed, module: str, name: str) -> frozenset:
    own = {n: f"{module}.{n}" for n in parsed.defs}
    return frozenset(_references(parsed.defs[name], parsed.bindings, own, calls=False))


def _raises_diverged(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Raise) and n.exc is not None:
            exc = n.exc.func if isinstance(n.exc, ast.Call) else n.exc
            chain = _chain(exc)
            if chain and chain[-1] == DIVERGED:
                return True
    return False


def training_entry_points(paper: str) -> tuple[str, ...]:
    """The public functions of ``companion.<paper>.train`` that train: those whose code, directly or through the
    module's own functions, raises :class:`~companion.params.TrainingDiverged` (only a loop of gradient steps can
    diverge), in the order of the module's ``__all__``."""
    module = f"companion.{paper}.train"
    parsed = _parsed(module)
    if parsed is None:
        return ()
    trains, todo = set(), {n for n, node in parsed.defs.items() if _raises_diverged(node)}
    callers = {n: {d.rpartition(".")[2] for d in _inside(f"{module}.{n}") if d.startswith(module + ".")}
               for n in parsed.defs}
    while todo:
        trains |= todo
        todo = {n for n, refs in callers.items() if refs & trains} - trains
    return tuple(f"{module}.{n}" for n in parsed.names if n in trains)


def training_used(spec: ResultSpec, root: Path | None = None) -> tuple[str, ...]:
    """The training entry points (:func:`training_entry_points`) a result reaches: from what its notebook refers to
    and every definition of its module, through the definitions of its paper's modules these refer to, and so on
    (a call graph read from the sources, by name: a definition it refers to counts as run)."""
    root = _root() if root is None else root
    package, entries = f"companion.{spec.paper}.", set(training_entry_points(spec.paper))
    trainer = f"companion.{spec.paper}.train."
    parsed = _parsed(spec.module)
    todo = {f"{spec.module}.{n}" for n in (parsed.defs if parsed else ())}
    notebook = root / "notebooks" / f"{spec.notebook}.md"
    if notebook.is_file():
        todo |= names_used(notebook_code(notebook))
    seen, reached = set(), set()
    while todo:
        dotted = todo.pop()
        if dotted in seen or not dotted.startswith(package):
            continue
        seen.add(dotted)
        if dotted.startswith(trainer):  # an entry point is reached; the trainer's insides are not the result's
            reached |= {dotted} & entries
            continue
        todo |= _inside(dotted)
    return tuple(e for e in training_entry_points(spec.paper) if e in reached)


def _test_files(root: Path) -> list[tuple[str, frozenset, frozenset]]:
    """Each test file under ``tests/``: (its path from the root, the dotted names its imports bind, its string
    constants)."""
    return [(path.relative_to(root).as_posix(), *_test_file(path, path.stat().st_mtime_ns))
            for path in sorted((root / "tests").rglob("test_*.py"))]


@lru_cache(maxsize=None)
def _test_file(path: Path, mtime: int) -> tuple[frozenset, frozenset]:
    tree = ast.parse(path.read_text())
    strings = frozenset(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str))
    return frozenset(_bindings(tree).values()), strings


def tests_of(spec: ResultSpec, root: Path | None = None) -> tuple[str, ...]:
    """The test files (paths from the root) that check a result: its own file ``tests/<paper>/test_<name>.py`` (the
    tests mirror the result modules), and those that import its module (or a name of it) or name its notebook
    (``"mesa/thm4_1_emergence"``, also inside a path)."""
    root = _root() if root is None else root
    named = re.compile(rf"(?<![\w]){re.escape(spec.notebook)}(?!\w)")
    own = f"tests/{spec.paper}/test_{spec.module.rsplit('.', 1)[-1]}.py"
    return tuple(path for path, imported, strings in _test_files(root)
                 if path == own or any(m == spec.module or m.startswith(spec.module + ".") for m in imported)
                 or any(named.search(s) for s in strings))


# ----------------------------------------------------------------------------------------------- the rows
@dataclass(frozen=True)
class Row:
    """One result of the map: its registry entry and what is derived from the sources."""

    spec: ResultSpec
    source: str  # the module's file from the root, e.g. "src/companion/mesa/results/thm4_1.py"
    tests: tuple[str, ...]  # test files from the root
    training: tuple[str, ...]  # the training entry points it reaches, e.g. "companion.mesa.train.run"


def result_rows(results: tuple[ResultSpec, ...] | None = None, root: Path | None = None) -> tuple[Row, ...]:
    """One :class:`Row` per result (``results``: the registries', in book order)."""
    root = _root() if root is None else root
    results = all_results() if results is None else results
    return tuple(Row(spec=r, source="src/" + r.module.replace(".", "/") + ".py", tests=tests_of(r, root),
                     training=training_used(r, root)) for r in results)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _claims_cell(spec: ResultSpec, star: str) -> str:
    ids = ", ".join(f"`{_cell(c.id)}`" + (star if c.headline else "") + (" †" if c.supporting else "")
                    for c in spec.claims)
    targets = Counter(c.target for c in spec.claims)
    summary = ", ".join(f"{targets[t]} {t.replace('_', ' ')}" for t in TARGETS if targets[t])
    return f"{len(spec.claims)} ({summary}): {ids}" if spec.claims else "none"


def _short(dotted: str) -> str:
    """A name inside its paper's package, as a row shows it (its section names the paper): ``train.run``."""
    return dotted.split(".", 2)[2] if dotted.count(".") >= 2 else dotted


#: the columns of both renderings
COLUMNS = ("result, page and module", "claims", "figures and sweep", "tests", "training")


class _Links:
    """How a rendering writes each cell that links somewhere (:class:`_GitHub`, :class:`_MyST`)."""

    star = " ★"

    def statement(self, row: Row) -> str:
        return ""

    def sweep(self, title: str) -> str:
        return f"; swept on the Sweeps page ({_cell(title.replace('$', ''))})"


class _GitHub(_Links):
    """Relative links from the repository root, as GitHub shows ``RESULTS.md``."""

    def page(self, row: Row) -> str:
        return f"[page](notebooks/{row.spec.notebook}.md)"

    def module(self, row: Row) -> str:
        return f"module [`{row.spec.module}`]({row.source})"

    def test(self, path: str) -> str:
        return f"[{path.removeprefix('tests/')}]({path})"

    def training(self, dotted: str) -> str:
        return f"[`{_short(dotted)}`](src/{dotted.rpartition('.')[0].replace('.', '/')}.py)"

    def sweep(self, title: str) -> str:
        return f"; swept on [the Sweeps page](book/sweeps.md) ({_cell(title)})"


class _MyST(_Links):
    """MyST roles for the book; ``built``: the notebooks of this build (None: all), the only pages it may link."""

    star = "&nbsp;★"

    def __init__(self, built: set[str] | None):
        self.built = built

    def _has(self, doc: str) -> bool:
        return self.built is None or doc in self.built

    def statement(self, row: Row) -> str:
        return f" ({{prf:ref}}`statement <{row.spec.label}>`)" if self._has(row.spec.notebook) else ""

    def page(self, row: Row) -> str:
        return f"{{doc}}`page </notebooks/{row.spec.notebook}>`" if self._has(row.spec.notebook) else \
            "page not in this build"

    def module(self, row: Row) -> str:
        short = row.spec.module.rsplit(".", 1)[-1]  # the paper and ``results`` are the section's and the intro's
        return "module " + (f"{{py:mod}}`{short} <{row.spec.module}>`" if self._has("book/api") else f"`{short}`")

    def test(self, path: str) -> str:
        return f"`{path.removeprefix('tests/')}`"  # the tests are not part of the book

    def training(self, dotted: str) -> str:
        return f"{{py:obj}}`{_short(dotted)} <{dotted}>`" if self._has("book/api") else f"`{_short(dotted)}`"

    def sweep(self, title: str) -> str:
        # a role's title holds no maths
        return (f"; swept on {{doc}}`{_cell(title.replace('$', ''))} </book/sweeps>`" if self._has("book/sweeps")
                else super().sweep(title))


def shared_tests(rows: tuple[Row, ...]) -> tuple[str, ...]:
    """The test files every row names (tests of all pages, such as each page's default parameters): listed once
    under the table, not in each row. None when the table has a single row."""
    if len(rows) < 2:
        return ()
    common = set.intersection(*(set(r.tests) for r in rows))
    return tuple(t for t in rows[0].tests if t in common)


def _table(rows: tuple[Row, ...], links: _Links) -> str:
    shared = set(shared_tests(rows))
    out = []
    for paper, _, title in PAPERS:
        mine = [r for r in rows if r.spec.paper == paper]
        if not mine:
            continue
        out += [f"## {title}\n", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        for row in mine:
            r = row.spec
            figures = ", ".join(f"`{f}`" for f in r.figures) or "no figure"
            sweep = links.sweep(r.sweep) if r.sweep else ""
            tests = [t for t in row.tests if t not in shared]
            cells = (f"**{_cell(r.number)}**: {_cell(r.title)}{links.statement(row)}; {links.page(row)}, "
                     f"{links.module(row)}", _claims_cell(r, links.star), figures + sweep,
                     ", ".join(links.test(t) for t in tests) or "none",
                     ", ".join(links.training(e) for e in row.training) or "none")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    if shared:
        out.append("Every result is also checked by " + ", ".join(links.test(t) for t in sorted(shared)) + ".\n")
    return "\n".join(out)


def where_markdown(results: tuple[ResultSpec, ...] | None = None, built: set[str] | None = None) -> str:
    """The book's table of every result (MyST): the paper's number and statement; the page; the module (linked to
    its API entry, whose *[source]* link shows the code), in the first column; the claims (★ headline, † supporting; counts per target); the figures
    and the sweep that maps it; the tests; the training entry points. ``built``: the notebooks of this build (a
    partial build, a test's, links only those; None: all)."""
    return _table(result_rows(results), _MyST(built))


_INTRO = f"""# Where is each result

One row per result of the two papers: its number in the paper and the statement as the book formulates it; the
page that checks it; the module that holds all of its computation and claims (its evidence functions, its figure
functions and its `CLAIMS` manifest); its claims, with their ids (★: a headline claim; †: a supporting claim, decided
but not counted as evidence; `{{law}}`-style parts are
filled in from the page's parameters) and counted by **target**, what was measured: a transformer trained by the
book's trainer (*trained*), population or reduced-model gradient descent (*reduced*), a closed form evaluated
exactly (*closed form*), a Monte-Carlo estimate (*monte carlo*) or an integrated ODE (*ode*); the figures of its
page and the sweep that maps it; the test files that import its module or name its page; and the training entry
points it reaches.

This file is generated from the registries `companion.mesa.results` and `companion.cot.results`
(`companion.site.where.results_markdown`); do not edit it by hand. After a change to a result, its page or its
tests, rewrite it with `{RESULTS_COMMAND}` (`tests/site/test_where.py` fails while it is stale). The book's
"Where is each result" page shows the same table.
"""


def results_markdown(rows: tuple[Row, ...] | None = None) -> str:
    """The text of ``RESULTS.md``: ``_INTRO`` and the table of every result with GitHub links."""
    rows = result_rows() if rows is None else rows
    return _INTRO + "\n" + _table(rows, _GitHub())


def write_results(root: Path | None = None) -> Path:
    """Write :func:`results_markdown` to ``<root>/RESULTS.md`` (untouched when unchanged); returns its path."""
    root = _root() if root is None else root
    path, text = root / RESULTS_FILE, results_markdown(result_rows(root=root))
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def check_results(root: Path | None = None) -> str:
    """"" if ``<root>/RESULTS.md`` is what the registries give, else what differs and the command that fixes it."""
    root = _root() if root is None else root
    path = root / RESULTS_FILE
    committed = path.read_text() if path.is_file() else ""
    expected = results_markdown(result_rows(root=root))
    if committed == expected:
        return ""
    diff = "".join(list(difflib.unified_diff(committed.splitlines(True), expected.splitlines(True), RESULTS_FILE,
                                             "the registries", n=0))[:40])
    return f"{RESULTS_FILE} is stale: run `{RESULTS_COMMAND}`\n{diff}"
