"""`make test`: the whole suite as two pytest processes side by side, so that both cores stay busy.

The first runs the tests marked ``notebooks`` (``tests/conftest.py`` marks every test that needs the session's
notebook runs or the site built from them, and the book builds of ``tests/site/test_book.py`` and
``tests/site/test_sweeps_page.py``, which balance the two): it starts the 46 notebook runs, two at a time, and then
builds and checks the site from them, which is mostly one process's work. The second runs every other test
meanwhile; in one pytest process those waited for each other. Each process has its own ``--basetemp``; their
outputs are printed whole, one after the other, as each process ends. The exit status is 0 when both processes pass,
else the first process's non-zero status. Extra arguments go to both pytest commands
(``python tools/run_suite.py -x``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROCESSES = (("notebook runs and the site", "notebooks"), ("everything else", "not notebooks"))


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # SIGTERM (a CI time limit): stop both processes as Ctrl-C does


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    base = Path(tempfile.mkdtemp(prefix="companion-test-suite-"))
    procs = []
    # the two processes share the cores: NumPy's BLAS, torch's OpenMP pool and MKL on half of them each (threaded over
    # all, their spinning threads slow the other process down; see companion.threads.use_threads), unless the caller chose
    env = dict(os.environ)
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(name, str(max(1, (os.cpu_count() or 1) // len(PROCESSES))))
    t0 = time.perf_counter()
    try:
        for i, (name, expr) in enumerate(PROCESSES):
            log = open(base / f"process{i}.log", "w+")
            cmd = [sys.executable, "-m", "pytest", "-m", expr, "-p", "no:cacheprovider",
                   "--basetemp", str(base / f"tmp{i}"), *argv]
            procs.append((name, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log))
        codes: dict[str, int] = {}
        while len(codes) < len(procs):
            for name, proc, log in procs:
                if name in codes or proc.poll() is None:
                    continue
                codes[name] = proc.returncode
                log.seek(0)
                print(f"===== process: {name} (pytest -m '{dict(PROCESSES)[name]}'), exit status {proc.returncode}, "
                      f"{time.perf_counter() - t0:.0f} s =====", flush=True)
                shutil.copyfileobj(log, sys.stdout)
                sys.stdout.flush()
            time.sleep(1)
    except KeyboardInterrupt:
        return 130
    finally:
        for _, proc, log in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # pytest's own teardown: the notebook runs and servers stop
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
            log.close()
    # pytest's 5: no test selected in a process (e.g. -k picked tests of the other process only)
    bad = [c for c in codes.values() if c not in (0, 5)]
    if not bad:
        shutil.rmtree(base, ignore_errors=True)
    print(f"make test: both processes ended in {time.perf_counter() - t0:.0f} s; "
          + ", ".join(f"{n}: exit {c}" for n, c in codes.items()), flush=True)
    return bad[0] if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
