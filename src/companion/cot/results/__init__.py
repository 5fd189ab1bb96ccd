"""Where each result of Huang, Wang & Lee (ICLR 2025) lives: one module per notebook of ``notebooks/cot/``.

Each module holds exactly what its notebook computes and checks: its evidence functions, its figure functions,
its ``CLAIMS`` manifest (one :class:`companion.claims.ClaimSpec` per claim id or id pattern the notebook records)
and ``RESULT`` (a :class:`companion.claims.ResultSpec`: the paper's number, the statement's label, the notebook,
the figures, the sweep that maps it). :data:`MODULES` lists them in book order (``_toc.yml``); :func:`results`
imports them (on demand: each pulls in torch and matplotlib) and returns their ``RESULT``.
"""

from __future__ import annotations

import importlib

from companion.claims import ResultSpec

__all__ = ["MODULES", "results"]

#: the result modules, in the order of the book's table of contents
MODULES = ("setup", "thm3_1", "cor3_1", "thm3_2", "thm4_1", "thm4_2", "looped", "experiments")


def results() -> tuple[ResultSpec, ...]:
    """The ``RESULT`` of every module of :data:`MODULES`, in book order."""
    return tuple(importlib.import_module(f"{__name__}.{m}").RESULT for m in MODULES)
