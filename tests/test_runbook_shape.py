"""Runbooks read like the playbook: a step cell is a call or two into the library and `rb.expect(...)`; loops,
decisions and table building live in the tested library (issue 15, "Thin notebooks").

What is measured, on each runbook's py:percent pair (the notebook holds the same cells: test_runbook_pairs.py):

- code lines: the physical lines of the code cells that hold code (not blank, not only a comment), the papermill
  parameters cell left out (its shape is papermill's: test_runbook_pairs.py checks papermill reads it); a
  `with rb.step(TITLE, fix=TEXT):` header counts as one line however the formatter wraps its title and fix text
  (that is the step's prose, the playbook's heading and its what-to-do-next, not logic);
- a code line is inside control flow when it lies within an `if`, `for`, `while`, `try` or `match` statement (from
  its first line to its last, at any depth). `with` is not control flow: `with rb.step(...)` is the step API.
  Conditional expressions and comprehensions are expressions, not statements, and do not count.

Targets: at most 10% of a runbook's code lines inside control flow, no code cell over 12 code lines, and no code
line over 120 characters (ruff's line length; ruff leaves the runbooks' Markdown cells, whose table rows cannot be
wrapped, to this test). The
troubleshooting table follows the steps: the Markdown cell after the last step is the registry's
(`lanebook.recipe.pitfalls.troubleshooting_markdown`; tools/sync_troubleshooting.py writes it).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import jupytext
import pytest
from lanebook.base.paths import RUNBOOKS_DIR
from lanebook.recipe.pitfalls import TROUBLESHOOTING_HEADING, troubleshooting_markdown

MAX_CONTROL_FLOW = 0.10
MAX_CELL_LINES = 12
LINE_LENGTH = 120  # pyproject.toml's [tool.ruff] line-length
CONTROL_FLOW = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.Match) + (
    (ast.TryStar,) if hasattr(ast, "TryStar") else ()
)
SCRIPTS = sorted(RUNBOOKS_DIR.glob("*.py"))


@dataclass
class CellShape:
    lines: int  # code lines
    in_control_flow: int


def cell_shape(source: str) -> CellShape:
    """Code lines of one cell and how many of them lie inside control flow (the rule in the module docstring)."""
    code = {n for n, line in enumerate(source.splitlines(), 1) if line.strip() and not line.strip().startswith("#")}
    inside = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, CONTROL_FLOW):
            inside.update(range(node.lineno, node.end_lineno + 1))
        if isinstance(node, ast.With) and any(is_step(item.context_expr) for item in node.items):
            code -= set(range(node.lineno + 1, node.body[0].lineno))  # the header's wrapped title and fix text
    return CellShape(len(code), len(code & inside))


def is_step(expr: ast.expr) -> bool:
    """`rb.step(...)`: the step API's header."""
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "step"


def code_cells(script) -> list:
    return [
        c
        for c in jupytext.read(script).cells
        if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", [])
    ]


def figures() -> dict[str, tuple[int, int, int]]:
    """Every runbook: (code lines, lines inside control flow, its longest cell's code lines)."""
    found = {}
    for script in SCRIPTS:
        shapes = [cell_shape(c.source) for c in code_cells(script)]
        found[script.stem] = (
            sum(s.lines for s in shapes),
            sum(s.in_control_flow for s in shapes),
            max(s.lines for s in shapes),
        )
    return found


def report() -> str:
    rows = [f"{'runbook':10} {'lines':>5} {'in control flow':>16} {'longest cell':>12}"]
    rows += [
        f"{name:10} {lines:5} {inside:9} ({inside / lines:4.0%}) {longest:12}"
        for name, (lines, inside, longest) in figures().items()
    ]
    return "\n".join(rows)


def test_the_measure_follows_its_rule():
    source = (
        "with rb.step('1 x', fix='run `x`'):\n"
        "    found = [n for n in nodes if n]  # a comprehension is no control flow\n"
        "    rb.expect(bool(found), what='what', detail='yes' if found else 'no')\n"
        "\n"
        "# only a comment\n"
        "for node in nodes:\n"
        "    if node:\n"
        "        print(node)\n"
        "try:\n"
        "    pass\n"
        "except ValueError:\n"
        "    pass\n"
    )
    assert cell_shape(source) == CellShape(lines=10, in_control_flow=7)
    wrapped = (
        "with rb.step(\n"
        "    '1 x',\n"
        "    fix='the long what-to-do-next '\n"
        "    'the formatter wraps',\n"
        "):\n"
        "    rb.expect(\n"
        "        True, 'what', 'seen'\n"
        "    )\n"
    )
    assert cell_shape(wrapped) == CellShape(lines=4, in_control_flow=0)  # the header is one line, the call is not


def test_there_are_runbooks_to_measure():
    assert len(SCRIPTS) >= 10 and all(code_cells(s) for s in SCRIPTS)


def test_runbook_code_rarely_sits_inside_control_flow():
    over = [name for name, (lines, inside, _) in figures().items() if inside > MAX_CONTROL_FLOW * lines]
    assert not over, f"over {MAX_CONTROL_FLOW:.0%} of code lines inside control flow: {over}\n{report()}"


def test_no_code_line_is_over_the_line_length():
    long = [
        f"{script.stem}: {line[:60]}..."
        for script in SCRIPTS
        for cell in jupytext.read(script).cells
        if cell.cell_type == "code"
        for line in cell.source.splitlines()
        if len(line) > LINE_LENGTH
    ]
    assert long == []


def test_no_code_cell_is_long():
    over = [name for name, (_, _, longest) in figures().items() if longest > MAX_CELL_LINES]
    assert not over, f"a code cell over {MAX_CELL_LINES} code lines: {over}\n{report()}"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_troubleshooting_follows_the_last_step_and_is_the_registrys(script):
    cells = jupytext.read(script).cells
    sections = [
        i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.startswith(TROUBLESHOOTING_HEADING)
    ]
    assert len(sections) == 1, f"{script.name}: one troubleshooting section, found {len(sections)}"
    last_step = max(i for i, c in enumerate(cells) if c.cell_type == "code" and "rb.step(" in c.source)
    assert sections[0] > last_step, f"{script.name}: the troubleshooting section comes before a step"
    assert cells[sections[0]].source == troubleshooting_markdown(script.stem), (
        f"{script.name}: the table differs from the registry: run `.venv/bin/python tools/sync_troubleshooting.py`"
    )
