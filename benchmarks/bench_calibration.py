"""What a calibration costs per page: page runs per minute at a point over N seeds through the sweep runner.

Without options, reads the committed calibration set (``calibration/*.json``: each file's median seconds per run,
and its wall time where the seeds ran in one go) and prints one row per page and point with the whole set's total.
``--measure N`` runs ``companion calibrate`` for every notebook at its smoke point over N fresh seeds (from 5000, in a
temporary folder) with ``--workers W`` and prints the same rows from those runs, with the wall time of each.

    python benchmarks/bench_calibration.py
    python benchmarks/bench_calibration.py --measure 10 --workers 2
    python benchmarks/bench_calibration.py --measure 4 --only cot/looped mesa/thm4_1_emergence
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

# the package loads after the options are parsed: a refused option answers before it does


def rows_of(files: list[dict]) -> list[tuple]:
    rows = []
    for d in files:
        n = len(d["seeds"])
        wall = d.get("wall_seconds")
        per_min = 60 * n / wall if wall else None
        rows.append((d["notebook"], d["point"], n, d.get("seconds_per_run"), wall, d.get("workers"), per_min))
    return rows


def show(rows: list[tuple]) -> None:
    print(f"{'page':<28} {'point':<9} {'seeds':>5} {'s/run':>7} {'wall s':>8} {'workers':>7} {'runs/min':>9}")
    for nb, point, n, spr, wall, workers, per_min in rows:
        print(f"{nb:<28} {point:<9} {n:>5} {spr if spr is not None else '-':>7} {wall if wall else '-':>8} "
              f"{workers or '-':>7} {f'{per_min:.1f}' if per_min else '-':>9}")
    walls = [r[4] for r in rows if r[4]]
    runs = sum(r[2] for r in rows if r[4])
    if walls:
        print(f"total: {runs} page runs in {sum(walls) / 60:.1f} min ({60 * runs / sum(walls):.1f} per minute) over "
              f"{len(walls)} of {len(rows)} files with a wall time")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", type=int, metavar="N", help="run every notebook's smoke point over N fresh seeds")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", nargs="+", metavar="NOTEBOOK", help="with --measure: these notebooks only")
    args = ap.parse_args(argv)
    from companion import calibration as cal

    if not args.measure:
        show(rows_of(cal.read_all()))
        return 0
    from companion import notebooks as nbs
    from companion.run.calibrate import calibrate

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        names = nbs.all_notebooks(toc_only=True)
        if args.only:
            unknown = sorted(set(args.only) - set(names))
            if unknown:
                ap.error(f"--only: not a notebook of the book: {', '.join(unknown)} (one of {', '.join(names)})")
            names = [n for n in names if n in args.only]
        for name in names:
            calibrate(name, "smoke", args.measure, 5000, workers=args.workers, out=Path(tmp), progress=False)
            print(f"{name}: {time.perf_counter() - t0:.0f} s so far", file=sys.stderr, flush=True)
        show(rows_of(cal.read_all(tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
