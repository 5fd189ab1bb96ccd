"""A content-addressed cache for expensive, deterministic runs, shared by the notebooks of one build.

Several notebooks use the same paper-scale training runs (for instance the Gaussian runs behind both
Fig. 1a and Fig. 1b of the mesa paper). :func:`cached` wraps a function in a ``joblib.Memory`` whose
directory is named by :func:`source_hash` — a hash of every source file of ``companion`` and of the
numerical stack's versions — so a change of the code can never serve a stale result, and a result is
keyed by all of the function's arguments.

Location: ``$COMPANION_CACHE_DIR`` if set (``off``/``0``/``none``/empty disables caching), else
``<book root>/_build/.companion_cache``. The tests run with caching disabled.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Callable, TypeVar

__all__ = ["source_hash", "cache_dir", "cached"]

F = TypeVar("F", bound=Callable)
_OFF = {"", "off", "0", "none", "false", "no"}


@functools.lru_cache(maxsize=None)
def source_hash(sources: tuple[str, ...] | None = None) -> str:
    """sha256 (16 hex digits) of package sources and of the numpy/scipy/torch versions.

    ``sources``: paths relative to the package (e.g. ``("params.py", "mesa/model.py")``) when a cache
    depends on exactly those files, so that edits elsewhere keep it; ``None``: every source file."""
    import numpy
    import scipy
    import torch

    h = hashlib.sha256()
    root = Path(__file__).resolve().parent
    files = sorted(root.rglob("*.py")) if sources is None else [root / rel for rel in sources]
    for f in files:
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    for mod in (numpy, scipy, torch):
        h.update(f"{mod.__name__}=={mod.__version__}".encode())
    return h.hexdigest()[:16]


def cache_dir(namespace: str = "", sources: tuple[str, ...] | None = None) -> Path | None:
    """The cache directory ``<base>/<namespace>-<source hash>`` for the current sources, or ``None`` when
    caching is disabled."""
    env = os.environ.get("COMPANION_CACHE_DIR")
    if env is not None:
        if env.strip().lower() in _OFF:
            return None
        base = Path(env)
    else:
        from .paths import repo_root

        try:
            base = repo_root() / "_build" / ".companion_cache"
        except FileNotFoundError:
            return None
    digest = source_hash(tuple(sources) if sources is not None else None)
    return base / (f"{namespace}-{digest}" if namespace else digest)


def cached(func: F) -> F:
    """``cached(f)(*args)`` is ``f(*args)``, memoised on disk when a cache directory is configured."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        loc = cache_dir()
        if loc is None:
            return func(*args, **kwargs)
        import joblib

        return joblib.Memory(location=str(loc), verbose=0).cache(func)(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
