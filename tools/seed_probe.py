"""Run notebooks at held-out seeds: every claim must pass (or say why not) at any seed of the domain.

The tests run each notebook at its smoke point and at two domain points, each with one seed. A claim whose
tolerance under-covers its noise (or whose training has not converged at those sizes) can pass there by
luck and fail at the next seed. This probe runs the smoke point (or the domain points, ``--domain``) of every
notebook at other seeds through `companion sweep`'s own runner and lists every failing claim::

    python tools/seed_probe.py                        # smoke points, seeds 2 and 3, every notebook
    python tools/seed_probe.py --seeds 4 5 6 -k cot/  # notebooks whose name contains "cot/"
    python tools/seed_probe.py --domain               # the domain points instead (slower)

Exit status 1 when a point fails. Not a test: it is slow and its purpose is to find fragile claims.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from _util import domain_points, smoke_parameters  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[2, 3])
    ap.add_argument("-k", default="", help="only notebooks whose name contains this text")
    ap.add_argument("--domain", action="store_true", help="probe the domain points instead of the smoke points")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()

    from companion.notebooks import all_notebooks, resolve
    from companion.run.store import read_results
    from companion.run.sweep import run_sweep

    smoke = smoke_parameters()
    dom = domain_points()
    bad = 0
    total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in all_notebooks():
            if args.k not in name:
                continue
            bases = dom.get(name, []) if args.domain else [smoke.get(name, {})]
            points = [dict(base, seed=s) for base in bases for s in args.seeds]
            if not points:
                continue
            out = Path(tmp) / name.replace("/", "__")
            run_sweep(str(resolve(name)), points, out, workers=args.workers, progress=False,
                      swept=sorted({k for p in points for k in p}), log=lambda msg: None)
            for rec in read_results(out).values():
                total += 1
                failed = [r for r in rec.get("records", []) if r.get("status") == "failed"]
                if rec.get("status") == "ok" and not failed:
                    continue
                bad += 1
                seed = rec.get("parameters", {}).get("seed")
                err = (rec.get("error") or "").splitlines()
                print(f"{name} seed {seed}: {rec.get('status')} {err[0] if err else ''}".rstrip())
                for r in failed:
                    print(f"    {r['claim']} ({r.get('kind')}): measured {r.get('measured'):.6g}, predicted "
                          f"{r.get('predicted')}, tolerance {r.get('tolerance')}")
            print(f"{name}: {len(points)} point(s) done", flush=True)
    print(f"{total - bad} of {total} points passed every claim")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
