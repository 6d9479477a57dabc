"""The built site as a reader sees it: opened from file:// in headless Chromium (Debian's /usr/bin/chromium through
Playwright) with no network. The book is built once (lanebook.site.book.build_book) from an outputs folder holding a
twin launch run, a short twin speed run and a small watch series of the twin lane. Every page checked here renders
(the theme's article shown, no failed request, every image loaded), asks nothing of any address but file:// (every
other request is routed to an abort and named), and draws no character as a missing glyph; the introduction, the
launch recipe page with its outputs (the troubleshooting table, the verdict table), the speed page with its plot,
the served lanes page and the audit trail are each checked for what they must show. Every page is also read at a
laptop width (1366 px) and a phone width (390 px): its first screen shows its title, it does not scroll sideways,
and it asks nothing of the network. Screenshots go to test-artifacts/site/: NAME.jpg, the whole page at 1280 px, for
the pages checked in detail; and NAME-1366.jpg, NAME-390.jpg, the first screen at each width (what that check
judges).

One browser context per viewport size serves every page read at that size, its one tab going from page to page, so
the suite pays for a page's load, not for a fresh browser profile and tab each time; each page's requests are
recorded apart.

A missing glyph is found by drawing: each character of the page's text (and of ::before/::after content) is
drawn on a canvas in the font of the element that holds it, beside a code point no font has (U+0378,
unassigned); the same pixels mean the browser had no glyph for it. `make setup` installs plain text fonts and
no emoji font, so a mark that needs an emoji font is drawn as that box here, as in any browser without one.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from helpers import watch_records
from helpers.lanebook_runs import run
from lanebook.base.paths import REPO

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = REPO / "test-artifacts" / "site"
SHORT_SPEED = ("-p", "max_tokens=32", "-p", "workloads=probe")

# Characters drawn like U+0378 (no font has it), with where each is; skips what draws nothing on purpose
# (spaces, format characters such as U+FE0F, combining marks).
MISSING_GLYPHS_JS = (
    r"""
() => {
  const canvas = document.createElement("canvas");
  canvas.width = 64; canvas.height = 64;
  const ctx = canvas.getContext("2d", {willReadFrequently: true});
  const draw = (font, text) => {
    ctx.clearRect(0, 0, 64, 64); ctx.font = font; ctx.textBaseline = "top"; ctx.fillStyle = "#000";
    ctx.fillText(text, 4, 4);
    return Array.from(ctx.getImageData(0, 0, 64, 64).data).join(",");
  };
  const drawsNothing = /[\p{Z}\p{Cf}\p{Mn}\p{Me}\p{Cc}]/u;
  const seen = new Map();
  const note = (el, text, style) => {
    const font = `${style.fontStyle} ${style.fontWeight} 32px ${style.fontFamily}`;
    for (const ch of text) {
      if (ch.codePointAt(0) < 0x80 || drawsNothing.test(ch)) continue;
      const key = font + "|" + ch;
      if (!seen.has(key)) seen.set(key, {ch, font, """
    r"""where: ((el.closest("[class]") || el).getAttribute("class") || el.tagName).slice(0, 60),
                                         context: (el.textContent || "").trim().slice(0, 80)});
    }
  };
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (el && el.getClientRects().length && getComputedStyle(el).visibility !== "hidden") """
    r"""note(el, node.data, getComputedStyle(el));
  }
  for (const el of document.body.querySelectorAll("*")) {
    // only HTML elements draw ::before/::after (an icon's <svg> keeps its class, not its pseudo-elements)
    if (!(el instanceof HTMLElement) || !el.getClientRects().length) continue;
    for (const pseudo of ["::before", "::after"]) {
      const style = getComputedStyle(el, pseudo);
      if (style.display !== "none" && style.content.startsWith('"')) note(el, JSON.parse(style.content), style);
    }
  }
  const missing = [];
  for (const {ch, font, where, context} of seen.values()) {
    if (draw(font, ch) === draw(font, "\u0378"))
      missing.push({char: ch, codepoint: "U+" + ch.codePointAt(0).toString(16).toUpperCase().padStart(4, "0"),
                    font, where, context});
  }
  return missing;
}
"""
)

IMAGES_JS = """
async () => Promise.all([...document.images].map(async img => {
  img.loading = "eager";
  try { await img.decode(); } catch (e) {}
  return {src: img.getAttribute("src"), width: img.naturalWidth};
}))
"""


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: `make test` installs Debian's chromium; Ubuntu packages none (a snap)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


class Reader:
    """One browser tab at a viewport size, opening pages one after another; each page's requests are recorded apart,
    and any request that is not file:// is aborted and named."""

    def __init__(self, browser, width: int = 1280, height: int = 900):
        self.requests: list[str] = []
        self.left: list[str] = []  # requests that would have left the machine (aborted)
        self.failed: list[str] = []
        self.context = browser.new_context(viewport={"width": width, "height": height})
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("requestfailed", lambda r: self.failed.append(f"{r.url} ({r.failure})"))

    def open(self, url: str) -> "Reader":
        """Go to URL with the previous page's requests forgotten; back when the page it lands on has loaded."""
        self.requests, self.left, self.failed = [], [], []
        self.page.goto(url)
        # jupyter-book's index.html forwards to the root page with a meta refresh: wait for the page it lands on
        self.page.wait_for_function(
            'document.readyState === "complete" && !document.querySelector(\'meta[http-equiv="refresh" i]\')'
        )
        self.page.wait_for_load_state("load")
        return self

    def _route(self, route) -> None:
        if route.request.url.startswith(("file://", "data:")):
            route.continue_()
        else:
            self.left.append(route.request.url)
            route.abort()

    def outside(self) -> list[str]:
        """Every request to anything but a local file, routed or not."""
        return sorted(set(self.left) | {u for u in self.requests if not u.startswith(("file://", "data:"))})

    def images(self) -> list[dict]:
        return self.page.evaluate(IMAGES_JS)

    def missing_glyphs(self) -> list[dict]:
        return self.page.evaluate(MISSING_GLYPHS_JS)

    def shot(self, name: str, full_page: bool) -> None:
        """A JPEG of the whole page, or of its first screen (a PNG of a long page costs seconds and shows no more)."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / name), full_page=full_page, type="jpeg", quality=80)

    def close(self) -> None:
        self.context.close()


@pytest.fixture(scope="module")
def reader(browser) -> Iterator[Reader]:
    """The tab the pages checked in detail are read in (1280 x 900)."""
    opened = Reader(browser)
    yield opened
    opened.close()


def test_the_glyph_check_sees_a_missing_glyph_and_passes_covered_marks(reader, tmp_path):
    """The checks themselves: a private-use character no font covers is found, text marks the fonts cover are not,
    and a stylesheet from the internet is named and never fetched."""
    page = tmp_path / "page.html"
    page.write_text(
        '<html><head><meta charset="utf-8"><link rel="stylesheet" href="https://example.invalid/x.css">'
        '</head><body><p class="mark">\ue000 missing</p><p>\u2713 pass \u2717 fail \u2014 \u00e9</p></body></html>'
    )
    visit = reader.open(page.as_uri())
    missing, outside = visit.missing_glyphs(), visit.outside()
    assert [m["codepoint"] for m in missing] == ["U+E000"], missing
    assert outside == ["https://example.invalid/x.css"]


@pytest.fixture(scope="module")
def site(twin, tmp_path_factory) -> Path:
    """The site built from a twin launch run, a short twin speed run (launch is idempotent: an up lane is verified)
    and a small watch series of the twin lane (helpers.watch_records)."""
    from lanebook.site.book import build_book

    tmp = tmp_path_factory.mktemp("site")
    run(tmp, "launch", "twin", expect_exit=0)
    run(tmp, "speed", "twin", *SHORT_SPEED, expect_exit=0)
    watch_records.write_watch(tmp / "outputs")
    saved = os.environ.get("LANEBOOK_OUTPUTS")
    os.environ["LANEBOOK_OUTPUTS"] = str(tmp / "outputs")
    try:
        index = build_book(tmp / "book").index
    finally:
        os.environ.pop("LANEBOOK_OUTPUTS") if saved is None else os.environ.update(LANEBOOK_OUTPUTS=saved)
    return index.parent


@contextmanager
def visit_page(reader: Reader, site: Path, name: str) -> Iterator[Reader]:
    """Open a page, check what every page must hold, keep its screenshot."""
    path = site / name
    assert path.is_file(), f"{name} is not in the built site"
    visit = reader.open(path.as_uri())
    visit.shot(name.replace("/", "-").replace(".html", ".jpg"), full_page=True)
    page = visit.page
    assert page.locator("article.bd-article h1").first.is_visible(), f"{name}: the theme's article has no heading shown"
    assert not visit.outside(), f"{name} asked the network for: {visit.outside()}"
    assert not visit.failed, f"{name}: requests failed: {visit.failed}"
    broken = [i["src"] for i in visit.images() if i["width"] == 0]
    assert not broken, f"{name}: images not loaded: {broken}"
    missing = visit.missing_glyphs()
    assert not missing, f"{name}: drawn as a missing glyph: {missing}"
    yield visit


@pytest.mark.twin
def test_the_introduction_renders_with_its_topology_picture(reader, site):
    with visit_page(reader, site, "index.html") as visit:
        pictures = visit.page.locator("article.bd-article img, article.bd-article svg")
        assert pictures.count() >= 1, "the introduction shows no picture of the lane topology"
        assert pictures.first.is_visible()


def table_after(page, heading: re.Pattern):
    """The first table after the heading matching `heading`, within its section."""
    section = page.get_by_role("heading", name=heading).first.locator(
        "xpath=ancestor::section[1]"
    )  # its own, not the page's
    return section.locator("table").first


@pytest.mark.twin
def test_the_launch_recipe_page_shows_its_twin_run_with_outputs_and_verdict_table(reader, site):
    with visit_page(reader, site, "recipe/launch.html") as visit:
        page = visit.page
        text = page.locator("article.bd-article").inner_text()
        assert re.search(r"\btwin\b", text, re.I), "the page does not say it shows a twin rehearsal"
        troubleshooting = table_after(page, re.compile(r"Troubleshooting"))
        assert troubleshooting.is_visible(), "the troubleshooting table is not shown (the cell's output is missing)"
        assert re.search(r"\bP\d\d\b", troubleshooting.inner_text()), troubleshooting.inner_text()[:500]
        verdicts = page.locator("article.bd-article table").filter(has_text=re.compile(r"\bpass\b", re.I))
        verdicts = verdicts.filter(has_text=re.compile(r"launcher reports the lane up"))
        assert verdicts.count() >= 1 and verdicts.first.is_visible(), "no verdict table with the run's checks"


@pytest.mark.twin
def test_the_speed_page_shows_its_plot(reader, site):
    with visit_page(reader, site, "speed.html") as visit:
        plots = [i for i in visit.images() if i["width"] > 0]
        assert plots, "the speed page shows no loaded plot image"
        assert re.search(r"\btwin\b", visit.page.locator("article.bd-article").inner_text(), re.I)


@pytest.mark.twin
def test_the_served_lanes_page_shows_its_plot_and_labels_twin_figures(reader, site):
    with visit_page(reader, site, "watch.html") as visit:
        assert [i for i in visit.images() if i["width"] > 0], "the served lanes page shows no loaded plot image"
        text = visit.page.locator("article.bd-article").inner_text()
        assert "TWIN" in text and "72.73 %" in text and "Head dies mid-TP" in text


@pytest.mark.twin
def test_the_audit_trail_lists_both_runs_linking_to_their_pages(reader, site):
    with visit_page(reader, site, "audit.html") as visit:
        page = visit.page
        table = page.locator("article.bd-article table").first
        rows = table.inner_text()
        assert re.search(r"\blaunch\b", rows) and re.search(r"\bspeed\b", rows), rows[:1000]
        links = [a.get_attribute("href") for a in table.locator("a[href]").all()]
        targets = {(site / "audit.html").parent.joinpath(h.split("#")[0]).resolve() for h in links if "://" not in h}
        assert len(targets) >= 2 and all(t.is_file() for t in targets), sorted(map(str, targets))


# The widths a reader brings: a laptop and a phone (each with its own first screen's height).
WIDTHS = {"laptop": (1366, 768), "phone": (390, 844)}
FIRST_SCREEN_JS = """
() => {
  const h1 = document.querySelector("article.bd-article h1");
  const box = h1 && h1.getBoundingClientRect();
  const page = document.documentElement;
  const sideways = page.scrollWidth - page.clientWidth;
  return {title: h1 ? h1.innerText : null, bottom: box ? box.bottom : null, sideways: sideways};
}
"""


@pytest.mark.twin
def test_every_page_reads_at_a_laptop_and_a_phone_width(browser, site):
    """Each page's first screen says what it is: its title shown, at either width; no page scrolls sideways (a wide
    table or code block scrolls in its own box, a long token in text wraps), and none asks the network for
    anything."""
    pages = sorted(
        p.relative_to(site).as_posix()
        for p in site.rglob("*.html")
        if p.relative_to(site).parts[0] not in ("_static", "_sources")
        and p.name not in ("genindex.html", "search.html")
    )
    assert "sources.html" in pages and "recipe/stop.html" in pages
    problems = []
    reader = Reader(browser, *WIDTHS["laptop"])
    try:
        for name in pages:
            # each page loaded once and read at either width (the tab resized: the theme lays out by media queries)
            visit = reader.open((site / name).as_uri())
            for kind, (width, height) in WIDTHS.items():
                visit.page.set_viewport_size({"width": width, "height": height})
                visit.shot(name.replace("/", "-").replace(".html", f"-{width}.jpg"), full_page=False)
                seen = visit.page.evaluate(FIRST_SCREEN_JS)
                if not seen["title"] or seen["bottom"] > height:
                    problems.append(f"{name} at {kind} width: its title is not on the first screen ({seen})")
                if seen["sideways"] > 0:
                    problems.append(f"{name} at {kind} width: the page scrolls sideways by {seen['sideways']} px")
            if visit.outside():
                problems.append(f"{name}: asked the network for {visit.outside()}")
            visit.page.set_viewport_size(dict(zip(("width", "height"), WIDTHS["laptop"])))
    finally:
        reader.close()
    assert not problems, "\n".join(problems)
