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

from _util import FIXTURES, ROOT, read_run

JB = str(Path(sys.executable).with_name("jupyter-book"))


def copy_book_frame(dest: Path, toc_notebooks: list[str], execute: str) -> None:
    """The real _config.yml and book/ pages, with a table of contents listing ``toc_notebooks``."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "book", dest / "book")
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["execute"]["execute_notebooks"] = execute
    (dest / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    for part in toc["parts"]:
        part["chapters"] = [
            c for c in part["chapters"] if not c["file"].startswith("notebooks/")
        ]
    toc["parts"] = [p for p in toc["parts"] if p["chapters"]]
    toc["parts"].insert(1, {"caption": "Notebooks", "chapters": [{"file": f"notebooks/{n}"} for n in toc_notebooks]})
    (dest / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
    (dest / "notebooks").mkdir(exist_ok=True)


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
def test_the_whole_book_builds_strictly(tmp_path, smoke_runs):
    """Every notebook, executed with its smoke parameters by the runner, renders into the full book with
    `-n -W` (zero warnings, every reference and glue key resolved), and every verdict is collected.
    (`make book` builds the same pages at the papers' settings.)"""
    names = nbs.all_notebooks()
    root = tmp_path / "book"
    copy_book_frame(root, names, execute="off")
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    (root / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))  # the real table of contents
    records = []
    for name in names:
        code, stderr, out = smoke_runs[name]
        assert code == 0, f"{name} did not run:\n{stderr}"
        dest = root / "notebooks" / f"{name}.ipynb"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(out / f"{Path(name).name}.ipynb", dest)
        records += read_run(out)["records"]
    (root / "_build").mkdir()
    (root / "_build" / book.VERDICT_PAGE).write_text(book.verdict_table(names, records, []))
    proc = subprocess.run([JB, "build", str(root), "-n", "-W", "--keep-going"], capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    warnings = [line for line in log.splitlines() if "WARNING" in line or "ERROR" in line or "Exception" in line]
    assert proc.returncode == 0 and not warnings, "\n".join(warnings) or log[-4000:]
    assert (root / "_build" / "html" / "index.html").is_file()
    for name in names:
        page = (root / "_build" / "html" / "notebooks" / f"{name}.html").read_text()
        assert "&lt;Figure size" not in page, f"{name}: a figure rendered as text, not as an image"
        assert "| claim | quantity |" not in page, f"{name}: the verdict table did not render as a table"
    summary = book.collect_results(root / "_build", names)
    assert not summary["missing"], summary
    assert not summary["failed"], summary
    # every formula must typeset: MathJax errors (e.g. "Double exponent") are invisible to Sphinx
    if os.environ.get("COMPANION_NO_BROWSER") == "1":
        pytest.skip("COMPANION_NO_BROWSER=1: TeX rendering not checked")
    assert book.find_browser(), "Chromium is needed to check the TeX (`make test` installs it; or set COMPANION_NO_BROWSER=1)"
    bad = book.check_math(root / "_build" / "html")
    assert not bad, f"TeX errors: {bad}"
