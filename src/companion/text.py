"""How names and numbers are written: the one home of every slug and number format of the package.

A leaf module (it imports nothing from :mod:`companion`), so that the verdict, the report, the runner, the
sweep, the CLI and the result modules all spell a notebook's file name, a label or a number the same way.

Slugs (one per kind of name, each fixed by where it appears):

* :func:`slug` -- a notebook as a file or folder name: ``mesa/thm4_1_emergence`` -> ``mesa__thm4_1_emergence``
  (the verdict's ``<slug>.jsonl``, the book's per-notebook results, a run's and a sweep's default folder);
* :func:`label` -- a notebook as part of a MyST label or HTML id: ``mesa/prop4_1_gaussian`` ->
  ``mesa-prop4-1-gaussian`` (``verdict-<label>``, ``claim-<label>-<claim>``);
* :func:`safe_name` -- any text as part of a file name: every character but letters, digits and ``=._-``
  becomes ``-`` (a sweep point's folder).

Numbers (two formats for two readers, and one for claim ids):

* :func:`number_text` -- a number in running text or on a terminal (a verdict's error message, ``companion run``
  and ``companion results``): six significant digits, ``—`` for a missing value;
* :func:`short_number` -- a number in a table cell of the book (the verdict tables and the dashboard): at most
  about nine characters, four significant digits, a true minus sign. It is shorter than :func:`number_text`
  because a table column is narrow, and it writes "−" (U+2212) because the page is typeset, not parsed;
* :func:`number_tag` -- a number as it enters a claim id: ``0.01`` -> ``0p01``, ``-1.5`` -> ``m1p5`` (the
  ``{name:num}`` placeholder of :class:`companion.claims.ClaimSpec` matches it). Claim ids are records:
  this spelling is frozen.
"""

from __future__ import annotations

import math

__all__ = ["slug", "label", "safe_name", "number_text", "short_number", "number_tag", "id_part"]


# ----------------------------------------------------------------------------------------------- slugs
def slug(notebook: str) -> str:
    """A notebook name as a file or folder name: ``mesa/thm4_1_emergence`` -> ``mesa__thm4_1_emergence``."""
    return notebook.strip("/").replace("/", "__")


def label(notebook: str) -> str:
    """A notebook name as part of a MyST label or HTML id: ``mesa/prop4_1_gaussian`` -> ``mesa-prop4-1-gaussian``."""
    return notebook.strip("/").replace("/", "-").replace("_", "-")


def safe_name(text: str) -> str:
    """``text`` with every character other than a letter, a digit or one of ``=._-`` replaced by ``-``."""
    return "".join(c if c.isalnum() or c in "=._-" else "-" for c in text)


# --------------------------------------------------------------------------------------------- numbers
def number_text(x) -> str:
    """A number in running text or on a terminal: six significant digits (``.6g``); ``—`` for None."""
    if x is None:
        return "—"
    return f"{x:.6g}"


def short_number(x) -> str:
    """A number in at most about 9 characters: 4 significant digits, scientific outside [1e-3, 1e5), "−" for
    the minus sign; ``—`` for None or a non-finite value."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    x = float(x)
    if x == 0:
        return "0"
    if 1e3 <= abs(x) < 1e5:
        s = f"{x:.0f}"
    elif 1e-3 <= abs(x) < 1e3:
        s = f"{x:.4g}"
    else:
        mant, exp = f"{x:.2e}".split("e")
        s = f"{mant}e{int(exp)}"
    return s.replace("-", "−")


def id_part(text: str) -> str:
    """Text of a number (or of several) as part of a claim id: ``.`` -> ``p``, ``-`` -> ``m``."""
    return str(text).replace(".", "p").replace("-", "m")


def number_tag(x) -> str:
    """A number as it enters a claim id: ``0.01`` -> ``0p01``, ``-1.5`` -> ``m1p5``, ``2.0`` -> ``2``."""
    return id_part(f"{x:g}")
