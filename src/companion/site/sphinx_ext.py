"""The book's Sphinx extension (``sphinx: extra_extensions`` in ``_config.yml``). No notebook needs editing:

* **The papers' numbering.** Theorems, propositions, corollaries, assumptions, lemmas, definitions and
  examples labelled ``<paper>-<kind>-<a>-<b>`` (e.g. ``mesa-thm-4-1``) carry the paper's number "4.1";
  the book's own statements (other labels) carry none. Equations labelled ``<paper>-eq-<n>`` carry the
  paper's "(n)"; the book's own numbered equations read "(B1)", "(B2)", … page by page, so they cannot
  be mistaken for the paper's. Figures carry no book number: their captions name the paper's figure
  ("Fig. 1a (reproduced)"). Chapters are unnumbered (``_toc.yml``).
* **Alt text from the caption** for every image inside a figure (a glued figure's image otherwise gets
  its file path as alt text).
* **Per notebook page** (HTML): a box with a download of the *executed* notebook of this build (copied
  from ``_build/jupyter_execute``), the measured execution time, and the provenance of the outputs
  (commit, parameters, seed, package versions, date).
* **Where is each result**: the table of ``book/where.md`` is written from the results registries
  (:mod:`companion.site.where`) when a build starts.
* **A quiet site**: the unused thebe scripts are dropped (they declared ``THEBE_JS_URL`` twice: a console
  error on every page); the build's kernels get CurveZMQ keys (no "running over TCP without encryption"
  warning per notebook); ``companion.css`` (verdict tables, wrapping code, phone layout) and a search
  page script that keeps raw TeX out of the result snippets.
"""

from __future__ import annotations

import copy
import datetime as _dt
import html
import json
import os
import platform
import re
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

from docutils import nodes

from ..calibration import DOMAIN_SEEDS, HELDOUT_FIRST_SEED, HELDOUT_SEEDS, SMOKE_SEEDS
from ..stats import BUILD_CLAIMS, BUILD_FALSE_FAIL, POWER
from ..text import plain_text
from ..verdict import MAX_CRIT, METADATA_KEY
from .calibration_page import band_z, write_calibration_page
from .where import where_markdown

__all__ = []


STATIC = Path(__file__).with_name("_static")


_PROOF_LABEL = re.compile(r"^(mesa|cot)-(thm|prop|cor|ass|lem|def|ex)-(\d+)-(\d+)$")


_EQ_LABEL = re.compile(r"^equation-(mesa|cot)-eq-(\d+)$")


PROVENANCE_PACKAGES = ("companion", "numpy", "scipy", "numba", "llvmlite", "torch", "matplotlib", "jupyter-book",
                       "myst-nb", "sphinx", "ipykernel")


def paper_numbers(env, docnames=None) -> None:
    """Rewrite ``env.toc_fignumbers`` (after Sphinx assigned them) to the papers' numbering."""
    for _docname, types in env.toc_fignumbers.items():
        for figtype in list(types):
            ids = types[figtype]
            if figtype == "figure":
                types[figtype] = {}
            elif figtype == "displaymath":
                k = 0
                for node_id in sorted(ids, key=lambda i: ids[i]):
                    m = _EQ_LABEL.match(node_id)
                    if m:
                        ids[node_id] = (int(m.group(2)),)
                    else:
                        k += 1
                        ids[node_id] = (f"B{k}",)
            elif figtype in ("code-block", "table"):
                continue
            else:  # sphinx-proof's counters: theorem, proposition, assumption, ...
                for node_id in ids:
                    m = _PROOF_LABEL.match(node_id)
                    ids[node_id] = (int(m.group(3)), int(m.group(4))) if m else ()


def _restore_book_numbers(app, env, docnames):
    # Sphinx re-writes every page whose numbers differ from the last build's: let it compare its own
    # numbers (saved below), not the papers', so that a rebuild re-writes only the pages that changed
    raw = getattr(env, "companion_book_fignumbers", None)
    if raw is not None:
        env.toc_fignumbers = copy.deepcopy(raw)


def _renumber(app, env):
    env.companion_book_fignumbers = copy.deepcopy(env.toc_fignumbers)
    paper_numbers(env)
    return []


def _caption_text(figure: nodes.figure) -> str:
    for cap in figure.findall(nodes.caption):
        text = plain_text(cap.astext())
        return text if len(text) <= 600 else text[:597] + "…"
    return ""


def alt_from_caption(app, doctree, docname) -> None:
    for fig in doctree.findall(nodes.figure):
        text = _caption_text(fig)
        if not text:
            continue
        for img in fig.findall(nodes.image):
            alt = img.get("alt", "")
            if not alt or alt == img.get("uri") or "/" in alt or re.search(r"\.(png|svg|jpe?g)$", alt):
                img["alt"] = text


def restore_cached_outputs(app, doctree) -> None:
    """myst-nb writes ``_build/jupyter_execute/<doc>.ipynb`` from the notebook it *read*; when jupyter-cache
    supplies the outputs (a page re-read after a Markdown-only change) that file has no outputs, and
    neither the results collection nor the executed-notebook download would see them. Merge the cached
    outputs into it."""
    docname = app.env.docname
    try:
        from myst_nb.sphinx_ import NbMetadataCollector

        data = NbMetadataCollector.get_exec_data(app.env, docname)
    except Exception:  # noqa: BLE001
        return
    if not data or data.get("method") != "cache":
        return
    path = Path(app.outdir).parent / "jupyter_execute" / f"{docname}.ipynb"
    if not path.is_file():
        return
    import nbformat

    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    if not code or any(c.get("outputs") for c in code):
        return
    from jupyter_cache import get_cache

    configured = getattr(getattr(app.env, "mystnb_config", None), "execution_cache_path", "")
    cache_path = Path(configured or Path(app.outdir).parent / ".jupyter_cache")
    if not cache_path.is_absolute():
        cache_path = Path(app.srcdir) / cache_path
    try:
        _, merged = get_cache(str(cache_path)).merge_match_into_notebook(nb)
    except KeyError:
        return
    nbformat.write(merged, path)


def _git(root: Path, *args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _build_facts(app) -> dict:

    root = Path(app.srcdir)
    commit = _git(root, "rev-parse", "--short=12", "HEAD")
    if commit and _git(root, "status", "--porcelain", "--untracked-files=no", "--", "src", "notebooks"):
        commit += " (with uncommitted changes to src/ or notebooks/)"
    versions = {"python": platform.python_version()}
    for name in PROVENANCE_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {"commit": commit or "not a git checkout", "versions": versions,
            "built": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def _records(nb: dict) -> list[dict]:

    out = []
    for cell in nb.get("cells", []):
        for o in cell.get("outputs", []) or []:
            out.extend((o.get("metadata") or {}).get(METADATA_KEY, []))
    return out


def _runtime(app, docname: str, nb: dict) -> tuple[float | None, str, float | None]:
    """(seconds, how it was measured, POSIX time of the execution)."""
    try:
        from myst_nb.sphinx_ import NbMetadataCollector

        data = NbMetadataCollector.get_exec_data(app.env, docname)
    except Exception:  # noqa: BLE001 - an older myst-nb, or the page was not a notebook
        data = None
    if data and data.get("runtime") is not None:
        how = {"cache": "executed by jupyter-cache for this build",
               "auto": "executed by this build", "force": "executed by this build"}.get(data.get("method"),
                                                                                      data.get("method", ""))
        return float(data["runtime"]), how, data.get("mtime")
    pm = (nb.get("metadata") or {}).get("papermill") or {}
    if pm.get("duration") is not None:
        end = pm.get("end_time")
        try:
            t = _dt.datetime.fromisoformat(end).timestamp() if end else None
        except ValueError:
            t = None
        return float(pm["duration"]), "executed by companion run (papermill)", t
    return None, "", None


def _fmt_seconds(s: float | None) -> str:
    if s is None:
        return "not measured"
    if s < 60:
        return f"{s:.1f} s"
    return f"{int(s // 60)} min {s % 60:.0f} s"


def _param_text(v) -> str:
    return json.dumps(v) if isinstance(v, (list, dict)) else str(v)


def provenance_html(app, docname: str, pagename: str) -> str:
    """The box under a notebook page's title (empty when the build has no executed notebook for it)."""
    src = Path(app.outdir).parent / "jupyter_execute" / f"{docname}.ipynb"
    if not src.is_file():
        return ""
    nb = json.loads(src.read_text())
    code = [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]
    with_outputs = sum(1 for c in code if c.get("outputs"))
    dest = Path(app.outdir) / "executed" / f"{docname}.ipynb"
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    href = os.path.relpath(dest, (Path(app.outdir) / pagename).parent).replace(os.sep, "/")
    seconds, how, when = _runtime(app, docname, nb)
    facts = getattr(app, "companion_build_facts", None) or _build_facts(app)
    recs = _records(nb)
    params = recs[0].get("parameters", {}) if recs else {}
    params = {k: v for k, v in params.items() if k != "results_dir"}
    when_text = _dt.datetime.fromtimestamp(when, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if when else "—"
    e = html.escape
    ptext = ", ".join(f"<code>{e(k)}={e(_param_text(v))}</code>" for k, v in params.items()) or "—"
    vtext = ", ".join(f"{e(k)} {e(v)}" for k, v in facts["versions"].items())
    seed = params.get("seed", "—")
    return (
        "<details class='companion-provenance'><summary>"
        f"<a class='companion-executed-download' href='{e(href)}' download>Executed notebook (.ipynb)</a>"
        f" · ran in <span class='companion-runtime'>{_fmt_seconds(seconds)}</span>"
        f" · {len(recs)} claims · provenance</summary>"
        "<dl>"
        f"<dt>outputs</dt><dd>{with_outputs} of {len(code)} code cells have outputs; {e(how) or 'not executed by this build'}"
        f" on {e(when_text)}</dd>"
        f"<dt>commit</dt><dd><code>{e(facts['commit'])}</code> (page built {e(facts['built'])})</dd>"
        f"<dt>seed</dt><dd><code>{e(_param_text(seed))}</code></dd>"
        f"<dt>parameters</dt><dd>{ptext}</dd>"
        f"<dt>versions</dt><dd>{vtext}</dd>"
        "</dl></details>"
    )


def page_context(app, pagename, templatename, context, doctree) -> None:
    # sphinx-thebe's scripts are not used (no launch buttons) and declare THEBE_JS_URL twice
    for key in ("script_files", "css_files"):
        files = context.get(key)
        if files:
            context[key] = [f for f in files if "thebe" not in str(getattr(f, "filename", f) or "").lower()
                            and "THEBE_JS_URL" not in str(getattr(f, "attributes", {}).get("body", ""))]
    if app.builder.name != "html" or not pagename.startswith("notebooks/") or "body" not in context:
        return
    box = provenance_html(app, pagename, pagename)
    if box:
        body = context["body"]
        i = body.find("</h1>")
        context["body"] = body[: i + 5] + box + body[i + 5:] if i >= 0 else box + body


def _builder_inited(app) -> None:
    if str(STATIC) not in [str(p) for p in app.config.html_static_path]:
        app.config.html_static_path.append(str(STATIC))
    app.companion_build_facts = _build_facts(app)
    write_where_page(Path(app.srcdir))
    write_calibration_page(Path(app.srcdir))


WHERE_PAGE = "where.md"  # included by book/where.md from ../_build/where.md


def write_where_page(root: Path) -> Path:
    """Write the "Where is each result" table (:func:`companion.site.where.where_markdown`) to
    ``<root>/_build/where.md``, leaving the file untouched when its text is unchanged (so Sphinx does not
    re-read the page)."""
    page = root / "_build" / WHERE_PAGE
    # a build of some of the pages (a test's) links only the notebooks its table of contents holds
    toc = root / "_toc.yml"
    files = set(re.findall(r"file:\s*(\S+)", toc.read_text())) if toc.is_file() else None
    text = where_markdown(built=None if files is None else {f.removeprefix("notebooks/") for f in files})
    if not page.is_file() or page.read_text() != text:
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(text)
    return page


def encrypted_kernels() -> None:
    """Kernels started by this build get CurveZMQ keys when their kernelspec supports it (ipykernel's does):
    no "Kernel is running over TCP without encryption" warning per notebook."""
    try:
        import zmq
        from jupyter_client.manager import KernelManager

        trait = KernelManager.class_traits().get("transport_encryption")
        if trait is not None and zmq.has("curve"):
            trait.default_value = "auto"
    except Exception:  # noqa: BLE001 - an older jupyter_client: keep its defaults
        pass


SITE_FILES = ("CITATION.cff", "LICENSE")  # copied from the book root to the root of the HTML site


def _build_finished(app, exc) -> None:
    if exc is not None or app.builder.name != "html":
        return
    for name in SITE_FILES:
        src = Path(app.srcdir) / name
        if src.is_file():
            shutil.copyfile(src, Path(app.outdir) / name)


def book_numbers() -> dict[str, str]:
    """The package's numbers that the book's own pages state, as MyST substitutions (``{{ power }}`` in a page):
    the power at which a band's detectable deviation is stated (:data:`companion.stats.POWER`), the level of the
    statistical bands in normal standard errors (:func:`companion.site.calibration_page.band_z`), the widest band
    a passing claim may have (:data:`companion.verdict.MAX_CRIT`), the book's error budget and the number of claims it
    is split over (:data:`companion.stats.BUILD_FALSE_FAIL`, ``BUILD_CLAIMS``), the seeds of the committed calibration at a
    smoke point and at a domain point (:data:`companion.calibration.SMOKE_SEEDS`, ``DOMAIN_SEEDS``), and those of the
    held-out check (``HELDOUT_SEEDS`` from ``HELDOUT_FIRST_SEED``)."""
    return {"power": f"{POWER:g}", "band_z": f"{band_z():.3g}", "max_crit": f"{MAX_CRIT:g}",
            "budget": f"{100 * BUILD_FALSE_FAIL:g} %", "build_claims": f"{BUILD_CLAIMS}",
            "smoke_seeds": f"{SMOKE_SEEDS}", "domain_seeds": f"{DOMAIN_SEEDS}", "heldout_seeds": f"{HELDOUT_SEEDS}",
            "heldout_first": f"{HELDOUT_FIRST_SEED}"}


def _substitutions(app, config) -> None:
    config.myst_substitutions = {**(getattr(config, "myst_substitutions", None) or {}), **book_numbers()}


def setup(app):
    encrypted_kernels()
    app.connect("config-inited", _substitutions)
    app.connect("builder-inited", _builder_inited)
    app.connect("env-before-read-docs", _restore_book_numbers)
    app.connect("env-get-updated", _renumber, priority=900)
    app.connect("doctree-read", restore_cached_outputs)
    app.connect("doctree-resolved", alt_from_caption)
    app.connect("html-page-context", page_context)
    app.connect("build-finished", _build_finished)
    app.add_css_file("companion.css")
    # MathJax on every page: the verdict tables are raw HTML whose reasons and falsifiers carry maths spans
    # (companion.text.math_html), and Sphinx loads MathJax only on pages with a math node ("Every claim" and
    # "Results at a glance" have none)
    app.set_html_assets_policy("always")
    app.add_js_file("companion-search.js", defer="defer")
    # pydata-sphinx-theme starts from an empty mode on a first visit and logs a console error for it
    app.add_js_file(None, body="if (!document.documentElement.dataset.mode) "
                               "document.documentElement.dataset.mode = 'auto';")
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
