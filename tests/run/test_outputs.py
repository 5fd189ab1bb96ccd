"""A run's output folder: partial folders of dead runs are cleared, a live run's never; a killed run leaves
nothing after the next run into the same output."""


import os
import signal
import subprocess
import sys
import time

import pytest

from _util import FIXTURES, ROOT, run_cli

TOY = str(FIXTURES / "toy.md")


# ---------------------------------------------------------------------- a killed `companion run -o OUT`
def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _run_partials(parent, name="out"):
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}.partial-"))


def test_a_run_clears_the_partial_folders_of_dead_runs_into_the_same_output_and_no_live_one(tmp_path):
    import socket

    from companion.run import outputs

    host = socket.gethostname()
    me = f"{os.getpid()} {outputs._process_start(os.getpid())} {host}\n"
    folders = {
        ".out.partial-dead0001": f"{_dead_pid()} 12345 {host}\n",  # its run was killed: removed
        ".out.partial-reused01": f"{os.getpid()} 1 {host}\n",  # the pid now names another process: removed
        ".out.partial-live0001": me,  # a run that is still going: kept
        ".out.partial-other001": f"{_dead_pid()} 12345 another-host\n",  # another machine's, on a shared disk: kept
        ".out.partial-nopid001": None,  # no owner file (an older version's): kept
        ".other.partial-dead01": f"{_dead_pid()} 12345 {host}\n",  # another output's: not ours to clear
    }
    for name, owner in folders.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "x.ipynb").write_text("{}")
        if owner is not None:
            (tmp_path / name / outputs.OWNER_FILE).write_text(owner)
    work = outputs.prepare_output(tmp_path / "out", overwrite=False)
    assert (work / outputs.OWNER_FILE).read_text() == me  # the new run names itself
    kept = [".out.partial-live0001", ".out.partial-nopid001", ".out.partial-other001", work.name]
    assert _run_partials(tmp_path) == sorted(kept)
    assert (tmp_path / ".other.partial-dead01").is_dir()


@pytest.mark.slow  # companion run processes and kernels: not in the fast suite (make test-fast)
def test_a_killed_run_leaves_nothing_after_the_next_run_into_the_same_output(tmp_path):
    from companion.run import outputs

    out = tmp_path / "out"
    args = ["run", TOY, "-p", "n", "50", "-o", str(out), "--quiet"]
    proc = subprocess.Popen([sys.executable, "-m", "companion", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 60
    # kill once the run owns its partial folder (its owner file written): killed between the folder and that file,
    # the folder names no owner and is kept by design (``nopid`` above), a race this test is not about
    while time.time() < deadline and not any((tmp_path / p / outputs.OWNER_FILE).is_file()
                                             for p in _run_partials(tmp_path)):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the run and its kernel
    proc.wait()
    assert _run_partials(tmp_path) and not out.exists()
    done = run_cli(*args)
    assert done.returncode == 0, done.stderr
    assert _run_partials(tmp_path) == [] and (out / "run.json").is_file()
    assert not (out / "run.pid").exists()  # the owner file is not part of the output
