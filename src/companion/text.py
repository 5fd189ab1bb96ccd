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

Words with mathematics (the reasons, falsifiers and quantities of the verdict records):

* maths is written as TeX between single dollars, ``$T\\to\\infty$: $1/(5\\sigma^2)$``, and code between
  backticks; :func:`math_html` typesets such text for a raw-HTML table (MathJax reads the spans), :func:`plain_text`
  strips it for a tooltip or alt text, and :func:`ascii_math` lists what is written as ASCII maths outside the
  dollars (``T -> inf``, ``sigma^2``, ``m4/m6``, ``x_1``), so that a test can refuse it.

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

import html
import math
import re

__all__ = ["slug", "label", "safe_name", "number_text", "short_number", "number_tag", "id_part", "plain_text",
           "math_html", "ascii_math", "segments", "tex_number"]


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


# ------------------------------------------------------------------------------------- words with maths
_TEX_WORDS = {"sigma": "σ", "eta": "η", "alpha": "α", "beta": "β", "gamma": "γ", "lambda": "λ", "theta": "θ",
              "rho": "ρ", "mu": "μ", "Sigma": "Σ", "infty": "∞", "pm": "±", "sim": "~", "le": "≤", "leq": "≤",
              "ge": "≥", "geq": "≥", "ne": "≠", "neq": "≠", "to": "→", "approx": "≈", "times": "×", "cdot": "·",
              "star": "*", "Nor": "N", "E": "E", "ldots": "…", "dots": "…", "kappa": "κ", "tau": "τ",
              "Lambda": "Λ", "ell": "ℓ", "delta": "δ", "Delta": "Δ", "epsilon": "ε", "varepsilon": "ε",
              "omega": "ω", "chi": "χ", "nu": "ν", "xi": "ξ", "pi": "π", "phi": "φ", "psi": "ψ", "zeta": "ζ",
              "in": "∈", "ll": "≪", "gg": "≫", "propto": "∝", "sum": "Σ", "prod": "Π", "lVert": "‖",
              "rVert": "‖", "Vert": "‖", "top": "ᵀ", "mid": "|", "lvert": "|", "rvert": "|"}
_TEX_DROP = re.compile(r"\\(?:mathrm|mathbf|mathsf|mathcal|mathbb|operatorname|rm|bf|text|left|right|bigl|bigr|"
                       r"Bigl|Bigr|big|Big|quad|qquad)\b|\\[,;:! ]")


def plain_text(tex: str) -> str:
    """Text without TeX markup, for alt text and tooltips: ``x_1\\sim\\Nor(0,\\sigma^2I)`` -> ``x_1 ~ N(0,σ^2I)``;
    ``\\frac{a}{b}`` -> ``a/b``; code backticks dropped."""
    text = re.sub(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", r"(\1)/(\2)", tex)
    text = _TEX_DROP.sub(" ", text)
    text = re.sub(r"\\([A-Za-z]+)", lambda m: _TEX_WORDS.get(m.group(1), m.group(1)), text)
    text = text.replace("{", "").replace("}", "").replace("$", "").replace("`", "")
    return " ".join(text.split())


_SEGMENT = re.compile(r"(?<!\\)\$(?!\$)(.+?)(?<!\\)\$|`([^`]+)`")


def segments(text: str) -> list[tuple[str, str]]:
    """``text`` cut into ``("text" | "math" | "code", piece)`` in order: maths between single dollars, code
    between backticks, the rest words."""
    out: list[tuple[str, str]] = []
    pos = 0
    for m in _SEGMENT.finditer(text):
        if m.start() > pos:
            out.append(("text", text[pos:m.start()]))
        out.append(("math", m.group(1)) if m.group(1) is not None else ("code", m.group(2)))
        pos = m.end()
    if pos < len(text):
        out.append(("text", text[pos:]))
    return out


def math_html(text) -> str:
    """Words with ``$...$`` maths and backtick code as HTML for a raw-HTML block: words escaped, maths as the
    span that Sphinx writes for inline maths (MathJax typesets it), code as ``<code>``. No newline survives (a
    blank line would end the HTML block)."""
    parts = []
    for kind, piece in segments(" ".join(str(text).split())):
        if kind == "math":
            parts.append(f'<span class="math notranslate nohighlight">\\({html.escape(piece, quote=True)}\\)</span>')
        elif kind == "code":
            parts.append(f"<code>{html.escape(piece, quote=True)}</code>")
        else:
            parts.append(html.escape(piece, quote=True))
    return "".join(parts)


#: ASCII maths a reader of a typeset page should not meet outside ``$...$``: arrows and relations, powers,
#: subscripts, roots, products of symbols, Greek letters spelt out, moments like ``m4``, a bare ``inf``
_ASCII_MATH = [
    ("arrow", re.compile(r"->|<-|=>")),
    ("relation", re.compile(r"<=|>=|!=|~=|\+/?-")),
    ("power", re.compile(r"\w\^|\)\^|\*\*")),
    ("subscript", re.compile(r"\b[A-Za-z]{1,3}_[A-Za-z0-9{]")),
    ("root or log", re.compile(r"\b(?:sqrt|exp|log)\(")),
    ("product", re.compile(r"[\w)]\s?\*\s?[\w(]")),
    ("greek", re.compile(r"\b(?:alpha|beta|gamma|delta|epsilon|eta|theta|kappa|lambda|mu|nu|xi|rho|sigma|Sigma|"
                         r"tau|phi|psi|chi|omega|Lambda|Delta|ell)\b")),
    ("symbol with index", re.compile(r"\b[A-Za-z][0-9]{1,2}\b")),
    ("infinity", re.compile(r"\binf(?:inity)?\b")),
    ("variable equation", re.compile(r"(?<![\w.])[A-Za-z](?:_\w+)?\s?[=<>]\s?[-−(\w]")),
]


def ascii_math(text) -> list[str]:
    """The pieces of ``text`` written as ASCII maths outside ``$...$`` and code: ``["arrow: ->", ...]``; empty
    when the text typesets its maths. A word such as "float64" or "DOP853" is no maths; a single letter with an
    index (``m4``, ``T = 10``) is."""
    found: list[str] = []
    for kind, piece in segments(str(text or "")):
        if kind != "text":
            continue
        for name, pattern in _ASCII_MATH:
            for m in pattern.finditer(piece):
                found.append(f"{name}: {m.group(0)!r}")
    return found


def tex_number(x, spec: str = ".3g") -> str:
    """A number for TeX between dollars: ``1.2e-05`` -> ``1.2\\times10^{-5}``, ``1e-08`` -> ``10^{-8}``,
    ``0.25`` -> ``0.25``; infinity ``\\infty``, NaN ``\\mathrm{NaN}``. ``spec``: the format of the mantissa."""
    x = float(x)
    if not math.isfinite(x):
        return r"\mathrm{NaN}" if math.isnan(x) else ("-" if x < 0 else "") + r"\infty"
    text = format(x, spec)
    if "e" not in text:
        return text
    mant, exp = text.split("e")
    return (f"{mant}\\times" if mant not in ("1", "1.0", "-1") else ("-" if mant == "-1" else "")) + f"10^{{{int(exp)}}}"
