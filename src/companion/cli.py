"""Command-line interface: ``companion list | run | sweep | results | book``.

Exit statuses: 0 success; 1 a notebook raised or a claim failed; 2 bad usage or bad parameters.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

__all__ = ["main"]


def _err(msg: str) -> None:
    print(f"companion: error: {msg}", file=sys.stderr)


def cmd_list(args) -> int:
    from . import notebooks as nbs

    names = nbs.all_notebooks()
    if args.notebook:
        names = [nbs.name_of(nbs.resolve(args.notebook))]
    listing = {name: [asdict(s) for s in nbs.parameters(name).values()] for name in names}
    if args.json:
        print(json.dumps(listing, indent=2))
        return 0
    for name, specs in listing.items():
        print(name)
        for s in specs:
            print(f"    {s['name']:<14} {s['type']:<12} = {s['default']:<22} {s['help']}")
    return 0


def _text_params(pairs) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in pairs or []:
        if name in out:
            raise ValueError(f"parameter '{name}' is given twice with -p")
        out[name] = value
    return out


def cmd_run(args) -> int:
    from .runner import NotebookFailed, ParameterSpecError, load_param_file, run_notebook
    from .notebooks import NotebookNotFound

    try:
        typed = {}
        for f in args.file or []:
            typed.update(load_param_file(f))
        text = _text_params(args.param)
        for name in set(typed) & set(text):
            typed.pop(name)  # -p wins over -f
        result = run_notebook(args.notebook, typed, args.output, text_parameters=text, log_output=args.log)
    except (ParameterSpecError, NotebookNotFound, ValueError, FileNotFoundError) as exc:
        _err(str(exc))
        return 2
    except NotebookFailed as exc:
        if exc.ename == "ParameterError":
            _err(f"{exc.notebook}: {exc.evalue}")
            return 2
        _err(f"{exc.notebook} raised {exc.ename}: {exc.evalue}")
        if exc.executed:
            print(f"companion: the executed notebook is kept at {exc.executed}", file=sys.stderr)
        return 1
    if not args.quiet:
        n = len(result.records)
        passed = sum(1 for r in result.records if r.get("passed"))
        print(f"{result.notebook}: {passed}/{n} claims passed in {result.seconds:.1f} s -> {result.output_dir}")
        for r in result.records:
            print(f"    {'ok  ' if r['passed'] else 'FAIL'} {r['claim']}: measured {r['measured']:.6g} "
                  f"predicted {r['predicted']:.6g} ({r['comparison']} tol {r['tolerance']:.3g})")
    return 0 if result.ok else 1


def cmd_sweep(args) -> int:
    import yaml

    from .notebooks import NotebookNotFound
    from .runner import ParameterSpecError
    from .sweep import SweepError, expand_grid, parse_grid, run_sweep

    try:
        text_grid = parse_grid(args.grid or [])
        typed_grid: dict = {}
        fixed: dict = {}
        for f in args.file or []:
            data = yaml.safe_load(Path(f).read_text()) or {}
            if not isinstance(data, dict):
                raise SweepError(f"{f}: expected a mapping (grid: {{name: [values]}}, fixed: {{name: value}})")
            unknown = set(data) - {"grid", "fixed"}
            if unknown:
                raise SweepError(f"{f}: unknown top-level key(s) {sorted(unknown)}; use 'grid' and 'fixed'")
            typed_grid.update(data.get("grid") or {})
            fixed.update(data.get("fixed") or {})
        if not text_grid and not typed_grid:
            raise SweepError("nothing to sweep: give --grid NAME=V1,V2 or -f grid.yaml")
        points = expand_grid(args.notebook, text_grid, typed_grid, fixed, _text_params(args.param))
        if args.workers < 1:
            raise SweepError(f"--workers must be >= 1; got {args.workers}")
        out = args.out or os.path.join("sweeps", args.notebook.replace("/", "__").removesuffix(".md"))
        summary = run_sweep(
            args.notebook, points, out, workers=args.workers, resume=args.resume,
            scheduler=args.scheduler, progress=not args.quiet,
        )
    except (SweepError, ParameterSpecError, NotebookNotFound) as exc:
        _err(str(exc))
        return 2
    print(
        f"sweep {summary['out']}: {summary['total']} points, {summary['ok']} ok, "
        f"{summary['failed']} failed verdicts, {summary['error']} errors, {summary['skipped']} skipped (resume); "
        f"results in {summary['results']}"
    )
    return 0 if summary["failed"] == 0 and summary["error"] == 0 else 1


def cmd_results(args) -> int:
    import csv

    from .sweep import flat_rows

    path = Path(args.directory)
    if not (path / "results.jsonl").is_file():
        _err(f"{path} holds no results.jsonl (is it a sweep directory?)")
        return 2
    rows = flat_rows(path)
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns and k != "point"]
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=["point", *columns])
            writer.writeheader()
            writer.writerows(rows)
        print(f"{len(rows)} rows -> {args.csv}")
        return 0

    def fmt(v):
        return f"{v:.6g}" if isinstance(v, float) else ("" if v is None else str(v))

    table = [columns] + [[fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(columns))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


def cmd_book(args) -> int:
    from .book import build

    return build(force=args.force)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="companion",
        description="Run, sweep and build the verified notebooks of the linear-transformer companion book.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="notebooks and their parameters (name, type, default, help)")
    p.add_argument("notebook", nargs="?", help="only this notebook (e.g. mesa/setup)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("run", help="execute one notebook with papermill")
    p.add_argument("notebook", help="name (mesa/setup) or path of the notebook")
    p.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="set a parameter (converted to the type declared in the parameters cell)")
    p.add_argument("-f", "--file", action="append", metavar="PARAMS.yaml", help="parameters from a YAML mapping")
    p.add_argument("-o", "--output", metavar="OUT", help="output directory (default runs/<notebook>/<time>)")
    p.add_argument("--log", action="store_true", help="stream the notebook's output while it runs")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("sweep", help="execute a grid of parameters in parallel (Dask)")
    p.add_argument("notebook")
    p.add_argument("--grid", action="append", metavar="NAME=V1,V2,...", help="a swept parameter (repeatable)")
    p.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="a parameter fixed for every point")
    p.add_argument("-f", "--file", action="append", metavar="GRID.yaml",
                   help="YAML with 'grid: {name: [values]}' and optional 'fixed: {name: value}'")
    p.add_argument("--out", metavar="DIR", help="sweep directory (default sweeps/<notebook>)")
    p.add_argument("--workers", type=int, default=2, help="local worker processes (default 2)")
    p.add_argument("--resume", action="store_true", help="skip points already finished in DIR")
    p.add_argument("--scheduler", metavar="ADDRESS", help="use a running Dask scheduler instead of a local cluster")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("results", help="tabulate the results of a sweep (one row per point and claim)")
    p.add_argument("directory", help="the sweep's --out directory")
    p.add_argument("--csv", metavar="FILE", help="write CSV instead of printing a table")
    p.set_defaults(func=cmd_results)

    p = sub.add_parser("book", help="strict build of the whole book (what `make book` runs)")
    p.add_argument("--force", action="store_true", help="re-execute every notebook")
    p.set_defaults(func=cmd_book)

    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
