"""ARCHITECTURE.md is the map a newcomer reads first: it names every layer folder, the documents the code cites
resolve inside the repository, and its glossary defines the id families the code cites."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from test_layers import LAYERS

REPO = Path(__file__).resolve().parents[1]
ARCHITECTURE = REPO / "ARCHITECTURE.md"
SOURCES = [p for folder in ("lib", "tests", "runbooks", "benchmarks", "tools") for p in (REPO / folder).rglob("*.py")]
SOURCES += list((REPO / "params").rglob("*.yaml")) + [REPO / "README.md", REPO / "Makefile"]
SOURCES = [p for p in SOURCES if p != Path(__file__).resolve()]
# Documents outside the repository (the project's brief and field notes live beside it, not in it).
OUTSIDE = re.compile(r"SPEC (section|§)|SPEC\.md|NOTES\.md|shared/seeds/README")


def headings() -> set[str]:
    return {line.lstrip("#").strip() for line in ARCHITECTURE.read_text().splitlines() if line.startswith("#")}


def test_it_names_every_layer_folder_in_its_rooms_table():
    rooms = re.findall(r"^\| `(\w+)/` \|", ARCHITECTURE.read_text(), re.M)
    assert rooms == LAYERS


def test_no_comment_cites_a_document_outside_the_repository():
    found = [
        f"{p.relative_to(REPO)}:{n}: {line.strip()}"
        for p in SOURCES
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert found == [], "\n".join(found)


def test_every_citation_of_a_section_names_a_heading_it_has():
    cited = {m.group(1) for p in SOURCES for m in re.finditer(r'ARCHITECTURE\.md, "([^"]+)"', p.read_text())}
    assert cited, "nothing cites ARCHITECTURE.md's sections (the speed figures do)"
    assert cited <= headings(), cited - headings()


def test_the_glossary_defines_every_id_family_the_code_cites():
    text = ARCHITECTURE.read_text()
    glossary = text[text.index("## Glossary") :]
    cited = set()
    for p in SOURCES:
        body = p.read_text()
        cited |= {f"seed {n}" for n in re.findall(r"\bseed (\d{3})\b", body)}
        cited |= {f"{letter}01-" for letter in re.findall(r"\b([PST])\d{2}\b", body)}
    missing = sorted(c for c in cited if f"| {c}" not in glossary)
    assert missing == []


MAX_DOCSTRING_LINES = 12
# Modules whose docstrings their owners are shortening next (issue 35, "Short docs"); the lead empties this list.
DOCSTRINGS_BEING_SHORTENED = {
    "ops/checkout_env.py",
    "ops/warmup.py",
    "recipe/lint.py",
    "recipe/render.py",
    "runs/audit.py",
    "runs/promote.py",
    "verify/diagnose.py",
    "verify/doctor.py",
    "verify/doctor_gather.py",
    "verify/hermes.py",
}
# Modules whose comments still cite runbook step numbers, being rewritten to name the step next (issue 35).
STEP_NUMBERS_BEING_REMOVED = {
    "ops/checkout_copy.py",
    "ops/checkout_env.py",
    "ops/rollback.py",
    "ops/warmup.py",
    "ops/weights.py",
    "speed/lanespeed.py",
    "verify/canary.py",
    "verify/probes.py",
}
# "Step 1", "steps 3": a runbook's step by number, which breaks when steps move. The pitfall page's parser names the
# notebook headings it reads ("Step 1 …"), which is a heading's form, not a citation.
STEP_NUMBER = re.compile(r"\b[Ss]teps? \d+\b(?! …)")
LIBRARY = REPO / "lib" / "lanebook"


def module_docstring_lines() -> dict[str, int]:
    """Each library module's docstring length in lines of text (its quotes not counted)."""
    found = {}
    for path in sorted(LIBRARY.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        found[path.relative_to(LIBRARY).as_posix()] = len(doc.splitlines()) if doc else 0
    return found


def test_no_module_docstring_runs_over_twelve_lines():
    long = {m: n for m, n in module_docstring_lines().items() if n > MAX_DOCSTRING_LINES}
    assert {m: n for m, n in long.items() if m not in DOCSTRINGS_BEING_SHORTENED} == {}
    assert DOCSTRINGS_BEING_SHORTENED <= set(long), (
        f"short now, drop from the list: {DOCSTRINGS_BEING_SHORTENED - set(long)}"
    )


def test_no_library_comment_cites_a_runbook_step_number():
    citing = {
        path.relative_to(LIBRARY).as_posix() for path in LIBRARY.rglob("*.py") if STEP_NUMBER.search(path.read_text())
    }
    assert citing - STEP_NUMBERS_BEING_REMOVED == set()
    assert STEP_NUMBERS_BEING_REMOVED <= citing, (
        f"none cited now, drop from the list: {STEP_NUMBERS_BEING_REMOVED - citing}"
    )
