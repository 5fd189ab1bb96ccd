"""The "Implementation" note of every mesa notebook names code that exists (issue 14): a renamed or removed
function fails here instead of leaving a stale pointer on the page."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "notebooks" / "mesa").glob("*.md"))


def _note(path: Path) -> str:
    text = path.read_text()
    m = re.search(r"```\{admonition\} Implementation\n(.*?)\n```", text, re.S)
    assert m, f"{path.name}: no Implementation note"
    return m.group(1)


def resolve(dotted: str):
    """The object named by ``companion.<module path>.<attribute>`` (the longest importable module prefix)."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


@pytest.mark.parametrize("path", PAGES, ids=[p.stem for p in PAGES])
def test_the_implementation_note_names_code_that_exists(path):
    names = re.findall(r"`(companion(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`", _note(path))
    assert len(names) >= 3, f"{path.name}: the note names {len(names)} functions"
    for dotted in names:
        try:
            resolve(dotted)
        except (ImportError, AttributeError):
            pytest.fail(f"{path.name}: `{dotted}` does not exist")


def test_a_stale_name_is_caught():
    with pytest.raises(AttributeError):
        resolve("companion.mesa.checks.no_such_check")
    assert resolve("companion.mesa.theory.c_star") is importlib.import_module("companion.mesa.theory").c_star
