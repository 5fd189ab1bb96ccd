"""Write RESULTS.md, the map of every result (page, module, claims, figures, tests, training), from the registries.

Run after adding, removing or changing a result, its page or its tests: ``tests/site/test_where.py`` fails while the
committed file differs from what :func:`companion.site.where.results_markdown` gives. ``--check``: write nothing,
exit 1 (showing the difference) when the file is stale."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from companion.site import where

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Write RESULTS.md from the registries of both papers.")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when RESULTS.md is stale")
    args = parser.parse_args(argv)
    if args.check:
        problem = where.check_results(ROOT)
        print(problem or f"{where.RESULTS_FILE} is up to date")
        return 1 if problem else 0
    print(f"wrote {where.write_results(ROOT).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
