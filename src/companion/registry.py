"""The registry of both papers' results, in book order: what the verdicts and the site both read."""

from __future__ import annotations

from .claims import ResultSpec
from .cot import results as cot_results
from .mesa import results as mesa_results

__all__ = ["PAPERS", "all_results", "results_of", "result_modules"]


#: the papers, in book order, with their registries and their titles on the page
PAPERS = (
    ("mesa", mesa_results, "Paper 1: mesa-optimization (Zheng et al., NeurIPS 2024)"),
    ("cot", cot_results, "Paper 2: multi-step GD with chain of thought (Huang, Wang & Lee, ICLR 2025)"),
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
