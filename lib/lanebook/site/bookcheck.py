"""Checks of a built site: every internal link and anchor resolves, nothing is loaded from the internet, and no
page says what a published page must not (`text_problems`).

The site must work from a file:// path with no network: an http(s) or protocol-relative URL in a loading attribute
(script src, link href, img src, iframe src, …), a style attribute, <style>, or a CSS @import or url() is a problem;
a link (a href) to another site is allowed. A page's article must not say "not rehearsed", "seed 0" (readers get
the write-ups' titles) or show a path on the building machine (lanebook.base.paths.local_roots). `page_refs`,
`css_loads`, `article_lines` and `said` are pure; `check_site` and `text_problems` name each problem and page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from lanebook.base.paths import local_path_pattern

# (tag, attribute) pairs that make a browser fetch something as the page loads.
LOADING = {
    ("script", "src"),
    ("link", "href"),
    ("img", "src"),
    ("iframe", "src"),
    ("source", "src"),
    ("video", "src"),
    ("audio", "src"),
    ("embed", "src"),
    ("object", "data"),
    ("input", "src"),
    ("track", "src"),
    ("image", "href"),
}
LINKING = {("a", "href"), ("area", "href")}
CSS_URL = re.compile(r"""@import\s+(?:url\()?\s*['"]?([^'")\s;]+)|url\(\s*['"]?([^'")]+?)['"]?\s*\)""", re.I)
NOT_FILES = ("mailto:", "javascript:", "data:", "tel:", "about:")


def is_external(url: str) -> bool:
    return bool(re.match(r"^(?:[a-z][a-z0-9+.-]*:)?//", url.strip(), re.I))


def css_loads(css: str) -> list[str]:
    """Every URL a style sheet imports or loads (url(...) and @import)."""
    return [a or b for a, b in CSS_URL.findall(css)]


@dataclass
class PageRefs:
    ids: set[str] = field(default_factory=set)
    links: list[str] = field(default_factory=list)  # navigations (a href)
    loads: list[str] = field(default_factory=list)  # what the page fetches as it loads


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.refs = PageRefs()
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if "id" in values:
            self.refs.ids.add(values["id"])
        if tag == "a" and "name" in values:
            self.refs.ids.add(values["name"])
        for name, value in values.items():
            if (tag, name) in LOADING and not (tag == "link" and "alternate" in values.get("rel", "")):
                self.refs.loads.append(value)
            elif (tag, name) in LINKING:
                self.refs.links.append(value)
            elif name == "srcset":
                self.refs.loads += [part.split()[0] for part in value.split(",") if part.strip()]
            elif name == "style":
                self.refs.loads += css_loads(value)
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.refs.loads += css_loads(data)


def page_refs(html: str) -> PageRefs:
    """The ids a page defines, the links it has, and the URLs it loads."""
    parser = _Parser()
    parser.feed(html)
    parser.close()
    return parser.refs


def _resolve(page: Path, url: str) -> tuple[Path, str]:
    parts = urlsplit(url)
    target = page if not parts.path else (page.parent / unquote(parts.path))
    return target.resolve(), unquote(parts.fragment)


def check_site(root: Path) -> list[str]:
    """Each broken internal link or anchor and each external load of the site under ROOT, as one line."""
    root = Path(root).resolve()
    pages = {
        path.resolve(): page_refs(path.read_text(errors="replace"))
        for path in sorted(root.rglob("*.html"))
        if path.relative_to(root).parts[0] != "_static"
    }  # the theme's template macros there are no pages
    problems = []
    for page, refs in pages.items():
        where = page.relative_to(root)
        for url in refs.loads + refs.links:
            url = url.strip()
            if not url or url.startswith(NOT_FILES):
                continue
            if is_external(url):
                if url in refs.loads:
                    problems.append(f"{where} loads {url} from the internet")
                continue
            target, anchor = _resolve(page, url)
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                problems.append(f"{where}: {url} is missing")
            elif anchor and target in pages and anchor not in pages[target].ids:
                problems.append(f"{where}: {url} has no anchor #{anchor}")
    for css in sorted(root.rglob("*.css")):
        for url in css_loads(css.read_text(errors="replace")):
            if is_external(url):
                problems.append(f"{css.relative_to(root)} loads {url} from the internet")
            elif not url.startswith(NOT_FILES) and not _resolve(css, url)[0].is_file():
                problems.append(f"{css.relative_to(root)}: {url} is missing")
    return problems


# Marks only an emoji font draws (pictographs, dingbats, the emoji variation selector): a published page has none.
EMOJI = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf\u2b00-\u2bff\ufe0f]")
UNSAID = (
    (re.compile(r"not rehearsed", re.I), "says 'not rehearsed': rehearse the runbook on the twin"),
    (re.compile(r"\bseed 0", re.I), "says 'seed 0': name the write-up (lanebook.recipe.sources)"),
)


class _Article(HTMLParser):
    """The text inside <article> elements, by line of the HTML file."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: dict[int, str] = {}
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._depth += tag == "article"

    def handle_endtag(self, tag: str) -> None:
        self._depth -= tag == "article" and self._depth > 0

    def handle_data(self, data: str) -> None:
        if self._depth:
            line = self.getpos()[0]
            for n, part in enumerate(data.split("\n")):
                self.lines[line + n] = self.lines.get(line + n, "") + part


def article_lines(html: str) -> dict[int, str]:
    """Line of the HTML file -> the article's text on it."""
    parser = _Article()
    parser.feed(html)
    parser.close()
    return parser.lines


def said(lines: dict[int, str], local: re.Pattern) -> list[tuple[int, str, str]]:
    """(line, why, the text) for each line that says what a page must not."""
    found = []
    for line, text in sorted(lines.items()):
        for pattern, why in UNSAID:
            if pattern.search(text):
                found.append((line, why, text.strip()))
        match = local.search(text)
        if match:
            found.append(
                (line, f"shows a local path ({match.group(1)}): show it relative to the repository", text.strip())
            )
    return found


def text_problems(root: Path) -> list[str]:
    """Each line of the built site's articles that says what a published page must not, naming page and line."""
    root = Path(root).resolve()
    local = local_path_pattern()
    problems = []
    for path in sorted(root.rglob("*.html")):
        where = path.relative_to(root)
        if where.parts[0] == "_static":
            continue
        for line, why, text in said(article_lines(path.read_text(errors="replace")), local):
            problems.append(f"{where} line {line} {why}: {text[:120]}")
    return problems
