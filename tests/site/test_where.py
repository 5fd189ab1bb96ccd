"""The "Where is each result" page and the API reference list every result and every module."""

from __future__ import annotations

import re

import yaml
from _layers import MODULES

from companion.claims import ResultSpec
from companion.registry import all_results
from companion.site import where

from _util import ROOT


def _toc_notebooks() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [c["file"][len("notebooks/"):] for p in toc["parts"] for c in p["chapters"] if c["file"].startswith("notebooks/")]


def test_one_row_per_result_and_every_notebook_of_the_contents_has_one():
    text = where.where_markdown()
    rows = [line for line in text.splitlines() if line.startswith("| **")]
    results = all_results()
    assert len(rows) == len(results) == len(_toc_notebooks())
    for name in _toc_notebooks():
        assert sum(f"</notebooks/{name}>`" in row for row in rows) == 1, name
    for r in results:
        row = next(row for row in rows if f"</notebooks/{r.notebook}>`" in row)
        assert f"<{r.label}>`" in row and f"<{r.module}>`" in row
        assert f"{len(r.claims)} (" in row


def test_a_result_missing_from_a_registry_is_missing_from_the_page():
    results = all_results()
    fewer = where.where_markdown(results[1:])
    assert results[0].notebook not in fewer and results[1].notebook in fewer
    extra = ResultSpec(paper="cot", number="Theorem 9.9", title="a | pipe", label="cot-thm-9-9", notebook="cot/x",
                       module="companion.cot.results.x")
    assert "a \\| pipe" in where.where_markdown(results + (extra,))  # a pipe cannot break the table


def test_the_api_page_documents_every_module_of_the_package():
    text = (ROOT / "book" / "api.md").read_text()
    documented = re.findall(r"^\.\. automodule:: (\S+)$", text, flags=re.M)
    assert len(documented) == len(set(documented))
    expected = {m for m in MODULES if not m.endswith("__main__")}
    assert set(documented) == expected, (f"missing: {sorted(expected - set(documented))}; "
                                         f"stale: {sorted(set(documented) - expected)} (run tools/api_page.py)")


def test_the_where_and_api_pages_are_in_the_contents():
    files = [c["file"] for p in yaml.safe_load((ROOT / "_toc.yml").read_text())["parts"] for c in p["chapters"]]
    assert "book/where" in files and "book/api" in files


def test_a_partial_build_links_only_its_notebooks():
    """A build of some pages (the Sweeps page's test, a reader's subset) must not link pages it does not hold:
    under -n -W an unknown document fails the build."""
    results = all_results()
    keep = results[0].notebook
    text = where.where_markdown(results, built={keep})
    assert f"</notebooks/{keep}>`" in text and f"<{results[0].label}>`" in text
    for r in results[1:]:
        assert f"/notebooks/{r.notebook}>`" not in text and f"<{r.label}>`" not in text
    assert text.count("page not in this build") == len(results) - 1
    assert "</book/sweeps>`" not in text and "swept on the Sweeps page" in text
    assert "{py:mod}" not in text  # nor the API reference, when that is not in the build
