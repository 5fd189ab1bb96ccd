"""Each paper's result registry (companion.mesa.results, companion.cot.results) agrees with _toc.yml, the notebooks
and their verdict records. Every check is written once and holds for both papers alike: no paper is excused from one.

Fast suite: nothing is executed. The claim ids a notebook records come from the fixtures of the smoke runs:
``tests/fixtures/mesa_smoke_claims.json`` (claim, kind, headline of every verdict record of each mesa notebook run
at its smoke point, ``tests/smoke/mesa.yaml``, ``COMPANION_CACHE_DIR=off``) and ``tests/fixtures/cot_smoke_claims.json``
(claim, kind, headline, falsifier, ``tests/smoke/cot.yaml``), saved when the checks moved into the result modules. A
claim added to a notebook without a manifest line fails the smoke run itself (the Verdict's manifest is the module's
``manifest()``), and this test then names the missing line. The slow tests check the same against the records of
this build's own smoke runs.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import subprocess
import sys

import pytest

from companion.claims import KINDS, TARGETS, ResultSpec
from companion.registry import PAPERS as REGISTRIES
from companion.registry import results_of
from companion.site.where import notebook_code

from _util import FIXTURES, ROOT, read_run

PAPERS = tuple(name for name, _, _ in REGISTRIES)
REGISTRY = {name: registry for name, registry, _ in REGISTRIES}
TOC = {p: re.findall(rf"file: notebooks/({p}/\S+)", (ROOT / "_toc.yml").read_text()) for p in PAPERS}
RESULTS = {p: results_of(p) for p in PAPERS}
BY_NOTEBOOK = {r.notebook: r for p in PAPERS for r in RESULTS[p]}
#: the result modules of both papers, as (paper, module name)
MODULES = [(p, name) for p in PAPERS for name in REGISTRY[p].MODULES]
IDS = [f"{p}.{name}" for p, name in MODULES]


def _fixture_records() -> dict[str, list[dict]]:
    """notebook -> its smoke-point records as dicts (claim, kind, headline and, where the fixture has it, falsifier)."""
    out = json.loads((FIXTURES / "mesa_smoke_claims.json").read_text())
    cot = json.loads((FIXTURES / "cot_smoke_claims.json").read_text())["notebooks"]
    for notebook, rows in cot.items():
        out[notebook] = [dict(claim=c, kind=k, headline=h, falsifier=f) for c, k, h, f in rows]
    return out


RECORDS = _fixture_records()


def _matching(spec: ResultSpec, claim: str):
    """The manifest lines a recorded claim id belongs to: the line with exactly that id if there is one (an exact
    id takes precedence over a pattern it also fits), else every pattern it fits."""
    exact = [c for c in spec.claims if c.id == claim]
    return exact or [c for c in spec.claims if c.matches(claim)]


@pytest.mark.parametrize("paper", PAPERS)
def test_every_toc_notebook_has_exactly_one_result_in_book_order(paper):
    notebooks = [r.notebook for r in RESULTS[paper]]
    assert len(notebooks) == len(set(notebooks)), "two results name one notebook"
    assert notebooks == TOC[paper], f"the registry (in book order) and the {paper} chapters of _toc.yml differ"
    assert len(REGISTRY[paper].MODULES) == len(set(REGISTRY[paper].MODULES)) == len(RESULTS[paper])


def _import_problems(code: str, module: str) -> list[str]:
    """How a notebook's code departs from the book's import convention for its result module ``module``
    (``companion.<paper>.results.<name>``): ``from companion.<paper>.results import <name>``, then ``<name>.f(...)``;
    no alias, no import of the module's names one by one."""
    package, _, name = module.rpartition(".")
    tree = ast.parse("\n".join("pass" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines()))
    by_name, problems = False, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == package:
            for a in node.names:
                if a.name == name:
                    by_name |= a.asname is None
                    if a.asname:
                        problems.append(f"imports {name} as {a.asname} (write `from {package} import {name}`)")
        elif isinstance(node, ast.ImportFrom) and node.module == module:
            problems.append(f"imports {', '.join(a.name for a in node.names)} from {module} (call them as {name}.f)")
        elif isinstance(node, ast.Import) and any(a.name == module for a in node.names):
            problems.append(f"imports {module} whole (write `from {package} import {name}`)")
    calls = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                and n.func.value.id == name for n in ast.walk(tree))
    if not by_name and not problems:
        problems.append(f"does not import its result module as `from {package} import {name}`")
    elif not calls:
        problems.append(f"does not call its result module ({name}.f(...))")
    return problems


@pytest.mark.parametrize("paper, name", MODULES, ids=IDS)
def test_result_module_names_itself_and_its_notebook(paper, name):
    mod = importlib.import_module(f"companion.{paper}.results.{name}")
    r = mod.RESULT
    assert r.module == mod.__name__ == f"companion.{paper}.results.{name}"
    assert r.paper == paper and r.number and r.title
    assert r.claims is mod.CLAIMS and r.claims, "RESULT.claims is the module's CLAIMS"
    text = (ROOT / "notebooks" / f"{r.notebook}.md").read_text()
    assert re.search(rf"^:label: {re.escape(r.label)}$", text, flags=re.M), f"{r.notebook}: no statement labelled {r.label}"
    assert re.search(r"```\{prf:[a-z]+\}[^\n]*\n:label: " + re.escape(r.label), text), "the label of a statement"
    problems = _import_problems(notebook_code(ROOT / "notebooks" / f"{r.notebook}.md"), r.module)
    assert not problems, f"notebooks/{r.notebook}.md: " + "; ".join(problems)
    for fig in r.figures:
        assert re.search(rf"^```\{{glue:figure\}} {re.escape(fig)}$", text, flags=re.M), f"{r.notebook}: figure {fig} is not shown"
    shown = set(re.findall(r"```\{glue:figure\} (\S+)", text))
    assert shown == set(r.figures), f"{r.notebook}: figures shown {sorted(shown)}, declared {r.figures}"
    if r.sweep:
        assert f"## {r.sweep}\n" in (ROOT / "book" / "sweeps.md").read_text(), f"no section {r.sweep!r} on the Sweeps page"


@pytest.mark.parametrize("paper, name", MODULES, ids=IDS)
def test_claim_manifest_is_well_formed(paper, name):
    r = importlib.import_module(f"companion.{paper}.results.{name}").RESULT
    ids = [c.id for c in r.claims]
    assert ids and len(ids) == len(set(ids)), f"{name}: a claim pattern twice: {ids}"
    for c in r.claims:
        assert c.kind in KINDS and c.target in TARGETS
        assert c.prediction, f"{name}: {c.id}: names no prediction (the function that computes the theory's value)"
        module, _, func = c.prediction.rpartition(".")
        assert not c.prediction or (module and callable(getattr(importlib.import_module(module), func, None))), (
            f"{name}: {c.id}: prediction {c.prediction!r} does not exist")
        if c.kind == "statistical":
            assert c.falsifier, f"{name}: {c.id}: a statistical claim names its falsifier"


def test_an_experiment_is_read_by_several_claims_and_no_headline_is_supporting():
    """An ``experiment`` names trained models that two or more claims read (on one page or several): a name on one
    claim would count nothing; a supporting claim is never a headline and never an identity (ClaimSpec refuses
    both), and it says why it is not evidence in words."""
    from collections import Counter

    from companion.claims import ClaimSpec

    readers = Counter(c.experiment for p in PAPERS for r in RESULTS[p] for c in r.claims if c.experiment)
    assert readers and all(n >= 2 for n in readers.values()), readers
    for p in PAPERS:
        for r in RESULTS[p]:
            for c in r.claims:
                assert not c.supporting or len(c.supporting.split()) >= 8, f"{r.notebook}: {c.id}: say why"
    with pytest.raises(ValueError, match="supporting"):
        ClaimSpec("x", "statistical", "trained", headline=True, supporting="repeats y")
    with pytest.raises(ValueError, match="supporting"):
        ClaimSpec("x", "identity", "closed_form", supporting="repeats y")


def _check_records(notebook: str, records, *, every_line: bool = False, run: bool = False) -> None:
    """Every record belongs to exactly one manifest line (:func:`_matching`: the line with its exact id, else the one
    pattern it fits; :meth:`companion.claims.ResultSpec.spec_of` finds the same line), of its kind, a headline only to
    a headline line, and the falsifier it names (where recorded) is one its line allows, word for word; ``every_line``: every
    line of the manifest is used; ``run`` (records of a run, not the committed list of claims): each carries its line's
    ``supporting`` reason and ``experiment``."""
    r = BY_NOTEBOOK[notebook]
    assert records, f"{notebook}: no records"
    used = set()
    for rec in records:
        claim = rec["claim"]
        lines = _matching(r, claim)
        assert len(lines) == 1, f"{notebook}: claim {claim!r} matches {[c.id for c in lines]} of CLAIMS"
        spec = lines[0]
        assert r.spec_of(claim) is spec, f"{claim}: ResultSpec.spec_of must find {spec.id} (order exact ids first)"
        assert spec.kind == rec["kind"], f"{notebook}: {claim} is {rec['kind']}, its spec says {spec.kind}"
        assert spec.headline or not rec.get("headline"), f"{notebook}: {claim} is a headline claim, its spec {spec.id} is not"
        assert not run or (rec.get("supporting"), rec.get("experiment")) == (spec.supporting or None,
                                                                             spec.experiment or None), (
            f"{notebook}: {claim} does not carry its spec's supporting reason and experiment")
        if rec.get("falsifier"):
            assert rec["falsifier"] in spec.falsifiers, (
                f"{notebook}: {claim} names the falsifier {rec['falsifier']!r}; its manifest line {spec.id} allows "
                f"{spec.falsifiers!r}")
        used.add(spec.id)
    unused = [c.id for c in r.claims if c.id not in used]
    assert not every_line or not unused, f"{notebook}: manifest lines no smoke record matches: {unused}"


@pytest.mark.parametrize("paper", PAPERS)
def test_registry_and_fixture_cover_the_same_notebooks(paper):
    assert sorted(n for n in RECORDS if n.startswith(f"{paper}/")) == sorted(TOC[paper])


@pytest.mark.parametrize("notebook", [n for p in PAPERS for n in TOC[p]])
def test_every_smoke_claim_has_exactly_one_manifest_line_of_its_kind(notebook):
    _check_records(notebook, RECORDS[notebook], every_line=True)


@pytest.mark.slow
@pytest.mark.parametrize("notebook", [n for p in PAPERS for n in TOC[p]])
def test_this_builds_smoke_records_match_the_manifest(notebook, smoke_runs):
    code, stderr, out = smoke_runs[notebook]
    assert code == 0, stderr
    _check_records(notebook, read_run(out)["records"], run=True)


@pytest.mark.parametrize("paper, name", [(p, n) for p, n in MODULES if not inspect.signature(
    importlib.import_module(f"companion.{p}.results.{n}").manifest).parameters], ids=lambda v: str(v))
def test_fixed_manifests_are_the_recorded_ids(paper, name):
    """A manifest that depends on no parameter is exactly the claim ids recorded at the smoke point, in order."""
    mod = importlib.import_module(f"companion.{paper}.results.{name}")
    assert mod.manifest() == [rec["claim"] for rec in RECORDS[mod.RESULT.notebook]]


def _imports(path, package: str) -> set[str]:
    """Every module a source file of ``package`` imports, at module level and inside functions (relative imports
    resolved: ``from .thm3_1 import x`` in ``companion.cot.results`` is ``companion.cot.results.thm3_1``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            out.add(module)
            out |= {f"{module}.{a.name}" for a in node.names}
    return out


@pytest.mark.parametrize("paper", PAPERS)
def test_results_sit_above_the_science_layer(paper):
    """The science modules (the settings paper.py, the shared evidence) import no result; a result imports no other
    result but those its ``ResultSpec.builds_on`` names (the paper derives it from them; the registry's claim-id
    helpers, ``companion.mesa.results.init_tag`` and the like, are not results)."""
    src = ROOT / "src" / "companion" / paper
    prefix, modules = f"companion.{paper}.results", REGISTRY[paper].MODULES

    def results_imported(path, package):
        return {m.split(".")[3] for m in _imports(path, package)
                if m.startswith(prefix + ".") and m.split(".")[3] in modules}

    for path in src.glob("*.py"):
        bad = results_imported(path, f"companion.{paper}") | {m for m in _imports(path, f"companion.{paper}") if m == prefix}
        assert not bad, f"{path.name} imports {bad}"
    for name in modules:
        spec = next(s for s in REGISTRY[paper].results() if s.module == f"{prefix}.{name}")
        allowed = {m.rpartition(".")[2] for m in spec.builds_on}
        bad = results_imported(src / "results" / f"{name}.py", prefix) - allowed
        assert not bad, f"results/{name}.py imports {bad}"
    for spec in REGISTRY[paper].results():  # what a result builds on is a result of its paper, and it imports it
        for other in spec.builds_on:
            assert other.rpartition(".")[2] in modules and other.startswith(prefix + "."), (spec.module, other)
            assert other in _imports(ROOT / "src" / (spec.module.replace(".", "/") + ".py"), prefix), other


@pytest.mark.parametrize("paper", PAPERS)
def test_importing_one_result_imports_no_other(paper):
    prefix = f"companion.{paper}.results."
    code = (f"import sys, {prefix}thm4_2; "
            f"print(sorted(m for m in sys.modules if m.startswith({prefix!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"['{prefix}thm4_2']"


def test_the_verdict_module_imports_no_paper():
    """A kernel that only judges records (the runner's toy pages, a sweep's warm kernel before its first page)
    imports ``companion.verdict`` without either paper's package (torch): the registries are read on first use."""
    code = ("import sys, companion.verdict\n"
            "print(sorted(m for m in ('torch', 'companion.cot', 'companion.mesa') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
