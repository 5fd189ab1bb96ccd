"""The "Sweeps" page (book/sweeps.md, companion.sweeps_page): its sweeps' parameters are valid for the
notebooks at every size (checked against the parameters cells, no kernel), the printed commands parse as
`companion sweep` commands with those points, and (slow) the page's three sweeps run through run_sweep at
the test size, every point reaching its verdict and every expected claim present and read."""

import math
import shlex

import pytest

from companion import results as R
from companion import sweeps_page as SP
from companion.sweep import expand_grid, parse_grid


@pytest.mark.parametrize("size", ["book", "test", "cluster"])
@pytest.mark.parametrize("name", list(SP.SWEEPS))
def test_points_valid(name, size):
    pts = SP.points_of(name, size)
    grid = SP.spec(name, size)["grid"]
    assert len(pts) == math.prod(len(v) for v in grid.values())


@pytest.mark.parametrize("name", list(SP.SWEEPS))
def test_command_is_the_sweep(name):
    """The page's command, parsed as the CLI does, gives the same points as the sweep the page runs."""
    argv = shlex.split(SP.command(name, "book"))
    assert argv[:3] == ["companion", "sweep", SP.SWEEPS[name]] and "--scheduler" in argv
    grid = [argv[i + 1] for i, a in enumerate(argv) if a == "--grid"]
    fixed_text = {argv[i + 1]: argv[i + 2] for i, a in enumerate(argv) if a == "-p"}
    pts = expand_grid(SP.SWEEPS[name], parse_grid(grid), fixed_text=fixed_text)
    assert pts == SP.points_of(name, "book")
    assert "--scheduler" not in SP.command(name, "book", scheduler=None)


@pytest.mark.slow
def test_page_sweeps_run(tmp_path):
    """The three sweeps at the test size: no point crashes and every claim the page reads is there."""
    readers = {"mesa_T": SP.mesa_T_rows, "cot_k_eta": SP.cot_k_eta_rows, "mesa_laws": SP.mesa_laws_rows}
    for name in SP.SWEEPS:
        s = SP.run(name, tmp_path / name, size="test", workers=2)
        assert s["error"] == 0 and s["ok"] + s["failed"] == s["points"], s
        rows = readers[name](R.load(tmp_path / name))
        assert rows, name
        for r in rows:
            assert r["status"] not in ("missing", "error") and math.isfinite(r["measured"]), (name, r)
