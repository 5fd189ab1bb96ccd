"""Building the book: cache freshness, the strict Jupyter Book build, and the results of that build.

``companion book`` (what ``make book`` runs):

1. **Cache guard.** jupyter-cache re-executes a notebook only when its code cells change. The notebooks'
   results also depend on the pinned stack, whose hash is stored beside the cache (when it changes, the whole
   cache is wiped, :func:`guard_cache`), and on the package code they ran, which each page's cache record
   names and hashes (:func:`page_code`): a page whose code changed is removed and runs again, the others stay
   (:func:`drop_stale_pages`). Outputs on the site are therefore never stale.
2. **Execution, two at a time.** Every page of the table of contents with code cells that the cache does
   not hold is executed into jupyter-cache by :func:`pre_execute`, two notebooks at a time with one kernel
   thread each (myst-nb itself executes one notebook at a time): the same reader, kernel, working folder,
   timeout and cache record as myst-nb's own ``cache`` mode, so the build then finds every page cached.
   A notebook that raises is not cached; the build executes it again and reports it.
3. **Strict build.** ``jupyter-book build . -n -W --keep-going``: any warning (a broken reference, stray
   stderr, a notebook that raises, e.g. a failed verdict) fails the build.
4. **Results.** Every verdict table carries its records in the output metadata; they are read back
   from the executed notebooks of *this* build (``_build/jupyter_execute``) and written to
   ``_build/results/<notebook>.jsonl`` and ``_build/results/all.jsonl``, with a summary, and published
   with the site (``_build/html/results/``); the "Every claim" page (``_build/verdicts.md``) and the
   "Results at a glance" page (``_build/glance.md``, one row per numbered result of both registries) are
   written from them. A notebook in the table of contents without records, or any failed claim, makes the
   command fail.
5. **Checks and the PDF.** The whole book as one page (a single-page build from the same doctrees) is typeset
   once by MathJax in headless Chromium, which reports the TeX errors of every page, and printed by the same
   browser to ``_build/html/companion.pdf``, offline (:func:`print_book`); every page of the site must load the
   site's own MathJax (:func:`mathjax_unreachable`, a check of the files, no browser).

The site itself (the papers' numbering, provenance and executed notebooks per page, alt text, styles) is
:mod:`companion.site.sphinx_ext`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from multiprocessing import get_context
from multiprocessing.util import Finalize
from pathlib import Path

import nbformat
import yaml

from companion.mesa.lanes import host

from .. import cache as run_cache
from .. import notebooks as nbs
from ..mesa.results.plan import paper_runs, warm_run_cache
from ..paths import repo_root
from ..registry import all_results
from ..report import RESULTS_URL, counts, dashboard_markdown, glance_markdown
from ..run.jupyter_kernel import WarmKernel
from ..text import slug
from ..threads import available_cores, use_threads
from ..verdict import METADATA_KEY
from .sphinx_ext import write_where_page
from .sweeps_page import guard_cache as guard_sweeps_page

__all__ = [
    "code_hash", "guard_cache", "cell_imports", "page_code", "drop_stale_pages", "toc_pages", "execution_order", "COLD_PAGE_SECONDS",
    "pre_execute",
    "collect_results", "publish_results", "verdict_table",
    "glance_table", "records_from_cache", "write_tables", "find_browser", "check_math", "mathjax_unreachable",
    "print_book", "typeset_and_print", "build", "PDF_NAME", "CHROMIUM_FLAGS"
]


CACHE_DIR = Path("_build/.jupyter_cache")


DOCTREES = Path("_build/.doctrees")  # Sphinx's environment: which pages it has read, and when


HASH_FILE = ".companion-code-hash"


def code_hash(root: Path | None = None) -> str:
    """Hash of what every page's outputs depend on besides the package code its kernel ran (which
    :func:`drop_stale_pages` checks page by page) and its own code cells: the numerical stack and the host CPU
    (:func:`companion.cache.stack_signature`) and the pinned stack (``constraints.txt``, ``pyproject.toml``)."""

    root = root or repo_root()
    h = hashlib.sha256(run_cache.stack_signature().encode())
    for f in (root / "constraints.txt", root / "pyproject.toml"):
        if f.is_file():
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()


#: the keys of a cached page's record data that name the package code it depends on (:func:`page_code`)
FILES_KEY, FILES_HASH_KEY = "package_files", "package_hash"

#: run in a page's kernel before and after the page: the package modules loaded (``_loaded_modules``)
_LOADED_CODE = ("import sys as _companion_sys\n"
                "print(sorted(m for m in list(_companion_sys.modules) if m == 'companion' or m.startswith('companion.')))\n"
                "del _companion_sys")


def cell_imports(nb) -> set[str]:
    """The package modules the code cells of the notebook ``nb`` import (``import companion.x``, ``from
    companion.x import y``: ``companion.x`` and, where it is a module, ``companion.x.y``); IPython's magic and shell
    lines are skipped, a cell that does not parse gives nothing."""
    out: set[str] = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        src = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in cell.source.splitlines())
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                out.add(node.module)
                out.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in out if m == "companion" or m.startswith("companion.")}


def page_code(modules, whole: bool = False) -> dict:
    """The package code an executed page depends on, as the record data of its jupyter-cache entry: the files
    (relative to the package) of the import closures (:func:`companion.cache.import_closure`, imports inside
    functions included) of the package ``modules`` (``_execute_into_cache``: those the page's code cells
    import, :func:`cell_imports`, and those its kernel loaded while it ran, e.g. through ``importlib``), and their
    hash (:func:`companion.cache.hash_files`). ``whole`` (or ``modules`` None: not known): every package source.
    The static closures add what a worker process of the page imports that the kernel did not."""
    pkg = Path(run_cache.__file__).resolve().parent
    if whole or modules is None:
        files = sorted(str(f.relative_to(pkg)) for f in pkg.rglob("*.py"))
    else:
        found: set[str] = set()
        for m in modules:
            try:
                found.update(run_cache.import_closure(m))
            except ValueError:  # not a source file of the package (a namespace, a module made at run time)
                continue
        files = sorted(found)
    return {FILES_KEY: files, FILES_HASH_KEY: _files_hash(files)}


def _files_hash(files) -> str | None:
    """:func:`companion.cache.hash_files` of package-relative ``files`` now; None if one is gone."""
    pkg = Path(run_cache.__file__).resolve().parent
    paths = [pkg / f for f in files]
    if not all(p.is_file() for p in paths):
        return None
    return run_cache.hash_files(pkg, paths)


#: the run cache of a build (:func:`companion.cache.cache_dir` without ``$COMPANION_CACHE_DIR``)
RUN_CACHE = run_cache.BASE


def prune_run_cache(base: Path) -> list[str]:
    """Remove from the run cache ``base`` the folders that no key of the current code names
    (:func:`companion.cache.is_current`: a ``<module>-<hash>`` folder whose hash is not that of the module's import
    closure now, a bare ``<hash>`` folder but that of every source now). A folder of another name is kept. Returns
    the names removed. Each code change of a run's closure otherwise leaves its old folder behind for good."""
    if not base.is_dir():
        return []
    removed = []
    for folder in sorted(base.iterdir()):
        if folder.is_dir() and run_cache.is_current(folder.name) is False:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
    return removed


def drop_stale_pages(root: Path) -> list[str]:
    """Remove from the jupyter cache every executed page whose package code changed since it ran (its record's
    :func:`page_code` no longer matches, or it has none), and drop Sphinx's environment if any was removed
    (``forget_read_pages``). Returns the pages removed (their paths), so that only they run again."""
    if not (root / CACHE_DIR).is_dir():
        return []
    from jupyter_cache import get_cache

    cache = get_cache(str(root / CACHE_DIR))
    dropped = []
    for rec in cache.list_cache_records():
        data = rec.data or {}
        files = data.get(FILES_KEY)
        if files is None or _files_hash(files) != data.get(FILES_HASH_KEY):
            cache.remove_cache(rec.pk)
            dropped.append(str(rec.uri))
    if dropped:
        forget_read_pages(root)
    return dropped


def forget_read_pages(root: Path) -> None:
    """Drop Sphinx's environment, so the next build reads every page again.

    Sphinx re-reads a page only when its *source* changed; a page re-executed because the package changed (or,
    for the Sweeps page, because a swept notebook changed) has an unchanged source, and Sphinx would keep the
    HTML of its old outputs beside the new results (seen: after a change of ``companion.report``, the pages kept
    their old verdict tables while the dashboard showed the new ones)."""
    shutil.rmtree(root / DOCTREES, ignore_errors=True)


def guard_cache(root: Path | None = None) -> bool:
    """Wipe the jupyter cache if the numerical or the pinned stack changed (:func:`code_hash`). Returns True if
    wiped. A change of the package's code is checked page by page (:func:`drop_stale_pages`)."""
    root = root or repo_root()
    cache = root / CACHE_DIR
    stamp = cache / HASH_FILE
    current = code_hash(root)
    wiped = False
    if cache.exists() and (not stamp.is_file() or stamp.read_text().strip() != current):
        shutil.rmtree(cache)
        forget_read_pages(root)
        wiped = True
    cache.mkdir(parents=True, exist_ok=True)
    stamp.write_text(current + "\n")
    return wiped


def toc_pages(root: Path) -> list[Path]:
    """The source files of the table of contents (``_toc.yml``), in book order."""

    out: list[Path] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for key in ("root", "file"):
                if isinstance(node.get(key), str):
                    out.append(root / f"{node[key]}.md")
            for value in node.values():
                if isinstance(value, (list, dict)):
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(yaml.safe_load((root / "_toc.yml").read_text()))
    return [p for p in out if p.is_file()]


#: the warm kernel of a page-executing worker process (``_execute_into_cache``), shut down when the worker ends
_WARM = None


def _warm_kernel():
    """This worker process's :class:`companion.run.jupyter_kernel.WarmKernel`, started on first use and shut down
    (with its socket folder) when the process ends."""
    global _WARM
    if _WARM is None:
        _WARM = WarmKernel()
        Finalize(_WARM, _WARM.shutdown, exitpriority=10)
    return _WARM


def _loaded_modules(warm) -> list[str] | None:
    """The package modules loaded in the warm kernel's interpreter (``_LOADED_CODE``), None if it cannot say."""
    out: list[str] = []

    def hook(msg):
        if msg["msg_type"] == "stream" and msg["content"].get("name") == "stdout":
            out.append(msg["content"]["text"])

    try:
        reply = warm.kc.execute_interactive(_LOADED_CODE, store_history=False, timeout=60, output_hook=hook)
        if reply["content"].get("status") != "ok":
            return None
        return list(ast.literal_eval("".join(out).strip()))
    except Exception:  # a kernel that died or does not answer: every source counts
        return None


def _execute_into_cache(cache_path: str, path: str, timeout: int, whole: bool = False) -> tuple[str, float, str | None]:
    """Execute one MyST notebook as myst-nb's ``cache`` mode does (its reader, the notebook's folder as
    working directory, no errors allowed, the notebook's own ``execution`` metadata first) and store it in
    jupyter-cache. Runs in a worker process, in the worker's warm kernel: the pages of one worker share the
    imports, compiled kernels and hashes of the sources, and each starts from a reset namespace
    (:class:`companion.run.jupyter_kernel.WarmKernel`, whose runs record what runs in new kernels record).

    The record's data names the package code the page depends on (:func:`page_code` of the modules its code
    cells import and of those the kernel loaded while it ran; ``whole``: every source, for a page whose work runs in other processes, such as the Sweeps page's
    notebooks), which :func:`drop_stale_pages` checks before the next build.

    A page that raises (a failed claim) is cached too, with its outputs up to the error and ``failed`` in the
    record's data: this build renders it and reads its records without executing it again, and the next
    :func:`pre_execute` drops it and tries it again. A timeout or a dead kernel leaves nothing in the cache."""

    use_threads(1)  # two notebooks share the cores
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from myst_nb.core.read import myst_nb_reader_plugin
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = myst_nb_reader_plugin(path)
    meta = nb.metadata.get("execution", {})
    cwd = str(Path(path).parent)
    t0 = time.perf_counter()
    warm = _warm_kernel()
    try:
        km = warm.ready(cwd)
        before = None if whole else _loaded_modules(warm)  # the modules the pages before left in this kernel
        client = NotebookClient(nb, km=km, timeout=meta.get("timeout", timeout),
                                allow_errors=meta.get("allow_errors", False), record_timing=False,
                                resources={"metadata": {"path": cwd}})
        client.kc = warm.kc  # nbclient starts no client of its own when it has one
        client.execute()
    except (CellTimeoutError, DeadKernelError) as err:
        warm.shutdown()  # the next page starts a new kernel
        return path, time.perf_counter() - t0, f"{type(err).__name__}: {str(err).strip().splitlines()[-1:]}"
    except CellExecutionError as err:
        failed = f"{type(err).__name__}: {str(err).strip().splitlines()[-1:]}"
    else:
        failed = None
    seconds = time.perf_counter() - t0
    after = None if whole else _loaded_modules(warm)
    loaded = None if before is None or after is None else set(after) - set(before)
    code = page_code(None if loaded is None else loaded | cell_imports(nb), whole=whole)
    # one writer at a time: jupyter-cache's write (record, then notebook file, then truncation) read by another
    # process between the two statements of its truncation deleted a record whose file was not yet written
    # ("Notebook file does not exist for cache record PK: 2", seen with two pages side by side on a loaded machine)
    with run_cache.file_lock(Path(cache_path) / "companion-write.lock"):
        get_cache(cache_path).cache_notebook_bundle(
            CacheBundleIn(nb, path, data={"execution_seconds": seconds, "failed": failed is not None, **code}),
            check_validity=False, overwrite=True)
    return path, seconds, failed


def _page_seconds(root: Path, update: dict[str, float] | None = None) -> dict[str, float]:
    """Seconds each page took when it was last executed (``_build/.page_seconds.json``; ``update`` adds to it)."""

    path = root / "_build" / ".page_seconds.json"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if update:
        known.update(update)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
        tmp.replace(path)
    return known


#: the seconds the slowest pages take in a cold build (a fresh clone, 2-core AMD EPYC, two pages at a time), for the
#: order of a build that has no times of its own yet (:func:`execution_order`)
COLD_PAGE_SECONDS = {"notebooks/cot/experiments.md": 174.0, "notebooks/cot/cor3_1_floor.md": 135.0,
                     "notebooks/cot/looped.md": 96.0}


def execution_order(root: Path, pages: list[Path]) -> list[Path]:
    """``pages`` slowest first, so that the workers finish together: by the seconds each page took in the last build
    that executed it (``_build/.page_seconds.json``), else in a cold build (:data:`COLD_PAGE_SECONDS`), else the
    Sweeps page, then the cot pages (they train), then the mesa pages (their training runs are computed before
    them, :func:`pre_execute`)."""
    last = _page_seconds(root)

    def seconds(p: Path) -> float:
        rel = p.relative_to(root).as_posix()
        return last.get(rel, COLD_PAGE_SECONDS.get(rel, 30.0 if p.name == "sweeps.md" else 20.0 if "/cot/" in rel else 10.0))

    return sorted(pages, key=lambda p: -seconds(p))


def pre_execute(root: Path, jobs: int = 2, warm_mesa: bool = True) -> dict[str, float]:
    """Execute every page of the table of contents that has code cells and is not in the jupyter cache (or is
    there from a build in which it failed), ``jobs`` at a time (slowest first), into the cache
    (``_execute_into_cache``). Returns page -> seconds of the pages executed.

    With ``warm_mesa``, when a mesa notebook is to run, every paper-scale training run of the mesa
    notebooks (:func:`companion.mesa.results.plan.paper_runs`) is computed into the run cache first, ``jobs`` at a
    time: the notebooks share runs, and two of them side by side would train a shared run twice.

    Only in ``execute_notebooks: cache`` mode (``_config.yml``), whose per-cell ``timeout`` it uses."""

    from jupyter_cache import get_cache
    from myst_nb.core.read import myst_nb_reader_plugin

    execute = (yaml.safe_load((root / "_config.yml").read_text()) or {}).get("execute", {})
    if execute.get("execute_notebooks") != "cache" or Path(execute.get("cache", str(CACHE_DIR))) != CACHE_DIR:
        return {}
    timeout = int(execute.get("timeout", 1800))
    cache = get_cache(str(root / CACHE_DIR))
    todo = []
    for page in toc_pages(root):
        text = page.read_text()
        if "kernelspec:" not in text or "{code-cell}" not in text:
            continue
        try:
            rec = cache.match_cache_notebook(myst_nb_reader_plugin(str(page)))
        except KeyError:
            todo.append(page)
            continue
        if rec.data.get("failed"):  # cached for the build in which it failed: tried again
            cache.remove_cache(rec.pk)
            todo.append(page)
    todo = execution_order(root, todo)
    done: dict[str, float] = {}
    if not todo:
        return done

    if warm_mesa and any("/mesa/" in str(p) for p in todo) and run_cache.cache_dir() is not None:
        # the mesa notebooks share training runs: compute them once, in parallel, into the run cache first

        print(f"companion book: {len(paper_runs())} mesa training runs into the run cache, {jobs} at a time", flush=True)
        print(f"companion book: mesa runs ready in {warm_run_cache(jobs, log=None):.0f} s", flush=True)
    print(f"companion book: executing {len(todo)} page(s), {jobs} at a time", flush=True)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=get_context("spawn")) as pool:
        # a page outside notebooks/ (the Sweeps page) runs notebooks in other processes: all the package counts
        futs = [pool.submit(_execute_into_cache, str(root / CACHE_DIR), str(p), timeout,
                            p.relative_to(root).parts[0] != "notebooks") for p in todo]
        for fut in as_completed(futs):
            path, seconds, err = fut.result()
            rel = Path(path).relative_to(root)
            done[str(rel)] = seconds
            _page_seconds(root, {str(rel): seconds})
            print(f"companion book: {rel} {'FAILED (the build reports it)' if err else 'executed'} in {seconds:.0f} s"
                  + (f": {err}" if err else ""), flush=True)
    # the pages' own wall time (the mesa runs before them are reported on their own line)
    print(f"companion book: {len(done)} page(s) executed in {time.perf_counter() - t0:.0f} s "
          f"(sum of page times {sum(done.values()):.0f} s)", flush=True)
    return done


def _records_from_notebook(path: Path) -> list[dict]:
    return _records_of(nbformat.read(path, as_version=4))


def records_from_cache(root: Path, names: list[str]) -> dict[str, list[dict]] | None:
    """The verdict records of the notebooks ``names`` as jupyter-cache holds their executed outputs (after
    :func:`pre_execute`: the outputs the build will render), ``{name: records}``; ``None`` when a page is not in
    the cache (the build itself will execute it, and only its outputs tell)."""
    from jupyter_cache import get_cache
    from myst_nb.core.read import myst_nb_reader_plugin

    cache = get_cache(str(root / CACHE_DIR))
    out: dict[str, list[dict]] = {}
    for name in names:
        try:
            rec = cache.match_cache_notebook(myst_nb_reader_plugin(str(root / "notebooks" / f"{name}.md")))
        except (KeyError, FileNotFoundError):
            return None
        out[name] = _records_of(cache.get_cache_bundle(rec.pk).nb)
    return out


def _records_of(nb) -> list[dict]:
    records: list[dict] = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {})
            if METADATA_KEY in meta:
                records.extend(meta[METADATA_KEY])
    return records


def collect_results(build_dir: Path, names: list[str] | None = None) -> dict:
    """Read verdict records from ``build_dir/jupyter_execute`` into ``build_dir/results``."""
    names = names if names is not None else nbs.all_notebooks(toc_only=True)
    executed = build_dir / "jupyter_execute"
    results = build_dir / "results"
    if results.exists():
        shutil.rmtree(results)
    results.mkdir(parents=True)

    summary = {"notebooks": {}, "missing": [], "failed": [], "claims": 0}
    everything = []
    for name in names:
        path = executed / "notebooks" / f"{name}.ipynb"
        recs = _records_from_notebook(path) if path.is_file() else []
        if not recs:
            summary["missing"].append(name)
            continue
        (results / f"{slug(name)}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        everything.extend(recs)
        failed = [r["claim"] for r in recs if r.get("status") == "failed"]
        summary["notebooks"][name] = {"claims": len(recs), "failed": failed, **counts(recs)}
        summary["failed"].extend(f"{name}:{c}" for c in failed)
        summary["claims"] += len(recs)
    (results / "all.jsonl").write_text("".join(json.dumps(r) + "\n" for r in everything))
    summary.update(counts(everything))
    (results / "summary.json").write_text(json.dumps(summary, indent=2))
    write_tables(build_dir, names, everything, summary["missing"])
    publish_results(build_dir)
    return summary


def write_tables(build_dir: Path, names: list[str], records: list[dict], missing: list[str]) -> None:
    """The "Every claim" and "Results at a glance" tables (``build_dir/verdicts.md``, ``build_dir/glance.md``),
    each written only when its text changes (an unchanged file keeps Sphinx from reading its page again)."""
    for name, text in ((VERDICT_PAGE, verdict_table(names, records, missing)), (GLANCE_PAGE, glance_table(records))):
        page = build_dir / name
        if not page.is_file() or page.read_text() != text:
            page.write_text(text)


def publish_results(build_dir: Path) -> Path | None:
    """Copy ``build_dir/results`` into the site (``html/results/``), where the "Every claim" page links it."""

    html_dir = build_dir / "html"
    if not (build_dir / "results").is_dir() or not html_dir.is_dir():
        return None
    dest = html_dir / RESULTS_URL
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(build_dir / "results", dest)
    return dest


VERDICT_PAGE = "verdicts.md"  # included by book/verdicts.md from ../_build/verdicts.md


def verdict_table(names: list[str], records: list[dict], missing: list[str]) -> str:
    """MyST for the "Every claim" page (:func:`companion.report.dashboard_markdown`)."""

    return dashboard_markdown(names, records, missing)


GLANCE_PAGE = "glance.md"  # included by book/glance.md from ../_build/glance.md


def glance_table(records: list[dict]) -> str:
    """MyST for the "Results at a glance" page: one row per result of both registries
    (:func:`companion.registry.all_results`), its decisive claim among ``records``
    (:func:`companion.report.glance_markdown`)."""

    return glance_markdown(all_results(), records)


PDF_NAME = "companion.pdf"  # the whole book, at the root of the site (linked from the front page)


# Headless Chromium on a closed network: no background requests (they fail slowly here), no GPU, no sandbox
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _single_page(root: Path, jb_cmd: list[str] | None = None, out_dir: Path | None = None) -> Path:
    """The single-page build (``_build/singlehtml``) from the doctrees of the HTML build (nothing is executed or
    re-read), copied to ``companion-print.html`` at its top: the page is written at the root document's path
    (book/intro.html) but links _static/ and _images/ as if it were at the top. With ``out_dir``, a build of its
    own in ``out_dir/_build/singlehtml`` (its own doctrees: it reads the pages, from jupyter-cache, and can run
    beside the HTML build)."""
    jb = jb_cmd or [_jupyter_book()]
    extra = ["--path-output", str(out_dir)] if out_dir is not None else []
    proc = subprocess.run([*jb, "build", str(root), "--builder", "singlehtml", *extra], cwd=root, capture_output=True,
                          text=True)
    single = (out_dir if out_dir is not None else root) / "_build" / "singlehtml"
    page = single / (_root_doc(root) + ".html")
    if proc.returncode != 0 or not page.is_file():
        raise RuntimeError(f"single-page build failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    index = single / "companion-print.html"
    index.write_text(_print_mathjax(page.read_text()))
    return index


# MathJax's settings for the printed copy only, before its script runs: no hidden MathML copy of each formula for
# screen readers (the site keeps it; a PDF cannot use it) and no menu. The book's thousands of formulas then print
# in 25 s instead of 33 s on a 2-core AMD EPYC, with the same pages
_PRINT_MATHJAX = ("<script>window.MathJax = window.MathJax || {}; MathJax.options = Object.assign(MathJax.options || {}, "
                  "{enableMenu: false, enableAssistiveMml: false, menuOptions: {settings: {assistiveMml: false}}});"
                  "</script>")


def _print_mathjax(html: str) -> str:
    """``html`` with :data:`_PRINT_MATHJAX` just before its MathJax script (unchanged without one)."""
    found = re.search(r"<script[^>]*src=\"[^\"]*tex-[a-z]+\.js", html)
    return html if found is None else html[:found.start()] + _PRINT_MATHJAX + html[found.start():]


# per formula with a TeX error, its message and the page it comes from in the single-page build: the nearest
# "document-<page>" anchor before it (none: the root document, whose text comes first)
_ERRORS_BY_PAGE = """() => {
  const anchors = Array.from(document.querySelectorAll('[id^="document-"]'));
  const outer = Array.from(document.querySelectorAll('[data-mjx-error]'))
    .filter(e => !e.closest('mjx-assistive-mml'));  // one per formula: not its copy in the hidden MathML
  return outer.map(e => {
    let page = null;
    for (const a of anchors) {
      if (a.compareDocumentPosition(e) & Node.DOCUMENT_POSITION_FOLLOWING) page = a.id.slice(9); else break;
    }
    return [page, e.getAttribute('data-mjx-error')];
  });
}"""


def print_book(root: Path, browser: str | None = None, jb_cmd: list[str] | None = None, out_dir: Path | None = None
               ) -> tuple[Path, dict[str, list[str]]]:
    """Typeset the whole book once and print it: the single-page build (``_build/singlehtml``) is opened in headless
    Chromium (offline: the site's own MathJax), MathJax's TeX errors are read per page, and the same typeset page
    is printed (US Letter, margins of 0.4 in as Chromium's own print) to ``_build/html/companion.pdf``.

    One typesetting checks and prints: on the cold build's site it takes 98 s, against 122 s for rendering every
    page one by one (:func:`check_math`) beside a second browser printing the same formulas.
    Returns ``(pdf, errors)``, ``errors`` keyed by page as :func:`check_math` (``"notebooks/mesa/setup.html"``);
    the PDF is written even with errors (the caller decides). Raises RuntimeError if the page does not load or
    the PDF is not written. With ``out_dir``, the single page is a build of its own there (``_single_page``)
    and the PDF is ``out_dir/companion.pdf``: what :func:`build` runs beside the HTML build."""
    browser = browser or find_browser()
    if browser is None:
        raise FileNotFoundError("no Chromium found to print the PDF (install Debian's 'chromium')")
    index = _single_page(root, jb_cmd, out_dir)
    out = (out_dir if out_dir is not None else root / "_build" / "html") / PDF_NAME
    errors = typeset_and_print(index, out, _root_doc(root) + ".html", browser)
    return out, errors


@contextmanager
def _offline_page(browser: str):
    """A page of headless Chromium (playwright's sync API) that loads only local files: the site's own MathJax,
    never the network. Closed with its browser on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=browser, args=[f for f in CHROMIUM_FLAGS if f != "--headless"])
        try:
            ctx = b.new_context()
            ctx.route("**/*", lambda r: r.continue_() if r.request.url.startswith(("file:", "data:", "blob:"))
                      else r.abort())
            ctx.add_init_script(_SCRIPT_ERRORS)
            yield ctx.new_page()
        finally:
            b.close()


def _own_thread(fn, *args):
    """``fn(*args)`` in a thread of its own: playwright's sync API refuses to start in a thread whose asyncio loop
    runs (a Jupyter kernel, or a caller that already drives a browser with it, as the site's tests do)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(fn, *args).result()


def typeset_and_print(index: Path, out: Path, root_page: str, browser: str) -> dict[str, list[str]]:
    """Open the single page ``index`` in headless Chromium (offline), let MathJax typeset it, return its TeX errors
    per page (the page of the nearest ``document-<page>`` anchor before a formula; ``root_page`` before the first)
    and print it to ``out``. Raises RuntimeError if the page does not load or no PDF is written."""
    return _own_thread(_typeset_and_print, index, out, root_page, browser)


def _typeset_and_print(index: Path, out: Path, root_page: str, browser: str) -> dict[str, list[str]]:
    from playwright.sync_api import Error as PlaywrightError

    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    errors: dict[str, list[str]] = {}
    try:
        with _offline_page(browser) as page:
            page.goto(index.as_uri(), wait_until="load", timeout=600_000)
            state = page.evaluate(_MATHJAX_DONE)
            for doc, message in page.evaluate(_ERRORS_BY_PAGE):
                errors.setdefault(f"{doc}.html" if doc else root_page, []).append(message)
            has_math = 'class="math' in index.read_text(errors="replace")
            if has_math and (state != "done" or page.locator("mjx-container").count() == 0):
                errors.setdefault(root_page, []).append(f"the book did not typeset (MathJax: {state})")
            page.emulate_media(media="print")
            margin = "0.4in"
            page.pdf(path=str(out), format="Letter", print_background=True,
                     margin=dict(top=margin, bottom=margin, left=margin, right=margin))
    except PlaywrightError as exc:
        raise RuntimeError(f"Chromium could not typeset or print {index.name}: {str(exc).splitlines()[0]}") from None
    if not out.is_file() or out.stat().st_size < 2_000:
        raise RuntimeError(f"Chromium did not print the PDF {out}")
    return dict(sorted(errors.items()))


def mathjax_unreachable(html_dir: Path) -> dict[str, list[str]]:
    """Pages of the site with formulas whose MathJax script is missing or points to no file (a check of the files,
    no browser: the formulas themselves are typeset once for the whole book by :func:`print_book`)."""
    html_dir = Path(html_dir)
    bad: dict[str, list[str]] = {}
    for f in sorted(html_dir.rglob("*.html")):
        rel = f.relative_to(html_dir)
        if "_modules" in rel.parts:
            continue
        text = f.read_text(errors="replace")
        if 'class="math' not in text:
            continue
        srcs = re.findall(r'<script[^>]*\ssrc="([^"]*(?:mathjax|tex-)[^"]*)"', text, flags=re.IGNORECASE)
        missing = [src for src in srcs if not (f.parent / src.split("?")[0]).is_file()]
        if not srcs or missing:
            bad[str(rel)] = [f"MathJax script not found: {src}" for src in missing] or ["no MathJax script"]
    return bad


def _root_doc(root: Path) -> str:

    toc = yaml.safe_load((root / "_toc.yml").read_text())
    return str(toc.get("root", "index"))


def _jupyter_book() -> str:
    jb = Path(sys.executable).with_name("jupyter-book")
    return str(jb) if jb.exists() else "jupyter-book"


def find_browser() -> str | None:
    """A headless-capable Chromium, if installed (``make`` installs Debian's ``chromium`` when it can)."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def check_math(html_dir: Path, pages: list[str] | None = None, browser: str | None = None) -> dict[str, list[str]]:
    """Render pages in headless Chromium with the site's own (offline) MathJax and return the TeX errors
    MathJax reports, per page (e.g. "Double exponent: use braces to clarify"). The Sphinx build cannot
    see these: it passes TeX through untouched. One browser, driven by playwright, renders the pages one
    after the other, each once MathJax has typeset it."""
    browser = browser or find_browser()
    if browser is None:
        raise FileNotFoundError("no Chromium found to render the pages (install Debian's 'chromium')")
    html_dir = Path(html_dir)
    # the rendered sources of the API reference (``_modules/``, sphinx.ext.viewcode) are code, not typeset pages
    files = [html_dir / f"{p}.html" for p in pages] if pages else sorted(
        f for f in html_dir.rglob("*.html") if "_modules" not in f.relative_to(html_dir).parts)
    return _own_thread(_check_math_one_browser, html_dir, files, browser)


# run in every page before its own scripts: the script files that failed to load (a missing MathJax), so that a
# page whose MathJax cannot load is reported at once, not after the 20 s that a slow start is given
_SCRIPT_ERRORS = """window.__cvScriptErrors = [];
window.addEventListener('error', e => {
  if (e.target && e.target.tagName === 'SCRIPT') window.__cvScriptErrors.push(e.target.src);
}, true);"""

# "none": the page loads no MathJax; "done": typeset; "failed": its script did not load; "timeout": MathJax did not
# start within 20 s
_MATHJAX_DONE = """async () => {
  const mj = document.querySelector('script[src*="mathjax" i], script[src*="tex-" i]');
  if (!mj) return "none";
  const failed = () => (window.__cvScriptErrors || []).includes(mj.src);
  for (let i = 0; i < 400 && !failed() && !(window.MathJax && MathJax.startup && MathJax.startup.promise); i++)
    await new Promise(r => setTimeout(r, 50));
  if (failed()) return "failed";
  if (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) return "timeout";
  await MathJax.startup.promise;
  return "done";
}"""


def _check_math_one_browser(html_dir: Path, files: list[Path], browser: str) -> dict[str, list[str]]:
    """:func:`check_math` over ``files`` (one Chromium for all of them, not one process per page: about 1 s
    per page less)."""
    errors: dict[str, list[str]] = {}
    with _offline_page(browser) as page:
        for f in files:
            text = f.read_text(errors="replace")
            if "math" not in text:
                continue
            found: list[str] = []
            try:
                page.goto(f.as_uri(), wait_until="load", timeout=60_000)
                state = page.evaluate(_MATHJAX_DONE)
                found = page.eval_on_selector_all("[data-mjx-error]", "els => els.map(e => e.getAttribute('data-mjx-error'))")
                if state in ("timeout", "failed") or (page.locator("mjx-container").count() == 0 and 'class="math' in text):
                    found.append(f"page did not render (MathJax: {state})")
            except Exception as exc:  # a page that does not load is an error of the site, reported per page
                found.append(f"page did not render ({type(exc).__name__})")
            if found:
                errors[str(f.relative_to(html_dir))] = found
    return dict(sorted(errors.items()))


#: threads of the training kernels while the build has the machine to itself (its paper runs, before the pages)
BUILD_THREADS_MAX = 4

def build(root: Path | None = None, *, strict: bool = True, force: bool = False, extra_args=()) -> int:
    """Guard the cache, build the book strictly, collect the results. Returns an exit status."""
    root = root or repo_root()
    start = time.perf_counter()
    _execute_pages(root, force)
    cmd = [_jupyter_book(), "build", str(root)] + (["-n", "-W", "--keep-going"] if strict else []) + list(extra_args)
    names = nbs.all_notebooks(root, toc_only=True)
    cached, before = _verdict_tables(root, names)
    write_where_page(root)  # before the two builds below, which both read it
    browser = find_browser()
    printing, pool = None, ThreadPoolExecutor(max_workers=1)
    t_print = time.perf_counter()
    if browser and cached is not None and all(cached[n] and all(r.get("status") != "failed" for r in cached[n]) for n in names):
        # every page cached with passing verdicts: the single page is built and printed beside the HTML build, on
        # the other core (its own folder; kept only if the HTML build succeeds with these same tables)
        printing = pool.submit(print_book, root, browser, None, root / "_build" / "print")
    print("+", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    status = subprocess.call(cmd, cwd=root)
    summary = collect_results(root / "_build", names)
    changed = _tables(root) != before
    if changed:
        # second, incremental pass: only the "Every claim" and "Results at a glance" pages (they include the
        # new tables) are rebuilt
        print("+ (verdict tables changed) " + " ".join(cmd), flush=True)
        status = subprocess.call(cmd, cwd=root) or status
    status = _report(summary, status, time.perf_counter() - t0)
    if printing is not None and (status != 0 or changed):
        try:  # printed from other tables than the final ones, or the build failed: not kept
            printing.result()
        except (RuntimeError, subprocess.TimeoutExpired):
            pass
        printing = None
    pool.shutdown()
    if status == 0 and browser:
        status = _check_tex_and_print(root, browser, printing, t_print)
    elif status == 0:
        print("companion book: no Chromium found; the TeX of the pages was not checked", file=sys.stderr)
    if status == 0:
        print(f"companion book: open {root / '_build' / 'html' / 'index.html'}")
    if status == 0 and os.environ.get("COMPANION_CACHE_DIR") is None:  # a cache of its own, not a shared one
        gone = prune_run_cache(root / RUN_CACHE)
        if gone:
            print(f"companion book: removed {len(gone)} run-cache folder(s) of older code: {', '.join(gone)}")
    print(f"companion book: {time.perf_counter() - start:.0f} s in all, exit status {status}")
    return status


def _execute_pages(root: Path, force: bool) -> None:
    """The cache guards, the mesa kernels and the paper runs, then every page that the cache does not hold,
    two at a time (:func:`pre_execute`)."""
    # the build has the machine to itself: let the training kernels use the cores (they default to one
    # thread, which is faster when several processes share a small machine)
    os.environ.setdefault("COMPANION_THREADS", str(min(BUILD_THREADS_MAX, available_cores())))
    if force and (root / CACHE_DIR).exists():
        shutil.rmtree(root / CACHE_DIR)
    if guard_cache(root):
        print("companion book: the numerical or the pinned stack changed; re-executing every notebook")
    stale = drop_stale_pages(root)
    if stale:
        print(f"companion book: the package code of {len(stale)} page(s) changed; re-executing "
              + ", ".join(str(Path(p).relative_to(root)) if Path(p).is_relative_to(root) else p for p in stale))
    # jupyter-cache keys a page on its own code cells: the Sweeps page also depends on the notebooks it sweeps
    if guard_sweeps_page(root / CACHE_DIR, root):
        forget_read_pages(root)
        print("companion book: a notebook swept by the Sweeps page changed; re-executing that page")
    # compile the fused mesa kernels once, before the notebooks (cached on disk; a no-op after)
    print(f"companion book: mesa kernels ready in {host.warm_up():.1f} s", flush=True)
    pre_execute(root, jobs=min(2, available_cores()))


def _tables(root: Path) -> tuple[str, str]:
    return (root / "_build" / VERDICT_PAGE).read_text(), (root / "_build" / GLANCE_PAGE).read_text()


def _verdict_tables(root: Path, names: list[str]) -> tuple[dict | None, tuple[str, str]]:
    """Write the verdict tables from the executed pages in jupyter-cache, before Sphinx reads them (no second pass);
    a placeholder where a page has not run. Returns the cached records (None: not every page cached) and the
    tables as written."""
    cached = records_from_cache(root, names)
    if cached is not None:
        write_tables(root / "_build", names, [r for n in names for r in cached[n]], [n for n in names if not cached[n]])
    for name, what in ((VERDICT_PAGE, "The table of verdicts is"), (GLANCE_PAGE, "The results at a glance are")):
        if not (root / "_build" / name).is_file():
            (root / "_build" / name).write_text(f"{what} written when the notebooks of this build have run.\n")
    return cached, _tables(root)


def _report(summary: dict, status: int, seconds: float) -> int:
    """Print the build's outcome; a page without records or a failed claim fails the build."""
    print(
        f"companion book: build exit status {status} after {seconds:.0f} s; "
        f"{summary['claims']} claims from {len(summary['notebooks'])} notebooks -> _build/results/"
    )
    if summary["missing"]:
        print(f"companion book: no verdict records from: {', '.join(summary['missing'])}", file=sys.stderr)
    if summary["failed"]:
        print(f"companion book: FAILED claims: {', '.join(summary['failed'])}", file=sys.stderr)
    if status == 0 and (summary["missing"] or summary["failed"]):
        status = 1
    return status


def _check_tex_and_print(root: Path, browser: str, printing, t_print: float) -> int:
    """The TeX of every page and the PDF in one typesetting of the whole book (``printing``: the print made beside
    the HTML build, if kept); a PDF printed from pages whose TeX fails is removed again. Returns the status."""
    status = 0
    t1 = time.perf_counter()
    bad = mathjax_unreachable(root / "_build" / "html")
    try:
        if printing is not None:
            pdf = root / "_build" / "html" / PDF_NAME
            done, tex = printing.result()
            shutil.move(done, pdf)
            t1 = t_print
        else:
            pdf, tex = print_book(root, browser)
        for page, errs in tex.items():
            bad.setdefault(page, []).extend(errs)
        print(f"companion book: TeX checked and {pdf.relative_to(root)} printed in "
              f"{time.perf_counter() - t1:.0f} s" + (" (beside the HTML build)" if printing is not None else ""))
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"companion book: the PDF failed: {exc}", file=sys.stderr)
        status = 1
    for page, errs in bad.items():
        print(f"companion book: TeX errors on {page}: {sorted(set(errs))}", file=sys.stderr)
    if bad:
        status = 1
        (root / "_build" / "html" / PDF_NAME).unlink(missing_ok=True)
    return status
