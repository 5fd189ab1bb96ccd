"""Command-line interface: ``companion list | run | sweep | results | calibrate | book``.

Exit statuses: 0 success; 1 a notebook raised or a claim failed; 2 bad usage or bad parameters.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from dataclasses import asdict
from pathlib import Path

from .text import number_text, slug

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


def cmd_run(args) -> int:
    from .run.execute import NotebookFailed, run_notebook
    from .run.inputs import load_param_file, text_parameters
    from .run.process import exit_when_stdin_closes
    from .run.server import serve_runs
    from .threads import threads_env, use_threads

    if args.serve:
        return serve_runs()
    if os.environ.get("COMPANION_EXIT_WITH_STDIN") == "1":
        exit_when_stdin_closes()  # started by a sweep: die with the worker that started us
    typed = {}
    for f in args.file or []:
        typed.update(load_param_file(f))
    text = text_parameters(args.param)
    for name in set(typed) & set(text):
        typed.pop(name)  # -p wins over -f
    threads, why = threads_env(1)
    use_threads(threads)  # read by the kernel (mesa training, torch, NumPy's BLAS)
    if not args.quiet:
        print(f"companion: {why}", flush=True)
    try:
        result = run_notebook(args.notebook, typed, args.output, text_parameters=text, log_output=args.log,
                              overwrite=args.overwrite)
    except NotebookFailed as exc:
        if exc.refused:
            _err(f"{exc.notebook}: {exc.evalue}")
            return 2
        _err(f"{exc.notebook} raised {exc.ename}: {exc.evalue}")
        if exc.executed:
            print(f"companion: the executed notebook is kept at {exc.executed}", file=sys.stderr)
        return 1
    if not args.quiet:
        n = len(result.records)
        by = {s: sum(1 for r in result.records if r.get("status") == s)
              for s in ("passed", "not_resolvable", "does_not_hold", "failed")}
        found = f", {by['does_not_hold']} where the paper's statement does not hold" if by["does_not_hold"] else ""
        print(f"{result.notebook}: {by['passed']}/{n} claims passed, {by['not_resolvable']} not resolvable{found}, "
              f"{by['failed']} failed in {result.seconds:.1f} s -> {result.output_dir}")
        for r in result.records:
            status = r.get("status") or "failed"
            tag = {"passed": "ok  ", "not_resolvable": "n.r.", "not_applicable": "n.a.", "does_not_hold": "n.h."}.get(
                status, "FAIL")
            if status == "not_applicable":
                print(f"    {tag} {r.get('claim')} [{r.get('kind')}]: {r.get('reason')}")
                continue
            print(f"    {tag} {r.get('claim')} [{r.get('kind')}]: measured {_num(r.get('measured'))} "
                  f"predicted {_num(r.get('predicted'))} ({r.get('comparison')} tol {_num(r.get('tolerance'))})"
                  + (f"; falsifier {_num(r.get('falsifier_value'))} at {_num(r.get('z_falsifier'))} SE"
                     if r.get("z_falsifier") is not None else ""))
    return 0 if result.ok else 1


def _num(v) -> str:
    return number_text(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def cmd_sweep(args) -> int:
    from .run.grid import check_point_count, count_points, expand_grid, parse_grid, read_grid_files
    from .run.inputs import SweepError, text_parameters
    from .run.sweep import run_sweep, worker_count

    text_grid = parse_grid(args.grid or [])
    typed_grid, fixed = read_grid_files(args.file or [])
    if not text_grid and not typed_grid:
        raise SweepError("nothing to sweep: give --grid NAME=V1,V2 or -f grid.yaml")
    if args.max_points < 1:
        raise SweepError(f"--max-points must be >= 1; got {args.max_points}")
    workers, note = worker_count(args.workers)  # refuses --workers < 1; caps at the cores, with a note
    if note and not args.scheduler:
        print(f"companion: {note}", file=sys.stderr, flush=True)
    # the count from the grid's sizes, before a value is checked or a point built
    check_point_count(count_points(text_grid, typed_grid), args.max_points)  # one line: the count and the limit
    points = expand_grid(args.notebook, text_grid, typed_grid, fixed, text_parameters(args.param),
                         max_points=args.max_points)
    # the count before any work (on stdout: a refusal below stays one line on stderr)
    print(f"companion: {len(points)} point(s) to sweep (--max-points {args.max_points})", flush=True)
    out = args.out or os.path.join("sweeps", slug(args.notebook.removesuffix(".md")))

    def stop(signum, frame):  # SIGTERM as Ctrl-C: the cluster is shut down, its workers and runs with it
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, stop)
    try:
        summary = run_sweep(
            args.notebook, points, out, workers=workers, resume=args.resume, max_points=args.max_points,
            scheduler=args.scheduler, progress=not args.quiet, swept=[*typed_grid, *text_grid],
            log=lambda msg: print(f"companion: {msg}", file=sys.stderr, flush=True),
        )
    except KeyboardInterrupt:
        _err(f"sweep interrupted; the points that finished are in {Path(out) / 'results.jsonl'}: "
             "run the same command with --resume to run the others")
        return 130
    finally:
        signal.signal(signal.SIGTERM, old)
    print(
        f"sweep {summary['out']}: {summary['total']} points, {summary['ok']} ok, "
        f"{summary['failed']} failed verdicts, {summary['error']} errors, {summary['skipped']} skipped (resume); "
        f"results in {summary['results']}"
    )
    alarms = _expected_false_alarms(summary["results"])
    if alarms:
        print(f"companion: {alarms}")
    return 0 if summary["failed"] == 0 and summary["error"] == 0 else 1


def _expected_false_alarms(results: str) -> str:
    """One line: how many false failures a sweep's claim runs should give were every theorem right: at the book's
    level (:data:`companion.stats.Z_LEVEL`, every run decided against a band of standard errors,
    :func:`companion.report.banded`) and, for the statistical ones, at the committed calibration set's pooled rate
    (the Calibration page; left out without a calibration set); and how many of its page runs would fail, a claim
    of any kind failing, at that set's rate of failed page runs (:func:`companion.calibration.run_failures`)."""
    from .calibration import build_false_fail_rate, miss_counts, read_all, run_failures
    from .report import banded
    from .run.store import scan_results
    from .stats import Z_LEVEL, false_alarm

    good, _ = scan_results(Path(results))
    records = [r for _, _, p in good for r in p.get("records") or []]
    n_level = sum(1 for r in records if banded(r))
    line = (f"{n_level} claim runs decided at the book's level of {Z_LEVEL:.3g} SE: about "
            f"{n_level * false_alarm(Z_LEVEL):.2g} false failures expected were every theorem right")
    try:
        # the counts alone, not the page's statistics of every claim (3.3 s of every sweep's last line)
        smoke = [data for data in read_all() if data["point"] == "smoke"]
        pooled = build_false_fail_rate(c for data in smoke for c in miss_counts(data))
        pages = run_failures(smoke)
    except (OSError, ValueError, KeyError):
        return line
    if not pooled["runs"]:
        return line
    n = sum(1 for r in records if r.get("kind") == "statistical")
    return (f"{line}; of them {n} statistical: at the calibrated false-alarm rate ({pooled['misses']} of "
            f"{pooled['runs']} at the smoke points) about {n * pooled['rate']:.2g} runs would leave their band "
            f"(at most {n * pooled['rate_high']:.2g}, 95 %); claims of every kind: at the calibrated rate of failed "
            f"page runs ({pages['failed']} of {pages['runs']}) about {len(good) * pages['rate']:.2g} of these "
            f"{len(good)} page runs would fail (at most {len(good) * pages['rate_high']:.2g})")


def cmd_results(args) -> int:
    from .params import InputError
    from .run import table as sweep_table

    path = Path(args.directory)
    jsonl = path / "results.jsonl" if path.is_dir() else path
    if not jsonl.is_file():
        raise InputError(f"{path}: holds no results.jsonl; give a sweep's --out directory (or its results.jsonl)")
    table = sweep_table.load(jsonl)
    for lineno, why in table.skipped:
        _err(f"{jsonl} line {lineno}: skipped ({why})")
    wrote = False
    if args.csv:
        n = sweep_table.write_csv(table, args.csv, long=args.long)
        print(f"{n} rows -> {args.csv}")
        wrote = True
    if args.plot:
        what = sweep_table.plot(table, args.plot, x=args.x, y=args.y, claim=args.claim, value=args.value)
        print(f"{what} -> {args.plot}")
        wrote = True
    if not wrote:
        rows = table.long_rows() if args.long else table.wide_rows()
        columns: list[str] = []
        for row in rows:
            columns += [k for k in row if k not in columns and k != "point"]

        def fmt(v):
            return number_text(v) if isinstance(v, float) else ("" if v is None else str(v).strip().splitlines()[0][:60])

        cells = [columns] + [[fmt(r.get(c)) for c in columns] for r in rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
        for row in cells:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    if table.skipped:
        _err(f"{len(table.skipped)} line(s) of {jsonl} skipped; `companion sweep ... --resume` moves them "
             "aside and re-runs their points")
        return 1
    return 0


def cmd_calibrate(args) -> int:
    from . import notebooks as nbs
    from .calibration import FIRST_SEED, claim_summaries, default_seeds, read
    from .run.calibrate import calibrate, domain_points, restamp
    from .run.inputs import SweepError
    from .run.sweep import worker_count

    names = nbs.all_notebooks(toc_only=True) if args.notebook == "all" else [nbs.name_of(nbs.resolve(args.notebook))]
    jobs = [(n, p) for n in names for p in (domain_points(n) if args.point == "domain" else [args.point])]
    if not jobs:
        raise SweepError(f"--point {args.point}: no such point of {args.notebook}")
    workers, note = worker_count(args.workers)
    if note and not args.scheduler:
        print(f"companion: {note}", file=sys.stderr, flush=True)
    if args.extend and args.first_seed is not None:
        raise SweepError("--extend runs the seeds after the calibration file's last one: leave out --first-seed")
    if args.restamp is not None and (args.extend or args.resume or args.first_seed is not None):
        raise SweepError("--restamp reruns the calibration file's first seeds: leave out --extend, --resume and "
                         "--first-seed")
    if args.restamp is not None:
        return _restamp(jobs, args, workers, restamp)
    if args.first_seed is None:
        args.first_seed = FIRST_SEED
    def count(point: str) -> int:  # --seeds as given (calibrate refuses fewer than 2), else the committed set's
        return args.seeds if args.seeds is not None else default_seeds(point)

    seeds = " or ".join(map(str, sorted({count(point) for _, point in jobs})))
    print(f"companion: {len(jobs)} calibration(s) " + (f"grown to {seeds} seeds" if args.extend else
                                                        f"of {seeds} seeds from {args.first_seed}"), flush=True)
    bad = 0

    def stop(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, stop)
    try:
        for name, point in jobs:
            path = calibrate(name, point, count(point), args.first_seed, workers=workers, scheduler=args.scheduler,
                             resume=args.resume, progress=not args.quiet, out=args.out, extend=args.extend,
                             log=lambda msg: print(f"companion: {msg}", file=sys.stderr, flush=True))
            for s in claim_summaries(read(path)):
                problems = s.problems() + ([f"{s.failed} of {s.runs} runs failed"] if s.failed else [])
                bad += bool(problems)
                print(f"  {name} {point} {s.claim}: mean z {s.mean:+.2f} +- {s.mean_se:.2f}, rms {s.rms:.2f}, "
                      f"max |z| {s.max_abs:.2f}, {s.failed}/{s.runs} failed" + ("".join(f"; {p}" for p in problems)))
            print(f"{name} {point} -> {path}", flush=True)
    except KeyboardInterrupt:
        _err("calibration interrupted; the seeds that finished are kept: run the same command with --resume")
        return 130
    finally:
        signal.signal(signal.SIGTERM, old)
    return 1 if bad else 0


def _restamp(jobs, args, workers, restamp) -> int:
    """``companion calibrate --restamp K``: each calibration file carried over to the current code if its first K seeds
    give the same columns again (:func:`companion.run.calibrate.restamp`); exit 1 if any does not."""
    print(f"companion: {len(jobs)} calibration(s): the first {args.restamp} seeds of each run again and compared",
          flush=True)
    bad = 0
    for name, point in jobs:
        path, diffs = restamp(name, point, args.restamp, workers=workers, scheduler=args.scheduler,
                              progress=not args.quiet, out=args.out,
                              log=lambda msg: print(f"companion: {msg}", file=sys.stderr, flush=True))
        if diffs:
            bad += 1
            print(f"{name} {point}: not restamped, the current code records other numbers ({len(diffs)} column(s)): "
                  + "; ".join(diffs[:5]) + (" ..." if len(diffs) > 5 else "") + f"; recalibrate: companion calibrate "
                  f"{name} --point {point}", flush=True)
        else:
            print(f"{name} {point} -> {path} (restamped)", flush=True)
    return 1 if bad else 0


def cmd_book(args) -> int:
    from .site.book import build

    return build(force=args.force)


def build_parser() -> argparse.ArgumentParser:
    from .run.grid import MAX_POINTS
    from .threads import available_cores

    parser = argparse.ArgumentParser(
        prog="companion",
        description="Run, sweep and build the verified notebooks of the linear-transformer companion book.",
    )
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
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
    p.add_argument("-o", "--output", "--out", dest="output", metavar="OUT",
                   help="output directory (default runs/<notebook>/<time>)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a non-empty OUT, once the new run has reached its verdict")
    p.add_argument("--log", action="store_true", help="stream the notebook's output while it runs")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    # a sweep worker's run server (companion.run.server.serve_runs): requests on stdin, one warm kernel
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("sweep", help="execute a grid of parameters in parallel (Dask)")
    p.add_argument("notebook")
    p.add_argument("--grid", action="append", metavar="NAME=V1,V2,...", help="a swept parameter (repeatable)")
    p.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="a parameter fixed for every point")
    p.add_argument("-f", "--file", action="append", metavar="GRID.yaml",
                   help="YAML with 'grid: {name: [values]}' and optional 'fixed: {name: value}'")
    p.add_argument("-o", "--out", metavar="DIR",
                   help="sweep directory (default sweeps/<notebook>); locked while the sweep runs: a second sweep "
                        "on it is refused with the holder's pid")
    p.add_argument("--workers", type=int, default=2,
                   help="local worker processes (default 2); never more than this machine's cores "
                        f"({available_cores()} here): a larger number is capped with a note")
    p.add_argument("--max-points", type=int, default=MAX_POINTS, metavar="N",
                   help=f"refuse a grid of more than N points (default {MAX_POINTS}); the count is printed first")
    p.add_argument("--resume", action="store_true", help="skip points already finished in DIR")
    p.add_argument("--scheduler", metavar="ADDRESS", help="use a running Dask scheduler instead of a local cluster")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("results", help="table, CSV or figure of a sweep's results")
    p.add_argument("directory", help="the sweep's --out directory (or its results.jsonl)")
    p.add_argument("--csv", metavar="FILE",
                   help="write CSV: one row per point, one column per parameter and per claim's numbers")
    p.add_argument("--long", action="store_true", help="one row per point and claim instead (table and CSV)")
    p.add_argument("--plot", metavar="OUT.png",
                   help="figure (.png, .svg, .pdf): a line over one swept parameter, a heat map over two")
    p.add_argument("--x", metavar="PARAM", help="parameter on the x axis (default: the first swept one)")
    p.add_argument("--y", metavar="PARAM", help="second parameter: a heat map over (x, y)")
    p.add_argument("--claim", metavar="CLAIM", help="which claim's numbers to plot (default: the first)")
    p.add_argument("--value", default="measured", choices=["measured", "error", "predicted"],
                   help="which number of the claim to plot (default: measured)")
    p.set_defaults(func=cmd_results)

    p = sub.add_parser("calibrate", help="a notebook's statistical claims over many seeds: signed z against its law")
    p.add_argument("notebook", help="name (mesa/setup), path, or 'all'")
    p.add_argument("--point", default="smoke",
                   help="smoke (default), domain:I, domain (every domain point) or paper (the defaults)")
    p.add_argument("--seeds", type=int, help="how many seeds (default: as many as the committed set holds at that "
                                             "kind of point, companion.calibration.default_seeds)")
    # its default and --first-seed's are read when the command runs: companion.calibration imports the verdict module (matplotlib,
    # 0.4 s), which `companion --help`, a refused argument and every sweep worker's `companion run` would pay
    p.add_argument("--first-seed", type=int, help="the first seed (default: the calibration's first held-out seed, "
                                                  "companion.calibration.FIRST_SEED)")
    p.add_argument("--workers", type=int, default=2, help="local worker processes (default 2)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="use a running Dask scheduler instead of a local cluster")
    p.add_argument("--resume", action="store_true", help="keep the seeds already finished")
    p.add_argument("--extend", action="store_true",
                   help="grow the calibration file already there (same code, same point) to --seeds seeds: run only "
                        "the seeds after its last one")
    p.add_argument("--restamp", type=int, metavar="K",
                   help="carry the calibration file over to changed code that should record the same numbers: rerun "
                        "its first K seeds, and stamp it with the current code only if every claim's columns agree")
    p.add_argument("-o", "--out", metavar="DIR", help="where the calibration files go (default calibration/)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("book", help="strict build of the whole book (what `make book` runs)")
    p.add_argument("--force", action="store_true", help="re-execute every notebook")
    p.set_defaults(func=cmd_book)

    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. Bad input (a parameter, a path, a file, an option) is one line on stderr naming
    what is wrong and what is allowed, with exit status 2 and no traceback (``--debug`` shows it)."""
    from .notebooks import NotebookNotFound
    from .params import InputError, ParameterError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (InputError, NotebookNotFound, ParameterError) as exc:
        if args.debug:
            raise
        _err(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return 2
    except KeyboardInterrupt:
        if args.debug:
            raise
        _err("interrupted")
        return 130
    except OSError as exc:  # a path we were given: not writable, a file where a directory belongs, ...
        if args.debug:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        _err(f"{where}{exc.strerror or exc} (run with --debug for the traceback)")
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
