"""Markdown and HTML pieces the book's pages share: tables, wide containers, and status badges.

A status mark on the site is a badge: the word itself (PASS, FAIL, DRY-RUN, ...) in a coloured box styled
by book/_static/lanebook.css, so it renders in any browser, with or without an emoji font, and still
reads without the colour.
"""

from __future__ import annotations

import html
import re

from lanebook.base.checks import FAIL, MARKS, NOT_OBSERVED, OUTCOMES, PASS, SKIPPED, WARNING
from lanebook.lane.params import REAL_FIGURES, TWIN_FIGURES
from lanebook.runs.audit import VERDICTS

# The outcomes of a runbook's checks and the verdicts of runs, each with its badge class.
OUTCOME_CLASSES = {PASS: "pass", FAIL: "fail", NOT_OBSERVED: "dry-run", SKIPPED: "skipped", WARNING: "warning"}
VERDICT_CLASSES = {verdict: verdict for verdict in VERDICTS}
# Marks that records executed before the marks were words still carry (emoji need an emoji font): the
# book shows them as the words the runbooks print now. A word may follow the emoji ("✅ pass" in a gates table).
LEGACY_MARKS = {"✅": PASS, "❌": FAIL, "◻️": NOT_OBSERVED, "◻": NOT_OBSERVED, "⏭️": SKIPPED, "⚠️": WARNING}
_LEGACY_RE = re.compile(
    "(" + "|".join(sorted(map(re.escape, LEGACY_MARKS), key=len, reverse=True)) + r")"
    r"(?: (?:" + "|".join(OUTCOMES) + r")\b)?"
)


def cell(value: object) -> str:
    """A value as one Markdown table cell."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def md_table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def wide(table: str) -> str:
    """A wide generated table, given the page's full width (book/_static/lanebook.css)."""
    return "```{container} lanebook-wide\n" + table + "```\n"


def badge(word: str, kind: str) -> str:
    """A status word in its coloured box; kind picks the colour (pass, fail, error, dry-run, skipped, warning, twin,
    real)."""
    css = re.sub(r"[^a-z0-9-]", "-", kind.lower())
    return f'<span class="lanebook-badge lanebook-badge-{css}">{html.escape(word.upper())}</span>'


def verdict_badge(verdict: str) -> str:
    """A run's verdict (pass, fail, error, dry-run; anything else keeps its name, in a neutral box)."""
    return badge(verdict, VERDICT_CLASSES.get(verdict, "unknown"))


def outcome_badge(outcome: str) -> str:
    """One check's outcome (pass, fail, not observed, skipped, warning)."""
    return badge(outcome, OUTCOME_CLASSES.get(outcome, "unknown"))


def where_badge(twin: bool) -> str:
    return figures_badge(TWIN_FIGURES if twin else REAL_FIGURES)


def figures_badge(figures_label: str) -> str:
    """Whose figures or plan a page shows, from a lane's `figures_label`."""
    return badge(figures_label, "twin" if figures_label == TWIN_FIGURES else "real")


def dry_badge() -> str:
    return badge("dry run", "dry-run")


def badge_marks(markdown: str) -> str:
    """A notebook's Markdown with every check mark as a badge: the runbooks' words (`PASS`, ...) and the emoji
    of older records."""
    for outcome, mark in MARKS.items():
        markdown = markdown.replace(mark, outcome_badge(outcome))
    return _LEGACY_RE.sub(lambda m: outcome_badge(LEGACY_MARKS[m.group(1)]), markdown)
