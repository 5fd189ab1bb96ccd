"""The "Where is each result" page: one row per numbered result of both papers, from the registries.

The table is MyST, written by the book's Sphinx extension (:mod:`companion.sphinx_ext`) to
``_build/where.md`` when a build starts and included by ``book/where.md``; it is made from
``companion.<paper>.results.results()``, so a result module added to a registry appears on the page, and one
removed disappears, without an edit of the page.
"""

from __future__ import annotations

from collections import Counter

from ..claims import TARGETS, ResultSpec
from ..registry import PAPERS, all_results

__all__ = ["where_markdown"]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _claims_cell(spec: ResultSpec) -> str:
    ids = ", ".join(f"`{_cell(c.id)}`" + ("&nbsp;★" if c.headline else "") for c in spec.claims)
    targets = Counter(c.target for c in spec.claims)
    summary = ", ".join(f"{targets[t]} {t.replace('_', ' ')}" for t in TARGETS if targets[t])
    return f"{len(spec.claims)} ({summary}): {ids}" if spec.claims else "none"


def where_markdown(results: tuple[ResultSpec, ...] | None = None, built: set[str] | None = None) -> str:
    """The MyST table of every result: the paper's number and the statement; the page and the module (linked to its
    API entry, whose *[source]* link shows the code); the claims (★ headline; counts per target); the figures and
    the sweep that maps it. ``built``: the notebooks of this build (a partial build, a test's, links only those;
    None: all)."""
    results = all_results() if results is None else results
    out = []
    for paper, _, title in PAPERS:
        rows = [r for r in results if r.paper == paper]
        if not rows:
            continue
        out.append(f"## {title}\n")
        out.append("| result | page and module | claims | figures and sweep |")
        out.append("|---|---|---|---|")
        for r in rows:
            short = r.module.rsplit(".", 1)[-1]  # the paper and ``results`` are the section's and the intro's
            figures = ", ".join(f"`{f}`" for f in r.figures) or "no figure"
            title = _cell(r.sweep.replace("$", ""))
            sweeps_built = built is None or "book/sweeps" in built
            sweep = (f"; swept on {{doc}}`{title} </book/sweeps>`" if sweeps_built else f"; swept on the Sweeps page ({title})"
                     ) if r.sweep else ""
            linked = built is None or r.notebook in built
            module = f"{{py:mod}}`{short} <{r.module}>`" if built is None or "book/api" in built else f"`{short}`"
            statement = f" ({{prf:ref}}`statement <{r.label}>`)" if linked else ""
            page = f"{{doc}}`page </notebooks/{r.notebook}>`" if linked else "page not in this build"
            out.append(
                f"| **{_cell(r.number)}**: {_cell(r.title)}{statement} "
                f"| {page}, module {module} "
                f"| {_claims_cell(r)} | {figures}{sweep} |")
        out.append("")
    return "\n".join(out)
