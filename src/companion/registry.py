"""The registry of both papers' results, in book order: what the verdicts and the site both read."""

from __future__ import annotations

from .claims import ResultSpec
from .cot import results as cot_results
from .mesa import results as mesa_results

__all__ = ["PAPERS", "all_results"]


#: the papers, in book order, with their registries and their titles on the page
PAPERS = (
    ("mesa", mesa_results, "Paper 1: mesa-optimization (Zheng et al., NeurIPS 2024)"),
    ("cot", cot_results, "Paper 2: multi-step GD with chain of thought (Huang, Wang & Lee, ICLR 2025)"),
)


def all_results() -> tuple[ResultSpec, ...]:
    """Every registered result of both papers, in book order."""
    return tuple(spec for _, registry, _ in PAPERS for spec in registry.results())
