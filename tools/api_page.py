"""Write book/api.md: an ``automodule`` entry for every module of ``companion``, grouped by layer.

Run after adding or removing a module (``tests/site/test_where.py`` fails until the page lists exactly the
package's modules). The layers are those of ``tests/_layers.py``."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from _layers import MODULES, layer, paper  # noqa: E402

HEADER = """(api)=
# API reference

Every module of the package `companion`, generated from its docstrings when the book is built (a docstring
that does not render breaks the strict build). The modules are grouped by their layer: a module imports only
from its own layer or the layers above it on this page (see "Layers" in `CONTRIBUTING.md`; `tests/core/test_layers.py`
checks it). Each entry links to its rendered source (*[source]*); {doc}`where` says which module checks which
result.
"""

GROUPS = (
    ("Layer 0: vocabulary and tools", lambda m: layer(m) == 0),
    ("Layer 1: the science of the mesa paper", lambda m: layer(m) == 1 and paper(m) == "mesa"),
    ("Layer 1: the science of the cot paper", lambda m: layer(m) == 1 and paper(m) == "cot"),
    ("Layer 2: the results of the mesa paper", lambda m: layer(m) == 2 and paper(m) == "mesa"),
    ("Layer 2: the results of the cot paper", lambda m: layer(m) == 2 and paper(m) == "cot"),
    ("Layer 3: records and verdicts", lambda m: layer(m) == 3),
    ("Layer 4: running notebooks and sweeps", lambda m: layer(m) == 4),
    ("Layer 5: the site", lambda m: layer(m) == 5),
    ("Layer 6: the command line", lambda m: layer(m) == 6),
)


def _options(mod: str) -> str:
    """``:members:`` and ``:undoc-members:`` (a constant the docs refer to is listed even without a ``#:`` comment);
    a package also ``:ignore-module-all:``, so that it documents what it defines and not the
    names it re-exports from its submodules (documented there; ``lanes.bodies`` is both a function and a module)."""
    return "   :members:\n   :undoc-members:\n" + ("   :ignore-module-all:\n" if MODULES[mod].name == "__init__.py" else "")


def page() -> str:
    mods = sorted(m for m in MODULES if not m.endswith("__main__"))
    out = [HEADER]
    for title, keep in GROUPS:
        out.append(f"\n## {title}\n")
        # autodoc writes reStructuredText: the directive runs inside an eval-rst block
        out += [f"\n```{{eval-rst}}\n.. automodule:: {m}\n{_options(m)}```\n" for m in mods if keep(m)]
    return "".join(out)


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # no options: refuses any
    (ROOT / "book" / "api.md").write_text(page())
    print(f"wrote {ROOT / 'book' / 'api.md'}")
