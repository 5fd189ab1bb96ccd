#!/usr/bin/env python3
"""Give the cot paper's equations (6) and (7) their own numbers in the book. Idempotent; run once after
merging (``python tools/paper_numbering.py``; ``--check`` only reports).

The CoT training loss (6) and the evaluation loss (7) are defined side by side in one display of
``notebooks/cot/setup.md``. This script splits that display into two displays labelled ``cot-eq-6`` and
``cot-eq-7``, which ``companion.site.sphinx_ext`` numbers "(6)" and "(7)" (the book's own equations read
(B1), (B2), …), and turns the prose references "(6)" / "(7)" of the cot notebooks into ``{eq}`` links
(code cells and formulas are left alone).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUP = Path("notebooks/cot/setup.md")
LABELS = {"6": "cot-eq-6", "7": "cot-eq-7"}
_DISPLAY = re.compile(r"\$\$\n(?P<body>(?:(?!\$\$).)*?\\Lcal\^\{\\rm CoT\}(?:(?!\$\$).)*?)\n\$\$(?P<label>[ \t]*\([^)\n]*\))?",
                      re.S)
_REF = re.compile(r"(?<![\w{`$\\])\(([67])\)(?![\w`])")


def split_display(text: str) -> tuple[str, bool]:
    """Split the display that defines both losses into two labelled displays."""
    if "(cot-eq-6)" in text and "(cot-eq-7)" in text:
        return text, False
    for m in _DISPLAY.finditer(text):
        body = m.group("body")
        if "\\Lcal^{\\rm Eval}" not in body or m.group("label"):
            continue
        parts = re.split(r"\n\s*\\qquad\s*\n", body)
        if len(parts) != 2:
            continue
        cot, ev = (p.strip().rstrip(",").rstrip() for p in parts)
        new = f"$$\n{cot},\n$$ (cot-eq-6)\n\n$$\n{ev}\n$$ (cot-eq-7)"
        return text[: m.start()] + new + text[m.end():], True
    return text, False


def link_references(text: str) -> tuple[str, int]:
    """"(6)" / "(7)" in prose -> {eq}`cot-eq-6` / {eq}`cot-eq-7`; not in code cells, code or formulas."""
    out, n, fences, in_display = [], 0, [], False  # fences: a stack of open ``` blocks, True = code
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        m = re.match(r"^(`{3,}|:{3,})(.*)$", stripped)
        if m:
            info = m.group(2).strip()
            if not info and fences:
                fences.pop()
            else:
                code = not info.startswith("{") or info.startswith(("{code-cell", "{code", "{literalinclude"))
                fences.append(code)
            out.append(line)
            continue
        in_code = any(fences)
        if in_code:
            out.append(line)
            continue
        if stripped.startswith("$$"):
            in_display = not in_display if stripped == "$$" else (not in_display if stripped.count("$$") == 1 else in_display)
            out.append(line)
            continue
        if in_display:
            out.append(line)
            continue
        # split off inline math and inline code; replace in the rest
        pieces = re.split(r"(\$[^$]*\$|`[^`]*`)", line)
        for i in range(0, len(pieces), 2):
            pieces[i], k = _REF.subn(lambda m: "{eq}`" + LABELS[m.group(1)] + "`", pieces[i])
            n += k
        out.append("".join(pieces))
    return "".join(out), n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--check", action="store_true", help="report what would change, change nothing")
    args = ap.parse_args(argv)
    setup = args.root / SETUP
    if not setup.is_file():
        print(f"{setup}: not found", file=sys.stderr)
        return 1
    text = setup.read_text()
    new, split = split_display(text)
    if not split and "(cot-eq-6)" not in new:
        print(f"{SETUP}: the display defining both losses (6) and (7) was not found; nothing done", file=sys.stderr)
        return 1
    changes = {}
    if new != text:
        changes[setup] = new
    total = 0
    for nb in sorted((args.root / "notebooks" / "cot").glob("*.md")):
        src = changes.get(nb, nb.read_text())
        linked, k = link_references(src)
        total += k
        if linked != src:
            changes[nb] = linked
    for path, content in changes.items():
        print(f"{'would change' if args.check else 'changed'} {path.relative_to(args.root)}")
        if not args.check:
            path.write_text(content)
    print(f"display split: {split}; prose references linked: {total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
