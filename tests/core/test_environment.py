"""pyproject.toml (ranges), constraints.txt (exact pins) and environment.yml (conda) must agree."""

import re
import tomllib

import yaml
from packaging.requirements import Requirement
from packaging.version import Version

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
    import importlib

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


# the aliases under which the notebooks import the modules whose functions the note must name
# (mesa: R is the page's result module, companion.mesa.results.<name> of the registry)
NOTE_ALIASES = {"cot": {"checks": "checks", "th": "theory", "figures": "figures", "D": "domain"},
                "mesa": {"R": "results.{result}", "th": "theory", "F": "figures", "D": "domain"}}


def test_the_notation_page_names_code_that_exists():
    """Every `module.name` in the code column of the notation page resolves in companion."""
    text = (ROOT / "book" / "notation.md").read_text()
    names = set(re.findall(r"`((?:mesa|cot)\.[a-z_]+\.[A-Za-z_]+)`", text))
    classes = set(re.findall(r"`(ARData|Prompts)\.([A-Za-z_]+)(?:\(\))?`", text))
    assert len(names) >= 10 and classes
    for dotted in names:
        assert resolves(f"companion.{dotted}"), dotted
    from companion.cot.data import Prompts
    from companion.mesa.data import ARData

    for cls, attr in classes:
        owner = {"ARData": ARData, "Prompts": Prompts}[cls]
        assert hasattr(owner, attr) or attr in owner.__dataclass_fields__, f"{cls}.{attr}"


def test_every_implementation_note_names_code_that_exists():
    """Each notebook's "Implementation" note (a table whose code names are `companion.x.y` in backticks):
    every name resolves, and it names every function of the paper's checks, theory, figures (and mesa's
    domain) modules that the page's code calls, so the note cannot fall behind the code."""
    import jupytext

    assert not resolves("companion.mesa.evidence.no_such_check")  # a stale name is caught
    notes = 0
    for path in sorted(ROOT.glob("notebooks/*/*.md")):
        text = path.read_text()
        paper = path.parent.name
        section = implementation_section(text)
        assert section is not None, f"{path.name}: no Implementation note"
        notes += 1
        assert "|---|" in section.replace(" ", ""), f"{path.name}: the Implementation note has no table"
        names = set(re.findall(r"`(companion(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`", section))
        assert len(names) >= 3, f"{path.name}: the Implementation table names {len(names)} functions"
        for dotted in names:
            assert resolves(dotted), f"{path.name}: `{dotted}` does not exist"
        code = "\n".join(c.source for c in jupytext.reads(text, fmt="md:myst").cells if c.cell_type == "code")
        for alias, module in NOTE_ALIASES[paper].items():
            if "{result}" in module:
                from companion.mesa.results import module_of

                module = module.format(result=module_of(f"{paper}/{path.stem}").rsplit(".", 1)[1])
            for fn in set(re.findall(rf"(?<![\w.]){alias}\.([A-Za-z_][A-Za-z0-9_]*)\(", code)):
                assert f"companion.{paper}.{module}.{fn}" in names, (
                    f"{path.name}: the code calls {alias}.{fn} but the Implementation note does not name "
                    f"`companion.{paper}.{module}.{fn}`")
    assert notes == len(list(ROOT.glob("notebooks/*/*.md")))
