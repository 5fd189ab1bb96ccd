"""The package's modules and their layers (a module's folder gives its layer): read by ``core/test_layers.py``,
``site/test_where.py`` and ``tools/api_page.py``."""

from __future__ import annotations

from pathlib import Path

from companion.cache import module_imports

ROOT = Path(__file__).resolve().parents[1] / "src" / "companion"

#: the top-level modules above the vocabulary (every other top-level module is layer 0)
TOP_LAYERS = {"registry": 3, "report": 3, "verdict": 3, "calibration": 3, "cli": 6, "__main__": 6}
#: a subpackage's layer (the papers' ``results/`` folders are one above their science)
FOLDER_LAYERS = {"mesa": 1, "cot": 1, "run": 4, "site": 5}

def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = list(p.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def layer(mod: str) -> int:
    parts = mod.split(".")
    if len(parts) == 1:
        return 0
    if parts[1] in FOLDER_LAYERS:
        return FOLDER_LAYERS[parts[1]] + (len(parts) >= 3 and parts[2] == "results")
    if len(parts) == 2 and (parts[1] + ".py") in {p.name for p in ROOT.glob("*.py")}:
        return TOP_LAYERS.get(parts[1], 0)
    raise AssertionError(f"{mod} is in no layer: put it in a folder of FOLDER_LAYERS (tests/core/test_layers.py, "
                         "CONTRIBUTING.md)")


def paper(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in ("mesa", "cot") else None


def imports(mod: str, path: Path | None = None):
    """(target, line, inside_function) for every import of ``mod`` (read by :func:`companion.cache.module_imports`,
    the reader the run cache keys on); package targets resolved to the module (``from companion.mesa.lanes import
    host`` -> ``companion.mesa.lanes.host``), other targets to the top package."""
    for base, names, line, inside in module_imports(path or MODULES[mod], mod):
        if not names:  # import a.b
            yield (base if base in MODULES else base.split(".")[0]), line, inside
        elif base.split(".")[0] != "companion":
            yield base.split(".")[0], line, inside
        else:
            for a in names:
                yield (f"{base}.{a}" if f"{base}.{a}" in MODULES else base), line, inside


def package_edges() -> dict[str, dict[str, int]]:
    return {m: {t: line for t, line, _ in imports(m) if t in MODULES and t != m} for m in MODULES}
