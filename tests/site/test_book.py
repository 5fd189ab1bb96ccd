"""The strict book build: zero warnings, a raising notebook fails it, results land in _build/results."""

import os
import re
import shutil
from pathlib import Path

import pytest
import yaml
from _site import copy_book_frame

from companion import notebooks as nbs
from companion.site import book

from _util import FIXTURES, ROOT


def test_cache_guard_wipes_the_cache_when_the_stack_changes_but_not_when_the_package_does(tmp_path, monkeypatch):
    from companion import cache

    (tmp_path / "constraints.txt").write_text("numpy==2\n")
    assert book.guard_cache(tmp_path) is False
    marker = tmp_path / book.CACHE_DIR / "executed-notebook"
    marker.write_text("cached")
    assert book.guard_cache(tmp_path) is False and marker.exists()
    env = tmp_path / book.DOCTREES / "environment.pickle"
    env.parent.mkdir(parents=True)
    env.write_text("pages read by Sphinx")
    monkeypatch.setattr(cache, "source_hash", lambda *a: "a changed package")  # checked page by page instead
    assert book.guard_cache(tmp_path) is False and marker.exists()
    monkeypatch.setattr(cache, "stack_signature", lambda: "numpy==9;cpu=another")  # a new numerical stack or CPU
    assert book.guard_cache(tmp_path) is True and not marker.exists()
    assert not env.exists()  # else Sphinx keeps the old HTML of every page whose source did not change
    (tmp_path / book.CACHE_DIR / "executed-notebook").write_text("cached")
    (tmp_path / "constraints.txt").write_text("numpy==3\n")
    assert book.guard_cache(tmp_path) is True


def test_the_run_cache_keeps_the_folders_of_the_current_code_and_removes_older_ones(tmp_path):
    from companion import cache
    from companion.mesa.train import RUN_SOURCES

    def closure(m):
        return cache.source_hash(cache.import_closure(m))

    keep = ["mesa.train-" + cache.source_hash(RUN_SOURCES), "cot.train-" + closure("companion.cot.train"),
            "mesa.evidence-" + closure("companion.mesa.evidence"), cache.source_hash(), "no.such.module-0123456789abcdef",
            "notes"]
    old = ["mesa.train-0123456789abcdef", "cot.train-0123456789abcdef", "fedcba9876543210"]
    for name in keep + old:
        (tmp_path / name / "joblib").mkdir(parents=True)
    (tmp_path / "fedcba9876543211").write_text("a file, not a cache folder")
    assert sorted(book.prune_run_cache(tmp_path)) == sorted(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep + ["fedcba9876543211"])
    assert book.prune_run_cache(tmp_path / "absent") == []


def test_the_package_modules_a_page_imports_are_read_from_its_code_cells():
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("%matplotlib inline\nimport numpy as np\nfrom companion.cot.results import experiments, thm3_2"),
        nbformat.v4.new_markdown_cell("from companion.mesa import train"),  # prose, not code
        nbformat.v4.new_code_cell("!ls\nimport companion.plotting as cp\nfrom . import nothing"),
        nbformat.v4.new_code_cell("def broken(:\n    from companion.mesa import model"),  # does not parse
    ])
    assert book.cell_imports(nb) == {"companion.cot.results", "companion.cot.results.experiments",
                                     "companion.cot.results.thm3_2", "companion.plotting"}


def test_a_page_depends_on_the_import_closure_of_the_package_modules_it_loaded():
    """The code a page depends on (its cache record's data): the static import closures of the modules its kernel
    had loaded, so that a module a worker process of the page imports counts too; every source for a page whose
    work runs elsewhere. A change of any of those files changes the hash."""
    code = book.page_code(["companion.cot.results.experiments"])
    files = code[book.FILES_KEY]
    assert {"cot/results/experiments.py", "cot/results/thm3_2.py", "cot/train.py", "stats.py"} <= set(files)
    assert not any(f.startswith("mesa/") for f in files) and "site/book.py" not in files
    assert code[book.FILES_HASH_KEY] == book.page_code(["companion.cot.results.experiments"])[book.FILES_HASH_KEY]
    assert book.page_code(["companion.cot.results.thm3_2"])[book.FILES_HASH_KEY] != code[book.FILES_HASH_KEY]
    every = book.page_code(["companion.stats"], whole=True)[book.FILES_KEY]
    assert {"site/book.py", "mesa/model.py"} <= set(every) and book.page_code(None)[book.FILES_KEY] == every
    assert book._files_hash(["stats.py", "no_such_module.py"]) is None  # a file gone: stale


@pytest.mark.slow
def test_a_failing_verdict_fails_the_build_and_passing_results_are_collected(tmp_path, capfd):
    """A failed claim fails `companion book`, the passing page's records are collected; without the failing page
    the build passes and ends with its last stage: the site's MathJax found on every page, the whole book typeset
    once (no TeX error) and printed to _build/html/companion.pdf."""
    root = tmp_path / "mini"
    copy_book_frame(root, ["toy_pass", "toy_fail"], execute="cache")
    toy = (FIXTURES / "toy.md").read_text().replace("n: int = 2000", "n: int = 300")
    passing = toy.replace('```{code-cell} ipython3\nv = Verdict("toy"', '(verdict-toy-pass)=\n## Verdict\n\n'
                          '```{code-cell} ipython3\nv = Verdict("toy_pass"')  # the "Every claim" page links it
    (root / "notebooks" / "toy_pass.md").write_text(passing + "\nA formula, typeset for the PDF: $x^2$.\n")
    (root / "notebooks" / "toy_fail.md").write_text(
        toy.replace("fail: bool = False", "fail: bool = True").replace('Verdict("toy"', 'Verdict("toy_fail"')
    )
    status = book.build(root)
    out = capfd.readouterr().out
    assert status != 0, "a notebook whose verdict fails must fail the build"
    # the failed page is executed once, before Sphinx, whose one pass renders it from the cache with the tables
    # written from its records
    assert "toy_fail.md: Executing notebook" not in out and "(verdict tables changed)" not in out, out[-3000:]
    summary = yaml.safe_load((root / "_build" / "results" / "summary.json").read_text())
    assert {k: summary["notebooks"]["toy_pass"][k] for k in ("claims", "failed")} == {"claims": 1, "failed": []}
    assert summary["failed"] == ["toy_fail:second_moment"], summary
    assert (root / "_build" / "results" / "toy_pass.jsonl").is_file()
    page = (root / "_build" / "html" / "book" / "verdicts.html").read_text()
    assert "second_moment" in page and "toy_pass" in page  # the "Every claim" page shows this build
    assert not (root / "_build" / "html" / book.PDF_NAME).exists()
    if os.environ.get("COMPANION_NO_BROWSER") == "1":
        return
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    for part in toc["parts"]:
        part["chapters"] = [c for c in part["chapters"] if c["file"] != "notebooks/toy_fail"]
    (root / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
    (root / "notebooks" / "toy_fail.md").unlink()
    capfd.readouterr()
    status = book.build(root)
    out, err = capfd.readouterr()
    assert status == 0, (out + err)[-3000:]
    # every page cached with passing verdicts: the verdict tables written before Sphinx reads them (one pass) and the
    # book printed beside the HTML build
    assert "TeX checked and _build/html/companion.pdf printed" in out and "(beside the HTML build)" in out, out[-2000:]
    assert "(verdict tables changed)" not in out, out[-2000:]
    assert (root / "_build" / "html" / book.PDF_NAME).read_bytes().startswith(b"%PDF")
    # the same cached verdicts with an HTML build that fails: test_a_pdf_printed_beside_a_failing_html_build_is_not_kept


@pytest.mark.parametrize("html_status", [1, 0])
def test_a_pdf_printed_beside_a_failing_html_build_is_not_kept(tmp_path, monkeypatch, html_status):
    """Every page cached with passing verdicts: `companion book` prints the PDF beside the HTML build (into
    _build/print) and moves it to _build/html only when that build succeeds; when it fails (here its exit status
    1, e.g. a broken reference in the prose), the printed PDF is not kept. The pages, Sphinx and Chromium are stood
    in for: what is tested is the build's bookkeeping (the real builds: the test above)."""
    root = tmp_path / "mini"
    copy_book_frame(root, [], execute="cache")
    (root / "_build" / "html").mkdir(parents=True)
    printed = []

    def fake_print(root_, browser, jb_cmd=None, out_dir=None):
        out_dir.mkdir(parents=True, exist_ok=True)
        printed.append(out_dir)
        (out_dir / book.PDF_NAME).write_bytes(b"%PDF fake")
        return out_dir / book.PDF_NAME, {}

    monkeypatch.setattr(book, "_execute_pages", lambda root_, force: None)
    monkeypatch.setattr(book, "_verdict_tables", lambda root_, names: ({}, ("verdicts", "glance")))
    monkeypatch.setattr(book, "_tables", lambda root_: ("verdicts", "glance"))  # unchanged: no second pass
    monkeypatch.setattr(book, "write_where_page", lambda root_: None)
    monkeypatch.setattr(book, "find_browser", lambda: "chromium")
    monkeypatch.setattr(book, "print_book", fake_print)
    monkeypatch.setattr(book, "collect_results", lambda *a: {"claims": 0, "notebooks": {}, "missing": [], "failed": []})
    monkeypatch.setattr(book, "mathjax_unreachable", lambda html: {})
    monkeypatch.setattr(book.subprocess, "call", lambda cmd, cwd=None: html_status)
    status = book.build(root)
    assert printed == [root / "_build" / "print"]  # printed beside the HTML build
    pdf = root / "_build" / "html" / book.PDF_NAME
    if html_status:
        assert status != 0 and not pdf.exists()
    else:
        assert status == 0 and pdf.read_bytes() == b"%PDF fake"


@pytest.mark.slow
def test_pages_are_executed_two_at_a_time_into_the_cache_that_the_build_reads(tmp_path, capfd):
    """pre_execute puts every uncached page with code cells into jupyter-cache under the key myst-nb's
    cache mode looks up (so the build executes nothing again); a page that raises is cached with its error
    (this build renders it without executing it again) and marked failed, so that the next pre_execute tries it
    again; the kernels log no transport warning (a clean build log)."""
    from jupyter_cache import get_cache
    from myst_nb.core.read import myst_nb_reader_plugin

    root = tmp_path / "mini"
    copy_book_frame(root, ["toy_a", "toy_b", "toy_fail"], execute="cache")
    toy = (FIXTURES / "toy.md").read_text().replace("n: int = 2000", "n: int = 300")
    (root / "notebooks" / "toy_a.md").write_text(toy.replace('Verdict("toy"', 'Verdict("toy_a"'))
    (root / "notebooks" / "toy_b.md").write_text(toy.replace('Verdict("toy"', 'Verdict("toy_b"').replace("seed: int = 1", "seed: int = 2"))
    params_cell = "```{code-cell} ipython3\n:tags: [parameters]"
    raising = "```{code-cell} ipython3\nraise RuntimeError('boom')\n```\n\n" + params_cell
    (root / "notebooks" / "toy_fail.md").write_text(toy.replace(params_cell, raising, 1))
    done = book.pre_execute(root)
    assert set(done) == {"notebooks/toy_a.md", "notebooks/toy_b.md", "notebooks/toy_fail.md"}
    assert "without encryption" not in capfd.readouterr().err
    cache = get_cache(str(root / book.CACHE_DIR))
    for name in ("toy_a", "toy_b", "toy_fail"):
        rec = cache.match_cache_notebook(myst_nb_reader_plugin(str(root / "notebooks" / f"{name}.md")))
        assert rec.data["execution_seconds"] > 0 and rec.data["failed"] == (name == "toy_fail")
    error = cache.get_cache_bundle(rec.pk).nb.cells
    assert any(o.get("ename") == "RuntimeError" for c in error for o in c.get("outputs", []))  # rendered as it failed
    assert set(book.pre_execute(root)) == {"notebooks/toy_fail.md"}  # only the failing page is tried again
    # each record names the package code its page ran (the toy imports params and verdict, nothing of mesa)
    from jupyter_cache.base import CacheBundleIn

    recs = {Path(r.uri).stem: r for r in cache.list_cache_records()}
    files = recs["toy_a"].data[book.FILES_KEY]
    assert {"params.py", "verdict.py", "stats.py"} <= set(files) and not any(f.startswith("mesa/") for f in files)
    assert book.drop_stale_pages(root) == []  # nothing changed
    # as if toy_b's code had changed since it ran: only toy_b is removed and executed again
    bundle = cache.get_cache_bundle(recs["toy_b"].pk)
    cache.cache_notebook_bundle(CacheBundleIn(bundle.nb, bundle.record.uri,
                                              data={**bundle.record.data, book.FILES_HASH_KEY: "the code before"}),
                                check_validity=False, overwrite=True)
    assert [Path(p).stem for p in book.drop_stale_pages(root)] == ["toy_b"]
    assert set(book.pre_execute(root)) == {"notebooks/toy_b.md", "notebooks/toy_fail.md"}  # toy_a stays cached


def test_a_build_without_page_times_starts_the_slowest_pages_first(tmp_path):
    """A fresh clone has no page times of its own: the pages a cold build measured slowest start first (in that
    build they started after the quicker cot pages and the pages ran 40 s past the even split), then the Sweeps
    page, the cot pages and the mesa pages; once a build has timed a page, its own time counts."""
    slowest = sorted(book.COLD_PAGE_SECONDS, key=lambda p: -book.COLD_PAGE_SECONDS[p])
    assert len(slowest) >= 2 and set(slowest) <= {p.relative_to(ROOT).as_posix() for p in book.toc_pages(ROOT)}
    rest = ["book/sweeps.md", "notebooks/cot/setup.md", "notebooks/mesa/setup.md"]
    pages = [tmp_path / n for n in (rest[::-1] + slowest[::-1])]
    order = [p.relative_to(tmp_path).as_posix() for p in book.execution_order(tmp_path, pages)]
    assert order == slowest + rest
    book._page_seconds(tmp_path, {rest[-1]: 500.0, slowest[0]: 1.0})
    order = [p.relative_to(tmp_path).as_posix() for p in book.execution_order(tmp_path, pages)]
    assert order[0] == rest[-1] and order[-1] == slowest[0]


@pytest.mark.slow
def test_pages_of_one_worker_share_a_kernel_and_no_names(tmp_path, monkeypatch):
    """With one worker the pages run one after the other in one warm kernel: the second sees the modules the first
    imported (the same kernel) but none of its names (a reset namespace), and neither the kernel nor its socket
    folder outlives the build; the package code each page's cache record names is its own."""
    import tempfile

    from companion.run.jupyter_kernel import SOCKETS_ENV

    # a short folder: an IPC socket's path is limited to about 100 characters
    sockets = Path(tempfile.mkdtemp(prefix="cs-"))
    monkeypatch.setenv(SOCKETS_ENV, str(sockets))  # inherited by the build's worker processes
    root = tmp_path / "mini"
    copy_book_frame(root, ["toy_a", "toy_b"], execute="cache")
    toy = (FIXTURES / "toy.md").read_text().replace("n: int = 2000", "n: int = 300")
    params_cell = "```{code-cell} ipython3\n:tags: [parameters]"
    kernel_pid = tmp_path / "kernel.pid"  # page a writes its kernel's process id here
    first = ("```{code-cell} ipython3\nimport os, sys\nleft_by_a = os.getpid()\nsys.modules['toy_a_was_here'] = "
             f"sys\nopen({str(kernel_pid)!r}, 'w').write(str(left_by_a))\nimport companion.mesa.theory\n```\n\n")
    second = ("```{code-cell} ipython3\nimport sys\nassert 'toy_a_was_here' in sys.modules, 'a new kernel'\n"
              "assert 'left_by_a' not in dir(), 'a name of the previous page'\n```\n\n")
    (root / "notebooks" / "toy_a.md").write_text(toy.replace(params_cell, first + params_cell, 1)
                                                  .replace('Verdict("toy"', 'Verdict("toy_a"'))
    (root / "notebooks" / "toy_b.md").write_text(toy.replace(params_cell, second + params_cell, 1)
                                                  .replace('Verdict("toy"', 'Verdict("toy_b"'))
    book._page_seconds(root, {"notebooks/toy_a.md": 2.0, "notebooks/toy_b.md": 1.0})  # a first, then b
    done = book.pre_execute(root, jobs=1)
    assert list(done) == ["notebooks/toy_a.md", "notebooks/toy_b.md"]
    assert book.pre_execute(root, jobs=1) == {}  # both cached: b did not fail
    # each page depends on the code it ran, not on what the page before left in the kernel (a's mesa import)
    from jupyter_cache import get_cache

    files = {Path(r.uri).stem: r.data[book.FILES_KEY] for r in get_cache(str(root / book.CACHE_DIR)).list_cache_records()}
    assert "mesa/theory.py" in files["toy_a"] and not any(f.startswith("mesa/") for f in files["toy_b"])
    assert "verdict.py" in files["toy_b"]
    left = list(sockets.iterdir())
    shutil.rmtree(sockets)
    assert not left
    # this build's own kernel, not every kernel of the user: the other test lane runs kernels at the same time
    assert not _running(int(kernel_pid.read_text())), "the kernel outlived the build"


def _running(pid: int) -> bool:
    """Whether process ``pid`` is alive (a zombie, ended but not yet reaped, counts as ended)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_the_whole_book_builds_strictly(smoke_site, tmp_path):
    """Every notebook, executed with its smoke parameters by the runner, renders into the full book with
    `-n -W` (zero warnings, every reference and glue key resolved), and every verdict is collected.
    (`make book` builds the same pages at the papers' settings.)"""
    assert not smoke_site["not_run"], "notebooks did not run:\n" + "\n".join(
        f"{n}:\n{e}" for n, e in smoke_site["not_run"].items())
    log = smoke_site["log"]
    warnings = [line for line in log.splitlines() if "WARNING" in line or "ERROR" in line or "Exception" in line]
    assert smoke_site["returncode"] == 0 and not warnings, "\n".join(warnings) or log[-4000:]
    html = smoke_site["html"]
    assert (html / "index.html").is_file()
    names = nbs.all_notebooks()
    for name in names:
        page = (html / "notebooks" / f"{name}.html").read_text()
        assert "&lt;Figure size" not in page, f"{name}: a figure rendered as text, not as an image"
        assert "cv-table" in page and "| verdict |" not in page, f"{name}: the verdict table did not render"
    summary = smoke_site["summary"]
    assert not summary["missing"], summary
    assert not summary["failed"], summary
    # the Results at a glance: one row per registered result, each with records in this build
    from companion.registry import all_results

    glance = (html / "book" / "glance.html").read_text()
    assert glance.count("cv-glance-result") == len(all_results()) and "no records in this build" not in glance
    # the numbers of the book's own pages are the package's (MyST substitutions, companion.site.sphinx_ext)
    from companion.site.sphinx_ext import book_numbers

    assert f"with probability\n{book_numbers()['power']}, shown" in glance or \
        f"with probability {book_numbers()['power']}, shown" in glance, "the glance page's power is not substituted"
    assert "{{" not in glance
    # the build's results are published with the site, where the dashboard links them
    assert (html / "results" / "all.jsonl").is_file() and (html / "results" / "summary.json").is_file()
    for name in ("CITATION.cff", "LICENSE"):
        assert (html / name).is_file(), f"{name} is not on the site"
    assert not (html / "genindex.html").exists() or "genindex" not in (html / "index.html").read_text()
    # every page with formulas loads the site's own MathJax (the formulas themselves are typeset once, for the
    # whole book, when it is printed: tests/site/test_site.py)
    assert not book.mathjax_unreachable(html)
    if os.environ.get("COMPANION_NO_BROWSER") == "1":
        pytest.skip("COMPANION_NO_BROWSER=1: TeX rendering not checked")
    assert book.find_browser(), "Chromium is needed to check the TeX (`make test` installs it; or set COMPANION_NO_BROWSER=1)"
    # and the checks can fail: a formula with a double exponent, and a page whose MathJax does not load
    # (written beside the site's pages, removed again)
    src = (html / "notebooks" / "mesa" / "setup.html").read_text()
    seeded = {"zz_bad_tex": src.replace("<article", '<p><span class="math notranslate nohighlight">\\(x^2^3\\)'
                                                     "</span></p><article", 1),
              "zz_no_mathjax": src.replace("tex-chtml.js", "no-such-file.js")}
    # the one typesetting of the book reads each error's page from the anchors of the single-page build
    head = src[: src.index("<body")]
    math = '<p><span class="math notranslate nohighlight">\\({}\\)</span></p>'
    # (with the printed copy's MathJax settings, companion.site.book._print_mathjax)
    seeded["zz_print"] = book._print_mathjax(
        head + "<body>" + math.format("a_1_2") + '<span id="document-notebooks/mesa/setup"></span>' + math.format("x^2")
        + '<span id="document-notebooks/cot/setup"></span>' + math.format("y^2^3") + "</body></html>")
    assert "enableAssistiveMml: false" in seeded["zz_print"]
    try:
        for name, text in seeded.items():
            (html / "notebooks" / "mesa" / f"{name}.html").write_text(text)
        bad = book.check_math(html, pages=[f"notebooks/mesa/{n}" for n in ("zz_bad_tex", "zz_no_mathjax")])
        unreachable = book.mathjax_unreachable(html)
        from playwright.sync_api import sync_playwright

        with sync_playwright():  # a caller that already drives a browser (as the site's tests do) may print
            printed = book.typeset_and_print(html / "notebooks" / "mesa" / "zz_print.html", tmp_path / "p.pdf",
                                             "book/intro.html", book.find_browser())
    finally:
        for name in seeded:
            (html / "notebooks" / "mesa" / f"{name}.html").unlink(missing_ok=True)
    assert "Double exponent: use braces to clarify" in bad.get("notebooks/mesa/zz_bad_tex.html", []), bad
    assert any("did not render" in e for e in bad.get("notebooks/mesa/zz_no_mathjax.html", [])), bad
    assert list(unreachable) == ["notebooks/mesa/zz_no_mathjax.html"], unreachable
    assert printed == {"book/intro.html": ["Double subscripts: use braces to clarify"],
                       "notebooks/cot/setup.html": ["Double exponent: use braces to clarify"]}, printed
    assert (tmp_path / "p.pdf").read_bytes().startswith(b"%PDF")


# ---------------------------------------------------------------------------------------------- rendering
def _records():
    base = dict(notebook="mesa/prop4_1_gaussian", predicted=0.2, measured=0.21, tolerance=0.02, comparison="abs",
                error=0.01, passed=True, se=0.005, z=4.0, floor=0.0, parameters={"seed": 1})
    return [
        dict(base, claim="ratio_T10_sampling_leak", kind="statistical", status="passed", target="trained",
             quantity="trained ratio at T = 10 | vs c*(T)", reason="4 SE over\n\nreplicate seeds",
             falsifier="T -> infinity constant 1/5", falsifier_value=0.25, z_theory=2.0, z_falsifier=8.0),
        dict(base, claim="kernel_identity", kind="identity", status="passed", quantity="fast vs naive", target="closed_form",
             reason="round-off", comparison="rel", tolerance=1e-12, se=None, z=None),
        dict(base, claim="floor_bound", kind="bound", status="not_resolvable", quantity="loss above the floor",
             reason="round-off", comparison="lower", tolerance=0.0, predicted=3.5773e-14, measured=4.1e-14),
    ]


def test_verdict_table_puts_verdict_and_tolerance_first_and_links_each_claim():
    from companion.report import verdict_label, verdict_table_markdown

    table = verdict_table_markdown(_records())
    heads = re.findall(r"<th scope='col'[^>]*>([^<]*)</th>", table)
    assert heads[:2] == ["verdict", "tolerance"] and "claim" in heads and "kind" in heads
    assert "\n\n" not in table.strip(), "a blank line would end the HTML block inside the Markdown output"
    anchor = "#" + verdict_label("mesa/prop4_1_gaussian")
    assert table.count(f"href='{anchor}'") == 3, "every claim links to its notebook's verdict section"
    assert "title='trained ratio at T = 10 | vs c*(T)'" in table, "the full text of a claim on hover"
    assert "4 SE over replicate seeds" in table and "8.0 SE" in table, "the reason and the falsifier's distance"
    assert table.index("ratio_<wbr>T10") < table.index("kernel_<wbr>identity"), "identities come last"
    assert "implementation tests" in table


def test_tolerances_read_as_short_rules():
    from companion.report import fmt_number, tolerance_text

    assert tolerance_text({"comparison": "abs", "tolerance": 0.0123}) == "± 0.0123"
    assert tolerance_text({"comparison": "rel", "tolerance": 1e-12}) == "± 1.00e−12 rel."
    assert tolerance_text({"comparison": "lower", "tolerance": 0.0}) == "≥ p"
    assert tolerance_text({"comparison": "upper", "tolerance": 0.5}) == "≤ p + 0.5"
    assert fmt_number(3.5773e-14) == "3.58e−14" and len(fmt_number(-123456.789)) <= 10


def test_dashboard_counts_kinds_and_statuses_and_links_the_results():
    from companion.report import dashboard_markdown

    page = dashboard_markdown(["mesa/prop4_1_gaussian", "cot/setup"], _records(), ["cot/setup"])
    assert "**3 claims**" in page and "1 identity, 1 statistical, 1 bound" in page
    assert "**2 passed**" in page and "**1 not resolvable**" in page
    assert "../results/all.jsonl" in page and "../results/mesa__prop4_1_gaussian.jsonl" in page
    assert "href='../notebooks/mesa/prop4_1_gaussian.html#verdict-mesa-prop4-1-gaussian'" in page
    assert "<script>" in page and "cv-filter" in page
    assert "No verdict was recorded for cot/setup" in page
    # ... and per target (the bound's record has none: an old record, or a notebook outside the registries)
    assert "By what they measured (the target of each claim in its result's manifest): 1 trained, 1 closed form, " \
           "1 none." in page
    by_target = page[page.index("cv-summary-target"):]
    assert re.search(r"<th scope='row'>trained</th><td class='cv-num'>1</td>", by_target)
    assert "<select id='cv-target'>" in page and "data-target-name='trained'" in page
    assert "statistical<br><small class='cv-target'>trained</small>" in page, "the target under the kind"


def test_the_papers_numbers_replace_the_books():
    from types import SimpleNamespace

    from companion.site.sphinx_ext import paper_numbers

    env = SimpleNamespace(toc_fignumbers={"notebooks/cot/setup": {
        "theorem": {"cot-thm-4-1": (12, 1)}, "assumption": {"cot-ass-4-1": (12, 1), "book-own": (12, 2)},
        "figure": {"fig-cot-setup": (12, 1)},
        "displaymath": {"equation-cot-sparse": (12, 1), "equation-cot-eq-6": (12, 2), "equation-cot-gd": (12, 3)},
    }})
    paper_numbers(env)
    n = env.toc_fignumbers["notebooks/cot/setup"]
    assert n["theorem"] == {"cot-thm-4-1": (4, 1)}
    assert n["assumption"] == {"cot-ass-4-1": (4, 1), "book-own": ()}
    assert n["figure"] == {}, "figures are named by their captions, not numbered by the book"
    assert n["displaymath"] == {"equation-cot-sparse": ("B1",), "equation-cot-eq-6": (6,), "equation-cot-gd": ("B2",)}


def test_paper_numbering_script_labels_equations_6_and_7_once(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("paper_numbering", ROOT / "tools" / "paper_numbering.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    setup = tmp_path / "notebooks" / "cot" / "setup.md"
    setup.parent.mkdir(parents=True)
    setup.write_text(
        "The CoT training loss (6) and the evaluation loss (7) are\n\n$$\n"
        "\\Lcal^{\\rm CoT}(W) = \\tfrac12 \\E \\|r\\|^2,\n\\qquad\n\\Lcal^{\\rm Eval}(W) = \\E \\|e\\|^2 ,\n$$\n\n"
        "```{code-cell} ipython3\nv.check('x', quantity='CoT loss (6)')\n```\n\nIn $f(6)$ and `(7)` nothing changes.\n"
    )
    assert tool.main(["--root", str(tmp_path)]) == 0
    once = setup.read_text()
    assert "$$ (cot-eq-6)" in once and "$$ (cot-eq-7)" in once and "\\qquad" not in once
    assert "loss {eq}`cot-eq-6` and the evaluation loss {eq}`cot-eq-7`" in once
    assert "quantity='CoT loss (6)'" in once and "$f(6)$" in once and "`(7)`" in once
    assert tool.main(["--root", str(tmp_path)]) == 0 and setup.read_text() == once, "idempotent"


def test_figures_fit_the_column_at_the_books_font_sizes():
    import matplotlib

    from companion import plotting

    fig, axes = plotting.new_figure(ncols=4, width=3.4, height=3.0)
    w, h = fig.get_size_inches()
    assert w + 2 * plotting.PAD <= plotting.COLUMN_WIDTH + 1e-9 and abs(h / w - 3.0 / 13.6) < 1e-9, \
        "scaled to the column, same aspect"
    rc = matplotlib.rcParams
    assert min(rc["xtick.labelsize"], rc["ytick.labelsize"], rc["legend.fontsize"], rc["font.size"]) >= plotting.MIN_FONT_PT
    assert rc["svg.fonttype"] == "none"
    plotting.legend_outside(fig)
    assert "inline" not in matplotlib.get_backend()
    matplotlib.pyplot.close(fig)


def test_alt_text_is_the_caption_without_tex():
    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document

    from companion.site.sphinx_ext import alt_from_caption

    doc = new_document("t", get_default_settings(Parser))
    fig = nodes.figure("", nodes.image(uri="../../_images/abc.svg", alt="../../_images/abc.svg"),
                       nodes.caption("", r"Fig. 1b (reproduced): Gaussian x_1\sim\Nor(0,\sigma^2I)"))
    doc += fig
    alt_from_caption(None, doc, "notebooks/mesa/prop4_1_gaussian")
    assert next(iter(doc.findall(nodes.image)))["alt"] == "Fig. 1b (reproduced): Gaussian x_1~N(0,σ^2I)"


def test_a_figure_is_brought_to_the_standard_before_it_is_shown():
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    from companion import plotting

    plotting.use_book_style()
    fig, ax = plt.subplots(figsize=(12, 4))  # wider than the column, as a notebook might ask
    ax.plot([1, 2], label="x")
    ax.legend(fontsize=6)
    ax.set_title("t", fontsize=7)
    ax.tick_params(labelsize=5)
    plotting.enforce_standard(fig)
    assert fig.get_size_inches()[0] == pytest.approx(plotting.MAX_WIDTH)
    assert fig.get_size_inches()[1] == pytest.approx(4 * plotting.MAX_WIDTH / 12)
    fig.canvas.draw()
    assert min(t.get_fontsize() for t in fig.findobj(Text)) >= plotting.MIN_FONT_PT
    plt.close(fig)


def test_the_table_shows_the_t_band_of_a_few_dof_claim(tmp_path):
    from companion.report import verdict_table_html
    from companion.stats import Z_LEVEL, critical
    from companion.verdict import Verdict

    v = Verdict("t/band", manifest=["few", "many"], parameters={}, results_dir="")
    v.statistical("few", quantity="q", predicted=0.0, measured=0.01, se=0.01, dof=3, falsifier="f",
                  falsifier_value=1.0, reason="r")
    v.statistical("many", quantity="q", predicted=0.0, measured=0.01, se=0.01, falsifier="f", falsifier_value=1.0,
                  reason="r")
    html = verdict_table_html([r.__dict__ for r in v.records])
    assert html.count(f"band {critical(Z_LEVEL, 3):.1f}<") == 1 and html.count("cv-band") == 1


# ------------------------------------------------------------------------------------- results at a glance
def _glance_specs():
    from companion.claims import ResultSpec

    return (ResultSpec("mesa", "Theorem 4.1", "emergence", "mesa-thm-4-1", "mesa/a", "companion.mesa.results.a"),
            ResultSpec("mesa", "Theorem 4.2", "capability", "mesa-thm-4-2", "mesa/b", "companion.mesa.results.b"),
            ResultSpec("cot", "Theorem 3.1", "no CoT", "cot-thm-3-1", "cot/c", "companion.cot.results.c"))


def _stat(nb, claim, zf, status="passed", target="trained", headline=True, **kw):
    return dict(dict(notebook=nb, claim=claim, kind="statistical", status=status, target=target, headline=headline,
                     predicted=0.25, measured=0.2512, se=0.001, falsifier="c*(inf)", falsifier_value=0.2,
                     z_theory=1.2, z_falsifier=zf, crit=4.0, dof=None, z=4.0), **kw)


def test_glance_shows_each_results_decisive_claim_or_says_there_is_none():
    from companion.report import decisive_claim, glance_markdown, is_close_competitor

    a = [_stat("mesa/a", "ab_near", 12.0), _stat("mesa/a", "ab_far", 51.2),
         _stat("mesa/a", "not_headline", 900.0, headline=False),
         _stat("mesa/a", "wide_band", 400.0, status="not_resolvable", crit=17.5),
         _stat("mesa/a", "population", 800.0, target="reduced")]
    b = [_stat("mesa/b", "mc_only", 30.0, target="monte_carlo"), _stat("mesa/b", "mc_nr", 90.0, target="monte_carlo",
                                                                      status="not_resolvable")]
    # a strawman: passed on a trained model, but its falsifier (0) is 100 % from the prediction
    far = _stat("mesa/a", "vs_zero", 250.0, falsifier_value=0.0)
    assert decisive_claim(a + [far]) == (a[1], True), "a far falsifier does not decide"
    assert decisive_claim([far]) == (far, False)
    assert is_close_competitor(a[1]) and not is_close_competitor(far)
    assert not is_close_competitor(dict(a[1], falsifier_value=0.25 * 1.51))
    assert is_close_competitor(dict(a[1], falsifier_value=0.25 * 1.49))
    assert "(its falsifier lies 100% from the prediction: not a close competitor)" in glance_markdown(_glance_specs(), [far])
    assert decisive_claim(a) == (a[1], True)
    assert decisive_claim(b) == (b[0], False), "passed before not resolvable"
    page = glance_markdown(_glance_specs(), a + b)
    assert "**1 of 3 results** have a decisive claim on a trained model" in page
    assert page.index("Paper 1: mesa") < page.index("Theorem 4.1") < page.index("Paper 2") < page.index("Theorem 3.1")
    rows = re.findall(r"<tr[ >].*?</tr>", page)[1:]  # after the first header
    rows = [r for r in rows if "<th scope='col'>" not in r]
    assert len(rows) == 3, "one row per result"
    ra, rb, rc = rows
    assert "ab_<wbr>far" in ra and "0.2512<br>± 0.001" in ra and "0.25<br><small>(1.2 SE)</small>" in ra
    assert "c*(inf) = 0.2<br><small>(51.2 SE)</small>" in ra and "band 4.0 SE" in ra and "cv-badge cv-passed" in ra
    assert "href='../notebooks/mesa/a.html#verdict-mesa-a'" in ra and "no decisive claim" not in ra
    assert "mc_<wbr>only" in rb and "on monte carlo" in rb and "no decisive claim on a trained model yet" in rb
    assert "no records in this build" in rc and "href" not in rc  # its page may not be in this build
    # a setting page is not counted among the results, and its row says what it is instead of "no decisive claim"
    from companion.claims import ResultSpec

    setting = ResultSpec("mesa", "Section 3, the setting", "AR data", "mesa-def", "mesa/s", "companion.mesa.results.s",
                         setting=True)
    page = glance_markdown((setting, *_glance_specs()), a + b + [_stat("mesa/s", "loss_formula", 14.8, target="monte_carlo")])
    assert "**1 of 3 results** have a decisive claim" in page and "(The one setting page, Section 3 of the mesa paper, checks formulas" in page
    rs = [r for r in re.findall(r"<tr[ >].*?</tr>", page) if "<th scope='col'>" not in r][0]
    assert "loss_<wbr>formula" in rs and "a setting page" in rs and "no decisive claim" not in rs


def test_a_decisive_claim_rejects_its_falsifier_with_power_and_the_closest_falsifier_wins():
    """A falsifier inside the deviation the band detects with probability POWER ((4 + q_POWER) SE) is not rejected
    with power: such a claim does not decide, and its row says why; of two powered claims, the closer falsifier wins."""
    from statistics import NormalDist

    from companion.report import decisive_claim, detectable_of, glance_markdown, is_powered
    from companion.stats import POWER

    # prediction 0.25, falsifier 0.2: 0.05 apart; at se 0.009 the band detects 6.33 * 0.009 = 0.057
    weak = _stat("mesa/a", "weak", 5.9, se=0.009)  # a pass recorded before the verdict's power rule
    assert detectable_of(weak) == pytest.approx((4 + NormalDist().inv_cdf(POWER)) * 0.009) and not is_powered(weak)
    assert decisive_claim([weak]) == (weak, False)
    why = f"inside the 22.8% the band detects with probability {POWER:g}: not rejected with power"
    assert why in glance_markdown(_glance_specs(), [weak])
    # the verdict now leaves such a claim undecided (companion.verdict): its row says why all the same
    assert why in glance_markdown(_glance_specs(), [dict(weak, status="not_resolvable")])
    far = _stat("mesa/a", "far", 200.0, falsifier_value=0.15)  # 40 % away, rejected far out
    near = _stat("mesa/a", "near", 40.0, falsifier_value=0.22)  # 12 % away, (0.03 > 0.0063): powered
    assert decisive_claim([far, near, weak]) == (near, True)
    assert "detects 2.5%" in glance_markdown(_glance_specs(), [near])
    assert is_powered(dict(near, detectable=0.031)) is False  # the record's own field wins


def test_the_glance_page_lists_every_registered_result():
    from companion.registry import all_results

    page = book.glance_table([])
    specs = all_results()
    assert page.count("no records in this build") == len(specs) >= 15
    for spec in specs:
        assert f"<b>{spec.number}</b>" in page or f"<b>{spec.number.replace('&', '&amp;')}</b>" in page
    toc = (ROOT / "_toc.yml").read_text()
    assert "- file: book/glance\n      - file: book/verdicts" in toc
    assert "{include} ../_build/glance.md" in (ROOT / "book" / "glance.md").read_text()


@pytest.mark.slow
def test_a_page_kernel_of_the_book_gets_one_blas_thread(tmp_path, monkeypatch):
    """``companion book`` executes two pages side by side: each page's kernel must see one thread for the mesa
    kernel and the cot trainer (``COMPANION_THREADS``), for NumPy's OpenBLAS (``OPENBLAS_NUM_THREADS``) and for
    torch's own pool, whatever the caller's environment held (an OpenBLAS threading over both cores against the
    other page ran each cot page about twice as slowly; torch's pool on both cores, two mesa pages three times)."""
    for name in ("OPENBLAS_NUM_THREADS", "COMPANION_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(name, "7")
    seen = tmp_path / "seen.txt"
    page = tmp_path / "page.md"
    page.write_text((FIXTURES / "toy.md").read_text().split("```{code-cell}")[0]
                    + "```{code-cell} ipython3\nimport os\nimport torch\n"
                    + f"open({str(seen)!r}, 'w').write(os.environ.get('OPENBLAS_NUM_THREADS', '') + ' ' + "
                      "os.environ.get('COMPANION_THREADS', '') + ' ' + str(torch.get_num_threads()))\n```\n")
    path, seconds, err = book._execute_into_cache(str(tmp_path / "cache"), str(page), 120)
    assert err is None, err
    assert seen.read_text() == "1 1 1"
