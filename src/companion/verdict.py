"""Theory-vs-simulation verdicts: one typed record per claim, glued into the prose, written as JSON lines.

A claim is evidence, or it is not a claim. Every claim has a **kind**:

``identity``
    Two implementations of the same mathematics agree to round-off (a fast kernel against the definition).
    An implementation test: shown apart on the page and *not* counted as evidence for the paper.
``numerics``
    An integrator, a quadrature or an exact grid average against a closed form, at a tolerance set by the
    integrator's own error control or by round-off.
``statistical``
    A simulation against an *independent* prediction. The tolerance is ``z`` standard errors measured from
    the data (:mod:`companion.stats`: replicates, jackknife, Monte-Carlo SE) plus a stated round-off
    ``floor``; a standard error from few replicates gives its degrees of freedom (``dof``) and ``z`` becomes
    the Student-t critical value at the same level (:func:`companion.stats.critical`). It names its
    **falsifier**, the plausible wrong answer a sceptic would propose, with that answer's value. The claim
    *passes* when the theory is accepted **and** the falsifier is rejected *with power* **and** the critical value
    ``crit`` is at most :data:`MAX_CRIT` (8: at the book's level :data:`companion.stats.Z_LEVEL`, 7.1 degrees of
    freedom or more, e.g. 9 replicates). With power: the falsifier lies at least the deviation that the band
    detects with probability :data:`companion.stats.POWER` (:func:`companion.stats.detectable`,
    :math:`(c + q_{0.99})\\,\\mathrm{se} + \\text{floor}`) from the prediction, so that were it the truth, the
    theory's band would hold it in at most one run in a hundred; a design quantity (prediction, falsifier,
    measured noise) that does not read the measurement. Otherwise, when the theory is accepted, the status is
    ``not_resolvable`` (never a silent pass): the falsifier lies nearer than that (the parameters have no power to
    separate them), it has no value, or ``crit > 8`` (a band so wide that it decides nothing); the record's
    ``note`` says which. When the theory is rejected it *fails*, whatever its ``crit`` and its power; a claim whose
    spec declares that it tests a statement of the paper that may not hold here
    (:attr:`companion.claims.ClaimSpec.may_not_hold`, a rule fixed before the run) is then ``does_not_hold``
    instead: a finding of the book, which does not fail the build. A quantity without sampling noise is an identity
    or a numerics claim, not a statistical one.
``bound``
    An inequality a theorem states (``comparison="upper"`` or ``"lower"``), with a round-off or
    statistical tolerance; it may name a falsifier too.
``qualitative``
    A sign or an ordering, naming the alternative it rules out.

**Words.** A record's ``quantity`` says what was measured, its ``reason`` in at most :data:`REASON_MAX`
characters (two lines of the page) what was compared and why the band is what it is, and its ``detail`` the
full method behind the band (degrees of freedom, control variates, floors), folded under the reason on the
page. Maths in all of them (and in the falsifier's name) is TeX between single dollars, e.g.
``falsifier="$T\\to\\infty$: $1/(5\\sigma^2)$"``: the tables typeset it (:func:`companion.text.math_html`) and
the tests refuse ASCII maths (:func:`companion.text.ascii_math`).

**Falsifiers.** Every statistical and every qualitative claim names its falsifier (a call without one is a
``ValueError``); identity and numerics claims name none, and a bound may. A falsifier named without its value
is never rejected: the claim is ``not_resolvable`` at best. A claim that names no falsifier passes when the
theory is accepted (there is nothing to separate it from).

**Targets.** Every record says what was measured (:data:`companion.claims.TARGETS`: ``trained``, ``reduced``,
``closed_form``, ``monte_carlo``, ``ode``). The target is not typed in the notebook: it is the ``target`` of
the :class:`~companion.claims.ClaimSpec` that the claim id matches in the ``CLAIMS`` of the notebook's result
(:meth:`companion.claims.ResultSpec.spec_of`; the result is found in the registry of the notebook's paper,
``companion.<paper>.results``). A claim id that matches no spec, a kind other than the spec's, or
``headline=True`` on a claim the spec does not make a headline fails the notebook like an undeclared claim (a
spec's headline says the id *may* be a headline: one pattern such as ``limit_t{t}`` covers several records of
which the page makes one its headline, so the record's flag stays the notebook's). A notebook outside both papers (a test's) has no result: its
records have no target.

Each notebook declares the claims it makes (``manifest=``). A claim that does not apply at the given
parameters is recorded with :meth:`Verdict.not_applicable` and its reason. :meth:`Verdict.finish` fails on a
declared claim that was not recorded, on an undeclared one, on one its result's ``CLAIMS`` does not declare
(or declares with another kind), and on any failed claim: nothing disappears silently (a ``does_not_hold`` record
is shown, counted and written like every other; it only does not raise).

Usage (the last computational cell of a notebook)::

    from companion.stats import level_words
    from companion.verdict import Verdict
    v = Verdict("mesa/prop4_1_gaussian", manifest=["ratio_T10"], results_dir=results_dir)
    v.statistical("ratio_T10", quantity="trained ratio at T = 10 vs c*(T) sigma^2",
                  predicted=c_T, measured=mu, se=se, dof=7, floor=1e-12,
                  falsifier=r"$T\\to\\infty$ constant $1/5$", falsifier_value=0.2,
                  reason=f"{level_words()} over 8 replicate training sets")
    v.finish()   # table + glue + results file; raises VerdictError if anything failed

Comparisons (``comparison=``): ``"abs"`` ``|measured - predicted| <= tolerance``; ``"rel"``
``|measured - predicted| <= tolerance * |predicted|`` (identity and numerics only); ``"upper"``
``measured <= predicted + tolerance``; ``"lower"`` ``measured >= predicted - tolerance``.

The verdict cell shows the page's forest plot (:func:`companion.report.forest_html`) above the table, and glues
``verdict_answer`` (Markdown: the decisive claim in words, :func:`companion.report.answer_markdown`) for the page's
"In this book" box. For every claim ``c`` the glue keys ``c_predicted``, ``c_measured``, ``c_tolerance``, ``c_error``,
``c_falsifier_value``, ``c_z_theory``, ``c_z_falsifier``, ``c_crit``, ``c_dof`` (floats, NaN where absent) and
``c_verdict``
(the status text) are available to ``{glue:text}`` roles in the prose.

Records are written to ``<results_dir>/<notebook slug>.jsonl`` (``results_dir`` is a notebook parameter;
``""`` falls back to ``$COMPANION_RESULTS_DIR`` and, if that is unset, writes no file). They are also
embedded in the output metadata of the verdict table, so ``companion book`` collects the records of every
notebook of a build into ``_build/results/`` from the executed notebooks.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from . import notebooks as nbs
from .claims import EVIDENCE_KINDS, KINDS, STATUSES, ClaimSpec, ResultSpec
from .registry import PAPERS
from .report import answer_markdown, forest_html, verdict_table_markdown
from .stats import MANY_DOF, POWER, Z_LEVEL, critical, detectable
from .text import number_text, slug

__all__ = [
    "Verdict", "VerdictError", "Record", "METADATA_KEY", "KINDS", "EVIDENCE_KINDS", "STATUSES", "MAX_CRIT",
    "REASON_MAX", "slug",
    "result_of",
]

METADATA_KEY = "companion_results"
#: the widest critical value (in standard errors) at which a statistical claim can pass: the book's level needs
#: about 7.1 degrees of freedom or more (:func:`companion.stats.critical`); a wider band is ``not_resolvable``
MAX_CRIT = 8.0
#: the longest reason, in characters as typeset (:func:`companion.text.plain_text`): two lines of the page
REASON_MAX = 200
_COMPARISONS = ("abs", "rel", "upper", "lower")
_CLAIM_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")



def _compare(pred: float, meas: float, tol: float, comparison: str) -> tuple[float, bool]:
    """The error of ``meas`` against ``pred`` and whether it is within ``tol``: |meas - pred| (``abs``), relative
    (``rel``), meas - pred for an upper bound, pred - meas for a lower one. A non-finite number is never accepted."""
    diff = abs(meas - pred)
    if comparison == "abs":
        error, accepted = diff, diff <= tol
    elif comparison == "rel":
        error = diff / abs(pred) if pred != 0 else math.inf
        accepted = diff <= tol * abs(pred)
    elif comparison == "upper":
        error, accepted = meas - pred, meas <= pred + tol
    else:
        error, accepted = pred - meas, meas >= pred - tol
    return error, bool(accepted) and math.isfinite(meas) and math.isfinite(pred)


def _distances(pred: float, meas: float, tol: float, comparison: str, error: float, crit: float | None,
               fval: float | None) -> tuple[float | None, float | None]:
    """Distances of the measurement from the prediction and from the falsifier in units of the effective standard
    error tol / crit (statistical claims and bounds; None without a critical value)."""
    if crit is None or crit <= 0:
        return None, None
    unit = tol / crit
    dist = abs(meas - pred) if comparison in ("abs", "rel") else error
    z_th = dist / unit if unit > 0 else (0.0 if dist == 0 else math.inf)
    z_f = None
    if fval is not None:
        dfal = abs(meas - fval)
        z_f = dfal / unit if unit > 0 else (0.0 if dfal == 0 else math.inf)
    return z_th, z_f


def _falsifier_rejected(kind: str, pred: float, meas: float, tol: float, comparison: str, falsifier: str | None,
                        fval: float | None, crit: float | None, detect: float | None = None) -> tuple[bool, list[str]]:
    """Whether the falsifier counts as rejected (a claim without a falsifier has nothing to separate), and the
    notes that say why not. A statistical claim's falsifier is rejected *with power*: it lies at least ``detect``
    (:func:`companion.stats.detectable`) from the prediction, a design quantity that does not read the
    measurement; any other kind's falsifier is rejected when it lies outside the band around the measurement. A
    statistical band wider than :data:`MAX_CRIT` SE decides nothing."""
    notes = []
    if not falsifier:
        rejected = True  # nothing to separate the theory from
    elif fval is None:
        rejected = False
        notes.append("the falsifier has no value, so it cannot be rejected")
    elif kind == "statistical" and detect is not None:
        gap = abs(fval - pred)
        rejected = math.isfinite(gap) and gap >= detect
        if not rejected:
            notes.append(f"the falsifier lies {gap:.3g} from the prediction, nearer than the {detect:.3g} the band "
                         f"detects with probability {POWER:g}: these parameters cannot separate them")
    else:
        rejected = math.isfinite(meas) and abs(meas - fval) > (tol * abs(pred) if comparison == "rel" else tol)
        if not rejected:
            notes.append("the falsifier's value is inside the tolerance too")
    if kind == "statistical" and not (crit is not None and crit <= MAX_CRIT):
        rejected = False
        notes.append(f"the band is {'undefined' if crit is None else f'{crit:.3g} SE'} (more than "
                     f"{MAX_CRIT:g}): too few degrees of freedom to decide")
    return rejected, notes


class VerdictError(AssertionError):
    """At least one claim of a notebook failed, or its manifest and its records disagree."""


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


def _num(x: Any) -> float:
    x = _plain(x)
    return math.nan if x is None else float(x)


@dataclass
class Record:
    notebook: str
    claim: str
    kind: str
    status: str  # one of STATUSES
    quantity: str
    predicted: float | None
    measured: float | None
    tolerance: float | None
    comparison: str
    error: float | None  # realised |measured - predicted| (relative for "rel"; signed excess for bounds)
    passed: bool  # the verdict: status is "passed" (not_resolvable, does_not_hold, not_applicable are not passes)
    reason: str
    se: float | None = None  # standard error measured from the data (statistical claims)
    z: float | None = None  # the stated number of standard errors
    floor: float | None = None  # systematic terms added to crit * se (round-off; measured systematic errors)
    falsifier: str | None = None  # the plausible wrong answer this claim rules out
    falsifier_value: float | None = None
    z_theory: float | None = None  # distance measured - predicted in units of tolerance / crit
    z_falsifier: float | None = None  # distance measured - falsifier in the same units
    dof: float | None = None  # degrees of freedom of se (None: many, the normal quantile)
    crit: float | None = None  # the critical number of standard errors: z, or the t quantile at z's level
    headline: bool = False  # the headline value of the result (its prediction is the theory's number)
    parameters: dict = field(default_factory=dict)
    target: str | None = None  # what was measured (companion.claims.TARGETS), from the result's CLAIMS
    note: str | None = None  # why a claim is not_resolvable (theory accepted) or does_not_hold (its spec's rule)
    detail: str | None = None  # the full method behind the band (folded under the reason on the page)
    in_band: bool | None = None  # the measurement lies inside the band around the prediction (None: no measurement)
    z_score: float | None = None  # signed (measured - predicted) / se: what calibration collects (None without se)
    detectable: float | None = None  # the deviation from the prediction found with probability 0.99 (statistical)
    powered: bool | None = None  # the falsifier lies at least `detectable` from the prediction (statistical)
    supporting: str | None = None  # why the claim is not counted as evidence (ClaimSpec.supporting); None: it is
    experiment: str | None = None  # the shared trained models (or paired design) it reads (ClaimSpec.experiment)


def _dof(claim: str, dof) -> float | None:
    """Degrees of freedom as a float > 0, or None for 'many' (None, infinite, or above
    :data:`companion.stats.MANY_DOF`)."""

    if dof is None:
        return None
    d = float(dof.item() if hasattr(dof, "item") else dof)
    if d > MANY_DOF:
        return None
    if not d > 0:
        raise ValueError(f"{claim}: degrees of freedom must be > 0; got {dof!r}")
    return d


def result_of(notebook: str) -> ResultSpec | None:
    """The :class:`~companion.claims.ResultSpec` whose notebook is ``notebook``, from the registry of its paper
    (``"mesa/..."``, ``"cot/..."``); None for a notebook outside both papers. The result modules are imported
    one by one until it is found. A notebook of a paper that no result of its registry names is a ``KeyError``."""
    paper = notebook.split("/", 1)[0]
    for name, registry, _ in PAPERS:
        if name != paper:
            continue
        for module in registry.MODULES:
            spec = importlib.import_module(f"{registry.__name__}.{module}").RESULT
            if spec.notebook == notebook:
                return spec
        raise KeyError(f"no result of {registry.__name__} has the notebook {notebook!r}")
    return None


def _caller_parameters(notebook: str, frame_globals: dict) -> dict:
    """Every parameter of ``notebook``'s parameters cell with its current value in the caller's globals."""
    try:

        names = list(nbs.parameters(notebook))
    except Exception:  # noqa: BLE001 - a notebook outside the book (tests): no parameters known
        return {}
    return {k: frame_globals[k] for k in names if k in frame_globals}


class Verdict:
    """The verdict of one notebook: its manifest of claims and the records of the checks it made."""

    def __init__(self, notebook: str, *, manifest: Iterable[str], parameters: dict | None = None,
                 results_dir: str | os.PathLike = "", result: ResultSpec | None = None):
        self.notebook = notebook
        #: the result whose ``CLAIMS`` give each record its target (:func:`result_of` unless given)
        self.result = result if result is not None else result_of(notebook)
        self.spec_problems: list[str] = []
        if parameters is None:
            parameters = _caller_parameters(notebook, sys._getframe(1).f_globals)
        self.parameters = _plain(dict(parameters))
        self.results_dir = str(results_dir or os.environ.get("COMPANION_RESULTS_DIR", ""))
        self.manifest: list[str] = []
        self.declare(*manifest)
        if not self.manifest:
            raise ValueError(f"{notebook}: the manifest declares no claim")
        self.records: list[Record] = []

    def declare(self, *claims: str) -> None:
        """Add claim ids to the manifest (each once)."""
        for c in claims:
            if not _CLAIM_RE.match(c):
                raise ValueError(f"claim id {c!r} must be an identifier (letters, digits, underscores)")
            if c in self.manifest:
                raise ValueError(f"claim id {c!r} is declared twice in {self.notebook}")
            self.manifest.append(c)

    # ------------------------------------------------------------------ the core
    def check(
        self,
        claim: str,
        *,
        kind: str,
        quantity: str,
        predicted: float,
        measured: float,
        tolerance: float,
        comparison: str = "abs",
        reason: str,
        se: float | None = None,
        z: float | None = None,
        floor: float | None = None,
        falsifier: str | None = None,
        falsifier_value: float | None = None,
        headline: bool = False,
        dof: float | None = None,
        crit: float | None = None,
        undecided: str | None = None,
        detail: str | None = None,
    ) -> Record:
        """Compare one measured number with its prediction; remember (and return) the record.

        Use the kind-specific methods (:meth:`identity`, :meth:`numerics`, :meth:`statistical`,
        :meth:`bound`, :meth:`qualitative`); they fill ``kind`` and enforce what each kind needs.

        ``undecided``: why this comparison cannot decide the claim at these parameters, from a rule fixed before
        the comparison and declared in the claim's manifest line (:attr:`companion.claims.ClaimSpec.undecided`):
        a predicted effect too small for the measured noise, a trained model still improving when its training
        stopped. Given (not None), the claim is ``not_resolvable`` with the reason as its note *whatever the
        comparison gives*: a pass and a miss alike, so the rule can neither rescue a failure nor keep a lucky pass
        (the record's ``in_band`` still says what the comparison gave). The reason says what was measured."""
        self._new_id(claim)
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")
        if comparison not in _COMPARISONS:
            raise ValueError(f"comparison must be one of {_COMPARISONS}; got {comparison!r}")
        if comparison == "rel" and kind not in ("identity", "numerics"):
            raise ValueError(f"{claim}: a relative comparison is for identity and numerics claims only")
        if not reason.strip():
            raise ValueError("every tolerance needs a reason")
        pred, meas, tol = _num(predicted), _num(measured), float(tolerance)
        if not (math.isfinite(tol) and tol >= 0):
            raise ValueError(f"{claim}: tolerance must be finite and >= 0; got {tolerance!r}")
        error, accepted = _compare(pred, meas, tol, comparison)
        fval = None if falsifier_value is None else _num(falsifier_value)
        if fval is not None and not falsifier:
            raise ValueError(f"{claim}: a falsifier value needs the falsifier's name")
        target, headline, supporting, experiment = self._spec(claim, kind, headline)
        may_not_hold = self._may_not_hold(claim)
        if crit is None and z is not None:
            crit = float(z)
        z_th, z_f = _distances(pred, meas, tol, comparison, error, crit, fval)
        detect = None
        if kind == "statistical" and crit is not None and se is not None:
            detect = detectable(crit, _num(se), float(floor or 0.0), dof)
        rejected, notes = _falsifier_rejected(kind, pred, meas, tol, comparison, falsifier, fval, crit, detect)
        status = "failed" if not accepted else ("passed" if rejected else "not_resolvable")
        if undecided is not None:
            if not undecided.strip():
                raise ValueError(f"{claim}: say what was measured that leaves the claim undecided")
            spec = self.result.spec_of(claim) if self.result is not None else None
            if spec is not None and not spec.undecided:
                self.spec_problems.append(f"{claim}: left undecided, but {self.result.module}.CLAIMS declares no "
                                          f"rule for it ({spec.id!r} has no `undecided`)")
            status, notes = "not_resolvable", [undecided]
        if status == "failed" and may_not_hold:  # the paper's statement, tested as stated, does not hold here
            status, notes = "does_not_hold", [may_not_hold]
        z_score = powered = None
        if se is not None and _num(se) > 0 and math.isfinite(meas) and math.isfinite(pred):
            z_score = (meas - pred) / _num(se)
        if detect is not None and fval is not None:
            powered = bool(abs(fval - pred) >= detect)
        rec = Record(
            notebook=self.notebook, claim=claim, kind=kind, status=status, quantity=quantity,
            predicted=_plain(pred), measured=_plain(meas), tolerance=tol, comparison=comparison,
            error=_plain(float(error)), passed=status == "passed", reason=reason,
            se=None if se is None else _plain(float(se)), z=None if z is None else float(z),
            floor=None if floor is None else float(floor), falsifier=falsifier, falsifier_value=_plain(fval),
            z_theory=_plain(z_th), z_falsifier=_plain(z_f), dof=_plain(dof), crit=_plain(crit),
            headline=bool(headline), parameters=self.parameters, target=target,
            note="; ".join(notes) if status in ("not_resolvable", "does_not_hold") else None, detail=detail or None,
            in_band=bool(accepted), z_score=_plain(z_score), detectable=_plain(detect), powered=powered,
            supporting=supporting, experiment=experiment,
        )
        self.records.append(rec)
        return rec

    def _may_not_hold(self, claim: str) -> str:
        """The ``may_not_hold`` rule of the claim's spec ("" for none, or for a notebook outside both papers)."""
        spec = self.result.spec_of(claim) if self.result is not None else None
        return spec.may_not_hold if spec is not None else ""

    def _spec(self, claim: str, kind: str, headline: bool = False) -> tuple[str | None, bool, str | None, str | None]:
        """The target, the headline flag, the ``supporting`` reason and the ``experiment`` of a claim (None for
        "" in the last two), from its spec in the result's ``CLAIMS``; a claim id that matches no spec, or matches
        one of another kind, is a problem :meth:`finish` reports."""
        if self.result is None:
            return None, bool(headline), None, None
        spec: ClaimSpec | None = self.result.spec_of(claim)
        where = f"{self.result.module}.CLAIMS"
        if spec is None:
            self.spec_problems.append(f"{claim}: matches no claim of {where}")
            return None, bool(headline), None, None
        if spec.kind != kind:
            self.spec_problems.append(f"{claim}: recorded as {kind}, but {where} declares {spec.id!r} {spec.kind}")
        if headline and not spec.headline:
            self.spec_problems.append(f"{claim}: recorded as a headline, but {where} does not make {spec.id!r} one")
        return spec.target, bool(headline), spec.supporting or None, spec.experiment or None

    def _new_id(self, claim: str) -> None:
        if not _CLAIM_RE.match(claim):
            raise ValueError(f"claim id {claim!r} must be an identifier (letters, digits, underscores)")
        if any(r.claim == claim for r in self.records):
            raise ValueError(f"claim id {claim!r} is used twice in {self.notebook}")

    # ------------------------------------------------------------------ the kinds
    def identity(self, claim: str, *, quantity: str, predicted, measured, tolerance: float,
                 comparison: str = "abs", reason: str, detail: str | None = None) -> Record:
        """Two implementations of the same mathematics agree to round-off (an implementation test)."""
        return self.check(claim, kind="identity", quantity=quantity, predicted=predicted, measured=measured,
                          tolerance=tolerance, comparison=comparison, reason=reason, detail=detail)

    def numerics(self, claim: str, *, quantity: str, predicted, measured, tolerance: float,
                 comparison: str = "abs", reason: str, headline: bool = False,
                 detail: str | None = None) -> Record:
        """An integrator, quadrature or exact average against a closed form, at its error-control tolerance."""
        return self.check(claim, kind="numerics", quantity=quantity, predicted=predicted, measured=measured,
                          tolerance=tolerance, comparison=comparison, reason=reason, headline=headline,
                          detail=detail)

    def statistical(self, claim: str, *, quantity: str, predicted, measured, se, falsifier: str,
                    falsifier_value=None, z: float = Z_LEVEL, floor: float = 0.0, comparison: str = "abs",
                    reason: str, headline: bool = False, dof: float | None = None,
                    detail: str | None = None) -> Record:
        """A simulation against an independent prediction at ``crit * se + floor``; passes only when the
        falsifier is rejected with power (it lies at least :func:`companion.stats.detectable` from the prediction)
        and ``crit <= MAX_CRIT`` (``not_resolvable`` when the theory is accepted but not both; a falsifier without
        a value is never rejected).

        ``crit`` is ``z``, or with ``dof`` (the degrees of freedom of ``se``, e.g. R - 1 for R replicates) the
        Student-t quantile at the same level (:func:`companion.stats.critical`). ``z`` defaults to the book's level
        :data:`companion.stats.Z_LEVEL` (its one error budget), at which ``crit`` exceeds 8 below about 7.1 degrees
        of freedom (3 replicates, 2 degrees of freedom: 110)."""

        se_, fl = _num(se), float(floor)
        if not (math.isfinite(se_) and se_ >= 0):
            raise ValueError(f"{claim}: the standard error must be finite and >= 0; got {se!r}")
        if not (z > 0 and fl >= 0):
            raise ValueError(f"{claim}: need z > 0 and floor >= 0; got z={z!r}, floor={floor!r}")
        if not falsifier:
            raise ValueError(f"{claim}: a statistical claim names its falsifier (give its value too: a falsifier "
                             "without one is never rejected)")
        dof = _dof(claim, dof)
        crit = critical(z, dof)
        return self.check(claim, kind="statistical", quantity=quantity, predicted=predicted, measured=measured,
                          tolerance=crit * se_ + fl, comparison=comparison, reason=reason, se=se_, z=z, floor=fl,
                          falsifier=falsifier, falsifier_value=falsifier_value, headline=headline,
                          dof=dof, crit=crit, detail=detail)

    def bound(self, claim: str, *, quantity: str, bound, measured, comparison: str, reason: str,
              tolerance: float | None = None, se=None, z: float = Z_LEVEL, floor: float = 0.0,
              falsifier: str | None = None, falsifier_value=None, headline: bool = False,
              dof: float | None = None, undecided: str | None = None,
              detail: str | None = None) -> Record:
        """An inequality a theorem states: ``measured <= bound`` (``"upper"``) or ``>=`` (``"lower"``),
        up to ``tolerance`` (round-off) or ``crit * se + floor`` (a simulated quantity; ``crit`` as in
        :meth:`statistical`). ``undecided``: as in :meth:`check`."""

        if comparison not in ("upper", "lower"):
            raise ValueError(f"{claim}: a bound is 'upper' or 'lower'; got {comparison!r}")
        if (tolerance is None) == (se is None):
            raise ValueError(f"{claim}: give either a round-off tolerance or a standard error")
        if se is not None:
            se_ = _num(se)
            dof = _dof(claim, dof)
            crit = critical(z, dof)
            return self.check(claim, kind="bound", quantity=quantity, predicted=bound, measured=measured,
                              tolerance=crit * se_ + float(floor), comparison=comparison, reason=reason, se=se_,
                              z=z, floor=float(floor), falsifier=falsifier, falsifier_value=falsifier_value,
                              headline=headline, dof=dof, crit=crit, undecided=undecided,
                              detail=detail)
        if dof is not None:
            raise ValueError(f"{claim}: degrees of freedom belong to a standard error; this bound has none")
        return self.check(claim, kind="bound", quantity=quantity, predicted=bound, measured=measured,
                          tolerance=tolerance, comparison=comparison, reason=reason, falsifier=falsifier,
                          falsifier_value=falsifier_value, headline=headline, undecided=undecided,
                          detail=detail)

    def qualitative(self, claim: str, *, quantity: str, predicted, measured, comparison: str, tolerance: float,
                    falsifier: str, reason: str, falsifier_value=None, undecided: str | None = None,
                    detail: str | None = None) -> Record:
        """A sign or an ordering; ``falsifier`` names the alternative it rules out, and ``falsifier_value`` that
        alternative's value, which must lie outside the tolerance (without one the claim is ``not_resolvable``).
        ``undecided``: as in :meth:`check` (e.g. a predicted effect too small against the measured noise for the
        sign test to find it reliably)."""
        if not falsifier:
            raise ValueError(f"{claim}: a qualitative claim names the alternative it rules out")
        return self.check(claim, kind="qualitative", quantity=quantity, predicted=predicted, measured=measured,
                          tolerance=tolerance, comparison=comparison, reason=reason, falsifier=falsifier,
                          falsifier_value=falsifier_value, undecided=undecided,
                          detail=detail)

    def not_applicable(self, claim: str, *, kind: str, quantity: str, reason: str,
                       detail: str | None = None) -> Record:
        """Record that a declared claim does not apply at these parameters, and why."""
        self._new_id(claim)
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")
        if not reason.strip():
            raise ValueError(f"{claim}: say why the claim does not apply")
        target, headline, supporting, experiment = self._spec(claim, kind)
        rec = Record(notebook=self.notebook, claim=claim, kind=kind, status="not_applicable", quantity=quantity,
                     predicted=None, measured=None, tolerance=None, comparison="abs", error=None, passed=False,
                     reason=reason, parameters=self.parameters, target=target, headline=headline,
                     detail=detail or None, supporting=supporting, experiment=experiment)
        self.records.append(rec)
        return rec

    # ------------------------------------------------------------------ output
    @property
    def ok(self) -> bool:
        """No claim failed and the manifest and the records agree (``not_resolvable`` and ``does_not_hold`` claims are
        not failures)."""
        return bool(self.records) and all(r.status != "failed" for r in self.records) and not self.manifest_problems()

    def manifest_problems(self) -> list[str]:
        made = [r.claim for r in self.records]
        out = [f"{c}: declared but not recorded" for c in self.manifest if c not in made]
        out += [f"{c}: recorded but not declared in the manifest" for c in made if c not in self.manifest]
        return out + self.spec_problems

    def answer_markdown(self) -> str:
        """The page's "In this book" box (:func:`companion.report.answer_markdown`), glued as ``verdict_answer``."""
        return answer_markdown(self.result, [asdict(r) for r in self.records])

    def table_markdown(self) -> str:

        return verdict_table_markdown([asdict(r) for r in self.records])

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
        """Glue every number, show the verdict table, write the results file, and raise on failure or on a
        manifest that disagrees with the records."""
        if not self.records:
            raise VerdictError(f"{self.notebook}: no claim was checked")
        self.write()
        if display:
            self._display()
        problems = self.manifest_problems()
        failed = [r for r in self.records if r.status == "failed"]
        lines = problems + [
            f"{r.claim} ({r.kind}): {r.quantity}: measured {number_text(r.measured)}, predicted {number_text(r.predicted)}, "
            f"tolerance {r.tolerance:.3g} ({r.comparison})"
            for r in failed
        ]
        if lines:
            raise VerdictError(
                f"{len(failed)} of {len(self.records)} claim(s) of {self.notebook} failed"
                + (f"; {len(problems)} manifest problem(s)" if problems else "") + ":\n  " + "\n  ".join(lines)
            )

    def _display(self) -> None:
        from IPython.display import Markdown, display

        try:
            from myst_nb import glue
        except ImportError:  # pragma: no cover - myst-nb is a dependency
            glue = None
        if glue is not None:
            for r in self.records:
                for key in ("predicted", "measured", "tolerance", "error", "falsifier_value", "z_theory",
                            "z_falsifier", "crit", "dof"):
                    val = getattr(r, key)
                    glue(f"{r.claim}_{key}", float(val) if val is not None else math.nan, display=False)
                # the power of a statistical claim in its SE: the falsifier's distance and what the band detects
                for key, val in (("gap_se", None if r.falsifier_value is None or r.predicted is None
                                  else abs(r.falsifier_value - r.predicted)), ("detect_se", r.detectable)):
                    glue(f"{r.claim}_{key}", val / r.se if val is not None and r.se else math.nan, display=False)
                glue(f"{r.claim}_verdict", r.status.replace("_", " "), display=False)
            glue("verdict_answer", Markdown(self.answer_markdown()), display=False)
        display(
            Markdown(forest_html([asdict(r) for r in self.records]) + self.table_markdown()),
            metadata={METADATA_KEY: [asdict(r) for r in self.records]},
        )

