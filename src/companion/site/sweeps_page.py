"""The sweeps of the book's "Sweeps" page (``book/sweeps.md``): definitions, running and reading them.

Each sweep runs real notebooks through :func:`companion.run.sweep.run_sweep` (every point is a
run of the notebook in its worker's warm kernel), at a modest ``book`` size that fits the book build, and states
the command that reruns it bigger (``cluster`` size) on a Dask cluster. Records are read with
``.get``: a notebook that renames a claim shows up as a missing value on the page, not as a crash.

* ``mesa_T``: trained ``ab sigma^2`` against ``T`` for the Gaussian law (``mesa/prop4_1_gaussian``, the
  ``ratio_T<T>`` claims; the context lengths are batched in one point through ``Ts``, the seeds are swept);
* ``cot_k_eta``: the error of k-step CoT over ``(k, eta)`` at fixed ``n/d`` (``cot/thm3_2_construction``,
  the ``cot32_law_k<k>`` claims; the ``k`` are batched through ``k_list``, ``eta`` is swept);
* ``mesa_laws``: where Assumption 4.2 fails and the capability verdict with it
  (``mesa/thm4_2_capability``, the ``loss_<law>_1`` claims; the laws are batched through ``probe_laws``,
  ``T`` is swept).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shlex
import shutil
import time
from pathlib import Path
from typing import Any

from ..paths import repo_root
from ..run.cluster import local_cluster
from ..run.grid import expand_grid
from ..run.sweep import ALLOWED_FAILURES, run_sweep
from ..text import number_text

__all__ = [
    "SWEEPS", "SIZES", "spec", "command", "run", "run_all", "points_of", "mesa_T_rows", "cot_k_eta_rows",
    "mesa_laws_rows", "LAWS"
]


LAWS = ["gaussian", "rademacher", "sparse_gaussian", "sparse"]


SWEEPS: dict[str, str] = {
    "mesa_T": "mesa/prop4_1_gaussian",
    "cot_k_eta": "cot/thm3_2_construction",
    "mesa_laws": "mesa/thm4_2_capability",
}


#: grid and fixed parameters per sweep and size: ``book`` (this build, a few points of a few seconds each),
#: ``test`` (the test suite), ``cluster`` (the command printed on the page to rerun it bigger)
SIZES: dict[str, dict[str, dict[str, dict[str, Any]]]] = {
    "mesa_T": {
        # two points of two context lengths each (balanced: training time grows with T); the Fig. 1b part of
        # the notebook runs at its smallest size with the paper's step size for sigma = 1
        "book": dict(grid={"Ts": [[5, 40], [10, 20]]},
                     fixed=dict(d=5, T=8, m=200, m_test=200, epochs=80, sigmas=[1.0], lrs_gauss=[1e-4], a0s=[0.5],
                                b0s=[1.5], m_sweep=600, n_rep=3, kappa=0.4)),
        "test": dict(grid={"Ts": [[5], [10]]},
                     fixed=dict(d=5, T=8, m=200, m_test=200, epochs=60, sigmas=[1.0], lrs_gauss=[1e-4], a0s=[0.5],
                                b0s=[1.5], m_sweep=400, n_rep=3, kappa=0.4)),
        "cluster": dict(grid={"Ts": [[5], [10], [20], [50], [100], [200]], "seed": [1, 2, 3, 4]},
                        fixed=dict(m_sweep=20000, n_rep=8)),
    },
    "cot_k_eta": {
        # the sweep maps the construction's law (cot32_law_k*): the page's trained models (its decisive claim at
        # its defaults, 10 seeds) are not trained here (replicates = 0: that claim is recorded not applicable).
        # Two seeds, the fewest that give a spread, left it not resolvable at every point and took about half of
        # a point's time (eta = 0.15 alone on a 2-core machine: 22.7 s with them, 10.8 s without)
        "book": dict(grid={"eta": [0.15, 0.3, 0.45, 0.6]},
                     fixed=dict(d=10, n=20, k_list=[1, 2, 4, 8, 16, 32], ratios=[2], num_model=2000, num_mc=4000,
                                mp_levels=3, replicates=0, eval_batch=400)),
        "test": dict(grid={"eta": [0.3, 0.6]},
                     fixed=dict(d=4, n=8, k_list=[1, 4], ratios=[2], num_model=3000, num_mc=5000, mp_levels=3,
                                replicates=0, eval_batch=400)),
        "cluster": dict(grid={"eta": [0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65]},
                        fixed=dict(d=40, n=80, k_list=[1, 2, 4, 8, 16, 32, 64, 128], ratios=[2])),
    },
    "mesa_laws": {
        # step sizes at kappa x the full-parameter stability bound (lrs_sparse = probe_lrs = []): the paper's
        # smaller ones leave the sparse run far from recovery after 100 epochs
        "book": dict(grid={"T": [6, 12]},
                     fixed=dict(d=5, m=400, m_test=400, epochs=100, cs=[1.0], lrs_sparse=[], a0s=[0.5],
                                b0s=[1.5], probe_laws=LAWS, probe_lrs=[], m_rep=800, n_rep=4, n_batches=10)),
        "test": dict(grid={"T": [6, 8]},
                     fixed=dict(d=5, m=400, m_test=400, epochs=60, cs=[1.0], lrs_sparse=[], a0s=[0.5],
                                b0s=[1.5], probe_laws=LAWS, probe_lrs=[], m_rep=400, n_rep=3, n_batches=10)),
        "cluster": dict(grid={"T": [10, 20, 50, 100, 200], "d": [3, 5, 8]},
                        fixed=dict(cs=[1.0], lrs_sparse=[], a0s=[0.5], b0s=[1.5], probe_laws=LAWS, probe_lrs=[])),
    },
}


def spec(name: str, size: str = "book") -> dict:
    """``{"notebook", "grid", "fixed"}`` of sweep ``name`` at ``size``."""
    s = SIZES[name][size]
    return {"notebook": SWEEPS[name], "grid": dict(s["grid"]), "fixed": dict(s["fixed"])}


def _text(v: Any) -> str:
    if isinstance(v, (list, dict)):
        return json.dumps(v, separators=(",", ":"))
    return number_text(v) if isinstance(v, float) else str(v)


def command(name: str, size: str = "cluster", out: str | None = None, scheduler: str | None = "tcp://HOST:8786") -> str:
    """The ``companion sweep`` command line of sweep ``name`` at ``size`` (on ``scheduler`` if given)."""
    s = spec(name, size)
    parts = ["companion", "sweep", s["notebook"]]
    for k, vals in s["grid"].items():
        parts += ["--grid", shlex.quote(f"{k}=" + ",".join(_text(v) for v in vals))]
    for k, v in s["fixed"].items():
        parts += ["-p", k, shlex.quote(_text(v))]
    parts += ["--out", out or f"sweeps/{name}"]
    if scheduler:
        parts += ["--scheduler", scheduler]
    return " ".join(parts)


def points_of(name: str, size: str = "book") -> list[dict]:
    """The validated points of sweep ``name`` (every value checked against the notebook's parameters)."""

    s = spec(name, size)
    return expand_grid(s["notebook"], typed_grid=s["grid"], fixed=s["fixed"])


def run(name: str, out: str | Path, size: str = "book", workers: int = 2, scheduler: str | None = None) -> dict:
    """Run sweep ``name`` into ``out`` (a fresh directory: a previous sweep there is removed first).
    Returns run_sweep's summary with ``seconds`` (wall time), ``points`` and ``command`` added."""


    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    s = spec(name, size)
    pts = points_of(name, size)
    t0 = time.perf_counter()
    summary = run_sweep(s["notebook"], pts, out, workers=workers, scheduler=scheduler, progress=False,
                        swept=list(s["grid"]))
    summary["seconds"] = time.perf_counter() - t0
    summary["points"] = len(pts)
    summary["command"] = command(name, size, out=str(out), scheduler=None)
    return summary


def _claims(point: dict, pattern: str):
    """``(match, record)`` for every record of ``point`` whose claim id matches ``pattern``."""
    for r in point.get("records") or []:
        if isinstance(r, dict):
            m = re.fullmatch(pattern, str(r.get("claim", "")))
            if m:
                yield m, r


def _num(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def _status(point: dict, rec: dict | None) -> str:
    """A record's status (``passed``/``failed``/``not_resolvable``/...), or the point's if it has none."""
    if rec is None:
        return "error" if point.get("status") == "error" else "missing"
    st = rec.get("status")
    if st:
        return str(st)
    return "passed" if rec.get("passed") else "failed"  # a record from before statuses


def mesa_T_rows(table) -> list[dict]:
    """One row per (seed, T): the trained ab sigma^2 extrapolated in m, its SE, population GD, status."""
    rows = []
    for p in table.points:
        params = p.get("parameters") or {}
        found = {int(m.group(1)): r for m, r in _claims(p, r"ratio_T(\d+)")}
        for T in params.get("Ts") or sorted(found):
            r = found.get(int(T))
            rows.append(dict(seed=params.get("seed"), T=int(T), measured=_num((r or {}).get("measured")),
                             se=_num((r or {}).get("se")), predicted=_num((r or {}).get("predicted")),
                             status=_status(p, r), error=p.get("error")))
    return rows


def cot_k_eta_rows(table) -> list[dict]:
    """One row per (eta, k): the median CoT error, the median of the k-step GD law, status."""
    rows = []
    for p in table.points:
        params = p.get("parameters") or {}
        found = {int(m.group(1)): r for m, r in _claims(p, r"cot32_law_k(\d+)")}
        for k in params.get("k_list") or sorted(found):
            r = found.get(int(k))
            rows.append(dict(eta=_num(params.get("eta")), k=int(k), d=params.get("d"), n=params.get("n"),
                             measured=_num((r or {}).get("measured")), predicted=_num((r or {}).get("predicted")),
                             se=_num((r or {}).get("se")), status=_status(p, r), error=p.get("error")))
    return rows


def mesa_laws_rows(table) -> list[dict]:
    """One row per (T, law): the trained whole-sequence test loss, the non-recovery value it is judged
    against (the falsifier for a law that satisfies Assumption 4.2, the prediction otherwise), the kind
    and status of the claim."""
    rows = []
    for p in table.points:
        params = p.get("parameters") or {}
        found = {m.group(1): r for m, r in _claims(p, r"loss_([a-z_]+?)_1")}
        for law in params.get("probe_laws") or sorted(found):
            r = found.get(law)
            rows.append(dict(T=params.get("T"), d=params.get("d"), law=law, measured=_num((r or {}).get("measured")),
                             se=_num((r or {}).get("se")), predicted=_num((r or {}).get("predicted")),
                             falsifier_value=_num((r or {}).get("falsifier_value")), kind=(r or {}).get("kind"),
                             status=_status(p, r), error=p.get("error")))
    return rows


def _shown(path: Path) -> str:
    """``path`` relative to the book root when it lies inside it (as a reader would type it there)."""

    try:
        return str(Path(path).absolute().relative_to(repo_root()))
    except ValueError:
        return str(path)


def run_all(out: str | Path, size: str = "book", workers: int = 2, names: list[str] | None = None) -> dict:
    """Run the sweeps ``names`` (default all) one after the other on one local Dask cluster of ``workers``
    single-threaded workers (started once, and passed to each :func:`run` as its scheduler), so the cluster's
    start-up is paid once. Returns ``{name: summary}`` and ``{"_total": {"seconds", "points"}}``."""

    names = list(names or SWEEPS)
    out = Path(out)
    t0 = time.perf_counter()
    cluster = local_cluster(max(1, int(workers)), ALLOWED_FAILURES)
    done: dict[str, dict] = {}
    try:
        for n in names:
            done[n] = run(n, out / n, size, workers, cluster.scheduler_address)
            done[n]["command"] = command(n, size, out=_shown(out / n), scheduler=None)
    finally:
        cluster.close()
    done["_total"] = {"seconds": time.perf_counter() - t0, "points": sum(done[n]["points"] for n in names)}
    return done


PAGE = "book/sweeps.md"


STAMP = ".companion-sweeps-hash"


def notebooks_hash(root: Path | None = None) -> str:
    """Hash of the notebooks the page sweeps (their text) and of this module's sweep definitions."""


    root = root or repo_root()
    h = hashlib.sha256(json.dumps(SIZES, sort_keys=True).encode())
    for nb in sorted(set(SWEEPS.values())):
        f = root / "notebooks" / f"{nb}.md"
        h.update(nb.encode())
        h.update(f.read_bytes() if f.is_file() else b"missing")
    return h.hexdigest()


def guard_cache(cache_dir: str | Path, root: Path | None = None) -> bool:
    """Make the book build re-execute the Sweeps page when a notebook it sweeps has changed since the page
    was cached: jupyter-cache keys a page by its own code cells only, so without this the page would show
    the results of the notebooks as they were. Drops the page's cache records; returns True if it dropped any.
    (Call after :func:`companion.site.book.guard_cache`, with the same cache directory.)"""

    root = root or repo_root()
    cache_dir = Path(cache_dir)
    if not cache_dir.is_absolute():
        cache_dir = root / cache_dir
    stamp = cache_dir / STAMP
    current = notebooks_hash(root)
    dropped = False
    if cache_dir.exists() and (not stamp.is_file() or stamp.read_text().strip() != current):
        from jupyter_cache import get_cache

        cache = get_cache(str(cache_dir))
        page = str((root / PAGE).resolve())
        for rec in cache.list_cache_records():
            if str(rec.uri) == page or str(rec.uri).endswith(PAGE):
                cache.remove_cache(rec.pk)
                dropped = True
    cache_dir.mkdir(parents=True, exist_ok=True)
    stamp.write_text(current + "\n")
    return dropped


def fixed_seconds(table) -> list[float]:
    """Per point: its wall time minus the time its notebook's cells ran (papermill's cell durations in the
    executed notebook), i.e. the process and kernel start-up and the writing of the results."""
    import nbformat

    out = []
    for p in table.points:
        d = Path(str(p.get("output_dir") or ""))
        files = list(d.glob("*.ipynb")) if d.is_dir() else []
        if not files or not isinstance(p.get("seconds"), (int, float)):
            continue
        nb = nbformat.read(files[0], as_version=4)
        cells = sum(float(c.get("metadata", {}).get("papermill", {}).get("duration") or 0.0) for c in nb.cells)
        out.append(float(p["seconds"]) - cells)
    return out
