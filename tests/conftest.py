"""Shared fixtures: one smoke execution of every notebook per test session (reused by the strict
book-build test)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from _util import ROOT, domain_points, run_cli, smoke_parameters

# A hermetic test environment: a developer's own settings never leak into the tests.
os.environ["COMPANION_ROOT"] = str(ROOT)
# a non-inline backend: figures must still render (companion.plotting registers the SVG formatter)
os.environ["MPLBACKEND"] = "Agg"
os.environ["COMPANION_CACHE_DIR"] = "off"  # every test computes from scratch
for _var in ("COMPANION_RESULTS_DIR", "COMPANION_MAX_BYTES", "COMPANION_THREADS", "PYTHONHASHSEED"):
    os.environ.pop(_var, None)


# two notebook runs at a time on this 2-core class of machine: one kernel thread each
ONE_THREAD = {"COMPANION_THREADS": "1"}


@pytest.fixture(scope="session")
def smoke_runs(tmp_path_factory):
    """Execute every notebook of the book once with its smoke parameters (2 at a time, each in its own
    process through `companion run`); returns name -> (returncode, stderr, output_dir)."""
    from companion.notebooks import all_notebooks

    base = tmp_path_factory.mktemp("smoke")
    params = smoke_parameters()

    def one(name: str):
        out = base / name.replace("/", "__")
        out.mkdir(parents=True)
        pfile = out / "smoke-params.yaml"
        pfile.write_text(yaml.safe_dump(params.get(name, {})))
        proc = run_cli("run", name, "-f", str(pfile), "-o", str(out), "--quiet", timeout=900, env=ONE_THREAD)
        return name, (proc.returncode, proc.stderr, out)

    names = all_notebooks()
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, names))


@pytest.fixture(scope="session")
def domain_runs(tmp_path_factory):
    """Execute every notebook at its two domain points (2 at a time); returns (name, i) -> (returncode,
    stderr, output_dir, parameters)."""
    base = tmp_path_factory.mktemp("domain")
    jobs = [(name, i, values) for name, pts in domain_points().items() for i, values in enumerate(pts)]

    def one(job):
        name, i, values = job
        out = base / f"{name.replace('/', '__')}-{i}"
        out.mkdir(parents=True)
        pfile = out / "domain-params.yaml"
        pfile.write_text(yaml.safe_dump(values or {}))
        proc = run_cli("run", name, "-f", str(pfile), "-o", str(out), "--quiet", timeout=900, env=ONE_THREAD)
        return (name, i), (proc.returncode, proc.stderr, out, values)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, jobs))


@pytest.fixture(scope="session")
def smoke_site(smoke_runs, tmp_path_factory):
    """The whole book built once per session from the smoke runs (``tests/_site.py``): shared by the
    strict-build test and the browser tests of the site."""
    from _site import build_smoke_site

    from companion.notebooks import all_notebooks

    return build_smoke_site(tmp_path_factory.mktemp("site") / "book", all_notebooks(), smoke_runs)
