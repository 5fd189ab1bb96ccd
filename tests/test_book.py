"""The strict book build: zero warnings, a raising notebook fails it, results land in _build/results."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from companion import book
from companion import notebooks as nbs

from _site import JB, copy_book_frame
from _util import FIXTURES


def test_cache_guard_wipes_the_cache_when_the_package_changes(tmp_path, monkeypatch):
    from companion import cache

    (tmp_path / "constraints.txt").write_text("numpy==2\n")
    assert book.guard_cache(tmp_path) is False
    marker = tmp_path / book.CACHE_DIR / "executed-notebook"
    marker.write_text("cached")
    assert book.guard_cache(tmp_path) is False and marker.exists()
    monkeypatch.setattr(cache, "source_hash", lambda: "a changed package")  # as if src/companion changed
    assert book.guard_cache(tmp_path) is True and not marker.exists()
    (tmp_path / book.CACHE_DIR / "executed-notebook").write_text("cached")
    (tmp_path / "constraints.txt").write_text("numpy==3\n")
    assert book.guard_cache(tmp_path) is True


@pytest.mark.slow
def test_a_failing_verdict_fails_the_build_and_passing_results_are_collected(tmp_path, capsys):
    root = tmp_path / "mini"
    copy_book_frame(root, ["toy_pass", "toy_fail"], execute="cache")
    toy = (FIXTURES / "toy.md").read_text().replace("n: int = 2000", "n: int = 300")
    (root / "notebooks" / "toy_pass.md").write_text(toy.replace('Verdict("toy"', 'Verdict("toy_pass"'))
    (root / "notebooks" / "toy_fail.md").write_text(
        toy.replace("fail: bool = False", "fail: bool = True").replace('Verdict("toy"', 'Verdict("toy_fail"')
    )
    status = book.build(root)
    assert status != 0, "a notebook whose verdict fails must fail the build"
    summary = yaml.safe_load((root / "_build" / "results" / "summary.json").read_text())
    assert {k: summary["notebooks"]["toy_pass"][k] for k in ("claims", "failed")} == {"claims": 1, "failed": []}
    assert "toy_fail" in summary["missing"] or summary["failed"]
    assert (root / "_build" / "results" / "toy_pass.jsonl").is_file()
    page = (root / "_build" / "html" / "book" / "verdicts.html").read_text()
    assert "second_moment" in page and "toy_pass" in page  # the "Every claim" page shows this build


@pytest.mark.slow
def test_the_whole_book_builds_strictly(smoke_site):
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
    # the build's results are published with the site, where the dashboard links them
    assert (html / "results" / "all.jsonl").is_file() and (html / "results" / "summary.json").is_file()
    for name in ("CITATION.cff", "LICENSE"):
        assert (html / name).is_file(), f"{name} is not on the site"
    assert not (html / "genindex.html").exists() or "genindex" not in (html / "index.html").read_text()
    # every formula must typeset: MathJax errors (e.g. "Double exponent") are invisible to Sphinx
    if os.environ.get("COMPANION_NO_BROWSER") == "1":
        pytest.skip("COMPANION_NO_BROWSER=1: TeX rendering not checked")
    assert book.find_browser(), "Chromium is needed to check the TeX (`make test` installs it; or set COMPANION_NO_BROWSER=1)"
    bad = book.check_math(html)
    assert not bad, f"TeX errors: {bad}"
