"""A sweep's results as a table, a CSV export and a figure (``companion results``).

``results.jsonl`` is read tolerantly (:func:`companion.run.store.scan_results`): a bad line is skipped and
named (``Table.skipped``), never silently. Verdict records are read with ``.get``, so records with or
without the optional fields (``status``, ``se``, ``kind``, ``falsifier`` ...) both work.

* :meth:`companion.run.table.Table.wide_rows`: one row per point, one column per parameter and per claim's numbers
  (``<claim>.measured``, ``.predicted``, ``.se``, ``.passed`` ...), the export format;
* :meth:`companion.run.table.Table.long_rows`: one row per point and claim;
* :func:`plot`: a line of one claim's measured value over one swept parameter (error bars from the
  records' standard errors, or from the spread over the other swept parameters), with the prediction;
  or a heat map over two swept parameters. Points whose verdict failed, or that crashed, are marked.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..claims import REJECTED
from ..params import InputError
from ..plotting import new_figure
from ..text import number_text
from .store import scan_results

__all__ = ["Table", "load", "write_csv", "plot", "CLAIM_FIELDS"]


#: numbers of a verdict record exported per claim (absent fields are left empty)
CLAIM_FIELDS = ("measured", "predicted", "se", "z_score", "error", "tolerance", "in_band", "passed", "status",
                "falsifier_value", "z_theory", "z_falsifier", "dof", "crit", "detectable", "powered")


@dataclass
class Table:
    path: Path
    points: list[dict] = field(default_factory=list)  # the last record of every point, in file order
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line number, why)

    def parameters(self) -> list[str]:
        names: list[str] = []
        for p in self.points:
            names += [k for k in _params(p) if k not in names]
        return names

    def swept(self) -> list[str]:
        """Parameters whose value differs between points, in order."""
        return [k for k in self.parameters() if len({repr(_params(p).get(k)) for p in self.points}) > 1]

    def claims(self) -> list[str]:
        names: list[str] = []
        for p in self.points:
            names += [r.get("claim") for r in _records(p) if r.get("claim") not in names]
        return names

    def wide_rows(self) -> list[dict]:
        rows = []
        for p in self.points:
            row: dict[str, Any] = {"point": p.get("point"), **_params(p), "status": p.get("status")}
            if p.get("error"):
                row["error"] = p.get("error")
            for r in _records(p):
                for f in CLAIM_FIELDS:
                    if f in r:
                        row[f"{r.get('claim')}.{f}"] = r.get(f)
            rows.append(row)
        return rows

    def long_rows(self) -> list[dict]:
        rows = []
        for p in self.points:
            base = {"point": p.get("point"), **_params(p), "status": p.get("status")}
            recs = _records(p)
            if not recs:
                rows.append(dict(base, error=p.get("error")))
            for r in recs:
                rows.append(dict(base, **{k: r.get(k) for k in ("claim", "predicted", "measured", "se", "z_score",
                                                                "tolerance", "comparison", "in_band", "passed",
                                                                "status")
                                          if k in r or k in ("claim", "predicted", "measured", "passed")}))
        return rows


def _params(point: dict) -> dict:
    p = point.get("parameters")
    return {k: v for k, v in p.items() if k != "results_dir"} if isinstance(p, dict) else {}


def _records(point: dict) -> list[dict]:
    recs = point.get("records")
    return [r for r in recs if isinstance(r, dict)] if isinstance(recs, list) else []


def load(path: str | Path) -> Table:
    """The results of a sweep (its directory or its ``results.jsonl``)."""

    path = Path(path)
    if path.is_dir():
        path = path / "results.jsonl"
    good, bad = scan_results(path)
    last: dict[str, dict] = {}
    for _, _, rec in good:
        last.pop(rec["point"], None)
        last[rec["point"]] = rec
    return Table(path, list(last.values()), [(i, why) for i, _, why in bad])


def _open_for_writing(path: str | Path, what: str):
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{what} '{p}': is a directory; give a file name")
    try:
        return open(p, "w", newline="")
    except OSError as exc:
        raise InputError(f"{what} '{p}': cannot be written ({exc.strerror or exc})") from None


def write_csv(table: Table, path: str | Path, long: bool = False) -> int:
    """Write the wide (default) or long table as CSV; returns the number of rows."""
    rows = table.long_rows() if long else table.wide_rows()
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    with _open_for_writing(path, "--csv") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns or ["point"])
        writer.writeheader()
        writer.writerows(rows)
    return len(rows)


def _num(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v is not None else math.nan


def _claim_record(point: dict, claim: str) -> dict | None:
    return next((r for r in _records(point) if r.get("claim") == claim), None)


def _rejected(point: dict, rec: dict | None) -> bool:
    """The point crashed, holds no record of the claim, or its verdict rejects the theory (``failed``, or
    ``does_not_hold`` for a statement declared before the run as one the book may find not to hold)."""
    if rec is None or point.get("status") == "error":
        return True
    status = rec.get("status")
    if status is not None:
        return status in REJECTED
    return not rec.get("passed", False)  # a record from before statuses: passed meant "did not fail"


def plot(table: Table, out: str | Path, *, x: str | None = None, y: str | None = None, claim: str | None = None,
         value: str = "measured") -> str:
    """Draw the figure into ``out`` (format from the extension); returns a one-line description: a line of one
    claim's ``value`` over ``x`` (``_line``), or a heat map over ``x`` and ``y`` (``_heat_map``)."""
    x, claim = _plot_choices(table, out, x, y, claim)
    if y is None:
        fig, what = _line(table, x, claim, value)
    else:
        fig, what = _heat_map(table, x, y, claim, value)
    try:
        fig.savefig(out)
    except OSError as exc:
        raise InputError(f"--plot '{out}': cannot be written ({exc.strerror or exc})") from None
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    return what


def _plot_choices(table: Table, out, x: str | None, y: str | None, claim: str | None) -> tuple[str, str]:
    """Check the options of ``--plot`` before anything is drawn; returns the x parameter and the claim (defaults:
    the first swept parameter, the first claim)."""
    suffix = Path(out).suffix.lower()
    if suffix not in (".png", ".svg", ".pdf"):
        raise InputError(f"--plot '{out}': give a file name ending in .png, .svg or .pdf")
    if not table.points:
        raise InputError(f"{table.path}: holds no finished point to plot")
    params, swept, claims = table.parameters(), table.swept(), table.claims()
    for opt, name in (("--x", x), ("--y", y)):
        if name is not None and name not in params:
            raise InputError(f"{opt} '{name}': not a parameter of this sweep; its parameters are: {', '.join(params)}")
    x = x or (swept[0] if swept else None)
    if x is None:
        raise InputError("--plot: no parameter varies in this sweep; give --x PARAM")
    if y == x:
        raise InputError(f"--y '{y}': must differ from --x")
    if claim is None:
        if not claims:
            raise InputError(f"{table.path}: no point has a verdict record to plot")
        claim = claims[0]
    elif claim not in claims:
        raise InputError(f"--claim '{claim}': not a claim of this sweep; its claims are: {', '.join(claims) or 'none'}")
    return x, claim


def _xval(p: dict, name: str):
    return _params(p).get(name)


def _order(v):
    return (0, float(v)) if isinstance(v, (int, float)) else (1, str(v))


#: the legend entry of the marked points
REJECTED_LABEL = "rejected (failed, does not hold) / error"

#: the figures' width in inches
FIG_WIDTH = 5.2


def _line_point(pts: list[dict], claim: str, value: str):
    """One x value's mean, its error bar (the spread over the other swept parameters, e.g. seeds, else the record's
    SE), the mean prediction, and the values of its points."""
    recs = [_claim_record(p, claim) for p in pts]
    vals = [_num(r.get(value)) if r else math.nan for r in recs]
    finite = [v for v in vals if math.isfinite(v)]
    m = float(np.mean(finite)) if finite else math.nan
    if len(finite) > 1:  # spread over the other swept parameters (e.g. seeds)
        e = float(np.std(finite, ddof=1) / np.sqrt(len(finite)))
    else:
        ses = [_num(r.get("se")) for r in recs if r]
        e = ses[0] if ses and math.isfinite(ses[0]) and value == "measured" else math.nan
    preds = [_num(r.get("predicted")) for r in recs if r]
    pred = float(np.nanmean(preds)) if preds and any(math.isfinite(q) for q in preds) else math.nan
    return m, e, pred, recs, vals


def _line(table: Table, x: str, claim: str, value: str):
    fig, ax = new_figure(width=FIG_WIDTH, height=3.6)
    groups: dict = {}
    for p in table.points:
        groups.setdefault(repr(_xval(p, x)), (_xval(p, x), []))[1].append(p)
    xs, mean, err, pred, bad_x, bad_y = [], [], [], [], [], []
    for _, (xv, pts) in sorted(groups.items(), key=lambda kv: _order(kv[1][0])):
        m, e, q, recs, vals = _line_point(pts, claim, value)
        xs.append(xv)
        mean.append(m)
        err.append(e)
        pred.append(q)
        for p, r, v in zip(pts, recs, vals):
            if _rejected(p, r):
                bad_x.append(xv)
                bad_y.append(v if math.isfinite(v) else (m if math.isfinite(m) else 0.0))
    numeric = all(isinstance(v, (int, float)) for v in xs)
    pos = xs if numeric else list(range(len(xs)))
    yerr = None if all(not math.isfinite(e) for e in err) else [e if math.isfinite(e) else 0.0 for e in err]
    ax.errorbar(pos, mean, yerr=yerr, marker="o", ms=4, capsize=3, label=f"{value}")
    if value == "measured" and any(math.isfinite(q) for q in pred):
        ax.plot(pos, pred, ls="--", color="0.3", label="predicted")
    if bad_x:
        bpos = bad_x if numeric else [xs.index(b) for b in bad_x]
        ax.plot(bpos, bad_y, ls="none", marker="x", ms=9, mew=2, color="#d62728", label=REJECTED_LABEL)
    if not numeric:
        ax.set_xticks(pos, [str(v) for v in xs])
    elif len(xs) > 2 and min(xs) > 0 and max(xs) / min(xs) >= 50:
        ax.set_xscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(f"{claim}: {value}")
    ax.legend(fontsize=8)
    return fig, f"line of {claim} {value} over {x} ({len(xs)} values, {len(bad_x)} rejected point(s) marked)"


def _heat_map(table: Table, x: str, y: str, claim: str, value: str):
    fig, ax = new_figure(width=FIG_WIDTH, height=4.0)
    xv = sorted({repr(_xval(p, x)): _xval(p, x) for p in table.points}.values(), key=_order)
    yv = sorted({repr(_xval(p, y)): _xval(p, y) for p in table.points}.values(), key=_order)
    cells: dict = {}
    fails = set()
    for p in table.points:
        i, j = xv.index(_xval(p, x)), yv.index(_xval(p, y))
        r = _claim_record(p, claim)
        cells.setdefault((i, j), []).append(_num(r.get(value)) if r else math.nan)
        if _rejected(p, r):
            fails.add((i, j))
    grid = np.full((len(yv), len(xv)), np.nan)
    for (i, j), vals in cells.items():
        finite = [v for v in vals if math.isfinite(v)]
        if finite:
            grid[j, i] = float(np.mean(finite))
    im = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
    fig.colorbar(im, ax=ax, label=f"{claim}: {value}")
    ax.set_xticks(range(len(xv)), [number_text(v) if isinstance(v, float) else str(v) for v in xv])
    ax.set_yticks(range(len(yv)), [number_text(v) if isinstance(v, float) else str(v) for v in yv])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.grid(False)
    if fails:
        fi, fj = zip(*sorted(fails))
        ax.plot(fi, fj, ls="none", marker="x", ms=10, mew=2, color="#d62728", label=REJECTED_LABEL)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, -0.15))
    return fig, (f"heat map of {claim} {value} over ({x}, {y}) ({len(xv)} x {len(yv)}, "
                 f"{len(fails)} rejected cell(s) marked)")
