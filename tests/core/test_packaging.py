"""The package installs where users are: newer Pythons, and no exact pin in its metadata (exact pins live in
constraints.txt)."""


import re
import tomllib

from _util import ROOT


# ------------------------------------------------------------------------------------------ packaging
def test_installable_on_newer_pythons_and_no_exact_pins_in_the_package_metadata():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11"
    reqs = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    assert not [r for r in reqs if "==" in r], "exact pins belong in constraints.txt"
    assert any(re.fullmatch(r"torch>=2\.\d+,<3", r) for r in reqs)
    readme = (ROOT / "README.md").read_text()
    assert "Python 3.11 or newer" in readme and "CI tests Python 3.11 only" in readme
