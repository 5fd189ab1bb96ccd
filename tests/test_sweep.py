"""Sweeps: parallel points, failures isolated, resumable after a kill, nothing finished is lost."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from companion.sweep import SweepError, expand_grid, parse_grid, point_id, read_results

from _util import FIXTURES, ROOT, run_cli

TOY = str(FIXTURES / "toy.md")


def test_grid_parsing_and_expansion():
    assert parse_grid(["n=20,30", "scale=[1],2"]) == {"n": ["20", "30"], "scale": ["[1]", "2"]}
    pts = expand_grid(TOY, parse_grid(["n=20,30", "seed=1,2,3"]), fixed_text={"scale": "2"})
    assert len(pts) == 6 and all(p["scale"] == 2.0 for p in pts)
    assert len({point_id(p) for p in pts}) == 6
    with pytest.raises(SweepError):
        parse_grid(["n"])
    with pytest.raises(Exception, match="did you mean 'seed'"):
        expand_grid(TOY, parse_grid(["sede=1,2"]))
    with pytest.raises(Exception, match="expects an int"):
        expand_grid(TOY, parse_grid(["n=20,x"]))


def test_six_point_sweep_isolates_failures_and_resumes_after_kill(tmp_path):
    out = tmp_path / "sweep"
    args = ["sweep", TOY, "--grid", "seed=1,2,3", "--grid", "fail=false,true", "-p", "n", "200",
            "--out", str(out), "--workers", "2", "--quiet"]
    proc = subprocess.Popen([sys.executable, "-m", "companion", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 180
    while time.time() < deadline and len(read_results(out)) < 2:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # kill the driver and its workers mid-sweep
    proc.wait()
    before = read_results(out)
    assert 2 <= len(before) < 6, "the kill should land mid-sweep"

    proc = run_cli(*args, "--resume")
    assert proc.returncode == 1  # three points have a failing verdict by construction
    after = read_results(out)
    assert len(after) == 6
    for pid, rec in before.items():  # finished points were kept and not rerun
        assert after[pid] == rec
    statuses = sorted(r["status"] for r in after.values())
    assert statuses == ["failed"] * 3 + ["ok"] * 3
    for rec in after.values():
        assert rec["parameters"]["fail"] == (rec["status"] == "failed")
        assert len(rec["records"]) == 1
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 6  # every point written exactly once

    again = run_cli(*args, "--resume")
    assert "6 skipped" in again.stdout

    table = run_cli("results", str(out), "--csv", str(tmp_path / "r.csv"))
    assert table.returncode == 0
    import csv

    rows = list(csv.DictReader(open(tmp_path / "r.csv")))
    assert len(rows) == 6 and {r["seed"] for r in rows} == {"1", "2", "3"}
    assert sorted(r["passed"] for r in rows) == ["False"] * 3 + ["True"] * 3


def test_refuses_to_overwrite_a_finished_sweep(tmp_path):
    out = tmp_path / "s"
    args = ["sweep", TOY, "--grid", "seed=1", "-p", "n", "50", "--out", str(out), "--quiet"]
    assert run_cli(*args).returncode == 0
    proc = run_cli(*args)
    assert proc.returncode == 2 and "--resume" in proc.stderr


def test_sweep_on_an_external_dask_scheduler(tmp_path):
    """The same sweep, pointed at a running scheduler (as on a cluster), needs no other change."""
    import logging

    from dask.distributed import LocalCluster

    from companion.sweep import run_sweep

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster:
        points = expand_grid(TOY, parse_grid(["seed=1,2"]), fixed_text={"n": "50"})
        summary = run_sweep(TOY, points, tmp_path / "ext", scheduler=cluster.scheduler_address, progress=False)
    assert summary["ok"] == 2 and summary["total"] == 2
    assert len(read_results(tmp_path / "ext")) == 2
