"""A content-addressed cache for expensive, deterministic runs, shared by the notebooks of one build.

Several notebooks use the same paper-scale training runs (for instance the Gaussian runs behind both
Fig. 1a and Fig. 1b of the mesa paper). :func:`cached` wraps a function in a ``joblib.Memory`` whose
directory is named by :func:`source_hash` of the code the function can run (its module's :func:`import_closure`),
and a result is keyed by all of the function's arguments.

The key is the *code*, not its prose: :func:`source_hash` hashes each source file's normalised syntax tree
(:func:`normalised_source`: docstrings dropped, comments and layout gone with the parse), together with the
versions of Python and of the numerical stack (numpy, scipy, torch, numba, llvmlite) and the CPU the mesa
kernel is compiled for (its name and features, as LLVM sees them: the generated code, and so its round-off,
depends on them). A fixed typo in a docstring keeps every cached run; a changed constant discards them.

Two processes that need the same missing result at the same time (two pages of one build, run side by side,
that share a training run) do not both compute it: the first takes a lock on the result's key (an advisory
``flock`` on a file in ``<cache>/.locks``, released by the kernel however the process ends), the second waits on
it and then reads the result the first stored.

Location: ``$COMPANION_CACHE_DIR`` if set (``off``/``0``/``none``/empty disables caching), else
``<book root>/_build/.companion_cache``. The tests run with caching disabled.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import os
import sys
from pathlib import Path
from typing import Callable, TypeVar

import numpy

from .paths import repo_root

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks (see file_lock)
    fcntl = None

__all__ = ["source_hash", "hash_files", "normalised_source", "stack_signature", "import_closure", "BASE", "cache_dir",
           "module_cache_dir", "is_current", "cached", "file_lock"]

F = TypeVar("F", bound=Callable)
#: the cache's folder below the book root when ``$COMPANION_CACHE_DIR`` is not set
BASE = Path("_build") / ".companion_cache"
_OFF = {"", "off", "0", "none", "false", "no"}


@functools.lru_cache(maxsize=None)
def source_hash(sources: tuple[str, ...] | None = None) -> str:
    """sha256 (16 hex digits) of the package sources' code (:func:`hash_files`) and of the stack.

    ``sources``: paths relative to the package (e.g. ``("params.py", "mesa/model.py")``) when a cache
    depends on exactly those files, so that edits elsewhere keep it; ``None``: every source file."""
    root = Path(__file__).resolve().parent
    files = sorted(root.rglob("*.py")) if sources is None else [root / rel for rel in sources]
    return hash_files(root, files)


def hash_files(root: Path, files) -> str:
    """sha256 (16 hex digits) of the files' paths below ``root``, their normalised code
    (:func:`normalised_source`) and :func:`stack_signature`."""
    h = hashlib.sha256()
    for f in files:
        h.update(str(Path(f).relative_to(root)).encode())
        h.update(normalised_source(Path(f).read_text()))
    h.update(stack_signature().encode())
    return h.hexdigest()[:16]


def _drop_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def normalised_source(text: str) -> bytes:
    """The code of a Python source without its prose: the dump of its syntax tree with the docstrings of
    the module, its classes and functions removed (comments, blank lines and layout do not survive the
    parse). Two sources that differ only in prose give the same bytes; any change of code (a constant, a
    name, an operator) gives different ones."""
    return ast.dump(_drop_docstrings(ast.parse(text)), include_attributes=False).encode()


@functools.lru_cache(maxsize=None)
def stack_signature() -> str:
    """Python's version, the versions of the numerical stack and the host CPU the kernels compile for."""
    import llvmlite
    import llvmlite.binding as llvm
    import numba
    import scipy
    import torch

    parts = [f"python=={sys.version_info[0]}.{sys.version_info[1]}"]
    parts += [f"{m.__name__}=={m.__version__}" for m in (numpy, scipy, torch, numba, llvmlite)]
    parts.append(f"cpu={llvm.get_host_cpu_name()}:{llvm.get_host_cpu_features().flatten()}")
    return ";".join(parts)


def module_imports(path: Path, module: str):
    """Every ``import`` statement of the source file ``path`` of ``module``, at module level and inside
    functions: ``(base, names, lineno, inside_function)``, one tuple per imported name of ``import a, b`` (with
    ``names`` empty) and one per ``from base import x, y`` (``names`` = ``["x", "y"]``), relative imports
    resolved against ``module`` (``from ..threads import f`` in ``companion.mesa.train`` -> base
    ``companion.threads``). The one reader of imports: :func:`import_closure` and the layering test use it."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    inside: set[int] = set()
    for f in ast.walk(tree):
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside |= {id(n) for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, [], node.lineno, id(node) in inside
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = module.split(".") if is_pkg else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            yield base, [a.name for a in node.names], node.lineno, id(node) in inside


@functools.lru_cache(maxsize=None)
def _imports_of(path: Path, module: str, mtime_ns: int) -> tuple:
    """:func:`module_imports` of one file, read once per process and modification (the closures of the book's
    results share most of their files)."""
    return tuple(module_imports(path, module))


def import_closure(module: str) -> tuple[str, ...]:
    """The package source files that ``module`` (e.g. ``"companion.mesa.train"``) imports, directly or
    through other package modules, itself included: paths relative to the package, sorted.

    Read from the sources' ``import`` statements (module level and inside functions,
    ``module_imports``), so a cache keyed on :func:`source_hash` of this closure changes whenever any
    code the computation can run changes."""
    root = Path(__file__).resolve().parent
    pkg = root.name

    def path_of(mod: str) -> Path | None:
        parts = mod.split(".")
        if parts[0] != pkg:
            return None
        base = root.joinpath(*parts[1:])
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py")
        if (base / "__init__.py").is_file():
            return base / "__init__.py"
        return None

    def module_of(path: Path) -> str:
        rel = path.relative_to(root).with_suffix("")
        parts = [pkg, *rel.parts]
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    seen: set[Path] = set()
    todo = [path_of(module)]
    if todo[0] is None:
        raise ValueError(f"{module!r} is not a module of {pkg}")
    while todo:
        f = todo.pop()
        if f is None or f in seen:
            continue
        seen.add(f)
        here = module_of(f)
        # a module's parent packages run first when it is imported
        parts = here.split(".")
        for i in range(1, len(parts)):
            todo.append(path_of(".".join(parts[:i])))
        for base, names, _, _ in _imports_of(f, here, f.stat().st_mtime_ns):
            for n in [base] + [f"{base}.{a}" for a in names]:
                todo.append(path_of(n))
    return tuple(sorted(str(p.relative_to(root)) for p in seen))


def cache_dir(namespace: str = "", sources: tuple[str, ...] | None = None) -> Path | None:
    """The cache directory ``<base>/<namespace>-<source hash>`` for the current sources, or ``None`` when
    caching is disabled."""
    env = os.environ.get("COMPANION_CACHE_DIR")
    if env is not None:
        if env.strip().lower() in _OFF:
            return None
        base = Path(env)
    else:

        try:
            base = repo_root() / BASE
        except FileNotFoundError:
            return None
    digest = source_hash(tuple(sources) if sources is not None else None)
    return base / (f"{namespace}-{digest}" if namespace else digest)


@functools.lru_cache(maxsize=None)
def _sources_of(module: str) -> tuple[str, tuple[str, ...] | None]:
    """(namespace, sources) of :func:`cache_dir` for a function of ``module``: its import closure, named by the
    module below the package; every source, unnamed, for a module outside the package."""
    try:
        return module.partition(".")[2], import_closure(module)
    except ValueError:
        return "", None


def module_cache_dir(module: str) -> Path | None:
    """:func:`cache_dir` of the runs of the package module ``module``: ``<base>/<module below the package>-<hash of
    its import closure>`` (``companion.mesa.train``: ``mesa.train-<hash>``)."""
    return cache_dir(*_sources_of(module))


def is_current(name: str) -> bool | None:
    """Whether the cache folder ``name`` is a key of the current code: ``<module>-<hash>`` when the module's import
    closure hashes to it now (:func:`module_cache_dir`), a bare ``<hash>`` when every source does. ``None``: a name
    of no key (not a 16-hex-digit hash, or no module of the package), not ours to judge."""
    ns, sep, digest = name.rpartition("-")
    if len(digest) != 16 or any(c not in "0123456789abcdef" for c in digest):
        return None
    if not sep:
        return digest == source_hash()
    try:
        closure = import_closure(f"{Path(__file__).resolve().parent.name}.{ns}")
    except ValueError:
        return None
    return digest == source_hash(closure)


@contextlib.contextmanager
def file_lock(path: Path):
    """An exclusive advisory lock (``flock``) on the file ``path`` (made, with its folder, if missing), held for
    the ``with`` block: another process asking for it waits. The kernel releases it however the holder ends.
    Without ``fcntl`` (Windows) no lock is taken. Used for the run cache's keys (:func:`cached`) and for the
    writes into the jupyter-cache of ``companion book``, whose processes would otherwise race."""
    if fcntl is None:  # pragma: no cover - not POSIX
        yield
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def cached(func: F) -> F:
    """``cached(f)(*args)`` is ``f(*args)``, memoised on disk when a cache directory is configured; a miss is
    computed under the key's :func:`file_lock` (in ``<cache>/.locks``), so concurrent callers with the same arguments compute it
    once.

    A function of the package is cached in ``<base>/<module>-<hash>``, the hash of its module's
    :func:`import_closure` (for ``companion.cot.train.train_full``: ``cot.train-<hash>``), so that an edit
    elsewhere (the other paper's code, the site) keeps its results; any other function depends on every source."""
    module = func.__module__

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        loc = module_cache_dir(module)
        if loc is None:
            return func(*args, **kwargs)
        import joblib

        memo = joblib.Memory(location=str(loc), verbose=0).cache(func)
        if memo.check_call_in_cache(*args, **kwargs):
            return memo(*args, **kwargs)
        key = joblib.hash((func.__module__, func.__qualname__, args, sorted(kwargs.items())))
        with file_lock(loc / ".locks" / key):
            return memo(*args, **kwargs)  # a caller that waited finds the result stored

    return wrapper  # type: ignore[return-value]
