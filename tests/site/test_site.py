"""The built site as a reader meets it, in headless Chromium (Debian's, driven by playwright; never a
downloaded browser) with the network blocked: no console error, no remote request, verdict tables within
the column at 1280 px, no horizontal overflow on a phone, every image once with alt text from its caption,
figure text at least 9 pt as displayed, and on every notebook page a download of the executed notebook.
Two screenshots (1280 px and phone width) are kept under the site's ``_build/screenshots``."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import yaml

from companion import notebooks as nbs
from companion.paths import repo_root
from companion.plotting import MIN_FONT_PT
from companion.site import book
from companion.verdict import METADATA_KEY

pytestmark = pytest.mark.slow

DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


def _chromium() -> str:
    if os.environ.get("COMPANION_NO_BROWSER") == "1":
        pytest.skip("COMPANION_NO_BROWSER=1: the site is not checked in a browser")
    path = book.find_browser()
    if path is None:
        pytest.fail("Chromium is needed for the site tests (`make test` installs Debian's chromium)")
    return path


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = _chromium()
    with sync_api.sync_playwright() as p:
        # never a downloaded browser: the system's Chromium, and no background networking
        b = p.chromium.launch(executable_path=executable, args=[f for f in book.CHROMIUM_FLAGS if f != "--headless"])
        yield b
        b.close()


class Visit:
    """One browser context (viewport) with the network blocked; remembers console errors and requests."""

    def __init__(self, browser, viewport):
        self.context = browser.new_context(viewport=viewport)
        self.errors: list[str] = []
        self.remote: list[str] = []
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))

    def _route(self, route):
        url = route.request.url
        if url.startswith(("file:", "data:", "blob:", "about:")):
            route.continue_()
        else:
            self.remote.append(url)
            route.abort()

    def open(self, path: Path):
        self.errors.clear()
        self.remote.clear()
        self.page.goto(path.as_uri(), wait_until="load")
        self.page.wait_for_timeout(300)
        return self.page

    def close(self):
        self.context.close()


def _book_pages() -> list[str]:
    """The book's own pages in the table of contents (``book/...``), "Results at a glance" aside (read last,
    :func:`_visit_all`)."""
    toc = yaml.safe_load((repo_root() / "_toc.yml").read_text())
    files = [toc["root"], *(c["file"] for part in toc["parts"] for c in part["chapters"])]
    return [f for f in files if f.startswith("book/") and f != "book/glance"]


def _pages(html: Path) -> list[Path]:
    """Every page of the built site but the glance page: the book's own (those built) and every notebook's."""
    own = [html / f"{f}.html" for f in _book_pages()]
    return [*(p for p in own if p.is_file()), *[html / "notebooks" / f"{n}.html" for n in nbs.all_notebooks()]]


def _site(smoke_site) -> Path:
    if smoke_site["returncode"] != 0 or smoke_site["not_run"]:
        pytest.fail("the smoke site did not build (see test_the_whole_book_builds_strictly)")
    return smoke_site["html"]


_TABLES_JS = """() => Array.from(document.querySelectorAll('table.cv-table')).map(t => {
  const col = t.closest('article') || t.parentElement;
  return {width: t.getBoundingClientRect().width, scroll: t.parentElement.scrollWidth,
          column: col.getBoundingClientRect().width};
})"""

_PRE_JS = """() => Array.from(document.querySelectorAll('article pre')).filter(p => p.scrollWidth > p.clientWidth + 1)
  .map(p => [p.scrollWidth, p.clientWidth, p.textContent.slice(0, 60)])"""

# blocks of running text whose content runs past their own box (a long unbreakable word): the document need not
# scroll for it, the text is cut at the screen's edge
_SPILL_JS = """() => Array.from(document.querySelectorAll('article p, article li, article dd, article dt'))
  .filter(el => el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX === 'visible')
  .map(el => [el.scrollWidth - el.clientWidth, el.textContent.trim().slice(0, 60)])"""

_IMAGES_JS = """() => Array.from(document.querySelectorAll('article img')).map(i => ({
  src: i.getAttribute('src'), alt: i.getAttribute('alt') || '', width: i.getBoundingClientRect().width,
  inFigure: !!i.closest('figure')}))"""


_GLANCE_FOREST_JS = ("() => Array.from(document.querySelectorAll('figure.cv-forest-glance img'))"
                     ".filter(i => i.naturalWidth > 0).length")


def _visit_all(browser, smoke_site) -> dict:
    """Every page (:func:`_pages`, then "Results at a glance") loaded once at 1280 px and read, then the same page
    resized to a phone's width and read again: ``{"desktop": {path: ...}, "phone": {path: ...}}``. Per page and
    width: the console errors, remote requests and the document's scroll width, the forest-plot data of each notebook
    page (``_FOREST_JS``) and the glance page's count of decoded forest plots; at 1280 px also what
    :func:`_desktop_extra` reads. Each test below reads these instead of loading the pages again (a page load typesets
    its formulas: about a second each). One load serves both widths: the site's MathJax (version 3) typesets once
    and breaks no line by width, and the layout follows the viewport through CSS alone; a page loaded at a phone's
    width and one resized to it gave the same scroll widths and image widths on every page of a built book, a seeded
    600 px element included (both 600 px in 390)."""
    from companion.report import verdict_label

    html = _site(smoke_site)
    names = {html / "notebooks" / f"{n}.html": n for n in nbs.all_notebooks()}
    glance = html / "book" / "glance.html"
    visit = Visit(browser, DESKTOP)
    seen: dict[str, dict] = {"desktop": {}, "phone": {}}

    def read(page, path, extra) -> dict:
        got = {"errors": list(visit.errors), "remote": list(visit.remote),
               "width": page.evaluate("() => [document.documentElement.scrollWidth, "
                                      "document.documentElement.clientWidth]"),
               "spill": page.evaluate(_SPILL_JS), **extra}
        if path in names:
            got["forest"] = page.evaluate(_FOREST_JS, verdict_label(names[path]))
        if path == glance:
            got["glance_forests"] = page.evaluate(_GLANCE_FOREST_JS)
        return got

    try:
        for path in [*_pages(html), *([glance] if glance.is_file() else [])]:
            visit.page.set_viewport_size(DESKTOP)
            page = visit.open(path)
            seen["desktop"][path] = read(page, path, _desktop_extra(page, path))
            page.set_viewport_size(PHONE)
            page.wait_for_timeout(300)
            seen["phone"][path] = read(page, path, {})
    finally:
        visit.close()
    return seen


def _desktop_extra(page, path) -> dict:
    link = page.query_selector("a.companion-executed-download")
    runtime = page.query_selector(".companion-runtime")
    return {"tables": page.evaluate(_TABLES_JS), "pres": page.evaluate(_PRE_JS), "images": page.evaluate(_IMAGES_JS),
            "download": link.get_attribute("href") if link else None,
            "runtime": runtime.inner_text() if runtime else None}


@pytest.fixture(scope="module")
def visits(browser, smoke_site):
    """Every page loaded once, read at 1280 px and at a phone's width (:func:`_visit_all`)."""
    return _visit_all(browser, smoke_site)


@pytest.fixture(scope="module")
def desktop(visits):
    """Every page at 1280 px: what the tests below look at, per page."""
    return visits["desktop"]


@pytest.fixture(scope="module")
def phone(visits):
    """Every page at a phone's width."""
    return visits["phone"]


def test_pages_at_1280_px(desktop, smoke_site):
    """Console errors, remote requests, text that runs past its column, verdict tables wider than the column, code
    or printed output that scrolls sideways, images shown twice or with a path for alt text: none on any page."""
    html = smoke_site["html"]
    problems: list[str] = []
    for path, got in desktop.items():
        name = path.relative_to(html).as_posix()
        problems += [f"{name}: {e}" for e in got["errors"]]
        problems += [f"{name}: remote request {u}" for u in got["remote"]]
        problems += [f"{name}: text runs {px} px past its column: {text!r}" for px, text in got["spill"]]
        for t in got["tables"]:
            if t["width"] > t["column"] + 1 or t["scroll"] > t["column"] + 1:
                problems.append(f"{name}: a verdict table is {t['width']:.0f} px wide (scrolls {t['scroll']} px) "
                                f"in a {t['column']:.0f} px column")
        for pre in got["pres"]:
            problems.append(f"{name}: a code or output block scrolls sideways ({pre[0]} px in {pre[1]} px): "
                            f"{pre[2]!r}")
        count: dict[str, int] = {}
        for img in got["images"]:
            count[img["src"]] = count.get(img["src"], 0) + 1
            alt = img["alt"].strip()
            if not alt or re.search(r"(^|/)[^ ]+\.(png|svg|jpe?g|gif)$", alt) or "_images/" in alt:
                problems.append(f"{name}: image {img['src']} has alt text {alt!r} (not its caption)")
        problems += [f"{name}: image {src} is shown {k} times" for src, k in count.items() if k > 1]
    assert not problems, "\n".join(problems)


def test_figure_text_is_at_least_9_pt_as_displayed(desktop, smoke_site):
    """companion.plotting's standard: every figure's text (sub- and superscripts of formulas aside) is at
    least 9 pt at its displayed size in the 1280 px layout. Figures are SVG with text kept as text."""
    html = smoke_site["html"]
    small = []
    for path, got in desktop.items():
        for img in got["images"]:
            if not img["src"].endswith(".svg") or img["width"] <= 0:
                continue
            pt = _smallest_text_pt(path.parent / unquote(img["src"]), img["width"])
            if pt is not None and pt < MIN_FONT_PT - 0.05:
                small.append(f"{path.relative_to(html).as_posix()}: figure {Path(img['src']).name} has text "
                             f"at {pt:.1f} pt as displayed")
    assert not small, f"text below {MIN_FONT_PT:g} pt (set no font size below companion.plotting's; keep the " \
                      "figure within the column width):\n" + "\n".join(small)


def _smallest_text_pt(svg: Path, shown_px: float) -> float | None:
    """The smallest font size of an SVG figure (matplotlib, text kept as text) as displayed, in pt. A size
    that is 0.7 times another size of the figure is a formula's sub- or superscript and does not count."""
    if not svg.is_file():
        return None
    text = svg.read_text(errors="replace")
    m = re.search(r'viewBox="[-\d.]+ [-\d.]+ ([\d.]+) [\d.]+"', text)
    if not m:
        return None
    scale = shown_px / float(m.group(1))  # CSS px per SVG unit
    sizes = {float(s) for s in re.findall(r"font(?:-size)?:\s*(?:[a-z]+\s+)*([\d.]+)px", text)}
    body = [s for s in sizes if not any(abs(s / 0.7 - t) <= 0.03 * t for t in sizes)]
    return min(body) * scale * 0.75 if body else None


_PROSE_TABLES_JS = """() => Array.from(document.querySelectorAll('article table')).map(t => {
  const box = t.parentElement, col = t.closest('article');
  return {width: t.getBoundingClientRect().width, column: col.getBoundingClientRect().width,
          box: box.getBoundingClientRect().width, scroll: box.scrollWidth, overflow: getComputedStyle(box).overflowX};
})"""


def test_the_notation_tables_fit_the_column_at_1280_px_and_scroll_in_their_box_on_a_phone(browser, smoke_site):
    """The Notation page's tables fit the text column at 1280 px (code names wrap); on a phone a table whose
    formulas are wider than the screen scrolls inside its own box, never the page."""
    page_path = _site(smoke_site) / "book" / "notation.html"
    for viewport, must_fit in ((DESKTOP, True), (PHONE, False)):
        visit = Visit(browser, viewport)
        try:
            page = visit.open(page_path)
            tables = page.evaluate(_PROSE_TABLES_JS)
            doc = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        finally:
            visit.close()
        assert len(tables) == 3
        for t in tables:
            assert t["box"] <= t["column"] + 1, t  # the box never leaves the column
            if must_fit:
                assert t["width"] <= t["box"] + 1 and t["scroll"] <= t["box"] + 1, t
            else:
                assert t["overflow"] in ("auto", "scroll"), t
        assert doc[0] <= doc[1] + 1, doc


def test_pages_on_a_phone_do_not_scroll_sideways(phone, smoke_site):
    """No page is wider than a phone's screen, and no paragraph or list item of any page runs past its column (a
    long name that cannot break: the page does not scroll, the text is cut)."""
    html = smoke_site["html"]
    wide = [f"{path.relative_to(html).as_posix()}: {w[0]} px wide on a {w[1]} px screen"
            for path, got in phone.items() if (w := got["width"])[0] > w[1] + 1]
    wide += [f"{path.relative_to(html).as_posix()}: text runs {px} px past its column: {text!r}"
             for path, got in phone.items() for px, text in got["spill"]]
    assert not wide, "\n".join(wide)


def test_every_notebook_page_offers_its_executed_notebook(desktop, smoke_site):
    """The download under each notebook's title is the executed notebook of this build: its code cells
    have outputs and it carries the verdict records; the page states the measured runtime."""
    html = smoke_site["html"]
    missing = []
    for name in nbs.all_notebooks():
        path = html / "notebooks" / f"{name}.html"
        got = desktop[path]
        if got["download"] is None:
            missing.append(f"{name}: no executed-notebook download")
            continue
        target = (path.parent / unquote(urlparse(got["download"]).path)).resolve()
        if not target.is_file():
            missing.append(f"{name}: the download {got['download']} is not on the site")
            continue
        nb = json.loads(target.read_text())
        outputs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
        if not outputs or not any(METADATA_KEY in (o.get("metadata") or {}) for o in outputs):
            missing.append(f"{name}: the downloaded notebook has no outputs or no verdict records")
        if not got["runtime"] or not re.search(r"\d", got["runtime"]):
            missing.append(f"{name}: no measured runtime")
    assert not missing, "\n".join(missing)


def test_the_dashboard_filters_and_links_each_claim_to_its_verdict(browser, smoke_site):
    html = _site(smoke_site)
    visit = Visit(browser, DESKTOP)
    try:
        page = visit.open(html / "book" / "verdicts.html")
        total = len(smoke_site["records"])
        assert page.locator("table.cv-dash tbody.cv-claim-group").count() == total
        page.select_option("#cv-kind", "identity")
        shown = page.locator("table.cv-dash tbody.cv-claim-group:not([hidden])")
        n_identity = sum(1 for r in smoke_site["records"] if r["kind"] == "identity")
        assert shown.count() == n_identity
        page.select_option("#cv-kind", "")
        page.fill("#cv-q", "no claim has this text")
        assert shown.count() == 0
        page.fill("#cv-q", "")
        # each claim links to its notebook's verdict section, which exists
        for a in page.locator("table.cv-dash td.cv-claim a").all()[:400]:
            href = a.get_attribute("href")
            file, _, anchor = href.partition("#")
            target = (html / "book" / file).resolve()
            assert target.is_file(), href
            assert f'id="{anchor}"' in target.read_text(), f"{href}: no verdict section with that id"
        # the JSON lines it names are published
        for a in page.locator("a[href$='.jsonl']").all():
            assert (html / "book" / a.get_attribute("href")).resolve().is_file(), a.get_attribute("href")
        # sorting by the falsifier's distance keeps every claim
        page.locator("table.cv-dash thead th[data-sort='z-falsifier']").first.click()
        assert page.locator("table.cv-dash tbody.cv-claim-group").count() == total
    finally:
        visit.close()


def test_screenshots_at_1280_px_and_on_a_phone(browser, smoke_site):
    """Kept as artifacts (``_build/screenshots`` of the test site; also copied to $COMPANION_SCREENSHOTS)."""
    html = _site(smoke_site)
    out = smoke_site["root"] / "_build" / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    shots = []
    for label, viewport in (("1280", DESKTOP), ("phone", PHONE)):
        visit = Visit(browser, viewport)
        try:
            page = visit.open(html / "notebooks" / "mesa" / "thm4_1_emergence.html")
            page.locator("table.cv-table").first.scroll_into_view_if_needed()
            shots.append(out / f"verdict-table-{label}.png")
            page.screenshot(path=str(shots[-1]))
        finally:
            visit.close()
    for s in shots:
        assert s.stat().st_size > 10_000
    dest = os.environ.get("COMPANION_SCREENSHOTS")
    if dest:
        Path(dest).mkdir(parents=True, exist_ok=True)
        for s in shots:
            shutil.copy(s, Path(dest) / s.name)
    print("screenshots:", *shots)


def test_the_whole_book_prints_as_one_pdf(smoke_site):
    """`companion book` typesets the single-page build once with Chromium (offline): every formula of every page
    without a TeX error, and the same page printed; the front page links it."""
    html = _site(smoke_site)
    _chromium()
    pdf, tex_errors = book.print_book(smoke_site["root"])
    assert not tex_errors, f"TeX errors: {tex_errors}"
    assert pdf == html / book.PDF_NAME
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF") and len(data) > 200_000
    pages = len(re.findall(rb"/Type\s*/Page[^s]", data))
    assert pages >= 20, f"only {pages} pages: the book was not printed whole"
    printed = (smoke_site["root"] / "_build" / "singlehtml" / "companion-print.html").read_text()
    for name in nbs.all_notebooks():
        assert f'id="verdict-{name.replace("/", "-").replace("_", "-")}"' in printed, f"{name} is not in the PDF"
    assert 'href="../companion.pdf"' in (html / "book" / "intro.html").read_text()


_FOREST_JS = """(label) => {
  const anchor = document.getElementById(label);
  const section = anchor && (anchor.closest('section') || anchor.parentElement);
  const col = document.querySelector('article') || document.body;
  const imgs = Array.from((section || document).querySelectorAll('figure.cv-forest img'));
  const box = document.querySelector('.cv-answer');
  const stat = document.querySelector("tbody.cv-claim-group[data-kind-name='statistical']");
  return {inVerdict: !stat || (!!section && imgs.length > 0),
          plots: imgs.map(i => ({width: i.getBoundingClientRect().width, natural: i.naturalWidth,
                                 column: col.getBoundingClientRect().width, alt: i.getAttribute('alt') || ''})),
          answer: box ? box.innerText : null,
          answerFirst: !!box && !!section &&
            (box.compareDocumentPosition(section) & Node.DOCUMENT_POSITION_FOLLOWING) > 0,
          typeset: box ? box.querySelectorAll('mjx-container, .MathJax').length : 0,
          asciiInTables: Array.from(document.querySelectorAll('.cv-reason, .cv-falsifier'))
                              .filter(e => /->|\\+-|sigma\\^/.test(e.innerText)).length};
}"""


@pytest.mark.parametrize("viewport", ["desktop", "phone"], ids=["1280px", "phone"])
def test_each_result_page_shows_its_forest_plot_under_its_verdict_and_its_answer_first(request, smoke_site, viewport):
    """Under each notebook's Verdict heading with a statistical claim a forest plot drawn from its records (decoded, with alt text, within
    the column at 1280 px and on a phone); the "In this book" box before the verdict section; no ASCII arrows or
    powers in the reasons and falsifiers; on "Results at a glance" the forest plot of the decisive claims."""
    seen_pages = request.getfixturevalue(viewport)  # every page loaded once at this width
    html = smoke_site["html"]
    problems = []
    for name in nbs.all_notebooks():
        seen = seen_pages[html / "notebooks" / f"{name}.html"]["forest"]
        if not seen["inVerdict"]:
            problems.append(f"{name}: no forest plot under the Verdict heading")
        for p in seen["plots"]:
            if p["natural"] <= 0 or p["width"] > p["column"] + 1 or "Forest plot" not in p["alt"]:
                problems.append(f"{name}: forest plot {p}")
        if not seen["answer"] or not re.search(r"(Headline|Deciding) claim", seen["answer"]) or not seen["answerFirst"]:
            problems.append(f"{name}: no 'In this book' box before the verdict ({seen['answer']!r})")
        if seen["asciiInTables"]:
            problems.append(f"{name}: {seen['asciiInTables']} reasons or falsifiers in ASCII maths")
    glance = seen_pages.get(html / "book" / "glance.html")
    if glance is not None and glance["glance_forests"] < 1:
        problems.append("Results at a glance: no forest plot")
    assert not problems, "\n".join(problems)
