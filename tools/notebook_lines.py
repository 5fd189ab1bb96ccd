"""Count the computation lines of the notebooks: what a page computes itself instead of calling the package.

A computation line is a non-blank line of a code cell that is not a comment, outside the ``parameters``
cell (the parameters are the notebook's interface, not computation). Compare with a git revision::

    python tools/notebook_lines.py              # per notebook and per paper, this tree
    python tools/notebook_lines.py --rev f2a2596  # the same at a git revision
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parents[1]


def computation_lines(text: str) -> int:
    nb = jupytext.reads(text, fmt="md:myst")
    n = 0
    for cell in nb.cells:
        if cell.cell_type != "code" or "parameters" in cell.metadata.get("tags", []):
            continue
        n += sum(1 for line in cell.source.splitlines() if line.strip() and not line.strip().startswith("#"))
    return n


def count(rev: str | None) -> dict[str, int]:
    if rev is None:
        return {str(p.relative_to(ROOT)): computation_lines(p.read_text()) for p in sorted(ROOT.glob("notebooks/*/*.md"))}
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "notebooks"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    out = {}
    for name in sorted(n for n in names if n.endswith(".md")):
        text = subprocess.run(["git", "show", f"{rev}:{name}"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
        out[name] = computation_lines(text)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", help="a git revision to count instead of the working tree")
    ap.add_argument("--quiet", action="store_true", help="totals only")
    args = ap.parse_args(argv)
    counts = count(args.rev)
    if not args.quiet:
        for name, n in counts.items():
            print(f"{n:5d}  {name}")
    by = {p: sum(n for k, n in counts.items() if f"/{p}/" in k) for p in ("mesa", "cot")}
    print(f"total {sum(counts.values())}  mesa {by['mesa']}  cot {by['cot']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
