"""The cot result registry (companion.cot.results) agrees with _toc.yml, the notebooks and their verdict records.

Fast lane: nothing is executed. The claim ids a notebook records come from tests/fixtures/cot_smoke_claims.json,
the verdict records of every cot notebook run at its smoke point (claim, kind, headline, falsifier), saved when
the claims moved into the result modules; a claim added to a notebook without a manifest line fails the smoke
run itself (the Verdict's manifest is the module's ``manifest()``), and this test then names the missing line.
"""

from __future__ import annotations

import importlib
import json
import re

import pytest

from companion.claims import KINDS, TARGETS, ResultSpec
from companion.cot import results as registry

from _util import ROOT

TOC = re.findall(r"file: notebooks/(cot/\S+)", (ROOT / "_toc.yml").read_text())
RECORDS = json.loads((ROOT / "tests" / "fixtures" / "cot_smoke_claims.json").read_text())["notebooks"]
RESULTS = registry.results()


def _matching(spec: ResultSpec, claim: str):
    """The manifest lines a recorded claim id belongs to: the line with exactly that id if there is one (an exact
    id takes precedence over a pattern it also fits), else every pattern it fits."""
    exact = [c for c in spec.claims if c.id == claim]
    return exact or [c for c in spec.claims if c.matches(claim)]


def test_every_cot_notebook_has_exactly_one_result_in_book_order():
    assert [r.notebook for r in RESULTS] == TOC, "registry order must be the book order of _toc.yml"
    assert len({r.notebook for r in RESULTS}) == len(RESULTS)
    assert len(registry.MODULES) == len(set(registry.MODULES)) == len(RESULTS)


@pytest.mark.parametrize("name", registry.MODULES)
def test_result_module_is_self_consistent(name):
    mod = importlib.import_module(f"companion.cot.results.{name}")
    r = mod.RESULT
    assert r.module == mod.__name__ == f"companion.cot.results.{name}"
    assert r.paper == "cot" and r.number and r.title
    assert r.claims == mod.CLAIMS and r.claims, "RESULT.claims is the module's CLAIMS"
    ids = [c.id for c in r.claims]
    assert len(ids) == len(set(ids)), f"{name}: CLAIMS patterns repeat: {ids}"
    text = (ROOT / "notebooks" / f"{r.notebook}.md").read_text()
    assert re.search(rf"^:label: {re.escape(r.label)}$", text, re.M), f"{r.notebook}: no statement labelled {r.label}"
    for fig in r.figures:
        assert f"```{{glue:figure}} {fig}\n" in text, f"{r.notebook}: figure {fig} is not shown"
    shown = set(re.findall(r"```\{glue:figure\} (\S+)", text))
    assert shown == set(r.figures), f"{r.notebook}: figures shown {sorted(shown)}, declared {r.figures}"
    assert f"companion.cot.results import {name}" in text, f"{r.notebook} does not call its result module"
    if r.sweep:
        assert f"## {r.sweep}\n" in (ROOT / "book" / "sweeps.md").read_text(), f"no section {r.sweep!r} on the Sweeps page"
    for c in r.claims:
        assert c.kind in KINDS and c.target in TARGETS
        if c.kind == "statistical":
            assert c.falsifier, f"{c.id}: a statistical claim names its falsifier"
        module, _, func = c.prediction.rpartition(".")
        assert callable(getattr(importlib.import_module(module), func, None)), f"{c.id}: prediction {c.prediction}"


@pytest.mark.parametrize("r", RESULTS, ids=[r.notebook for r in RESULTS])
def test_every_recorded_claim_has_exactly_one_manifest_line(r):
    records = RECORDS[r.notebook]
    assert records, f"{r.notebook}: no records in the fixture"
    used = set()
    for claim, kind, headline, falsifier in records:
        lines = _matching(r, claim)
        assert len(lines) == 1, f"{r.notebook}: {claim} matches {[c.id for c in lines]} of CLAIMS"
        spec = lines[0]
        assert r.spec_of(claim) is spec, f"{claim}: ResultSpec.spec_of must find {spec.id} (order exact ids first)"
        assert spec.kind == kind, f"{claim}: recorded as {kind}, manifest says {spec.kind}"
        assert spec.headline or not headline, f"{claim}: a headline claim, the manifest says not"
        if falsifier:
            assert spec.falsifier == falsifier, f"{claim}: falsifier {falsifier!r}, manifest {spec.falsifier!r}"
        used.add(spec.id)
    unused = [c.id for c in r.claims if c.id not in used]
    assert not unused, f"{r.notebook}: manifest lines no smoke record matches: {unused}"


def test_registry_and_fixture_cover_the_same_notebooks():
    assert sorted(RECORDS) == sorted(TOC)


@pytest.mark.parametrize("name", ["setup", "thm3_1", "looped"])
def test_fixed_manifests_are_the_recorded_ids(name):
    mod = importlib.import_module(f"companion.cot.results.{name}")
    assert mod.manifest() == [c[0] for c in RECORDS[mod.RESULT.notebook]]
