"""Theory-vs-simulation verdicts: one record per claim, glued into the prose, written as JSON lines.

Usage in a notebook (the last computational cell)::

    from companion.verdict import Verdict
    v = Verdict("mesa/thm4_1_emergence", parameters=dict(d=d, T=T, seed=seed), results_dir=results_dir)
    v.check("ab_limit", quantity="a*b at epoch 200 vs population GD",
            predicted=ab_pop, measured=ab_gd, tolerance=5e-3, comparison="rel",
            reason="sampling error of the empirical moments at m = 1e4 (about 0.3 %)")
    v.finish()   # table + glue + results file; raises VerdictError if any claim failed

Comparisons (``comparison=``):

* ``"abs"``:   ``|measured - predicted| <= tolerance``
* ``"rel"``:   ``|measured - predicted| <= tolerance * |predicted|``
* ``"upper"``: ``measured <= predicted + tolerance``  (an upper bound holds)
* ``"lower"``: ``measured >= predicted - tolerance``  (a lower bound holds)

For every claim ``c`` the glue keys ``c_predicted``, ``c_measured``, ``c_tolerance`` (Python floats),
``c_error`` (the realised |measured - predicted|, or the relative error for ``"rel"``) and
``c_verdict`` (``"passed"``/``"FAILED"``) are available to ``{glue:text}`` roles in the prose.

Records are written to ``<results_dir>/<notebook slug>.jsonl`` (``results_dir`` is a notebook
parameter; ``""`` falls back to ``$COMPANION_RESULTS_DIR`` and, if that is unset, writes no file).
They are also embedded in the output metadata of the verdict table, so ``companion book`` collects
the records of every notebook of a build into ``_build/results/`` from the executed notebooks.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Verdict", "VerdictError", "Record", "METADATA_KEY", "slug"]

METADATA_KEY = "companion_results"
_COMPARISONS = ("abs", "rel", "upper", "lower")
_CLAIM_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class VerdictError(AssertionError):
    """At least one claim of a notebook failed its theory-vs-simulation check."""


def slug(notebook: str) -> str:
    return notebook.strip("/").replace("/", "__")


def _plain(value: Any) -> Any:
    """Convert numpy/torch scalars and containers into JSON-friendly Python objects."""
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    return str(value)


@dataclass
class Record:
    notebook: str
    claim: str
    quantity: str
    predicted: float | None
    measured: float | None
    tolerance: float
    comparison: str
    error: float | None
    passed: bool
    reason: str
    parameters: dict = field(default_factory=dict)


class Verdict:
    def __init__(self, notebook: str, parameters: dict | None = None, results_dir: str | os.PathLike = ""):
        self.notebook = notebook
        self.parameters = _plain(dict(parameters or {}))
        self.results_dir = str(results_dir or os.environ.get("COMPANION_RESULTS_DIR", ""))
        self.records: list[Record] = []

    # ------------------------------------------------------------------ checks
    def check(
        self,
        claim: str,
        *,
        quantity: str,
        predicted: float,
        measured: float,
        tolerance: float,
        comparison: str = "abs",
        reason: str,
    ) -> Record:
        """Compare one measured number with its prediction; remember (and return) the record."""
        if not _CLAIM_RE.match(claim):
            raise ValueError(f"claim id {claim!r} must be an identifier (letters, digits, underscores)")
        if any(r.claim == claim for r in self.records):
            raise ValueError(f"claim id {claim!r} is used twice in {self.notebook}")
        if comparison not in _COMPARISONS:
            raise ValueError(f"comparison must be one of {_COMPARISONS}; got {comparison!r}")
        if not reason.strip():
            raise ValueError("every tolerance needs a reason")
        pred = float(_plain(predicted)) if _plain(predicted) is not None else math.nan
        meas = float(_plain(measured)) if _plain(measured) is not None else math.nan
        tol = float(tolerance)
        if not (math.isfinite(tol) and tol >= 0):
            raise ValueError(f"tolerance must be finite and >= 0; got {tolerance!r}")
        diff = abs(meas - pred)
        if comparison == "abs":
            error, passed = diff, diff <= tol
        elif comparison == "rel":
            error = diff / abs(pred) if pred != 0 else math.inf
            passed = diff <= tol * abs(pred)
        elif comparison == "upper":
            error, passed = meas - pred, meas <= pred + tol
        else:
            error, passed = pred - meas, meas >= pred - tol
        passed = bool(passed) and math.isfinite(meas) and math.isfinite(pred)
        rec = Record(
            notebook=self.notebook,
            claim=claim,
            quantity=quantity,
            predicted=_plain(pred),
            measured=_plain(meas),
            tolerance=tol,
            comparison=comparison,
            error=_plain(float(error)),
            passed=passed,
            reason=reason,
            parameters=self.parameters,
        )
        self.records.append(rec)
        return rec

    # ------------------------------------------------------------------ output
    @property
    def passed(self) -> bool:
        return bool(self.records) and all(r.passed for r in self.records)

    def table_markdown(self) -> str:
        sym = {"abs": "±", "rel": "± rel.", "upper": "≤ pred. +", "lower": "≥ pred. −"}
        rows = [
            "| claim | quantity | predicted | measured | tolerance | verdict |",
            "|---|---|---|---|---|---|",
        ]
        for r in self.records:
            rows.append(
                f"| `{r.claim}` | {_cell(r.quantity)} | {_fmt(r.predicted)} | {_fmt(r.measured)} | "
                f"{sym[r.comparison]} {r.tolerance:.3g} | {'passed' if r.passed else '**FAILED**'} |"
            )
        return "\n".join(rows)

    def write(self) -> Path | None:
        """Write the records as JSON lines (one per claim) if a results directory is configured."""
        if not self.results_dir:
            return None
        out = Path(self.results_dir)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{slug(self.notebook)}.jsonl"
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(asdict(r)) + "\n" for r in self.records))
        os.replace(tmp, path)
        return path

    def finish(self, display: bool = True) -> None:
        """Glue every number, show the verdict table, write the results file, and raise on failure."""
        if not self.records:
            raise VerdictError(f"{self.notebook}: no claim was checked")
        self.write()
        if display:
            self._display()
        failed = [r for r in self.records if not r.passed]
        if failed:
            lines = [
                f"{r.claim}: {r.quantity}: measured {_fmt(r.measured)}, predicted {_fmt(r.predicted)}, "
                f"tolerance {r.tolerance:.3g} ({r.comparison})"
                for r in failed
            ]
            raise VerdictError(
                f"{len(failed)} of {len(self.records)} claim(s) of {self.notebook} failed:\n  " + "\n  ".join(lines)
            )

    def _display(self) -> None:
        from IPython.display import Markdown, display

        try:
            from myst_nb import glue
        except ImportError:  # pragma: no cover - myst-nb is a dependency
            glue = None
        if glue is not None:
            for r in self.records:
                for key, val in (
                    ("predicted", r.predicted),
                    ("measured", r.measured),
                    ("tolerance", r.tolerance),
                    ("error", r.error),
                ):
                    glue(f"{r.claim}_{key}", float(val) if val is not None else math.nan, display=False)
                glue(f"{r.claim}_verdict", "passed" if r.passed else "FAILED", display=False)
        display(
            Markdown(self.table_markdown()),
            metadata={METADATA_KEY: [asdict(r) for r in self.records]},
        )


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell (a quantity may contain |x| or line breaks)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _fmt(x: float | None) -> str:
    if x is None:
        return "nan"
    if x == 0:
        return "0"
    if 1e-3 <= abs(x) < 1e5:
        return f"{x:.6g}"
    return f"{x:.4e}"
