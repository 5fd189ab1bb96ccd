"""pyproject.toml (ranges), constraints.txt (exact pins) and environment.yml (conda) must agree; the notation page and
each notebook's Implementation table name code that exists, and every function of its paper a notebook calls."""

import importlib
import re
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from companion.site.where import names_called, names_used, notebook_code

from _util import ROOT


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pyproject_requirements() -> dict[str, Requirement]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(data["dependencies"])
    for extra in data.get("optional-dependencies", {}).values():
        reqs += extra
    return {norm(Requirement(r).name): Requirement(r) for r in reqs}


def constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[norm(name)] = version
    return pins


def environment() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    out = {}
    for spec in pip:
        name, version = spec.split("==")
        out[norm(name)] = version
    return out


def test_every_direct_dependency_is_pinned_and_in_range():
    pins = constraints()
    for name, req in pyproject_requirements().items():
        assert name in pins, f"{name} is in pyproject.toml but not pinned in constraints.txt"
        assert req.specifier.contains(Version(pins[name]), prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside pyproject's range {req.specifier}"
        )


def test_environment_yml_lists_the_same_packages_at_the_pinned_versions():
    env, req, pins = environment(), pyproject_requirements(), constraints()
    assert set(env) == set(req), f"only in environment.yml: {set(env) - set(req)}; only in pyproject: {set(req) - set(env)}"
    for name, version in env.items():
        assert version == pins[name], f"environment.yml has {name}=={version}, constraints.txt {pins[name]}"


def test_required_pins_of_the_documentation_and_torch_stack():
    pins = constraints()
    assert pins["jupyter-book"] == "1.0.4.post1"
    assert pins["torch"] == "2.13.0"
    for name in ["numpy", "scipy", "matplotlib", "papermill", "jupytext", "myst-nb", "sphinx-proof",
                 "sphinxcontrib-bibtex", "ipykernel", "dask", "distributed", "tqdm", "pytest"]:
        assert name in pins, f"{name} must be pinned exactly"


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make book" in readme
    commands = [l.strip() for l in ci.splitlines() if l.strip() and not l.startswith("#")]
    assert commands[-1] == "make test"


def resolves(dotted: str) -> bool:
    """Whether ``companion.a.b.name`` names an existing module or attribute (the longest importable module
    prefix, then attributes)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def implementation_section(text: str) -> str | None:
    """The "Implementation" note of a notebook: a "## Implementation" section (up to the next heading of
    level 2) or an ``{admonition} Implementation`` block; None if it has neither."""
    m = re.search(r"^## Implementation\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M) or re.search(
        r"^```\{admonition\} Implementation\n(.*?)^```", text, flags=re.S | re.M)
    return m.group(1) if m else None


def test_the_notation_page_names_code_that_exists():
    """Every `module.name` in the code column of the notation page resolves in companion."""
    text = (ROOT / "book" / "notation.md").read_text()
    names = set(re.findall(r"`((?:mesa|cot)(?:\.[a-z_0-9]+)*\.[A-Za-z_][A-Za-z0-9_]*)`", text))
    classes = set(re.findall(r"`(ARData|Prompts)\.([A-Za-z_]+)(?:\(\))?`", text))
    assert len(names) >= 10 and classes
    for dotted in names:
        assert resolves(f"companion.{dotted}"), dotted
    from companion.cot.data import Prompts
    from companion.mesa.data import ARData

    for cls, attr in classes:
        owner = {"ARData": ARData, "Prompts": Prompts}[cls]
        assert hasattr(owner, attr) or attr in owner.__dataclass_fields__, f"{cls}.{attr}"


NOTEBOOKS = sorted(ROOT.glob("notebooks/*/*.md"))


def implementation_names(path) -> set[str]:
    """The code names of a notebook's Implementation table: every `companion.x.y` in backticks."""
    section = implementation_section(path.read_text())
    return set(re.findall(r"`(companion(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`", section or ""))


def test_every_implementation_note_is_a_table_of_code_that_exists():
    """Each notebook has an "Implementation" note, a table whose code names (`companion.x.y` in backticks) all
    resolve."""
    assert not resolves("companion.mesa.evidence.no_such_check")  # a stale name is caught
    for path in NOTEBOOKS:
        section = implementation_section(path.read_text())
        assert section is not None, f"{path.name}: no Implementation note"
        assert "|---|" in section.replace(" ", ""), f"{path.name}: the Implementation note has no table"
        names = implementation_names(path)
        assert len(names) >= 3, f"{path.name}: the Implementation table names {len(names)} functions"
        for dotted in names:
            assert resolves(dotted), f"{path.name}: `{dotted}` does not exist"


def _omissions(scope) -> list[str]:
    """What the Implementation tables omit: for every notebook, each function of its paper's package that its code
    calls and ``scope(paper, dotted)`` selects, which its table does not name."""
    out = []
    for path in NOTEBOOKS:
        paper, names = path.parent.name, implementation_names(path)
        for dotted in sorted(names_called(notebook_code(path))):
            if dotted.startswith(f"companion.{paper}.") and scope(paper, dotted) and dotted not in names:
                module, _, fn = dotted.rpartition(".")
                out.append(f"notebooks/{paper}/{path.name} calls {fn} of {module}: add `{dotted}` to its "
                           "Implementation table")
    return out


def test_every_result_module_function_a_notebook_calls_is_in_its_implementation_table():
    """The drift guard of the result modules, for both papers: a notebook that calls a function of a result module
    (its own or another's, in any import form) names it in its Implementation table."""
    missing = _omissions(lambda paper, dotted: dotted.startswith(f"companion.{paper}.results."))
    assert not missing, "\n".join(missing)


def test_every_science_function_a_notebook_calls_is_in_its_implementation_table():
    """The same for the paper's other modules (theory, domain, data, training, shared evidence, figures)."""
    missing = _omissions(lambda paper, dotted: not dotted.startswith(f"companion.{paper}.results."))
    assert not missing, "\n".join(missing)


def test_everything_a_notebook_uses_is_in_its_modules_all():
    """Every name a notebook takes from a module of the package (a function it calls, a constant it reads) is in
    that module's ``__all__``, so that the API page, which documents ``__all__``, lists it."""
    missing = []
    for path in NOTEBOOKS:
        for dotted in sorted(names_used(notebook_code(path))):
            module, _, name = dotted.rpartition(".")
            exported = getattr(importlib.import_module(module), "__all__", None)
            if exported is None or name not in exported:
                missing.append(f"notebooks/{path.parent.name}/{path.name} uses {name} of {module}: add {name!r} to "
                               f"{module}.__all__")
    assert not missing, "\n".join(missing)


#: one call of a result module's function in each import form a notebook may use
IMPORT_FORMS = {
    "by name": "from companion.cot.results import thm4_2\nthm4_2.parse_spectrum('1,2')",
    "alias": "from companion.cot.results import thm4_2 as R\nR.parse_spectrum('1,2')",
    "names": "from companion.cot.results.thm4_2 import parse_spectrum\nparse_spectrum('1,2')",
    "dotted": "import companion.cot.results.thm4_2\ncompanion.cot.results.thm4_2.parse_spectrum('1,2')",
    "module alias": "import companion.cot.results.thm4_2 as ood\n%matplotlib inline\nood.parse_spectrum('1,2')",
}


@pytest.mark.parametrize("form", IMPORT_FORMS)
def test_the_guard_reads_every_import_form(form):
    """A call the guard cannot see is a call it cannot check: each form is read as the same function."""
    code = IMPORT_FORMS[form] + "\nspectrum = [1, 2]\nprint(len(spectrum))"
    assert names_called(code) == names_used(code) == {"companion.cot.results.thm4_2.parse_spectrum"}


def test_a_name_read_but_not_called_is_used_not_called():
    code = "from companion.cot.results import thm4_2\nfalsifier = thm4_2.NEAR_STEP"
    assert names_used(code) == {"companion.cot.results.thm4_2.NEAR_STEP"} and not names_called(code)
