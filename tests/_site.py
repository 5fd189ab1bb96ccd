"""Building test copies of the book: the real _config.yml, book/ pages and site files, with a table of
contents of chosen notebooks (shared by site/test_book.py and site/test_site.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from _util import ROOT, read_run

JB = str(Path(sys.executable).with_name("jupyter-book"))
SITE_FILES = ("CITATION.cff", "LICENSE")
# pages that run sweeps of the real notebooks when executed (tests/site/test_sweeps_page.py builds them); the
# copies below hold no real notebooks (or none executed), so they leave these pages out of their contents
SWEEP_PAGES = {"book/sweeps"}
# pages left out of a book of chosen notebooks: the API reference's docstrings cite the statements of every
# notebook (the whole smoke site, with the real table of contents, keeps it)
PARTIAL_OUT = {"book/api"}


def real_toc() -> dict:
    """The real table of contents without :data:`SWEEP_PAGES`."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    for part in toc["parts"]:
        part["chapters"] = [c for c in part["chapters"] if c["file"] not in SWEEP_PAGES]
    return toc


def copy_book_frame(dest: Path, toc_notebooks: list[str], execute: str) -> None:
    """The real _config.yml and book/ pages, with a table of contents listing ``toc_notebooks``."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "book", dest / "book")
    for name in SITE_FILES:
        if (ROOT / name).is_file():
            shutil.copy(ROOT / name, dest / name)
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["execute"]["execute_notebooks"] = execute
    (dest / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    toc = real_toc()
    for part in toc["parts"]:
        part["chapters"] = [
            c for c in part["chapters"] if not c["file"].startswith("notebooks/") and c["file"] not in PARTIAL_OUT
        ]
    toc["parts"] = [p for p in toc["parts"] if p["chapters"]]
    toc["parts"].insert(1, {"caption": "Notebooks", "chapters": [{"file": f"notebooks/{n}"} for n in toc_notebooks]})
    (dest / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
    (dest / "notebooks").mkdir(exist_ok=True)
    # the generated pages that book/ includes (`companion book` writes them from the records of its build)
    (dest / "_build").mkdir(exist_ok=True)
    for page in ("verdicts.md", "glance.md"):
        if not (dest / "_build" / page).is_file():
            (dest / "_build" / page).write_text("Written when the notebooks of this build have run.\n")


def build_smoke_site(root: Path, names: list[str], smoke_runs: dict) -> dict:
    """Every notebook, executed with its smoke parameters by the runner, rendered into the whole book
    (the real table of contents) with ``-n -W``; the results collected and published as ``make book``
    does. Returns the build's log, exit status, records and summary."""
    from companion.site import book

    copy_book_frame(root, names, execute="off")
    toc = real_toc()
    (root / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))  # the real table of contents
    records, not_run = [], {}
    for name in names:
        code, stderr, out = smoke_runs[name]
        if code != 0:
            not_run[name] = stderr
            continue
        dest = root / "notebooks" / f"{name}.ipynb"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(out / f"{Path(name).name}.ipynb", dest)
        records += read_run(out)["records"]
    (root / "_build").mkdir(parents=True, exist_ok=True)
    (root / "_build" / book.VERDICT_PAGE).write_text(book.verdict_table(names, records, []))
    (root / "_build" / book.GLANCE_PAGE).write_text(book.glance_table(records))
    proc = subprocess.run([JB, "build", str(root), "-n", "-W", "--keep-going"], capture_output=True, text=True)
    summary = book.collect_results(root / "_build", names)
    return {"root": root, "html": root / "_build" / "html", "returncode": proc.returncode,
            "log": proc.stdout + proc.stderr, "records": records, "summary": summary, "not_run": not_run}
