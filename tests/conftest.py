"""Shared fixtures: one smoke execution of every notebook and two domain-point executions per test
session, started in the background when collection ends (reused by the strict book-build and site tests)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from _util import ROOT, domain_points, smoke_parameters

# A hermetic test environment: a developer's own settings never leak into the tests.
os.environ["COMPANION_ROOT"] = str(ROOT)
# a non-inline backend: figures must still render (companion.plotting registers the SVG formatter)
os.environ["MPLBACKEND"] = "Agg"
os.environ["COMPANION_CACHE_DIR"] = "off"  # every test computes from scratch
for _var in ("COMPANION_RESULTS_DIR", "COMPANION_MAX_BYTES", "COMPANION_THREADS", "PYTHONHASHSEED"):
    os.environ.pop(_var, None)


# two notebook runs at a time on this 2-core class of machine: one kernel thread each
ONE_THREAD = {"COMPANION_THREADS": "1"}
NOTEBOOK_FIXTURES = ("smoke_runs", "domain_runs", "smoke_site")
# the book-build tests (and the Sweeps page's strict build) join the notebook runs in `make test`'s first pytest process
# (tools/run_suite.py), so that the two processes end together: with them in the other process the two took 826 s and
# 1108 s (site/test_book.py, about 140 s of book builds) and 881 s and 1039 s (site/test_sweeps_page.py, 64 s)
# (tests/run/test_cluster.py too: its real Dask clusters mostly wait, which the site phase's single thread leaves room
# for; in the other process it made that process the longer by about a minute)
BOOK_PROCESS_FILES = ("test_book.py", "test_sweeps_page.py", "test_cluster.py")  # tests/site/, tests/run/
EDGE_TESTS_D = 8  # the d of the curvature and divergence tests in tests/mesa/test_step_sizes.py


class NotebookRuns:
    """Every notebook run the session needs (its smoke point, then its two domain points), as `companion run`
    runs it, two at a time (each of the two threads in its own run server and warm kernel), started in the background as soon as collection finds
    a test that needs them. The tests that do not need them run meanwhile (they are ordered first), so the
    runs overlap the single-threaded and waiting parts of the suite (site build, Dask, sweeps)."""

    def __init__(self, base, domain: bool = True):
        from companion.notebooks import all_notebooks

        self.base = base
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="notebook-run")
        self._local = threading.local()
        self.servers: list = []
        self.seconds: dict[str, float] = {}
        # first, compile the fused mesa kernel once per d the runs use (as `companion book` does): in a fresh
        # clone, a run that meets an uncompiled d would wait for it (the compilation holds a lock per kernel, so
        # a kernel is compiled once however many processes ask); the cot smoke runs (queued first) keep the
        # other worker busy meanwhile
        # (and d = 8, which the stability tests of tests/mesa/test_step_sizes.py use in the other pytest process of `make test`: compiled
        # here, in the background, that process loads it instead of compiling it on its critical path)
        dims = [5] + sorted({int(p["d"]) for name, pts in domain_points().items() if name.startswith("mesa/")
                             for p in pts if "d" in p} - {5}) + [EDGE_TESTS_D]
        self.pool.submit(self._warm_kernels, dims)
        smoke = smoke_parameters()
        order = sorted(all_notebooks(), key=lambda n: n.startswith("mesa/"))  # cot first, while the kernels compile
        self.smoke = {name: self.pool.submit(self._run, f"smoke/{name.replace('/', '__')}", name, smoke.get(name, {}))
                      for name in order}
        self.domain: dict = {}
        if domain:
            self.submit_domain()

    def submit_domain(self) -> None:
        """Queue the two domain points of every notebook (after the smoke runs)."""
        self.domain = {(name, i): self.pool.submit(self._run, f"domain/{name.replace('/', '__')}-{i}", name, values or {})
                       for name, pts in domain_points().items() for i, values in enumerate(pts)}

    def _warm_kernels(self, dims: list[int]) -> None:
        import sys

        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"from companion.mesa.lanes import host; host.warm_up({tuple(dims)!r})"],
                       check=False, capture_output=True, timeout=900)
        self.seconds[f"mesa kernels d={','.join(map(str, dims))}"] = time.perf_counter() - t0

    def _server(self):
        """This pool thread's run server (`companion run --serve`): the runs of one thread share a warm kernel,
        as a sweep worker's points do (the kernel changes its directory to the next notebook's folder)."""
        from companion.run.server import RunServer

        server = getattr(self._local, "server", None)
        if server is None or not server.alive():
            server = self._local.server = RunServer(env=ONE_THREAD)
            self.servers.append(server)
        return server

    def _run(self, tag: str, name: str, values: dict):
        out = self.base / tag
        out.mkdir(parents=True)
        pfile = out.parent / f"{out.name}.params.yaml"
        pfile.write_text(yaml.safe_dump(values))
        t0 = time.perf_counter()
        reply, _ = self._server().request(name, pfile, out, lambda: "timed out" if time.perf_counter() - t0 > 900 else None)
        if reply["rc"] is None or not reply["served"]:
            self._server().kill()
        self.seconds[tag] = time.perf_counter() - t0
        proc = subprocess.CompletedProcess(["companion", "run", name, "-f", str(pfile), "-o", str(out)],
                                           reply["rc"] if reply["rc"] is not None else 1, "", reply.get("error") or "")
        return proc, out

    def close(self):
        for fut in [*self.smoke.values(), *self.domain.values()]:
            fut.cancel()
        self.pool.shutdown(wait=True)
        for server in self.servers:
            server.close()


_RUNS: list[NotebookRuns] = []


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects: the marker below is selectable
def pytest_collection_modifyitems(config, items):
    """Tests that need the notebook runs, and the book-build tests, are marked ``notebooks`` (``make test`` runs them
    in a pytest process of their own beside the rest, ``tools/run_suite.py``) and go last, those of the domain points after those of the
    smoke runs (stable order otherwise), so that in one process the runs overlap the rest of the suite."""
    def rank(it):
        names = getattr(it, "fixturenames", ())
        return 2 if "domain_runs" in names else 1 if any(f in names for f in NOTEBOOK_FIXTURES) else 0

    for it in items:
        if rank(it) or it.path.name in BOOK_PROCESS_FILES:
            it.add_marker(pytest.mark.notebooks)
    items.sort(key=rank)


def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return
    # with COMPANION_SITE the site tests look at a built book: smoke_site needs no runs
    wanted = ("smoke_runs", "domain_runs") if os.environ.get("COMPANION_SITE") else NOTEBOOK_FIXTURES
    if any(f in getattr(it, "fixturenames", ()) for it in session.items for f in wanted):
        import tempfile

        domain = any("domain_runs" in getattr(it, "fixturenames", ()) for it in session.items)
        _RUNS.append(NotebookRuns(Path(tempfile.mkdtemp(prefix="companion-notebook-runs-")), domain=domain))


def pytest_sessionfinish(session):
    for runs in _RUNS:
        runs.close()


def pytest_terminal_summary(terminalreporter):
    for runs in _RUNS:
        if runs.seconds:
            slow = sorted(runs.seconds.items(), key=lambda kv: -kv[1])[:8]
            terminalreporter.write_line(f"notebook runs: {len(runs.seconds)} in {sum(runs.seconds.values()):.0f} s "
                                        "(process time, two at a time); slowest: "
                                        + ", ".join(f"{t} {s:.0f} s" for t, s in slow))


def _notebook_runs() -> NotebookRuns:
    if not _RUNS:  # a test that needs the runs was not seen at collection (e.g. requested dynamically)
        import tempfile

        _RUNS.append(NotebookRuns(Path(tempfile.mkdtemp(prefix="companion-notebook-runs-"))))
    return _RUNS[0]


@pytest.fixture(scope="session")
def smoke_runs():
    """Every notebook of the book executed once with its smoke parameters; name -> (returncode, stderr,
    output_dir)."""
    out = {}
    for name, fut in _notebook_runs().smoke.items():
        proc, folder = fut.result()
        out[name] = (proc.returncode, proc.stderr, folder)
    return out


@pytest.fixture(scope="session")
def domain_runs():
    """Every notebook at its two domain points; (name, i) -> (returncode, stderr, output_dir, parameters)."""
    pts = domain_points()
    runs = _notebook_runs()
    if not runs.domain:  # requested without being seen at collection
        runs.submit_domain()
    out = {}
    for (name, i), fut in runs.domain.items():
        proc, folder = fut.result()
        out[(name, i)] = (proc.returncode, proc.stderr, folder, pts[name][i])
    return out


@pytest.fixture(scope="session")
def smoke_site(request, tmp_path_factory):
    """The whole book built once per session from the smoke runs (``tests/_site.py``): shared by the
    strict-build test and the browser tests of the site.

    ``COMPANION_SITE=<book root>`` points these tests at a book built by ``make book`` instead (e.g. the
    paper-settings build: ``COMPANION_SITE=. pytest tests/site/test_site.py``); nothing is executed then."""
    from companion.notebooks import all_notebooks

    if os.environ.get("COMPANION_SITE"):
        return built_site(Path(os.environ["COMPANION_SITE"]).resolve())
    from _site import build_smoke_site

    smoke_runs = request.getfixturevalue("smoke_runs")
    return build_smoke_site(tmp_path_factory.mktemp("site") / "book", all_notebooks(), smoke_runs)


def built_site(root: Path) -> dict:
    """The dictionary of :func:`_site.build_smoke_site` for a book that ``make book`` built at ``root``."""
    import json

    html = root / "_build" / "html"
    results = root / "_build" / "results"
    if not (html / "index.html").is_file() or not (results / "all.jsonl").is_file():
        pytest.exit(f"COMPANION_SITE={root}: no built book there (run make book)", returncode=2)
    records = [json.loads(line) for line in (results / "all.jsonl").read_text().splitlines() if line.strip()]
    summary = json.loads((results / "summary.json").read_text())
    return {"root": root, "html": html, "returncode": 0, "log": "", "records": records, "summary": summary,
            "not_run": {}}
