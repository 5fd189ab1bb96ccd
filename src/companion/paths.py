"""Where things are: the book root (the directory holding ``_toc.yml``) and its notebooks."""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """Return the book root: ``$COMPANION_ROOT``, else the first ancestor of this package or of the
    current directory that holds both ``_toc.yml`` and ``notebooks/``."""
    env = os.environ.get("COMPANION_ROOT")
    if env:
        return Path(env).resolve()
    for start in (Path.cwd().resolve(), Path(__file__).resolve()):
        for parent in [start, *start.parents]:
            if (parent / "_toc.yml").is_file() and (parent / "notebooks").is_dir():
                return parent
    raise FileNotFoundError(
        "cannot find the book root (a directory with _toc.yml and notebooks/); "
        "set COMPANION_ROOT or run from inside the repository"
    )


def notebooks_dir() -> Path:
    return repo_root() / "notebooks"
