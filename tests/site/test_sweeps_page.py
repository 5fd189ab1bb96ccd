"""The "Sweeps" page (book/sweeps.md, companion.site.sweeps_page): its sweeps' parameters are valid for the
notebooks at every size (checked against the parameters cells, no kernel), the printed commands parse as
`companion sweep` commands with those points, and (slow) the page's three sweeps run through run_sweep at
the test size, every point reaching its verdict and every expected claim present and read."""

import math
import shlex

import pytest

from companion.run import table as sweep_table
from companion.run.grid import expand_grid, parse_grid
from companion.site import sweeps_page


@pytest.mark.parametrize("size", ["book", "test", "cluster"])
@pytest.mark.parametrize("name", list(sweeps_page.SWEEPS))
def test_points_valid(name, size):
    pts = sweeps_page.points_of(name, size)
    grid = sweeps_page.spec(name, size)["grid"]
    assert len(pts) == math.prod(len(v) for v in grid.values())


@pytest.mark.parametrize("name", list(sweeps_page.SWEEPS))
def test_command_is_the_sweep(name):
    """The page's command, parsed as the CLI does, gives the same points as the sweep the page runs."""
    argv = shlex.split(sweeps_page.command(name, "book"))
    assert argv[:3] == ["companion", "sweep", sweeps_page.SWEEPS[name]] and "--scheduler" in argv
    grid = [argv[i + 1] for i, a in enumerate(argv) if a == "--grid"]
    fixed_text = {argv[i + 1]: argv[i + 2] for i, a in enumerate(argv) if a == "-p"}
    pts = expand_grid(sweeps_page.SWEEPS[name], parse_grid(grid), fixed_text=fixed_text)
    assert pts == sweeps_page.points_of(name, "book")
    assert "--scheduler" not in sweeps_page.command(name, "book", scheduler=None)


@pytest.mark.slow
def test_page_builds_strictly(tmp_path):
    """book/sweeps.md executed by the strict Jupyter Book build (its sweeps at the test size, on the real
    notebooks, through run_sweep): no warning, no stray stderr, three figures, the timings and commands on
    the page; no point of the three sweeps crashed and every claim the page reads is there. The pages it
    links to are stand-ins holding their labels."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import yaml
    from _site import copy_book_frame

    from _util import ROOT

    root = tmp_path / "book"
    copy_book_frame(root, [], execute="force")  # the real book/ pages and config; never a cached execution
    shutil.copytree(ROOT / "notebooks", root / "notebooks", dirs_exist_ok=True)
    (root / "book" / "targets.md").write_text(
        "# Linked pages\n\n" + "".join(f"({label})=\n## {label}\n\n" for label in
                                       ("mesa-prop4-1", "mesa-thm4-2", "cot-thm3-2")))
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())  # the real contents, the notebooks replaced by targets
    for part in toc["parts"]:
        part["chapters"] = [c for c in part["chapters"] if not c["file"].startswith("notebooks/") and c["file"] != "book/api"]
    toc["parts"] = [p for p in toc["parts"] if p["chapters"]]
    toc["parts"][0]["chapters"].append({"file": "book/targets"})
    (root / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
    (root / "_build").mkdir(exist_ok=True)
    (root / "_build" / "verdicts.md").write_text("No verdicts in this test build.\n")
    import os

    env = dict(os.environ, COMPANION_SWEEPS_SIZE="test", COMPANION_ROOT=str(root))
    jb = str(Path(sys.executable).with_name("jupyter-book"))
    proc = subprocess.run([jb, "build", str(root), "-n", "-W", "--keep-going"], capture_output=True, text=True,
                          env=env, timeout=900, cwd=root)
    log = proc.stdout + proc.stderr
    warnings = [ln for ln in log.splitlines() if ("WARNING" in ln or "ERROR" in ln or "Exception" in ln)
                and "Kernel is running over TCP" not in ln]
    assert proc.returncode == 0 and not warnings, "\n".join(warnings) or log[-4000:]
    page = (root / "_build" / "html" / "book" / "sweeps.html").read_text()
    assert page.count('<img alt=') >= 3 or page.count("<img") >= 3
    for name in sweeps_page.SWEEPS:
        assert sweeps_page.SWEEPS[name] in page and (root / "_build" / "sweeps" / name / "results.jsonl").is_file()
    assert "--scheduler" in page and "&lt;Figure size" not in page
    readers = {"mesa_T": sweeps_page.mesa_T_rows, "cot_k_eta": sweeps_page.cot_k_eta_rows, "mesa_laws": sweeps_page.mesa_laws_rows}
    for name in sweeps_page.SWEEPS:
        table = sweep_table.load(root / "_build" / "sweeps" / name)
        assert table.points and not table.skipped, name
        assert not [p for p in table.points if p.get("status") == "error"], (name, "a point crashed")
        rows = readers[name](table)
        assert rows, name
        for r in rows:
            assert r["status"] not in ("missing", "error") and math.isfinite(r["measured"]), (name, r)


def test_cache_guard_drops_the_page_when_a_swept_notebook_changes(tmp_path):
    """jupyter-cache keys the page by its own code cells: the guard drops its cached execution when a
    notebook it sweeps changes (and only then), so the page never shows results of an old notebook."""
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    root = tmp_path
    for nb in sweeps_page.SWEEPS.values():
        (root / "notebooks" / nb).parent.mkdir(parents=True, exist_ok=True)
        (root / "notebooks" / f"{nb}.md").write_text(f"# {nb}\n")
    (root / "book").mkdir()
    (root / sweeps_page.PAGE).write_text("# page\n")
    cache_dir = root / "_build" / ".jupyter_cache"

    def cache_page():
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1", execution_count=1)])
        get_cache(str(cache_dir)).cache_notebook_bundle(CacheBundleIn(nb, str(root / sweeps_page.PAGE)), check_validity=False)

    def n_records():
        return len(get_cache(str(cache_dir)).list_cache_records())

    sweeps_page.guard_cache(cache_dir, root)  # first build: stamp written
    cache_page()
    assert sweeps_page.guard_cache(cache_dir, root) is False and n_records() == 1
    (root / "notebooks" / f"{sweeps_page.SWEEPS['mesa_T']}.md").write_text("# changed\n")
    assert sweeps_page.guard_cache(cache_dir, root) is True and n_records() == 0
    cache_page()
    assert sweeps_page.guard_cache(cache_dir, root) is False and n_records() == 1
