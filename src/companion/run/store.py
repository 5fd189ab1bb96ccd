"""The sweep store: ``results.jsonl`` read tolerantly and repaired, appended atomically, and the folder's lock."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import threading
import time
from pathlib import Path

from .inputs import SweepError

__all__ = [
    "read_results", "scan_results", "repair_results", "flat_rows", "SweepLock", "clear_partials", "LOCK_NAME",
    "Appender"
]


LOCK_NAME = "sweep.lock"


def scan_results(path: str | Path) -> tuple[list[tuple[int, bytes, dict]], list[tuple[int, bytes, str]]]:
    """Every line of a ``results.jsonl``: ``(good, bad)``, good as ``(line number, raw bytes, record)``,
    bad as ``(line number, raw bytes, why)``. A line is good if it is UTF-8 JSON of an object with a
    string ``point`` and a ``status``; anything else (a torn write, junk, ``{}``, a list) is bad."""
    path = Path(path)
    good, bad = [], []
    if not path.is_file():
        return good, bad
    data = path.read_bytes()
    lines = data.split(b"\n")
    for i, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        torn = i == len(lines)  # no newline after it: the write was cut
        try:
            rec = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            bad.append((i, raw, "not UTF-8 text"))
            continue
        except json.JSONDecodeError:
            bad.append((i, raw, "cut short by a crash mid-write" if torn else "not valid JSON"))
            continue
        if not isinstance(rec, dict):
            bad.append((i, raw, f"a JSON {type(rec).__name__}, not a point's record"))
        elif not isinstance(rec.get("point"), str) or "status" not in rec:
            bad.append((i, raw, "a JSON object without 'point' and 'status'"))
        elif torn:
            bad.append((i, raw, "no newline after it (cut short by a crash mid-write?)"))
        else:
            good.append((i, raw, rec))
    return good, bad


def repair_results(out: str | Path) -> list[tuple[int, str]]:
    """Move the bad lines of ``OUT/results.jsonl`` aside (appended to ``OUT/results.rejected`` with
    their line numbers) and rewrite the file with its good lines, byte for byte, atomically. Their points
    have no record any more, so the sweep runs them again. Returns ``[(line number, why)]``."""
    out = Path(out)
    path = out / "results.jsonl"
    good, bad = scan_results(path)
    if not bad:
        return []
    with open(out / "results.rejected", "ab") as fh:
        for i, raw, why in bad:
            fh.write(f"# {path.name} line {i}: {why}\n".encode() + raw + b"\n")
        fh.flush()
        os.fsync(fh.fileno())
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(b"".join(raw + b"\n" for _, raw, _ in good))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return [(i, why) for i, _, why in bad]


def read_results(out: str | Path) -> dict[str, dict]:
    """The last record of every point in ``OUT/results.jsonl`` (later lines win; bad lines are left out:
    :func:`scan_results` names them)."""
    good, _ = scan_results(Path(out) / "results.jsonl")
    return {rec["point"]: rec for _, _, rec in good}


def flat_rows(out: str | Path) -> list[dict]:
    """One row per (point, claim) of a sweep: the point's parameters, then the claim's numbers.
    A point that produced no record (it crashed) gives one row with its status and error."""
    rows = []
    for pid, rec in read_results(out).items():
        params = rec.get("parameters") if isinstance(rec.get("parameters"), dict) else {}
        params = {k: v for k, v in params.items() if k != "results_dir"}
        claims = [r for r in (rec.get("records") or []) if isinstance(r, dict)] or [None]
        for r in claims:
            row = {"point": pid, **params, "status": rec.get("status")}
            if r is None:
                row["error"] = rec.get("error")
            else:
                row.update({k: r.get(k) for k in ("claim", "predicted", "measured", "tolerance", "comparison",
                                                  "in_band", "passed")})
            rows.append(row)
    return rows


class Appender:
    """Appends one JSON line per finished point with O_APPEND + fsync, from the driver only."""

    def __init__(self, path: Path):
        self.path = path
        self.lock = threading.Lock()

    def __call__(self, record: dict) -> None:
        data = (json.dumps(record, default=str) + "\n").encode()
        with self.lock:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    data = b"\n" + data  # never glue a record onto a torn line
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)


class SweepLock:
    """The lock of a sweep folder: ``OUT/sweep.lock``, held with an exclusive ``flock`` and holding the pid
    of its holder. The kernel drops the ``flock`` when the holder dies, so a lock left by a killed sweep is
    simply taken over; a live holder makes :meth:`SweepLock.acquire` raise :class:`SweepError` naming the lock and
    the holder's pid.

    Parameters
    ----------
    out : Path
        The sweep folder (it must exist)."""

    def __init__(self, out: str | Path):
        self.out = Path(out)
        self.path = self.out / LOCK_NAME
        self.fd: int | None = None

    def holder(self) -> str:
        """The pid written in the lock file ('unknown' while its holder has not written it yet)."""
        for _ in range(20):
            try:
                text = self.path.read_text().strip()
            except OSError:
                text = ""
            if text:
                return text
            time.sleep(0.01)
        return "unknown"

    def acquire(self) -> SweepLock:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise SweepError(
                        f"--out '{self.out}': another sweep is running on it (lock {self.path} held by pid "
                        f"{self.holder()}); wait for it to end or give another --out"
                    ) from None
                raise SweepError(f"--out '{self.out}': cannot lock {self.path} ({exc.strerror or exc})") from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # the previous holder removed the file between our open and our lock: retry
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            os.fsync(fd)
            self.fd = fd
            return self

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            self.path.unlink()  # while still holding it: a waiter that opened it sees another inode and retries
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


def clear_partials(out: str | Path) -> list[str]:
    """Remove what the runs of an earlier, killed sweep left in ``OUT/points/``: the private
    ``.<id>.partial-*`` and ``.<id>.old-*`` folders of :func:`companion.run.execute.run_notebook` and the
    ``.<id>.params.yaml`` files. Call it only while holding the folder's :class:`SweepLock` and with no
    point running. Returns the names removed."""

    points = Path(out) / "points"
    removed: list[str] = []
    if not points.is_dir():
        return removed
    for entry in sorted(points.iterdir()):
        if not entry.name.startswith("."):
            continue
        if entry.is_dir() and (".partial-" in entry.name or ".old-" in entry.name):
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.is_file() and entry.name.endswith(".params.yaml"):
            entry.unlink(missing_ok=True)
        else:
            continue
        removed.append(entry.name)
    return removed
