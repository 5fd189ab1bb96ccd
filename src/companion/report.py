"""Verdict records rendered for a reader: the table under each notebook's verdict and the "Every claim"
dashboard of a build. One home for both (the notebook table and the dashboard share the row format)."""

from __future__ import annotations

from collections import Counter

from .verdict import EVIDENCE_KINDS, KINDS, STATUSES

__all__ = ["verdict_label", "verdict_table_markdown", "dashboard_markdown", "counts"]

_SYM = {"abs": "±", "rel": "± rel.", "upper": "≤ pred. +", "lower": "≥ pred. −"}
_STATUS = {"passed": "passed", "failed": "**FAILED**", "not_resolvable": "not resolvable",
           "not_applicable": "not applicable"}


def verdict_label(notebook: str) -> str:
    """The MyST label of a notebook's verdict section, e.g. ``verdict-mesa-prop4-1-gaussian``."""
    return "verdict-" + notebook.strip("/").replace("/", "-").replace("_", "-")


def _cell(text) -> str:
    """Text safe inside a Markdown table cell (a quantity may contain |x| or line breaks)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _fmt(x) -> str:
    if x is None:
        return "—"
    if x == 0:
        return "0"
    if 1e-3 <= abs(x) < 1e5:
        return f"{x:.6g}"
    return f"{x:.3e}"


def _tol(r: dict) -> str:
    if r.get("tolerance") is None:
        return "—"
    return f"{_SYM.get(r.get('comparison'), r.get('comparison'))} {r['tolerance']:.3g}"


def _falsifier(r: dict) -> str:
    f = r.get("falsifier")
    if not f:
        return "—"
    zf = r.get("z_falsifier")
    fv = r.get("falsifier_value")
    val = f" = {_fmt(fv)}" if fv is not None else ""
    dist = f" ({zf:.1f} SE away)" if zf is not None and r.get("z") is not None else ""
    return _cell(f"{f}{val}{dist}")


def _row(r: dict) -> str:
    return (f"| {_STATUS.get(r.get('status'), r.get('status'))} | `{r['claim']}` | {r.get('kind', '?')} "
            f"| {_fmt(r.get('predicted'))} | {_fmt(r.get('measured'))} | {_tol(r)} | {_falsifier(r)} "
            f"| {_cell(r.get('quantity', ''))}: {_cell(r.get('reason', ''))} |")


_HEAD = ["| verdict | claim | kind | predicted | measured | tolerance | falsifier | what, and why this tolerance |",
         "|---|---|---|---|---|---|---|---|"]


def verdict_table_markdown(records: list[dict]) -> str:
    """The verdict table of one notebook: evidence first, implementation identities last."""
    ev = [r for r in records if r.get("kind") != "identity"]
    ids = [r for r in records if r.get("kind") == "identity"]
    return "\n".join(_HEAD + [_row(r) for r in ev + ids])


def counts(records: list[dict]) -> dict:
    """Claims per kind and per status."""
    return {"kinds": dict(Counter(r.get("kind", "?") for r in records)),
            "statuses": dict(Counter(r.get("status", "passed" if r.get("passed") else "failed") for r in records))}


def dashboard_markdown(names: list[str], records: list[dict], missing: list[str]) -> str:
    """MyST for the "Every claim" page: a summary line per kind and status, then per notebook the claims
    grouped by kind, each notebook linked to its verdict section."""
    c = counts(records)
    ev = sum(v for k, v in c["kinds"].items() if k in EVIDENCE_KINDS)
    kinds = ", ".join(f"{c['kinds'][k]} {k}" for k in KINDS if k in c["kinds"])
    stats = ", ".join(f"**{c['statuses'][s]} {s.replace('_', ' ')}**" for s in STATUSES if s in c["statuses"])
    lines = [
        f"This build checked **{len(records)} claims** in **{len(names) - len(missing)} notebooks** ({kinds}): "
        f"{stats}. {ev} claims are evidence for the papers; the "
        f"{c['kinds'].get('identity', 0)} identities are implementation tests"
        + (f". No verdict was recorded for {', '.join(missing)}." if missing else "."),
        "",
    ]
    for name in names:
        recs = [r for r in records if r.get("notebook") == name]
        if not recs:
            continue
        cn = counts(recs)
        lines += [
            f"## {name}",
            "",
            f"{{ref}}`Verdict of this notebook <{verdict_label(name)}>` — "
            + ", ".join(f"{cn['kinds'][k]} {k}" for k in KINDS if k in cn["kinds"]) + "; "
            + ", ".join(f"{cn['statuses'][s]} {s.replace('_', ' ')}" for s in STATUSES if s in cn["statuses"]),
            "",
        ]
        order = {k: i for i, k in enumerate(KINDS)}
        rows = sorted(recs, key=lambda r: (r.get("kind") == "identity", order.get(r.get("kind"), 99)))
        lines += _HEAD + [_row(r) for r in rows] + [""]
    return "\n".join(lines) + "\n"
