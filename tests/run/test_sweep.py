"""Sweeps: parallel points, failures isolated, resumable after a kill, nothing finished is lost."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from companion.run.grid import expand_grid, parse_grid, point_id
from companion.run.inputs import SweepError
from companion.run.store import read_results

from _util import FIXTURES, MYST_HEADER, ROOT, cmdline, one_worker_scheduler, run_cli, slow_toy

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


@pytest.mark.slow
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
    before_bytes = (out / "results.jsonl").read_bytes()

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
    assert (out / "results.jsonl").read_bytes().startswith(before_bytes)  # finished lines byte-identical

    again = run_cli(*args, "--resume")
    assert "6 skipped" in again.stdout

    table = run_cli("results", str(out), "--csv", str(tmp_path / "r.csv"))
    assert table.returncode == 0
    import csv

    rows = list(csv.DictReader(open(tmp_path / "r.csv")))  # one row per point, one column per number
    assert len(rows) == 6 and {r["seed"] for r in rows} == {"1", "2", "3"}
    assert sorted(r["second_moment.in_band"] for r in rows) == ["False"] * 3 + ["True"] * 3
    for r in rows:
        assert r["fail"] == str(r["second_moment.status"] == "failed") and float(r["second_moment.measured"]) > 0
        assert r["second_moment.passed"] == str(r["second_moment.status"] == "passed")


@pytest.mark.slow
def test_refuses_to_overwrite_a_finished_sweep(tmp_path):
    out = tmp_path / "s"
    args = ["sweep", TOY, "--grid", "seed=1", "-p", "n", "50", "--out", str(out), "--quiet"]
    assert run_cli(*args).returncode == 0
    proc = run_cli(*args)
    assert proc.returncode == 2 and "--resume" in proc.stderr


@pytest.mark.slow
def test_sweep_on_an_external_dask_scheduler(tmp_path):
    """The same sweep, pointed at a running scheduler (as on a cluster), needs no other change."""
    from companion.run.sweep import run_sweep

    with one_worker_scheduler() as address:
        points = expand_grid(TOY, parse_grid(["seed=1,2"]), fixed_text={"n": "50"})
        summary = run_sweep(TOY, points, tmp_path / "ext", scheduler=address, progress=False)
    assert summary["ok"] == 2 and summary["total"] == 2
    assert len(read_results(tmp_path / "ext")) == 2


@pytest.mark.slow
def test_a_run_on_a_users_dask_worker_does_not_inherit_the_nannys_allocator_setting(tmp_path):
    """A nanny of a cluster the user started sets MALLOC_TRIM_THRESHOLD_ in its worker (Dask's default): the runs the
    worker starts leave it out (a page's NumPy temporaries would be faulted in afresh at every step: the looped
    page's training 3.7 times slower)."""
    from dask.distributed import Client

    from companion.run.cluster import MALLOC_TRIM
    from companion.run.sweep import run_sweep

    nb = tmp_path / "env.md"
    nb.write_text(THREADS_NB)
    with one_worker_scheduler() as address:
        with Client(address) as client:
            on_worker = list(client.run(lambda: os.environ.get(MALLOC_TRIM)).values())
        summary = run_sweep(str(nb), [{"seed": 1}], tmp_path / "ext", scheduler=address, progress=False)
    import dask

    assert on_worker == [str(dask.config.get(f"distributed.nanny.pre-spawn-environ.{MALLOC_TRIM}"))]  # it can fail
    assert summary["ok"] == 1
    assert {p.read_text() for p in (tmp_path / "ext" / "points").glob("*/malloc.txt")} == {"unset"}


def test_the_nannys_allocator_setting_is_left_out_and_a_users_own_kept(monkeypatch):
    import dask
    import distributed  # noqa: F401 - the configuration's defaults

    from companion.run.cluster import MALLOC_TRIM, nanny_variables

    nannys = str(dask.config.get(f"distributed.nanny.pre-spawn-environ.{MALLOC_TRIM}"))
    monkeypatch.setenv(MALLOC_TRIM, nannys)  # Dask's configured value: a nanny's
    assert nanny_variables() == (MALLOC_TRIM,)
    monkeypatch.setenv(MALLOC_TRIM, str(2 * int(nannys)))  # the user's own
    assert nanny_variables() == ()
    monkeypatch.delenv(MALLOC_TRIM)
    assert nanny_variables() == ()


@pytest.mark.slow
def test_torn_and_junk_lines_are_reported_moved_aside_and_rerun(tmp_path):
    """A crash mid-write leaves a torn last line; junk may be appended by anything. `results` names each
    skipped line and exits 1; --resume moves them aside and re-runs their points; the good lines stay
    byte for byte, and the re-run record lands on its own line."""
    out = tmp_path / "s"
    args = ["sweep", TOY, "--grid", "seed=1,2", "-p", "n", "50", "--out", str(out), "--quiet"]
    assert run_cli(*args).returncode == 0
    path = out / "results.jsonl"
    first, second = path.read_bytes().splitlines(keepends=True)
    torn_point = json.loads(second)["point"]
    path.write_bytes(first + b"{}\n[1, 2]\n\xff\xfe junk\n" + second[: len(second) // 2])

    proc = run_cli("results", str(out))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    for line in (2, 3, 4, 5):
        assert f"{path} line {line}: skipped" in proc.stderr
    assert "cut short by a crash mid-write" in proc.stderr and "not UTF-8" in proc.stderr

    proc = run_cli(*args, "--resume")
    assert proc.returncode == 0, proc.stderr
    assert "line 5: cut short by a crash mid-write; moved aside" in proc.stderr
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 2 and lines[0] == first  # the finished point: byte-identical
    assert json.loads(lines[1])["point"] == torn_point and json.loads(lines[1])["status"] == "ok"
    rejected = (out / "results.rejected").read_bytes()
    assert b"{}" in rejected and b"\xff\xfe junk" in rejected and second[: len(second) // 2] in rejected
    assert run_cli("results", str(out)).returncode == 0


def _descendants(pid):
    import psutil

    return psutil.Process(pid).children(recursive=True)


@pytest.mark.slow
def test_a_killed_client_takes_its_workers_runs_and_kernels_with_it(tmp_path):
    import psutil

    out = tmp_path / "k"
    proc = subprocess.Popen([sys.executable, "-m", "companion", "sweep", slow_toy(tmp_path), "--grid", "seed=1,2,3,4",
                             "-p", "n", "50", "-p", "hold", "60", "--out", str(out), "--quiet"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        kids = []
        while time.time() < deadline:
            kids = _descendants(proc.pid)
            cmds = [cmdline(k) for k in kids if k.is_running()]
            if any("ipykernel" in c for c in cmds) and any("companion run" in c for c in cmds):
                break
            time.sleep(0.2)
        assert any("ipykernel" in cmdline(k) for k in kids), "no kernel started"
        proc.kill()  # SIGKILL to the client alone: no chance to clean up
        proc.wait()
        gone, alive = psutil.wait_procs(kids, timeout=15)  # the points would run for another minute
        assert not alive, [cmdline(p)[:100] for p in alive]
    finally:
        if proc.poll() is None:
            proc.kill()
        for k in kids:
            try:
                k.kill()
            except psutil.NoSuchProcess:
                pass


# a toy notebook's parameters cell: a seed and where to write
SEED_PARAMS = MYST_HEADER + """
```{code-cell} ipython3
:tags: [parameters]
seed: int = 1  # seed
results_dir: str = ""  # where to write
```
"""

THREADS_NB = SEED_PARAMS + """
```{code-cell} ipython3
import os, pathlib
pathlib.Path(results_dir, "threads.txt").write_text(os.environ.get("COMPANION_THREADS", "unset"))
pathlib.Path(results_dir, "blas.txt").write_text(os.environ.get("OPENBLAS_NUM_THREADS", "unset"))
pathlib.Path(results_dir, "omp.txt").write_text(os.environ.get("OMP_NUM_THREADS", "unset"))
pathlib.Path(results_dir, "malloc.txt").write_text(os.environ.get("MALLOC_TRIM_THRESHOLD_", "unset"))
```
"""


@pytest.mark.slow
def test_cores_a_run_uses_them_all_a_sweep_shares_them(tmp_path):
    import os

    from companion.threads import available_cores

    nb = tmp_path / "threads.md"
    nb.write_text(THREADS_NB)
    env = {k: v for k, v in os.environ.items()
           if k not in ("COMPANION_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    cores = available_cores()
    proc = subprocess.run([sys.executable, "-m", "companion", "run", str(nb), "-o", str(tmp_path / "r")],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"companion: COMPANION_THREADS={cores}: every core of this machine" in proc.stdout
    assert (tmp_path / "r" / "threads.txt").read_text() == str(cores)
    assert (tmp_path / "r" / "blas.txt").read_text() == str(cores)  # NumPy's BLAS keeps to the same budget

    proc = subprocess.run([sys.executable, "-m", "companion", "sweep", str(nb), "--grid", "seed=1,2",
                           "--workers", "2", "--out", str(tmp_path / "s"), "--quiet"],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    share = max(1, cores // 2)
    assert f"COMPANION_THREADS={share} per point: each host's cores shared by its Dask worker threads" in proc.stderr
    got = {p.read_text() for p in (tmp_path / "s" / "points").glob("*/threads.txt")}
    assert got == {str(share)}
    assert {p.read_text() for p in (tmp_path / "s" / "points").glob("*/blas.txt")} == {str(share)}
    assert {p.read_text() for p in (tmp_path / "s" / "points").glob("*/omp.txt")} == {str(share)}  # torch's pool too
    # the runs do not inherit the allocator setting of the sweep's own nannies (companion.run.cluster.MALLOC_TRIM)
    assert {p.read_text() for p in (tmp_path / "s" / "points").glob("*/malloc.txt")} == {"unset"}
    # a chosen budget reaches NumPy's BLAS in a sweep's warm kernel too (Dask's workers default it to 1)
    proc = subprocess.run([sys.executable, "-m", "companion", "sweep", str(nb), "--grid", "seed=3", "--workers", "1",
                           "--out", str(tmp_path / "s3"), "--quiet"],
                          cwd=ROOT, capture_output=True, text=True, env=dict(env, COMPANION_THREADS="3"), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert {p.read_text() for p in (tmp_path / "s3" / "points").glob("*/blas.txt")} == {"3"}
    assert {p.read_text() for p in (tmp_path / "s3" / "points").glob("*/omp.txt")} == {"3"}  # Dask's default is 1


def test_a_record_is_never_glued_onto_a_torn_line(tmp_path):
    from companion.run.store import Appender, scan_results

    path = tmp_path / "results.jsonl"
    path.write_bytes(b'{"point": "a", "status": "ok"}\n{"point": "b", "sta')
    Appender(path)({"point": "c", "status": "ok"})
    good, bad = scan_results(path)
    assert [rec["point"] for _, _, rec in good] == ["a", "c"] and [i for i, _, _ in bad] == [2]


@pytest.mark.slow
def test_sigterm_to_the_client_shuts_the_sweep_down_cleanly(tmp_path):
    import psutil

    out = tmp_path / "t"
    proc = subprocess.Popen([sys.executable, "-m", "companion", "sweep", slow_toy(tmp_path), "--grid", "seed=1,2",
                             "-p", "n", "50", "-p", "hold", "60", "--out", str(out), "--quiet"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kids = []
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not any("ipykernel" in cmdline(k) for k in kids):
            kids = [k for k in _descendants(proc.pid) if k.is_running()]
            time.sleep(0.2)
        proc.terminate()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130
        assert err.strip().splitlines()[-1].startswith("companion: error: sweep interrupted")
        assert "--resume" in err and "Traceback" not in err
        _, alive = psutil.wait_procs(kids, timeout=15)
        assert not alive
    finally:
        if proc.poll() is None:
            proc.kill()


WARM_NB = SEED_PARAMS + """
```{code-cell} ipython3
import os, pathlib
assert "left_over" not in globals(), "a name of the previous run survived"
left_over = seed
pathlib.Path(results_dir, "kernel.txt").write_text(str(os.getpid()))
```
"""


@pytest.mark.slow
def test_a_workers_points_share_one_warm_kernel_and_none_of_its_names(tmp_path):
    from companion.run.sweep import run_sweep

    nb = tmp_path / "warm.md"
    nb.write_text(WARM_NB)
    out = tmp_path / "w"
    from companion.run.cluster import MALLOC_TRIM

    before = os.environ.get(MALLOC_TRIM)
    summary = run_sweep(str(nb), [{"seed": s} for s in (1, 2, 3)], out, workers=1, progress=False)
    assert summary["ok"] == 3, (out / "results.jsonl").read_text()
    pids = {p.read_text() for p in (out / "points").glob("*/kernel.txt")}
    assert len(pids) == 1, f"one kernel for the worker's three points, got {pids}"
    # the sweep's own nannies left the allocator setting out of this process, which started them (and of every
    # process it starts later: companion.run.cluster.local_cluster)
    assert os.environ.get(MALLOC_TRIM) == before


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cot/setup", "mesa/setup"])
def test_a_run_in_a_warm_kernel_records_what_a_run_in_a_new_one_records(name, tmp_path):
    """The same point, first in a new kernel, then in the same kernel after a run at another point: equal
    records (the notebooks seed every generator from their parameters; nothing of a run leaks into the next)."""
    from companion.run.execute import run_notebook
    from companion.run.jupyter_kernel import WarmKernel

    from _util import smoke_parameters

    params = smoke_parameters()[name]
    kernel = WarmKernel()
    try:
        first = run_notebook(name, params, tmp_path / "a", kernel=kernel)
        client = kernel.kc  # one connected client serves every run (no wait for the kernel per run)
        run_notebook(name, dict(params, seed=int(params.get("seed", 0)) + 7), tmp_path / "b", kernel=kernel)
        again = run_notebook(name, params, tmp_path / "c", kernel=kernel)
        assert kernel.runs == 3 and kernel.km is not None and kernel.km.is_alive()
        assert client is not None and kernel.kc is client
    finally:
        kernel.shutdown()

    def strip(recs):
        return [{k: v for k, v in r.items() if k not in ("parameters",)} for r in recs]

    assert first.records and strip(first.records) == strip(again.records)


@pytest.mark.slow  # starts a kernel: not in the fast lane
def test_a_warm_kernel_starts_processes_after_a_reset(tmp_path):
    """After the reset between two runs, the kernel's ``__main__`` keeps the module attributes that starting a
    process needs: a spawned process (what a local Dask cluster's nannies are) starts and ends cleanly in the second
    run as in the first, and the previous run's names are gone. (The shell's reset deleted ``__spec__``, and the
    Sweeps page, run after another page in the book's warm kernels, failed with "Nanny failed to start".)"""
    from companion.run.jupyter_kernel import MODULE_ATTRIBUTES, WarmKernel

    cell = ("import multiprocessing as _mp, os as _os\n"
            "_p = _mp.get_context('spawn').Process(target=_os.getpid); _p.start(); _p.join()\n"
            "print('exit', _p.exitcode, 'left' if 'left_over' in globals() else 'clean', "
            f"[k for k in {MODULE_ATTRIBUTES!r} if k not in globals()])\n"
            "left_over = 1")
    kernel = WarmKernel()
    try:
        outs = []
        for _ in range(2):
            kernel.ready(str(tmp_path))
            out = []
            reply = kernel.kc.execute_interactive(cell, timeout=120, output_hook=lambda m, out=out: out.append(
                m["content"].get("text") or "".join(m["content"].get("traceback") or [])))
            outs.append("".join(out).strip())
            assert reply["content"]["status"] == "ok", outs[-1]
        assert outs == ["exit 0 clean []", "exit 0 clean []"], outs
    finally:
        kernel.shutdown()


@pytest.mark.slow
def test_a_warm_kernel_runs_a_notebook_of_another_folder_in_that_folder(tmp_path):
    """A notebook of another folder (cot after mesa, as `make test`'s notebook runs go) runs in the same kernel,
    which changes its directory to that folder: no new kernel, imports and compiled kernels kept."""
    from companion.run.execute import run_notebook
    from companion.run.jupyter_kernel import WarmKernel

    toy = Path(TOY).read_text()
    cell = "```{code-cell} ipython3\nimport numpy as np\n"
    paths = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        where = f"import os\nassert os.getcwd() == {str((tmp_path / folder).resolve())!r}, os.getcwd()\n"
        paths.append(tmp_path / folder / "toy.md")
        paths[-1].write_text(toy.replace(cell, cell + where, 1))
    kernel = WarmKernel()
    try:
        pids = []
        for path in (*paths, paths[0]):
            run = run_notebook(str(path), {}, tmp_path / f"out{len(pids)}", kernel=kernel)
            assert run.records and run.records[0]["status"] == "passed", run
            pids.append(kernel.km.provisioner.process.pid)
        assert kernel.runs == 3 and len(set(pids)) == 1
    finally:
        kernel.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("end", ["close", "kill"])
def test_a_run_server_leaves_no_socket_folder_however_it_ends(end, tmp_path):
    """The warm kernel talks over IPC sockets in a folder the server's owner made: closed or killed, the server
    leaves none of it behind (a killed server cannot clean up itself)."""
    from companion.run.server import RunServer

    nb = tmp_path / "warm.md"
    nb.write_text(WARM_NB)
    params = tmp_path / "p.yaml"
    params.write_text("seed: 1\n")
    server = RunServer(threads=1)
    reply, _ = server.request(str(nb), params, tmp_path / "out")
    assert reply["rc"] == 0, reply
    sockets = Path(server.sockets)
    assert any(sockets.rglob("k-*")), "the kernel's sockets live in the server's folder"
    getattr(server, end)()
    assert not sockets.exists()


def test_socket_folders_of_dead_owners_are_removed_and_no_other(tmp_path):
    """A sweep worker killed with its servers at once (SIGKILL to the group) leaves its servers' socket folders;
    the next RunServer removes those whose owner pid is gone, never a live owner's or a folder it does not name."""
    import subprocess
    import sys

    from companion.run.server import SERVER_PREFIX, remove_stale_socket_folders

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"{SERVER_PREFIX}{dead.pid}-abc"
    (stale / "companion-kernel-x").mkdir(parents=True)
    (stale / "companion-kernel-x" / "k-1").write_text("")
    live = tmp_path / f"{SERVER_PREFIX}{os.getpid()}-def"
    live.mkdir()
    odd = tmp_path / f"{SERVER_PREFIX}notapid-x"
    odd.mkdir()
    assert remove_stale_socket_folders(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and live.is_dir() and odd.is_dir()
