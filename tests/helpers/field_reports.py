"""The public reports of the doctor's case base (lanebook.recipe.casebase), as facts, and a post assembled from them
the way an operator pastes one into `lanebook doctor --logs`: the words as prose, a table's rows as a Markdown table,
the log lines in a fenced block and the kernel lines in another. The first 78 (recipe/cases/field.yaml) were split
(work / heldout) by thread before the rules were written; the split is recomputed from each thread's URL."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from lanebook.recipe.casebase import LOOKALIKE, cases
from lanebook.verify.doctor import Diagnosis, diagnose, read_lines

__all__ = ["LOOKALIKE", "Report", "doctor_on", "log_text", "named_right", "post", "reports", "score", "split_of"]

FIELD = "field.yaml"  # the case base's first file: the reports the rules were built on (work) and held back from


@dataclass(frozen=True)
class Report:
    id: str
    url: str
    split: str
    cause: str
    phase: str
    lines: tuple[str, ...] = ()
    kernel: tuple[str, ...] = ()
    words: tuple[str, ...] = ()


def split_of(url: str) -> str:
    """work when the first byte of the thread URL's sha256 is even, heldout when odd: decided before any rule."""
    return "work" if hashlib.sha256(url.encode()).digest()[0] % 2 == 0 else "heldout"


def reports(split: str | None = None, *, every_file: bool = False) -> list[Report]:
    """The field reports (recipe/cases/field.yaml) of one half, or all; every_file: the whole case base."""
    found = [
        Report(c.id, c.url, split_of(c.url), c.cause, c.phase, c.lines, c.kernel, c.words)
        for c in cases()
        if every_file or c.file == FIELD
    ]
    return [r for r in found if split is None or r.split == split]


def log_text(report: Report) -> str:
    """The report's log and kernel lines only, as a saved log holds them ('' when it quotes none)."""
    return "\n".join(report.lines + report.kernel) + ("\n" if report.lines or report.kernel else "")


def post(report: Report) -> str:
    """The post as it reads: prose, then a table, then the fenced log lines and kernel lines."""
    prose = [w for w in report.words if not w.startswith("|")]
    table = [w for w in report.words if w.startswith("|")]
    parts = []
    if prose:
        parts.append("We hit this on our pair. " + " ".join(w.rstrip(".") + "." for w in prose))
    if table:
        columns = table[0].count("|") - 1
        parts.append("\n".join([table[0], "|" + "---|" * columns, *table[1:]]))
    if report.lines:
        parts.append("Log:\n```text\n" + "\n".join(report.lines) + "\n```")
    if report.kernel:
        parts.append("dmesg:\n```\n" + "\n".join(report.kernel) + "\n```")
    return "\n\n".join(parts) + "\n"


def doctor_on(report: Report, text: str | None = None, *, index=None) -> Diagnosis:
    """The doctor on the report's post (or TEXT), retrieval reading INDEX (None: the whole case base)."""
    return diagnose(read_lines(f"{report.id}.md", post(report) if text is None else text), cases=index)


def named_right(report: Report, found: Diagnosis) -> bool:
    """A cause is named right when it is the doctor's first finding; a look-alike when nothing is confirmed."""
    if report.cause == LOOKALIKE:
        return not found.confirmed
    return bool(found.findings) and found.findings[0].id == report.cause


def score(split: str) -> dict:
    """The doctor on one half: counts and the reports it missed (with what it said instead)."""
    rows = reports(split)
    causes = [r for r in rows if r.cause != LOOKALIKE]
    lookalikes = [r for r in rows if r.cause == LOOKALIKE]
    missed, right, confirmed_on_lookalikes = [], 0, 0
    for r in causes:
        found = doctor_on(r)
        if named_right(r, found):
            right += 1
        else:
            missed.append((r.id, r.cause, [(f.id, f.confidence) for f in found.findings][:3]))
    for r in lookalikes:
        found = doctor_on(r)
        if found.confirmed:
            confirmed_on_lookalikes += 1
            missed.append((r.id, r.cause, [(f.id, f.confidence) for f in found.findings][:3]))
    return {
        "split": split,
        "causes": len(causes),
        "right": right,
        "lookalikes": len(lookalikes),
        "confirmed_on_lookalikes": confirmed_on_lookalikes,
        "missed": missed,
    }
