"""A recorded notebook as a book page: the same cells and stored outputs, shaped for a static site.

The page is a copy; the record is never changed. In the copy: the page's own heading comes first and the
notebook's `# ` headings become `## ` (one title per page); the machine-readable verdict output is left out
(the heading states the verdict); widget outputs are left out (a static page would need the widget
manager's JavaScript from the internet to draw them, and the progress they show is also in the printed
lines beside them); check marks become badges (lanebook.site.pages.markup); a path on the machine that ran it is
shown relative to the repository (or as outputs, ~, $TMPDIR: lanebook.base.paths.shown_paths), so no page shows
where the clone that built it lives.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from lanebook.base.paths import shown_paths
from lanebook.site.pages.markup import badge_marks
from lanebook.steps.runbook import VERDICT_MIME

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
MARKDOWN_MIME = "text/markdown"


def demote_titles(markdown: str) -> str:
    """`# Title` lines become `## Title`; lines inside fenced code (a shell comment) stay as they are."""
    lines, fenced = [], False
    for line in markdown.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        lines.append("#" + line if not fenced and line.startswith("# ") else line)
    return "\n".join(lines)


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else value


def _page_output(output: dict):
    """The output as the page shows it, or None when the page leaves it out."""
    data = output.get("data", {})
    if VERDICT_MIME in data or WIDGET_MIME in data:
        return None
    for mime, value in data.items():
        if mime.startswith("text/"):
            data[mime] = shown_paths(_text(value))
    if MARKDOWN_MIME in data:
        data[MARKDOWN_MIME] = badge_marks(data[MARKDOWN_MIME])
    if "text" in output:  # a stream
        output["text"] = shown_paths(_text(output["text"]))
    if "traceback" in output:
        output["traceback"] = [shown_paths(line) for line in output["traceback"]]
        output["evalue"] = shown_paths(output.get("evalue", ""))
    return output


def page_notebook(source: Path, heading: str) -> nbformat.NotebookNode:
    """The notebook at SOURCE as a page starting with the Markdown HEADING (which holds the page's `# ` title)."""
    nb = nbformat.read(source, as_version=4)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.source = shown_paths(cell.source)
        if cell.cell_type == "markdown":
            cell.source = badge_marks(demote_titles(cell.source))
        elif cell.cell_type == "code":
            cell.outputs = [o for o in (_page_output(o) for o in cell.get("outputs", [])) if o is not None]
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(heading))
    return nb


def notebook_title(source: Path) -> str:
    """The notebook's first `# ` heading (the runbook's title), or its file name."""
    nb = nbformat.read(source, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            match = re.search(r"^# (.+)$", cell.source, flags=re.M)
            if match:
                return match.group(1).strip()
    return source.stem
