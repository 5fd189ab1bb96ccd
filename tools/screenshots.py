"""Screenshots of built pages at 1280 px and at phone width, in Debian's Chromium (never a downloaded one),
with the network blocked: the habit of looking at every page one changes.

    python tools/screenshots.py                              # every page of _build/html -> _build/screenshots
    python tools/screenshots.py notebooks/mesa/thm4_3_masking book/verdicts --out /tmp/shots
    python tools/screenshots.py --figures notebooks/cot/thm4_1_dynamics   # each figure alone, at 1280 px

Writes ``<page>-1280.png`` and ``<page>-390.png`` (full page), or ``<page>-fig<k>.png`` per figure.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = {"1280": {"width": 1280, "height": 900}, "390": {"width": 390, "height": 844}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pages", nargs="*", help="pages relative to the site, without .html (default: every page)")
    ap.add_argument("--html", default=str(ROOT / "_build" / "html"), help="the built site")
    ap.add_argument("--out", default=str(ROOT / "_build" / "screenshots"), help="where the PNGs go")
    ap.add_argument("--figures", action="store_true", help="one screenshot per figure at 1280 px instead")
    args = ap.parse_args(argv)
    # after the options: a refused one costs no import of the browser driver and the book (3 s)
    from playwright.sync_api import sync_playwright

    from companion.site import book

    html, out = Path(args.html), Path(args.out)
    if not html.is_dir():
        print(f"screenshots: --html '{html}': not a built site (run make book)", file=sys.stderr)
        return 2
    pages = [html / f"{p}.html" for p in args.pages] or sorted(
        p for p in html.rglob("*.html") if not p.name.startswith(("genindex", "search", "prf-")))
    missing = [p for p in pages if not p.is_file()]
    if missing:
        print(f"screenshots: page '{missing[0].relative_to(html)}': not in the site", file=sys.stderr)
        return 2
    browser_path = book.find_browser()
    if browser_path is None:
        print("screenshots: no Chromium found (apt-get install chromium)", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path,
                                    args=[f for f in book.CHROMIUM_FLAGS if f != "--headless"])
        for width, viewport in WIDTHS.items():
            if args.figures and width != "1280":
                continue
            ctx = browser.new_context(viewport=viewport)
            ctx.route("**/*", lambda r: r.continue_() if r.request.url.startswith(("file:", "data:", "blob:"))
                      else r.abort())
            page = ctx.new_page()
            for path in pages:
                stem = str(path.relative_to(html).with_suffix("")).replace("/", "__")
                page.goto(path.as_uri(), wait_until="load")
                page.wait_for_timeout(400)  # MathJax
                if args.figures:
                    for k, fig in enumerate(page.query_selector_all("article figure, article .cell_output img")):
                        fig.screenshot(path=str(out / f"{stem}-fig{k}.png"))
                else:
                    page.screenshot(path=str(out / f"{stem}-{width}.png"), full_page=True)
            ctx.close()
        browser.close()
    print(f"screenshots: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
