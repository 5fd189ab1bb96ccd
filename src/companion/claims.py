"""The claim vocabulary: what a claim is, what it measures, and where each numbered result lives.

The bottom layer of the package (it imports nothing from ``companion``). Every other layer speaks it:

* a **kind** says what sort of evidence a claim is (:data:`KINDS`; see :mod:`companion.verdict`);
* a **target** says what was measured (:data:`TARGETS`): a transformer trained by the book's trainer
  (``trained``), population or reduced-model gradient descent (``reduced``), a closed form evaluated
  exactly (``closed_form``), a Monte-Carlo estimate (``monte_carlo``) or an integrated ODE (``ode``);
* a :class:`ClaimSpec` is one line of a result's ``CLAIMS`` manifest: the claim id (a pattern whose
  ``{placeholders}`` the notebook fills from its parameters), its kind, its target, whether it is a
  headline claim, the function that computes the theory's prediction and the falsifier it rejects, whether it is
  **supporting** (of an evidence kind, but not counted as evidence: it repeats another claim's fact or checks a
  sampler, a formula or the training code the result only uses) and the **experiment** whose trained models it
  reads when other claims read them too (claims of one experiment are readings of it, not independent facts);
* a :class:`ResultSpec` is one numbered result of one paper: its number in the paper, the label of the
  statement in the book, the notebook that checks it, the module that holds its computation and claims,
  its figures and the sweep that maps it. The registries ``companion.<paper>.results.RESULTS`` list them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["KINDS", "EVIDENCE_KINDS", "TARGETS", "STATUSES", "REJECTED", "ClaimSpec", "ResultSpec"]

#: what sort of evidence a claim is (:mod:`companion.verdict` defines each)
KINDS = ("identity", "numerics", "statistical", "bound", "qualitative")
#: the kinds counted as evidence for a paper (``identity`` is an implementation test)
EVIDENCE_KINDS = ("numerics", "statistical", "bound", "qualitative")
#: what a claim measured: a trained transformer, reduced-model GD, a closed form, Monte Carlo, an ODE
TARGETS = ("trained", "reduced", "closed_form", "monte_carlo", "ode")
#: the outcome of a claim: ``does_not_hold`` is a miss of a claim that tests a statement of the paper the book may
#: find not to hold (:attr:`ClaimSpec.may_not_hold`): a finding, shown as such, that does not fail the build
STATUSES = ("passed", "failed", "does_not_hold", "not_resolvable", "not_applicable")
#: the statuses of a claim whose measurement rejected its prediction
REJECTED = ("failed", "does_not_hold")

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::(num))?\}")
# a number as the notebooks write it into a claim id: "." -> "p", "-" -> "m" (0p5, 1, m1p5, 1em05)
_NUMBER = "m?[0-9]+(?:p[0-9]+)?(?:e[mp]?[0-9]+)?"


@dataclass(frozen=True)
class ClaimSpec:
    """One claim of a result's manifest.

    ``id`` is the claim id, or a pattern such as ``"loss_{law}"`` whose placeholders stand for the parts
    the notebook computes from its parameters (each placeholder matches ``[A-Za-z0-9_]+``; a placeholder
    ``{name:num}`` matches only a number as the notebooks tag it, ``0p5`` or ``m1p5``, so that
    ``loss_sparse_{s:num}`` does not also match ``loss_sparse_gaussian_1``). ``prediction``
    names the function of the result's module (or of the science layer) that computes the theory's value;
    ``falsifier`` names the competitor the claim rejects ("" for kinds that name none). Where the competitor
    depends on the page's parameters (the law's moments, the test position), ``falsifier`` describes them all and
    ``alternatives`` lists the exact words a record may name, one per case.

    ``supporting``: "" for a claim that is evidence for the paper; else why it is not counted as evidence although
    its kind is (it repeats the fact of another claim, or checks a sampler, a formula or the training code that
    the result only uses). A supporting claim is still decided, recorded and fails the build when it fails; it is
    never a headline. ``experiment``: "" unless the claim reads trained models (or one paired design) that other
    claims, on this page or another, read too; then the name of that experiment, the same words on every such
    claim, so that the book counts one experiment with several readings, not several facts.

    ``undecided``: "" unless a rule, fixed before any run, can leave the claim ``not_resolvable`` at some
    parameters; then that rule in words, from design quantities (the predicted effect, the measured noise, the
    sizes, whether training had stopped improving), not from the compared value. Where it holds the claim is
    undecided whether the comparison would pass or miss (:meth:`companion.verdict.Verdict.check`).

    ``may_not_hold``: "" unless the claim tests a statement of the paper as the paper states it, at parameters where
    the book may find that it does not hold (the paper's figure at sizes the book can run); then why, in words, fixed
    before any run. A miss of such a claim is status ``does_not_hold``: a finding of the book, shown as one, which
    does not fail the build (every other miss is ``failed`` and does); a pass is a pass. Only for a claim of an
    evidence kind that is evidence (not ``supporting``)."""

    id: str
    kind: str
    target: str
    headline: bool = False
    prediction: str = ""
    falsifier: str = ""
    alternatives: tuple[str, ...] = ()
    supporting: str = ""
    experiment: str = ""
    undecided: str = ""
    may_not_hold: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"claim {self.id!r}: kind must be one of {KINDS}; got {self.kind!r}")
        if self.target not in TARGETS:
            raise ValueError(f"claim {self.id!r}: target must be one of {TARGETS}; got {self.target!r}")
        if self.supporting and (self.headline or self.kind not in EVIDENCE_KINDS):
            raise ValueError(f"claim {self.id!r}: a supporting claim is a non-headline claim of an evidence kind "
                             f"{EVIDENCE_KINDS} (an identity is never evidence)")
        if self.may_not_hold and (self.supporting or self.kind not in EVIDENCE_KINDS):
            raise ValueError(f"claim {self.id!r}: only a claim that is evidence for the paper tests a statement that may "
                             "not hold (may_not_hold)")

    @property
    def falsifiers(self) -> tuple[str, ...]:
        """The falsifiers a record of this claim may name, word for word."""
        return self.alternatives or ((self.falsifier,) if self.falsifier else ())

    @property
    def pattern(self) -> re.Pattern:
        """The regular expression a recorded claim id of this spec matches."""
        parts, pos = [], 0
        for m in _PLACEHOLDER.finditer(self.id):
            parts.append(re.escape(self.id[pos:m.start()]))
            parts.append(_NUMBER if m.group(2) else "[A-Za-z0-9_]+?")
            pos = m.end()
        parts.append(re.escape(self.id[pos:]))
        return re.compile("^" + "".join(parts) + "$")

    def matches(self, claim_id: str) -> bool:
        return bool(self.pattern.match(claim_id))


@dataclass(frozen=True)
class ResultSpec:
    """One numbered result of one paper and where the book checks it."""

    paper: str  # "mesa" or "cot"
    number: str  # the paper's numbering, e.g. "Theorem 4.2"
    title: str  # a few words, e.g. "capability: recovery iff Assumption 4.2"
    label: str  # the statement's label in the book, e.g. "mesa-thm-4-2"
    notebook: str  # e.g. "mesa/thm4_2_capability" (notebooks/<notebook>.md)
    module: str  # e.g. "companion.mesa.results.thm4_2"
    claims: tuple[ClaimSpec, ...] = ()
    figures: tuple[str, ...] = ()  # glue names of the page's figures
    sweep: str = ""  # the sweep that maps it (a section of the Sweeps page), "" if none
    # a setting page (the paper's definitions: data, model, losses), not a numbered result: its claims check
    # formulas and implementations (closed form, Monte Carlo), and no trained-model claim is asked of it
    setting: bool = False
    # the results this one is derived from in the paper, whose modules it may import (e.g. cot Corollary 3.1
    # trains and stops as Theorem 3.1 does): every other import between result modules is refused by a test
    builds_on: tuple[str, ...] = ()

    def spec_of(self, claim_id: str) -> ClaimSpec | None:
        """The manifest line a recorded claim id belongs to (the first that matches), or None."""
        for spec in self.claims:
            if spec.matches(claim_id):
                return spec
        return None
