"""The registry of both papers' results, in book order: what the verdicts and the site both read."""

from __future__ import annotations

import importlib

from .claims import ResultSpec

__all__ = ["PAPERS", "all_results", "results_of", "result_modules"]


class _Registry:
    """A paper's registry (``companion.<paper>.results``), imported when one of its attributes is first read: the
    paper's package imports torch (about a second), which a kernel that only judges records (a sweep's toy page,
    ``companion.verdict`` imported for its vocabulary) never needs. ``__name__`` is the module's, without import."""

    def __init__(self, module: str):
        self.__name__ = module

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self.__name__), attr)

    def __repr__(self) -> str:
        return f"<registry {self.__name__}>"


#: the papers, in book order, with their registries and their titles on the page
PAPERS = (
    ("mesa", _Registry("companion.mesa.results"), "Paper 1: mesa-optimization (Zheng et al., NeurIPS 2024)"),
    ("cot", _Registry("companion.cot.results"), "Paper 2: multi-step GD with chain of thought (Huang, Wang & Lee, ICLR 2025)"),
)


def all_results() -> tuple[ResultSpec, ...]:
    """Every registered result of both papers, in book order."""
    return tuple(spec for _, registry, _ in PAPERS for spec in registry.results())


def results_of(paper: str) -> tuple[ResultSpec, ...]:
    """The registered results of one paper (``"mesa"``, ``"cot"``), in book order."""
    for name, registry, _ in PAPERS:
        if name == paper:
            return registry.results()
    raise KeyError(f"no paper {paper!r}; the papers are {[name for name, _, _ in PAPERS]}")


def result_modules() -> tuple[str, ...]:
    """The dotted name of every result module of both papers, in book order, read from the registries'
    ``MODULES`` (no result module is imported)."""
    return tuple(f"{registry.__name__}.{name}" for _, registry, _ in PAPERS for name in registry.MODULES)
