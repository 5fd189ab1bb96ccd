"""Every notebook of the book: anatomy, parameters cell, and a smoke execution whose verdict passes."""

import re

import pytest

from companion import notebooks as nbs
from companion.run.inputs import coerce_parameters
from companion.verdict import result_of

from _util import domain_points, read_run, smoke_parameters, word_problems

NAMES = nbs.all_notebooks()
ALLOWED_TYPES = {"int", "float", "bool", "str", "list", "list[int]", "list[float]", "list[str]"}


def test_the_toc_notebooks_exist():
    from _util import ROOT

    toc = (ROOT / "_toc.yml").read_text()
    listed = re.findall(r"file: notebooks/(\S+)", toc)
    missing = [n for n in listed if not (ROOT / "notebooks" / f"{n}.md").is_file()]
    assert not missing, f"in _toc.yml but not on disk: {missing}"
    assert sorted(listed) == sorted(NAMES), "a notebook on disk is missing from _toc.yml"


def test_every_notebook_has_valid_smoke_parameters():
    smoke = smoke_parameters()
    assert set(smoke) == set(NAMES), f"missing: {set(NAMES) - set(smoke)}; unknown: {set(smoke) - set(NAMES)}"
    for name, values in smoke.items():
        coerce_parameters(name, nbs.parameters(name), values or {})


def test_every_notebook_has_two_valid_domain_points():
    points = domain_points()
    assert set(points) == set(NAMES), f"missing: {set(NAMES) - set(points)}; unknown: {set(points) - set(NAMES)}"
    for name, pts in points.items():
        assert isinstance(pts, list) and len(pts) == 2, f"{name}: two domain points, got {pts!r}"
        for values in pts:
            coerce_parameters(name, nbs.parameters(name), values or {})


def _assert_verdict_holds(name, run):
    assert run["status"] == "ok" and run["records"], run
    bad = [r for r in run["records"] if r.get("status") not in ("passed", "not_resolvable", "not_applicable")]
    assert not bad, f"{name}: claims that failed: {[r['claim'] for r in bad]}"
    for r in run["records"]:
        assert r.get("kind") in ("identity", "numerics", "statistical", "bound", "qualitative"), r
        if r["status"] == "not_applicable":
            assert r["reason"].strip(), r
        if r["kind"] == "statistical" and r["status"] != "not_applicable":
            assert r.get("falsifier") and r.get("se") is not None, r
    words = [w for r in run["records"] for w in word_problems(r)]
    assert not words, f"{name}: " + "\n".join(words)
    # a result's page makes one of its applicable headline claims (its manifest's headline lines) the headline
    spec = result_of(name)
    lines = [c for c in spec.claims if c.headline]
    applicable = [r["claim"] for r in run["records"] if r["status"] != "not_applicable"
                  and any(c.matches(r["claim"]) for c in lines)]
    assert not applicable or any(r.get("headline") for r in run["records"]), \
        f"{name}: no record is the headline, though {applicable} may be"


@pytest.mark.parametrize("name", NAMES)
def test_anatomy_and_parameters_cell(name):
    text = nbs.resolve(name).read_text()
    assert text.startswith("---\njupytext:"), "jupytext header first"
    assert re.search(r"```\{prf:(theorem|proposition|corollary|lemma|definition|assumption)\}", text), "a statement block"
    assert "Verdict(" in text and ".finish()" in text and "manifest=" in text, "a verdict with a manifest"
    from companion.report import verdict_label

    assert f"({verdict_label(name)})=" in text, "a label on the verdict section (the dashboard links to it)"
    assert re.search(r"companion (sweep|run) " + re.escape(name), text), "a 'try it' command for this notebook"
    assert "{glue:" in text, "numbers glued into the prose"
    box = text.find("{glue:md} verdict_answer")
    assert box > 0, "an 'In this book' box glued from the records (verdict_answer)"
    assert box < text.index("## Parameters") and box < text.index(f"({verdict_label(name)})="), \
        "the page's answer before its method"
    specs = nbs.parameters(name)
    assert "seed" in specs and "results_dir" in specs
    for spec in specs.values():
        assert spec.type in ALLOWED_TYPES, f"{spec.name}: type {spec.type!r} (declare one of {sorted(ALLOWED_TYPES)})"
        assert spec.help, f"{spec.name}: every parameter needs a '# help' comment"
        assert "=" not in spec.help, f"{spec.name}: papermill drops a line whose help contains '='; use ≥ ≤"


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_and_its_verdict_passes(name, smoke_runs):
    code, stderr, out = smoke_runs[name]
    assert code == 0, f"{name} failed with smoke parameters:\n{stderr}"
    _assert_verdict_holds(name, read_run(out))


DOMAIN = [(name, i) for name in NAMES for i in range(2)]


@pytest.mark.slow
@pytest.mark.parametrize("name, i", DOMAIN, ids=[f"{n}-{i}" for n, i in DOMAIN])
def test_notebook_holds_at_its_domain_points(name, i, domain_runs):
    code, stderr, out, values = domain_runs[(name, i)]
    assert code == 0, f"{name} at {values} failed:\n{stderr}"
    _assert_verdict_holds(name, read_run(out))


@pytest.mark.slow
def test_a_build_decides_no_more_claims_at_the_level_than_its_error_budget_is_split_over(smoke_runs, domain_runs):
    """``companion.stats.BUILD_CLAIMS`` bounds the claims one build decides against a band of standard errors
    (``companion.report.banded``), so that the level ``Z_LEVEL`` keeps the whole build's false-fail chance within
    ``BUILD_FALSE_FAIL``: counted over every page at its smoke point, and at each of the two domain points. (The
    book's own build at its parameters says its count on the "Every claim" page.)"""
    from companion.report import banded
    from companion.stats import BUILD_CLAIMS

    builds = {"smoke": [out for code, _, out in smoke_runs.values() if code == 0]}
    for i in range(2):
        builds[f"domain {i}"] = [out for (_, j), (code, _, out, _) in domain_runs.items() if j == i and code == 0]
    counts = {k: sum(1 for out in outs for r in read_run(out)["records"] if banded(r)) for k, outs in builds.items()}
    assert all(0 < n <= BUILD_CLAIMS for n in counts.values()), (counts, BUILD_CLAIMS)
