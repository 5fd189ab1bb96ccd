"""Output folders: a run writes into a partial folder that it owns and moves into place only when it ends.

A folder's owner (``run.pid``: pid and process start time) tells a live run from a dead one, so stale partial
folders of a killed run are cleared and a live one is never touched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

from ..params import InputError
from ..text import slug

__all__ = ["read_records", "holds_a_run", "OWNER_FILE", "clear_stale_partials", "prepare_output", "move_into_place"]


def read_records(output_dir: Path, notebook: str) -> list:
    path = output_dir / f"{slug(notebook)}.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def holds_a_run(out: Path) -> bool:
    return (out / "run.json").exists()


#: the file in a run's private ``.<OUT>.partial-*`` folder naming the process that writes it (removed before
#: the folder is moved into place)
OWNER_FILE = "run.pid"


def _process_start(pid: int) -> str:
    """The start time of process ``pid`` in clock ticks since boot ('' where /proc does not say): with the
    pid it names one process, not a later one that reuses the pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]


def _owner_text() -> str:
    return f"{os.getpid()} {_process_start(os.getpid()) or '-'} {socket.gethostname()}\n"


def _owner_is_dead(folder: Path) -> bool:
    """True only when ``folder``'s owner file names a process of this host that no longer runs. A folder
    without one (an older version's, a finished run between its last two renames) or of another host is
    never called dead."""
    try:
        pid_text, start, host = (folder / OWNER_FILE).read_text().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return False
    if host != socket.gethostname() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, owned by another user
        return False
    now = _process_start(pid)
    return bool(now and start != "-" and now != start)  # the pid now names another process


def clear_stale_partials(out: Path) -> list[str]:
    """Remove the private ``.<OUT>.partial-*`` folders that killed runs into ``out`` left beside it (their
    owner process is dead); a running one is never touched. Returns the names removed."""
    pattern = re.compile(rf"\.{re.escape(out.name)}\.partial-[a-z0-9_]+")
    removed = []
    try:
        entries = sorted(out.parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        if pattern.fullmatch(entry.name) and entry.is_dir() and not entry.is_symlink() and _owner_is_dead(entry):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed


def prepare_output(out: Path, overwrite: bool) -> Path:
    """Check the output directory and create the private folder the run writes into (a sibling of
    ``out``, so that moving it into place is one rename on the same file system), with a file naming this
    process; the folders of earlier runs into ``out`` that were killed are removed first."""
    if out.exists() and not out.is_dir():
        raise InputError(f"output directory '{out}': is a file; give a new or empty directory with -o")
    if out.is_dir() and holds_a_run(out) and not overwrite:
        raise InputError(
            f"output directory '{out}': holds a previous run (run.json); pass --overwrite to replace it "
            "once the new run has finished, or give another -o"
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        clear_stale_partials(out)
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
        (work / OWNER_FILE).write_text(_owner_text())
        umask = os.umask(0)
        os.umask(umask)
        work.chmod(0o777 & ~umask)  # mkdtemp makes it private; the output is an ordinary folder
        return work
    except OSError as exc:
        raise InputError(
            f"output directory '{out}': cannot be created ({exc.strerror or exc}); give a writable directory with -o"
        ) from None


def move_into_place(tmp: Path, out: Path) -> None:
    """Put the run's files in ``out``. A previous run there is replaced whole, and removed only after the
    new one is in place; a folder without a run (e.g. holding the parameter file) keeps its other files,
    and gets ``run.json`` last."""
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()
    if not out.exists():
        os.rename(tmp, out)
        return
    if not holds_a_run(out):
        for f in sorted(tmp.iterdir(), key=lambda f: f.name == "run.json"):
            os.replace(f, out / f.name)
        tmp.rmdir()
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    old.rmdir()
    os.rename(out, old)
    os.rename(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
