"""The numbered results of the mesa paper, one module each: where each result is checked.

Each module ``companion.mesa.results.<name>`` holds what the notebook of its result computes and checks: the
design of its runs (``design``: every run the page trains, with its sizes, seeds, step sizes and replicate sets,
written once; ``paper_runs`` is that design at the paper's settings), its evidence functions (typed records), its
figure functions, its ``CLAIMS`` manifest (:class:`companion.claims.ClaimSpec`) and its ``RESULT``
(:class:`companion.claims.ResultSpec`). Evidence several results share lives one layer down, in
:mod:`companion.mesa.evidence` and :mod:`companion.mesa.stability`; a result may import those and
:mod:`companion.mesa.paper` (the paper's settings), never another result. :mod:`companion.mesa.results.plan`, which
is no result, collects every result's ``paper_runs`` into the plan of the paper-scale runs.

:data:`MODULES` lists them in book order; :func:`results` imports them lazily (importing one result does not
import the others).
"""

from __future__ import annotations

import importlib

from companion.claims import ResultSpec
from companion.text import number_tag

__all__ = ["MODULES", "results", "module_of", "number_tag", "init_tag"]

#: the result modules, in the order of the book's table of contents
MODULES = ("setup", "thm4_1", "thm4_2", "prop4_1", "prop4_2", "thm4_3", "appendix")


def results() -> tuple[ResultSpec, ...]:
    """The :class:`~companion.claims.ResultSpec` of every mesa result, in book order."""
    return tuple(importlib.import_module(f"{__name__}.{name}").RESULT for name in MODULES)


def module_of(notebook: str) -> str:
    """The result module (dotted name) whose notebook is ``notebook`` (e.g. ``"mesa/thm4_2_capability"``)."""
    for spec in results():
        if spec.notebook == notebook:
            return spec.module
    raise KeyError(f"no mesa result has the notebook {notebook!r}")


def init_tag(ini) -> str:
    """A diagonal init (a0, b0) as it enters a claim id: ``(0.5, 1.5)`` -> ``0p5_1p5``."""
    return f"{number_tag(ini[0])}_{number_tag(ini[1])}"
