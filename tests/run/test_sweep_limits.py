"""A sweep's limits are checked before any work: the number of points, the workers against the cores, one sweep
per folder (its lock), one spelling of the output options; a killed sweep leaves nothing behind."""


import os
import re
import signal
import subprocess
import sys
import time

import pytest

from companion import cli
from companion.run.store import read_results
from companion.threads import available_cores

from _util import FIXTURES, ROOT, run_cli

TOY = str(FIXTURES / "toy.md")


class _Started(Exception):
    """Raised by the fake LocalCluster: the sweep got as far as starting its workers."""


@pytest.fixture
def no_cluster(monkeypatch):
    """Replace Dask's LocalCluster: record the workers asked for and stop there (nothing is started)."""
    import dask.distributed

    asked: list[int] = []

    def fake(*args, n_workers=None, **kwargs):
        asked.append(n_workers)
        raise _Started(n_workers)

    monkeypatch.setattr(dask.distributed, "LocalCluster", fake)
    import papermill  # noqa: F401  (the one-time imports are not what is timed)

    from companion import notebooks

    notebooks.parameters(TOY)
    return asked


def _grid(n: int, start: int = 1) -> str:
    return ",".join(str(i) for i in range(start, start + n))


# ---------------------------------------------------------------------------------------------- points
def test_a_million_points_are_refused_in_one_line_before_any_worker(tmp_path, capsys, no_cluster):
    out = tmp_path / "big"
    t0 = time.perf_counter()
    rc = cli.main(["sweep", "mesa/setup", "--grid", f"seed={_grid(1000)}", "--grid", f"m={_grid(1000, 1000)}",
                   "-o", str(out)])
    seconds = time.perf_counter() - t0
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and seconds < 2, (rc, seconds)
    assert err == ["companion: error: --max-points: the grid has 1000000 points, more than the limit of 10000; "
                   "sweep fewer values or raise --max-points"]
    assert no_cluster == [] and not out.exists()


def test_max_points_is_an_option_with_a_stated_default(capsys, no_cluster, tmp_path):
    with pytest.raises(SystemExit):
        cli.main(["sweep", "--help"])
    assert re.search(r"--max-points N\s+refuse a grid of more than N points\s+\(default\s+10000\)",
                     capsys.readouterr().out)
    with pytest.raises(_Started):  # the count is shown before any work
        cli.main(["sweep", TOY, "--grid", "seed=1,2,3", "-o", str(tmp_path / "c"), "--quiet"])
    assert "companion: 3 point(s) to sweep (--max-points 10000)" in capsys.readouterr().out
    assert cli.main(["sweep", TOY, "--grid", "seed=1,2,3", "--max-points", "2", "-o", str(tmp_path / "s")]) == 2
    assert "the grid has 3 points, more than the limit of 2" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------- workers
def test_workers_beyond_the_cores_are_capped_with_a_note(tmp_path, capsys, no_cluster):
    t0 = time.perf_counter()
    with pytest.raises(_Started):
        cli.main(["sweep", TOY, "--grid", f"seed={_grid(40)}", "--workers", "1000", "-o", str(tmp_path / "w"),
                  "--quiet"])
    assert time.perf_counter() - t0 < 2
    cores = available_cores()
    assert no_cluster == [cores]  # not one worker more than the machine has cores
    assert f"--workers 1000: this machine has {cores} cores; using {cores} local workers" in capsys.readouterr().err
    assert not (tmp_path / "w" / "sweep.lock").exists()  # released on the way out


def test_the_workers_policy_is_in_the_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"never more than this machine's cores ({available_cores()} here)" in text and "capped" in text


# -------------------------------------------------------------------------------------------------- -o
def test_run_and_sweep_take_the_same_output_options():
    parser = cli.build_parser()
    assert parser.parse_args(["sweep", "x", "-o", "D"]).out == "D"
    assert parser.parse_args(["sweep", "x", "--out", "D"]).out == "D"
    assert parser.parse_args(["run", "x", "-o", "D"]).output == "D"
    assert parser.parse_args(["run", "x", "--out", "D"]).output == "D"


# ------------------------------------------------------------------------------------------------ lock
def _hold_lock(out):
    """Another process holding the lock of ``out`` (until killed)."""
    code = ("import sys, time; from companion.run.sweep import SweepLock; SweepLock(sys.argv[1]).acquire(); "
            "print('held', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_sweep_on_a_locked_folder_is_refused_naming_the_holder(tmp_path, capsys, no_cluster):
    out = tmp_path / "s"
    out.mkdir()
    holder = _hold_lock(out)
    try:
        for extra in ([], ["--resume"]):
            t0 = time.perf_counter()
            rc = cli.main(["sweep", TOY, "--grid", "seed=21,22,23", "-o", str(out), "--quiet", *extra])
            assert rc == 2 and time.perf_counter() - t0 < 2
            err = capsys.readouterr().err.strip().splitlines()[-1]
            assert f"lock {out / 'sweep.lock'} held by pid {holder.pid}" in err, err
        assert no_cluster == []
    finally:
        holder.kill()
        holder.wait()
    # the holder died without a word: its lock is stale and taken over
    from companion.run.store import SweepLock

    lock = SweepLock(out).acquire()
    assert (out / "sweep.lock").read_text().strip() == str(os.getpid())
    lock.release()
    assert not (out / "sweep.lock").exists()


@pytest.mark.slow  # Dask sweep processes and kernels: not in the fast suite (make test-fast)
def test_three_sweeps_on_one_folder_run_every_point_once(tmp_path):
    """Three `companion sweep --out SAME` at once (one with --resume): one runs, the others are refused
    naming the lock and the pid of the one that runs; every point has exactly one record."""
    out = tmp_path / "same"
    args = [sys.executable, "-m", "companion", "sweep", TOY, "--grid", "seed=21,22,23", "-p", "n", "50",
            "-o", str(out), "--quiet", "--workers", "1"]
    first = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (out / "sweep.lock").is_file():
        time.sleep(0.05)
    others = [subprocess.run(args + extra, cwd=ROOT, capture_output=True, text=True, timeout=120)
              for extra in ([], ["--resume"])]
    _, first_err = first.communicate(timeout=300)
    assert first.returncode == 0, first_err
    for proc in others:
        assert proc.returncode == 2, proc.stderr
        assert f"held by pid {first.pid}" in proc.stderr.strip().splitlines()[-1]
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3 and len(read_results(out)) == 3


# -------------------------------------------------------------------------------------------- partials
def _leftovers(out):
    points = out / "points"
    return sorted(p.name for p in points.iterdir() if p.name.startswith(".")) if points.is_dir() else []


@pytest.mark.slow  # Dask sweep processes and kernels: not in the fast suite (make test-fast)
def test_a_sweep_killed_before_its_first_point_leaves_nothing_after_the_next_run(tmp_path):
    out = tmp_path / "k"
    args = ["sweep", TOY, "--grid", "seed=1,2", "-p", "n", "50", "-o", str(out), "--quiet", "--workers", "1"]
    proc = subprocess.Popen([sys.executable, "-m", "companion", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and not any(".partial-" in n for n in _leftovers(out)):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver, its workers and the point's run
    proc.wait()
    assert any(".partial-" in n for n in _leftovers(out)) and not read_results(out)
    time.sleep(1.5)  # the orphaned run notices its worker is gone and exits
    # a folder of a stale point that is not running, as a crash of an older version could leave
    (out / "points" / ".0000000000_seed=9.partial-abc").mkdir()

    proc = run_cli(*args, "--resume")
    assert proc.returncode == 0, proc.stderr
    assert "leftover(s) of interrupted runs" in proc.stderr
    assert _leftovers(out) == [] and len(read_results(out)) == 2


@pytest.mark.slow  # Dask sweep processes and kernels: not in the fast suite (make test-fast)
def test_a_new_sweep_clears_leftovers_too(tmp_path):
    out = tmp_path / "n"
    (out / "points" / ".abc_seed=1.partial-x1").mkdir(parents=True)
    (out / "points" / ".abc_seed=1.params.yaml").write_text("seed: 1\n")
    proc = run_cli("sweep", TOY, "--grid", "seed=1", "-p", "n", "50", "-o", str(out), "--quiet", "--workers", "1")
    assert proc.returncode == 0, proc.stderr
    assert _leftovers(out) == [] and len(read_results(out)) == 1
