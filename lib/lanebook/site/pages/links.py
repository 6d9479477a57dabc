"""Citations and ids as links, on every page: a write-up is named by its title, linked to the Sources page, and a
pitfall, symptom or fact id (P07, S02, D13, H01, T04) links to its row on the page that defines it.

A row defines an id with `anchor(ID)` (a span carrying the id); `defined_anchors` finds
them in the staged pages, and `link_text` rewrites one page's Markdown. Nothing is rewritten inside code (fenced
or inline), inside an HTML tag or link, in a Markdown link, in an address, or in the anchor itself. Pure functions.
"""

from __future__ import annotations

import html
import posixpath
import re

from lanebook.recipe.sources import SHORTHAND, cited

SOURCES_DOC = "sources"
ID = re.compile(r"\b([PSDHT]\d\d)\b")
ANCHOR_CLASS = "lanebook-anchor"
DEFINED = re.compile(r'<span class="' + ANCHOR_CLASS + r'" id="([PSDHT]\d\d)">')
# What is left as it is, besides fenced code (`code_regions`): inline code, an anchor or link element, a Markdown
# link, any other tag, an address.
SKIP = re.compile(
    r"(`+)[^\n]+?\1"
    r'|<span class="' + ANCHOR_CLASS + r'"[^>\n]*>[^\n]*?</span>'
    r"|<a\b[^>\n]*>[^\n]*?</a>"
    r"|\[[^\]\n]*\]\([^)\n]*\)"
    r"|<[^>\n]*>"
    r"|\b(?:https?|file)://\S+"
)
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})(.*)$")
# A nested run's record linked from its parent's notebook as outputs/LANE/ sees it (rollback's gates run).
NESTED_RUN = re.compile(r"\]\(\.\./([^/()\s]+/[^/()\s]+)\.ipynb\)")


def anchor(row_id: str) -> str:
    """A table row's id, made a link target (pages link it as PAGE.html#ID)."""
    return f'<span class="{ANCHOR_CLASS}" id="{html.escape(row_id)}">{html.escape(row_id)}</span>'


def defined_anchors(pages: dict[str, str]) -> dict[str, str]:
    """id -> the doc (staged path without suffix) whose row defines it; pages: doc -> its text."""
    found: dict[str, str] = {}
    for doc, text in pages.items():
        for row_id in DEFINED.findall(text):
            found.setdefault(row_id, doc)
    return found


def href(from_doc: str, to_doc: str, fragment: str) -> str:
    """The built page TO_DOC's #FRAGMENT, relative to the built page FROM_DOC."""
    return f"{posixpath.relpath(to_doc, posixpath.dirname(from_doc) or '.')}.html#{fragment}"


def _link_plain(text: str, doc: str, anchors: dict[str, str]) -> str:
    def write_up(match: re.Match) -> str:
        source = cited(match)
        return f'<a href="{href(doc, SOURCES_DOC, source.anchor)}"><em>{html.escape(source.short_title)}</em></a>'

    def row(match: re.Match) -> str:
        target = anchors.get(match.group(1))
        return (
            match.group(0) if target is None else f'<a href="{href(doc, target, match.group(1))}">{match.group(1)}</a>'
        )

    return ID.sub(row, SHORTHAND.sub(write_up, text))


def run_links(text: str, doc: str, run_docs: dict[str, str]) -> str:
    """TEXT with each link to a recorded run as its outputs folder names it (../LANE/STEM.ipynb) made a link to
    that run's page; run_docs: LANE/STEM -> its doc."""

    def page(match: re.Match) -> str:
        target = run_docs.get(match.group(1))
        if target is None:
            return match.group(0)
        return f"]({posixpath.relpath(target, posixpath.dirname(doc) or '.')}.ipynb)"

    return NESTED_RUN.sub(page, text)


def code_regions(text: str) -> list[tuple[int, int]]:
    """(start, end) of each fenced code block: a fence whose info string is no directive, or {code}; a directive's
    fence (```{container}, ```{admonition}) holds Markdown, and fences nest inside it. An unclosed block runs to
    the end."""
    regions, open_fences, at = [], [], 0  # open_fences: (fence, is code, start)
    for line in text.splitlines(keepends=True):
        match = FENCE.match(line.rstrip("\n"))
        if match:
            fence, info = match.group(1), match.group(2).strip()
            top = open_fences[-1] if open_fences else None
            if top and not info and fence[0] == top[0][0] and len(fence) >= len(top[0]):
                open_fences.pop()
                if top[1]:
                    regions.append((top[2], at + len(line)))
            elif not (top and top[1]):  # inside code a fence is text
                open_fences.append((fence, not info.startswith("{") or info.startswith("{code"), at))
        at += len(line)
    regions += [(start, len(text)) for _, code, start in open_fences[:1] if code]
    return regions


def _link_markdown(text: str, doc: str, anchors: dict[str, str]) -> str:
    out, at = [], 0
    for match in SKIP.finditer(text):
        out.append(_link_plain(text[at : match.start()], doc, anchors))
        out.append(match.group(0))
        at = match.end()
    out.append(_link_plain(text[at:], doc, anchors))
    return "".join(out)


def link_text(text: str, doc: str, anchors: dict[str, str]) -> str:
    """TEXT (Markdown with inline HTML) of the page DOC with each write-up named and linked and each known id
    linked to its row."""
    out, at = [], 0
    for start, end in code_regions(text):
        out += [_link_markdown(text[at:start], doc, anchors), text[start:end]]
        at = end
    out.append(_link_markdown(text[at:], doc, anchors))
    return "".join(out)
