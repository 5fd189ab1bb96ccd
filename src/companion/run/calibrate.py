"""``companion calibrate``: one notebook at one point of its domain over many seeds, through the sweep runner.

The seeds' runs go to a sweep folder (``_build/calibration/<notebook>__<point>``, resumable with ``--resume``,
locked while it runs, local or on a Dask scheduler); when they are done, their statistical records are reduced to
a calibration file (``calibration/<notebook>__<point>.json``, :mod:`companion.calibration`) stamped with the code
version of the notebook's claims and the commit. A folder whose runs were made by other code is refused instead
of mixed. ``--extend`` adds seeds to a current calibration file: the seeds after its last one are run and their
columns appended (:func:`extend_data`), so that a point goes from 20 seeds to 50 without rerunning the 20.
``--restamp K`` carries a calibration file over a change of code that should change no record (a refactor, a faster
kernel): its first K seeds are run again with the current code and every column of every claim compared with the
file's (:func:`compare_columns`); only if all agree is the file stamped with the current code version, the check
written into it (``restamped``); else nothing is written and the differing claims are named (:func:`restamp`).
It checks K seeds, not all: a change that acts at some seeds only (a gate, a rule that drops a replicate) may agree at
the first K and move others; such a change is recalibrated. A change of the book's level (:data:`companion.stats.Z_LEVEL`,
the error budget split over its claims) moves no score: a restamp first carries the file's bands over to the new
level (:func:`relevel_data`: every critical value and in-band flag recomputed from the scores, the statuses where they
follow), then compares as above. A file whose statuses were decided before the verdict's power rule
(:data:`STATUS_RULE`) is carried over by :func:`repower_data`: the rule moves no score, no band and no failure.

Points: ``smoke`` (``tests/smoke/<paper>.yaml``, what the tests run), ``domain:I`` (the I-th point of
``tests/domain/<paper>.yaml``) and ``paper`` (the notebook's defaults, the paper's settings).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import yaml

from .. import notebooks as nbs
from ..calibration import FIRST_SEED, calibration_dir, code_version, collect, file_name, median
from ..claims import REJECTED
from ..paths import repo_root
from ..stats import Z_LEVEL, critical, detectable
from ..verdict import MAX_CRIT
from .inputs import SweepError
from .store import read_results
from .sweep import run_sweep

__all__ = ["POINTS", "POINT_KINDS", "points_folders", "point_parameters", "calibration_parameters", "domain_points",
           "calibrate", "runs_dir", "dumps", "extend_data", "restamp",
           "compare_columns", "RESTAMP_RTOL", "relevel_data", "file_level", "LEVEL_BEFORE_BUDGET", "STATUS_RULE",
           "repower_data"]

#: the kinds of point a calibration runs at
POINTS = ("smoke", "domain:I", "paper")
_POINT_RE = re.compile(r"^(smoke|paper|domain:(\d+))$")


POINT_KINDS = ("smoke", "domain")


def points_folders() -> list[Path]:
    """The folders of the points files the tests run, one per kind (``tests/smoke``, ``tests/domain``)."""
    return [repo_root() / "tests" / kind for kind in POINT_KINDS]


def _points(kind: str, notebook: str) -> tuple[Path, dict]:
    """The points file of one kind (``smoke``, ``domain``) for ``notebook``'s paper, and its table."""
    path = dict(zip(POINT_KINDS, points_folders()))[kind] / f"{notebook.split('/', 1)[0]}.yaml"
    return path, (yaml.safe_load(path.read_text()) if path.is_file() else None) or {}


def point_parameters(notebook: str, point: str) -> dict:
    """The parameters of ``notebook`` at ``point`` (``smoke``, ``domain:I``, ``paper``); one line naming the
    point and what is allowed otherwise."""
    m = _POINT_RE.match(point)
    if not m:
        raise SweepError(f"--point {point!r}: give smoke, paper or domain:I (I = 0, 1, ...)")
    if point == "paper":
        return {}
    kind = "smoke" if point == "smoke" else "domain"
    path, table = _points(kind, notebook)
    if notebook not in table:
        raise SweepError(f"--point {point}: {notebook} has no {kind} point in {path.name}")
    if kind == "smoke":
        return dict(table[notebook] or {})
    i, points = int(m.group(2)), table[notebook]
    if i >= len(points):
        raise SweepError(f"--point {point}: {notebook} has {len(points)} domain point(s), domain:0 ... "
                         f"domain:{len(points) - 1}")
    return dict(points[i] or {})


def domain_points(notebook: str) -> list[str]:
    """``domain:0``, ``domain:1``, ... for every domain point of ``notebook`` the tests run."""
    return [f"domain:{i}" for i in range(len(_points("domain", notebook)[1].get(notebook) or []))]


def runs_dir(notebook: str, point: str, out: str | Path | None = None) -> Path:
    """Where the seeds' runs of one calibration go (not committed: only the calibration file is):
    ``_build/calibration/<notebook>__<point>``, or ``<out>/runs/...`` for a calibration written to ``out``."""
    base = repo_root() / "_build" / "calibration" if out is None else Path(out) / "runs"
    return base / file_name(notebook, point).removesuffix(".json")


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo_root(), capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo_root(),
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (out.stdout.strip() or "unknown") + ("+dirty" if dirty else "")


def calibrate(notebook: str, point: str = "smoke", seeds: int = 100, first_seed: int = FIRST_SEED, *,
              workers: int = 2, scheduler: str | None = None, resume: bool = False, progress: bool = True,
              out: str | Path | None = None, log=None, extend: bool = False) -> Path:
    """Run ``notebook`` at ``point`` for seeds ``first_seed ... first_seed + seeds - 1`` and write its calibration
    file (into ``out``, default the committed set); returns the file's path. With ``extend``, the calibration file
    already there (at the current code version and the same parameters) grows to ``seeds`` seeds: the seeds after
    its last one are run (``first_seed`` is then not used) and appended (:func:`extend_data`)."""
    log = log or (lambda msg: None)
    name = nbs.name_of(nbs.resolve(notebook))
    if seeds < 2:
        raise SweepError(f"--seeds must be >= 2; got {seeds}")
    if first_seed < 0:
        raise SweepError(f"--first-seed must be >= 0; got {first_seed}")
    params, path = _calibration_point(name, point, out)
    if extend and not path.is_file():
        raise SweepError(f"--extend: {path} does not exist; run the calibration without --extend first")
    version = code_version(name)
    base = _extendable(path, version, params) if extend else None
    if base is not None:
        if len(base["seeds"]) >= seeds:
            log(f"{path.name} holds {len(base['seeds'])} seeds already (--seeds {seeds}): nothing to add")
            return path
        first_seed, seeds = max(base["seeds"]) + 1, seeds - len(base["seeds"])
        resume = True  # the runs folder may hold this file's runs (same code): they are kept, not refused
    folder = runs_dir(name, point, out)
    stamp = folder / "calibration.json"
    if resume and stamp.is_file():
        old = json.loads(stamp.read_text())
        if old.get("code_version") != version:
            raise SweepError(f"--resume: the runs in {folder} were made by other code (version "
                             f"{old.get('code_version')}, now {version}); remove the folder to start again")
    elif not resume and folder.exists() and any(folder.iterdir()):
        raise SweepError(f"{folder}: holds an earlier calibration; pass --resume to continue it or remove it")
    folder.mkdir(parents=True, exist_ok=True)
    meta = json.loads(stamp.read_text()) if resume and stamp.is_file() else {}
    meta.update(notebook=name, point=point, code_version=version)
    meta.setdefault("commit", _commit())  # the commit the first runs were made at
    stamp.write_text(json.dumps(meta))
    points = [dict(params, seed=s) for s in range(first_seed, first_seed + seeds)]
    t0 = time.perf_counter()
    summary = run_sweep(name, points, folder, workers=workers, resume=resume, scheduler=scheduler,
                        progress=progress, swept=["seed"], log=log, max_points=None)
    if summary["skipped"] == 0:  # one uninterrupted run of every seed: its wall time is the cost
        meta.update(wall_seconds=round(time.perf_counter() - t0, 1), workers=workers if scheduler is None else None)
        stamp.write_text(json.dumps(meta))
    if "wall_seconds" not in meta and base is None and path.is_file():  # runs made before the stamp kept it: the file did
        earlier = json.loads(path.read_text())
        if earlier.get("code_version") == version and earlier.get("wall_seconds"):
            meta.update(wall_seconds=earlier["wall_seconds"], workers=earlier.get("workers"))
    finished = [p for p in read_results(folder).values() if p.get("parameters", {}).get("seed") in
                range(first_seed, first_seed + seeds)]
    data = {
        "notebook": name, "point": point, "parameters": params, "code_version": version,
        "commit": meta["commit"], "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "runs": {"total": len(points), **{k: sum(1 for p in finished if p.get("status") == k)
                                          for k in ("ok", "failed", "error")}},
        "seconds_per_run": _rounded(median([p.get("seconds") for p in finished])),
        "wall_seconds": meta.get("wall_seconds"), "workers": meta.get("workers"), "level": Z_LEVEL,
        "rule": STATUS_RULE, **collect(finished),
    }
    if base is not None:
        data = extend_data(base, data)
    _write(path, data)
    return path


def calibration_parameters(notebook: str, point: str) -> dict:
    """The parameters a calibration of ``notebook`` at ``point`` runs at: the point's (:func:`point_parameters`)
    without its own seed, which a calibration varies."""
    params = point_parameters(notebook, point)
    params.pop("seed", None)
    return params


def _calibration_point(name: str, point: str, out) -> tuple[dict, Path]:
    """The parameters of ``name`` at ``point`` (:func:`calibration_parameters`) and the path of its calibration file
    (in ``out``, default the committed set)."""
    return calibration_parameters(name, point), (Path(out) if out is not None else calibration_dir()) / file_name(name, point)


def _write(path: Path, data: dict) -> None:
    """Write a calibration file whole or not at all (a temporary file, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(dumps(data))
    os.replace(tmp, path)


#: the agreement of a rerun seed's numeric columns with the file's, relative to the larger of 1 and the value's size:
#: the file keeps z to 6 significant digits and floor/SE to 4, so an exact refactor agrees to their rounding; any
#: change of what a record computes moves some column at some seed far more
RESTAMP_RTOL = {"z": 2e-5, "floor_se": 2e-3, "crit": 1e-9, "dof": 1e-9}


#: the statuses of the in-band runs a file may hold without knowing which: passed or undecided
#: (:func:`repower_data`)
_IN_BAND = ("passed", "not_resolvable")


def compare_columns(old: dict, new: dict, seeds: list[int], split_unknown: bool = False) -> list[str]:
    """The differences between two calibrations' data at ``seeds`` (each held by both): one line per seed whose
    page run failed on one side only (``failed_seeds``: a claim of any kind), per claim whose
    column differs at some seed beyond :data:`RESTAMP_RTOL` (status and in_band exactly), and per claim recorded
    by one only. Empty when they agree. ``split_unknown``: ``old`` does not know whether its in-band runs passed
    (:func:`repower_data`): passed and not_resolvable compare equal there, and the falsifier's distance
    (``gap_se``), which it did not record, is not compared."""
    where_old = {s: i for i, s in enumerate(old["seeds"])}
    where_new = {s: i for i, s in enumerate(new["seeds"])}
    lines = [f"the page run at seed {s} {'failed' if s in new['failed_seeds'] else 'passed'}, before it "
             f"{'failed' if s in old['failed_seeds'] else 'passed'}" for s in seeds
             if (s in old["failed_seeds"]) != (s in new["failed_seeds"])]  # a claim of another kind moved
    for claim in sorted(set(old["claims"]) | set(new["claims"])):
        a, b = old["claims"].get(claim), new["claims"].get(claim)
        if a is None or b is None:  # a claim of one side only: a difference where that side recorded it
            side, idx = (b, where_new) if a is None else (a, where_old)
            if any(side["status"][idx[s]] is not None for s in seeds):
                lines.append(f"{claim}: recorded only by the {'current' if a is None else 'earlier'} code")
            continue
        for key in dict.fromkeys([*a, *b]):
            for s in seeds:
                x = (a.get(key) or [None] * len(old["seeds"]))[where_old[s]]
                y = (b.get(key) or [None] * len(new["seeds"]))[where_new[s]]
                if _same(key, x, y) or (split_unknown and ((key == "gap_se" and x is None)
                                                            or (key == "status" and {x, y} <= set(_IN_BAND)))):
                    continue
                lines.append(f"{claim}: {key} at seed {s} was {x!r}, now {y!r}")
                break
    return lines


def _same(key: str, x, y) -> bool:
    if x is None or y is None or isinstance(x, (str, bool)) or isinstance(y, (str, bool)) or key not in RESTAMP_RTOL:
        return x == y
    return abs(float(x) - float(y)) <= RESTAMP_RTOL[key] * max(1.0, abs(float(x)))


#: the level of the files written before the book had an error budget (every band was 4 normal SE then)
LEVEL_BEFORE_BUDGET = 4.0


def file_level(data: dict) -> float:
    """The level (normal standard errors) at which a calibration file's bands were drawn: its ``level``, or
    :data:`LEVEL_BEFORE_BUDGET` for a file from before the budget."""
    return float(data.get("level", LEVEL_BEFORE_BUDGET))


#: how a calibration file's statuses were decided: ``"power"``, a statistical claim's falsifier rejected when it lies
#: at least the band's detectable deviation from the prediction (:mod:`companion.verdict`); a file without ``rule``
#: decided it from the measurement (the falsifier outside the band around it)
STATUS_RULE = "power"


def repower_data(data: dict) -> tuple[dict, dict]:
    """A calibration file whose statuses predate :data:`STATUS_RULE`, carried over to it. The rule moves no score, no
    band and no failure (a run that leaves its band fails under either rule); it decides anew only whether an
    in-band run passed or was undecided, which needs the falsifier's distance (``gap_se``) that such a file does not
    hold: those runs keep their status and are counted ``unknown`` (no statistic of a calibration reads that split:
    :func:`companion.calibration.miss_counts`), and a restamp replaces them at the seeds it reruns. Returns the
    data (with ``rule`` and an empty ``gap_se`` column) and the counts."""
    counts = {"rule": STATUS_RULE, "unknown": 0}
    claims = {}
    for claim, col in data["claims"].items():
        col = {k: list(v) for k, v in col.items()}
        col.setdefault("gap_se", [None] * len(col["status"]))
        counts["unknown"] += sum(1 for st, b in zip(col["status"], col.get("in_band") or [None] * len(col["status"]))
                                 if st in _IN_BAND and b is not False)
        claims[claim] = col
    return dict(data, rule=STATUS_RULE, claims=claims), counts


def relevel_data(data: dict, z: float = Z_LEVEL) -> tuple[dict, dict]:
    r"""A calibration file's data with its bands redrawn at the level ``z``: per claim and seed the critical value
    :math:`c` = :func:`companion.stats.critical` ``(z, dof)`` and the in-band flag :math:`|z_i| \le c + f_i` (the
    score :math:`z_i` and the floor in SE :math:`f_i` do not depend on the level; a statistical claim's band is
    two-sided). The status follows where it can: a run that leaves the band fails (a gate that would have made it
    undecided is not recorded: counted ``failed_by_flip``), and a pass whose band now exceeds
    :data:`companion.verdict.MAX_CRIT`, or whose falsifier (``gap_se`` from it) lies nearer than the new band detects
    (:func:`companion.stats.detectable`), is ``not_resolvable``. What the file cannot decide is kept and counted
    ``unknown`` (none of it changes a miss count): an undecided run at a narrower band (its falsifier may now be
    rejected with power, or a declared rule may hold), a pass at a wider one whose falsifier's distance the file does
    not hold, a failure that a wider band takes in.
    Returns the new data (with ``level``) and the counts; a restamp then checks its first seeds against a rerun."""
    z0 = file_level(data)
    counts = {"from_level": z0, "level": float(z), "crit": 0, "in_band": 0, "failed_by_flip": 0, "unknown": 0}
    claims = {}
    for claim, col in data["claims"].items():
        col = {k: list(v) for k, v in col.items()}
        for i, st in enumerate(col["status"]):
            if st is None or st == "not_applicable" or col.get("crit", [None] * (i + 1))[i] is None:
                continue
            dof = col["dof"][i]
            c = critical(z, dof)
            counts["crit"] += 1
            col["crit"][i] = c
            score = col["z"][i]
            if score is None:  # no noise at this point (round-off SE): nothing is drawn from a band
                continue
            inside = abs(score) <= c + (col["floor_se"][i] or 0.0)
            if inside != col["in_band"][i]:
                counts["in_band"] += 1
                col["in_band"][i] = inside
                if not inside and st not in REJECTED:  # the theory is rejected: a failure, whatever the band's width
                    col["status"][i], counts["failed_by_flip"] = "failed", counts["failed_by_flip"] + 1
                elif inside:  # a failure now inside the band: passed or undecided, by its falsifier
                    counts["unknown"] += 1
                continue
            gap = (col.get("gap_se") or [None] * (i + 1))[i]
            if inside and st == "passed" and c > MAX_CRIT:
                col["status"][i] = "not_resolvable"
            elif inside and st == "passed" and gap is not None and gap < detectable(c, 1.0, col["floor_se"][i] or 0.0, dof):
                col["status"][i] = "not_resolvable"  # the falsifier nearer than the wider band detects: no power
            elif inside and ((st == "not_resolvable" and z < z0 and c <= MAX_CRIT)
                             or (st == "passed" and z > z0 and gap is None)):
                counts["unknown"] += 1
        claims[claim] = col
    return dict(data, level=float(z), claims=claims), counts


def restamp(notebook: str, point: str = "smoke", seeds: int = 10, *, workers: int = 2, scheduler: str | None = None,
            progress: bool = True, out: str | Path | None = None, log=None) -> tuple[Path, list[str]]:
    """Carry the calibration file of ``notebook`` at ``point`` over to the current code: rerun its first ``seeds``
    seeds (into ``runs_dir(...)`` + ``__restamp``, resumable at the same code), compare every claim's columns
    (:func:`compare_columns`) and, if they all agree, write the file back with the current ``code_version``, the
    commit and a ``restamped`` entry (from which version, at which commit and time, how many seeds were compared).
    Returns the path and the differences (empty: restamped; else the file is left as it was). A file already at
    the current code is left alone; one whose parameters are not the point's now is refused in one line.

    The comparison holds on one class of CPU: trained models take other SIMD paths of torch and NumPy on another
    (their sums round differently, and training carries the difference on), so a file made on another class may
    not restamp: recalibrate it on this one. Measured on the CoT experiments page (domain:0, seed 1000, 2-core AMD
    EPYC): with AVX-512 turned off (``ATEN_CPU_CAPABILITY=default``, ``NPY_DISABLE_CPU_FEATURES``) the trained claim's
    z moves from 1.58076 to 1.57901."""
    log = log or (lambda msg: None)
    name = nbs.name_of(nbs.resolve(notebook))
    if seeds < 1:
        raise SweepError(f"--restamp must be >= 1 seed; got {seeds}")
    params, path = _calibration_point(name, point, out)
    if not path.is_file():
        raise SweepError(f"--restamp: {path} does not exist; run the calibration without --restamp first")
    data = json.loads(path.read_text())
    version = code_version(name)
    if data.get("code_version") == version:
        log(f"{path.name} is at the current code already ({version}): nothing to restamp")
        return path, []
    relevel = repower = None
    if file_level(data) != Z_LEVEL:  # the bands of another level: redrawn at this one, then checked like the rest
        data, relevel = relevel_data(data, Z_LEVEL)
    if data.get("rule") != STATUS_RULE:  # statuses from before the power rule: its passes are unknown
        data, repower = repower_data(data)
    if (data.get("parameters") or {}) != params:
        raise SweepError(f"--restamp: {path.name} was made at other parameters than the point's now; rerun it "
                         "without --restamp")
    check = list(data["seeds"][:seeds])
    folder = runs_dir(name, point, out).with_name(runs_dir(name, point, out).name + "__restamp")
    stamp = folder / "calibration.json"
    resume = stamp.is_file() and json.loads(stamp.read_text()).get("code_version") == version
    if folder.exists() and not resume:
        shutil.rmtree(folder)  # a check of other code: nothing in it is a result
    folder.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(dict(notebook=name, point=point, code_version=version)))
    run_sweep(name, [dict(params, seed=s) for s in check], folder, workers=workers, resume=resume,
              scheduler=scheduler, progress=progress, swept=["seed"], log=log, max_points=None)
    finished = [p for p in read_results(folder).values() if p.get("parameters", {}).get("seed") in check]
    now = collect(finished)
    missing = sorted(set(check) - set(now["seeds"]))
    diffs = [f"seed {s}: no finished run (crashed or error)" for s in missing]
    diffs += compare_columns(data, now, [s for s in check if s not in missing], split_unknown=repower is not None)
    if diffs:
        return path, diffs
    if repower is not None:  # the rerun seeds' statuses and falsifier distances are known now
        data = _with_rerun(data, now, repower)
    entry = {"from": data["code_version"], "commit": _commit(), "seeds": len(check),
             "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
             **({"relevel": relevel} if relevel else {}), **({"repower": repower} if repower else {})}
    _write(path, dict(data, code_version=version, restamped=[*data.get("restamped", []), entry]))
    return path, []


def _with_rerun(data: dict, now: dict, counts: dict) -> dict:
    """``data`` (:func:`repower_data`) with the status and ``gap_se`` of every seed that ``now`` reran taken from the
    rerun (its other columns agree: :func:`compare_columns`), ``counts["unknown"]`` lowered by the in-band runs thus
    decided."""
    where = {s: i for i, s in enumerate(data["seeds"])}
    for claim, new in now["claims"].items():
        col = data["claims"].get(claim)
        if col is None:
            continue
        for j, s in enumerate(now["seeds"]):
            i = where[s]
            if col["status"][i] in _IN_BAND and col["in_band"][i] is not False:
                counts["unknown"] -= 1
            col["status"][i], col["gap_se"][i] = new["status"][j], new["gap_se"][j]
    return data


def _extendable(path: Path, version: str, params: dict) -> dict:
    """The calibration file ``path`` that ``--extend`` grows; one line naming what is wrong otherwise."""
    data = json.loads(path.read_text())
    if data.get("code_version") != version:
        raise SweepError(f"--extend: {path.name} was made by other code (version {data.get('code_version')}, now "
                         f"{version}); rerun it without --extend")
    if (data.get("parameters") or {}) != params:
        raise SweepError(f"--extend: {path.name} was made at other parameters than the point's now; rerun it without "
                         "--extend")
    return data


def extend_data(base: dict, more: dict) -> dict:
    """A calibration file's data ``base`` followed by ``more`` (the same notebook, point and code, later seeds):
    the seeds and every claim's columns appended (a claim missing from one side is None there), the run counts and
    wall times added, the median seconds per run weighted by the runs, the commits of both kept."""
    if (base["notebook"], base["point"], base["code_version"]) != (more["notebook"], more["point"], more["code_version"]):
        raise ValueError("extend_data: the two calibrations are of different notebooks, points or code")
    if set(base["seeds"]) & set(more["seeds"]):
        raise ValueError("extend_data: the two calibrations share seeds")
    nb, nm = len(base["seeds"]), len(more["seeds"])
    claims = {}
    for claim in sorted(set(base["claims"]) | set(more["claims"])):
        a, b = base["claims"].get(claim, {}), more["claims"].get(claim, {})
        claims[claim] = {k: list(a.get(k) or [None] * nb) + list(b.get(k) or [None] * nm)
                         for k in dict.fromkeys([*a, *b])}
    runs = {k: base["runs"].get(k, 0) + more["runs"].get(k, 0) for k in ("total", "ok", "failed", "error")}
    spr = [(x, n) for x, n in ((base.get("seconds_per_run"), nb), (more.get("seconds_per_run"), nm)) if x is not None]
    walls = [base.get("wall_seconds"), more.get("wall_seconds")]
    later = [c for c in dict.fromkeys((*base.get("commits", []), more.get("commit"))) if c and c != base.get("commit")]
    return dict(base, created=more["created"], runs=runs, **({"commits": later} if later else {}),
                seconds_per_run=_rounded(sum(x * n for x, n in spr) / sum(n for _, n in spr)) if spr else None,
                wall_seconds=round(sum(walls), 1) if None not in walls else None,
                workers=base.get("workers") if base.get("workers") == more.get("workers") else None,
                seeds=base["seeds"] + more["seeds"], failed_seeds=base["failed_seeds"] + more["failed_seeds"],
                claims=claims)


def dumps(data: dict) -> str:
    """A calibration file's JSON: one line per field and per claim, so that a diff shows which claims moved."""
    lines = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in data.items() if k != "claims"]
    claims = [f"  {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in data["claims"].items()]
    return "{\n" + ",\n".join(lines + [' "claims": {\n' + ",\n".join(claims) + "\n }"]) + "\n}\n"


def _rounded(x: float) -> float | None:
    return round(x, 2) if math.isfinite(x) else None
