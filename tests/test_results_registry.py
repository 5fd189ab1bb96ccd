"""The registry of mesa results (companion.mesa.results) agrees with _toc.yml, the notebooks and their verdicts.

Fast lane. The claim ids a notebook's manifest produces at its smoke point are read from
``tests/fixtures/mesa_smoke_claims.json``: the verdict records (claim id, kind, headline) of every mesa notebook
run at its smoke point (``tests/smoke/mesa.yaml``, ``COMPANION_CACHE_DIR=off``) before the checks moved into the
result modules. The slow lane checks the same against the records of this build's own smoke runs.
"""

import ast
import importlib
import json
import re
import subprocess
import sys

import pytest

from companion.claims import KINDS, TARGETS
from companion.mesa import results as registry

from _util import FIXTURES, ROOT, read_run

SMOKE_CLAIMS = FIXTURES / "mesa_smoke_claims.json"
TOC_NOTEBOOKS = [n for n in re.findall(r"file: notebooks/(\S+)", (ROOT / "_toc.yml").read_text()) if n.startswith("mesa/")]
SPECS = registry.results()
BY_NOTEBOOK = {spec.notebook: spec for spec in SPECS}


def _resolves(dotted: str) -> bool:
    module, _, attr = dotted.rpartition(".")
    try:
        return hasattr(importlib.import_module(module), attr)
    except ImportError:
        return False


def test_every_toc_notebook_has_exactly_one_result_and_vice_versa():
    notebooks = [spec.notebook for spec in SPECS]
    assert len(notebooks) == len(set(notebooks)), "two results name one notebook"
    assert notebooks == TOC_NOTEBOOKS, "the registry (in book order) and the mesa chapters of _toc.yml differ"
    assert len(registry.MODULES) == len(set(registry.MODULES)) == len(SPECS)


@pytest.mark.parametrize("name", registry.MODULES)
def test_result_module_names_itself_and_its_notebook(name):
    mod = importlib.import_module(f"companion.mesa.results.{name}")
    spec = mod.RESULT
    assert spec.module == mod.__name__ == f"companion.mesa.results.{name}"
    assert spec.paper == "mesa" and spec.claims is mod.CLAIMS and spec.number and spec.title
    text = (ROOT / "notebooks" / f"{spec.notebook}.md").read_text()
    assert re.search(rf"^:label: {re.escape(spec.label)}$", text, flags=re.M), f"{spec.notebook}: no label {spec.label}"
    assert re.search(r"```\{prf:[a-z]+\}[^\n]*\n:label: " + re.escape(spec.label), text), "the label of a statement"
    assert f"companion.mesa.results import {name} as R" in text, "the notebook calls its result module"
    for fig in spec.figures:
        assert re.search(rf"^```\{{glue:figure\}} {re.escape(fig)}$", text, flags=re.M), f"figure {fig} not on the page"
    if spec.sweep:
        assert f"## {spec.sweep}\n" in (ROOT / "book" / "sweeps.md").read_text(), f"no section {spec.sweep!r}"


@pytest.mark.parametrize("name", registry.MODULES)
def test_claim_manifest_is_well_formed(name):
    spec = importlib.import_module(f"companion.mesa.results.{name}").RESULT
    ids = [c.id for c in spec.claims]
    assert ids and len(ids) == len(set(ids)), f"{name}: a claim pattern twice"
    for c in spec.claims:
        assert c.kind in KINDS and c.target in TARGETS
        assert not c.prediction or _resolves(c.prediction), f"{name}: {c.id}: prediction {c.prediction!r} does not exist"
        if c.kind == "statistical":
            assert c.falsifier, f"{name}: {c.id}: a statistical claim names its falsifier"


def _check_records(notebook: str, records) -> None:
    spec = BY_NOTEBOOK[notebook]
    assert records, notebook
    for r in records:
        matches = [c for c in spec.claims if c.matches(r["claim"])]
        assert len(matches) == 1, f"{notebook}: claim {r['claim']!r} matches {[c.id for c in matches]}"
        assert matches[0].kind == r["kind"], f"{notebook}: {r['claim']} is {r['kind']}, its spec says {matches[0].kind}"
        if r.get("headline"):
            assert matches[0].headline, f"{notebook}: {r['claim']} is a headline claim, its spec {matches[0].id} is not"


def test_every_smoke_claim_matches_exactly_one_spec_of_its_kind():
    recorded = json.loads(SMOKE_CLAIMS.read_text())
    assert sorted(recorded) == sorted(TOC_NOTEBOOKS)
    for notebook, records in recorded.items():
        _check_records(notebook, records)


@pytest.mark.slow
@pytest.mark.parametrize("notebook", TOC_NOTEBOOKS)
def test_this_builds_smoke_records_match_the_manifest(notebook, smoke_runs):
    code, stderr, out = smoke_runs[notebook]
    assert code == 0, stderr
    _check_records(notebook, read_run(out)["records"])


def _imports(path) -> set[str]:
    """Every module a source file imports, at module level and inside functions."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def test_results_sit_above_the_science_layer():
    """The run plan (paper.py) and the shared evidence import no result; a result imports no other result (the
    registry's claim-id helpers, ``companion.mesa.results.init_tag`` and the like, are not results)."""
    mesa = ROOT / "src" / "companion" / "mesa"

    def results_imported(path):
        return {m for m in _imports(path) if m.startswith("companion.mesa.results.") and m.split(".")[3] in registry.MODULES}

    for path in mesa.glob("*.py"):
        bad = results_imported(path) | {m for m in _imports(path) if m == "companion.mesa.results"}
        assert not bad, f"{path.name} imports {bad}"
    for name in registry.MODULES:
        bad = results_imported(mesa / "results" / f"{name}.py")
        assert not bad, f"results/{name}.py imports {bad}"


def test_importing_one_result_imports_no_other():
    code = ("import sys, companion.mesa.results.thm4_2; "
            "print(sorted(m for m in sys.modules if m.startswith('companion.mesa.results.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['companion.mesa.results.thm4_2']"
