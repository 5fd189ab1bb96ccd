"""The map of every result: RESULTS.md (committed) and the book's "Where is each result" page show the same rows from
the registries, and the API reference lists every module."""

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


def _rows(text: str) -> list[list[str]]:
    """The result rows of a rendered table, split into cells (an escaped ``\\|`` stays inside its cell)."""
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in text.splitlines()
            if line.startswith("| **")]


def test_results_md_is_what_the_registries_give():
    problem = where.check_results(ROOT)
    assert not problem, problem


def test_a_stale_results_md_names_the_command_that_rewrites_it(monkeypatch):
    real = where.results_markdown
    monkeypatch.setattr(where, "results_markdown", lambda rows=None: real(rows) + "| **Theorem 9.9**: new |\n")
    problem = where.check_results(ROOT)
    assert where.RESULTS_COMMAND in problem and "+| **Theorem 9.9**: new |" in problem


def test_the_book_page_and_results_md_show_the_same_rows_and_columns():
    rows = where.result_rows()
    github, book = _rows(where.results_markdown(rows)), _rows(where.where_markdown())
    assert len(github) == len(book) == len(all_results())
    header = "| " + " | ".join(where.COLUMNS) + " |"
    assert where.results_markdown(rows).count(header) == where.where_markdown().count(header) == 2  # one per paper
    for g, b, row in zip(github, book, rows, strict=True):
        assert len(g) == len(b) == len(where.COLUMNS)
        assert g[0].split(":")[0] == b[0].split(":")[0] == f"**{row.spec.number}**"
        assert g[1] == b[1].replace("&nbsp;★", " ★")  # the claims, word for word
        assert g[2].split(";")[0] == b[2].split(";")[0]  # the figures


def test_every_link_of_results_md_opens_a_file_of_the_repository():
    """RESULTS.md is read on GitHub from the root: its relative links name files that exist."""
    text = where.results_markdown()
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert len(links) > 3 * len(all_results())
    for link in links:
        assert (ROOT / link).is_file(), link
    for r in all_results():
        row = next(row for row in _rows(text) if f"(notebooks/{r.notebook}.md)" in row[0])
        assert row[0].endswith(f"module [`{r.module}`](src/{r.module.replace('.', '/')}.py)")


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
    assert "a \\| pipe" in where.results_markdown(where.result_rows(results + (extra,)))


def test_the_tests_of_a_result_import_its_module_or_name_its_notebook(tmp_path):
    spec = next(r for r in all_results() if r.module == "companion.mesa.results.thm4_1")
    files = {
        "test_by_name.py": "from companion.mesa.results import thm4_1\n",
        "test_a_function.py": "def test_x():\n    from companion.mesa.results.thm4_1 import manifest\n",
        "test_names_page.py": f"PAGE = 'notebooks/{spec.notebook}.md'\n",
        "test_other.py": f"from companion.mesa.results import thm4_2\nPAGE = '{spec.notebook}_b'\n",
        "helper.py": "from companion.mesa.results import thm4_1\n",  # not a test file
    }
    for name, text in files.items():
        (tmp_path / "tests" / "mesa").mkdir(parents=True, exist_ok=True)
        (tmp_path / "tests" / "mesa" / name).write_text(text)
    assert where.tests_of(spec, tmp_path) == tuple(f"tests/mesa/{n}" for n in
                                                   ("test_a_function.py", "test_by_name.py", "test_names_page.py"))


def test_tests_of_every_result_are_listed_once_under_the_table():
    rows = where.result_rows()
    shared = where.shared_tests(rows)
    text = where.results_markdown(rows)
    for test in shared:
        assert text.count(f"({test})") == 1
    assert not where.shared_tests(rows[:1])


def test_the_training_entry_points_are_the_trainers_functions_that_train():
    """Read from the sources: a public function of ``companion.<paper>.train`` that can raise TrainingDiverged
    (itself or through the module's own functions: ``run`` trains through ``train``, ``cached_train_full`` is
    ``cached(train_full)``); a function that only sets up or evaluates is none."""
    mesa, cot = where.training_entry_points("mesa"), where.training_entry_points("cot")
    assert {"companion.mesa.train.run", "companion.mesa.train.train"} <= set(mesa)
    assert {"companion.cot.train.train_full", "companion.cot.train.cached_train_full",
            "companion.cot.train.train_looped_isotropic"} <= set(cot)
    for helper in ("companion.mesa.train.init_diagonal", "companion.mesa.train.test_loss",
                   "companion.cot.train.evaluate", "companion.cot.train.replicate_seed"):
        assert helper not in mesa + cot


def test_a_result_reaches_the_trainer_exactly_when_it_makes_a_claim_on_a_trained_model():
    """The call graph read from the notebook, the result module and the paper's modules they reach: a result with a
    ``trained`` claim reaches a training entry point, a result without one (closed forms, Monte Carlo, reduced GD)
    none (a module-level import closure would give every mesa result the trainer)."""
    for row in where.result_rows():
        trained = any(c.target == "trained" for c in row.spec.claims)
        assert bool(row.training) == trained, f"{row.spec.module}: training {row.training}, a trained claim: {trained}"
    looped = next(row for row in where.result_rows() if row.spec.module == "companion.cot.results.looped")
    assert "companion.cot.train.train_looped_isotropic" in looped.training


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
    assert "{py:" not in text  # nor the API reference, when that is not in the build
