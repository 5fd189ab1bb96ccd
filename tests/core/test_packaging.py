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


# ------------------------------------------------------------------------------------------ the Makefile
def _make_env(tmp_path, **env):
    """NUMBA_CACHE_DIR as `make` hands it to its recipes, under the environment ``env`` (and no NUMBA_CACHE_DIR
    of the caller's)."""
    import os
    import subprocess

    probe = tmp_path / "probe.mk"
    probe.write_text('probe:\n\t@echo "[$$NUMBA_CACHE_DIR]"\n')
    base = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME", "MAKEFLAGS")}
    out = subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), "-f", str(probe), "probe"], cwd=ROOT,
                         env={**base, **env}, capture_output=True, text=True, check=True).stdout
    return out.strip()[1:-1]


def test_make_keeps_the_compiled_kernels_in_a_per_user_cache(tmp_path):
    """The recipes of `make` (book, test) see NUMBA_CACHE_DIR under the user's cache folder, made if missing, so a
    second clone loads the kernels a first one compiled; the user's own NUMBA_CACHE_DIR wins; where the folder
    cannot be made, none is set (the kernels go beside the package, companion.mesa.lanes.jit._cache_dir)."""
    cache = tmp_path / "xdg"
    assert _make_env(tmp_path, XDG_CACHE_HOME=str(cache)) == str(cache / "companion" / "kernels")
    assert (cache / "companion" / "kernels").is_dir()
    assert _make_env(tmp_path, NUMBA_CACHE_DIR=str(tmp_path / "mine")) == str(tmp_path / "mine")
    blocked = tmp_path / "file"
    blocked.write_text("a file, not a folder")
    assert _make_env(tmp_path, XDG_CACHE_HOME=str(blocked)) == ""
