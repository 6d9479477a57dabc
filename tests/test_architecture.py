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
    assert long == {}


def test_no_library_comment_cites_a_runbook_step_number():
    citing = [
        f"{path.relative_to(LIBRARY)}:{n}: {line.strip()}"
        for path in sorted(LIBRARY.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if STEP_NUMBER.search(line)
    ]
    assert citing == [], "\n".join(citing)


# The product treats the twin as a lane of certain properties (the lane file's `policy:`), never by its name: outside
# the twin package and the two entry points that start it (cli.py, demo.py), `.twin` only labels what was measured
# or shown as the twin's. Each use, by module and function, with how many it makes and what it labels.
TWIN_LABELS = {
    ("lane/params.py", "LaneParams.figures_label"): (1, "the lane's one label for what it measured or planned"),
    ("runs/execute.py", "start_record"): (1, "the run record's twin flag"),
    ("site/book.py", "_stage_fleets"): (1, "the fleet page's lanes"),
    ("site/book.py", "_stage_speed"): (1, "the speed page's lanes"),
    ("site/pages/fleet_page.py", "fleet_page"): (1, "a fleet lane's where badge"),
    ("site/pages/intro_page.py", "draw"): (1, "the topology drawing's colour"),
    ("site/pages/intro_page.py", "shown_lanes"): (2, "one real and one twin lane drawn"),
    ("site/pages/intro_page.py", "topology"): (2, "the topology's title and flag"),
    ("site/pages/lanes_page.py", "matrix_html"): (1, "the lane matrix's TWIN badge"),
    ("site/pages/speed_page.py", "LaneSpeed.reference"): (2, "a baseline drawn only beside figures of its kind"),
    ("site/pages/speed_page.py", "lane_section"): (4, "the speed section's badge and captions"),
    ("site/pages/speed_page.py", "plot_history"): (1, "the plot's title"),
    ("site/pages/speed_page.py", "seed_figures"): (1, "seed figures shown beside real baselines only"),
    ("site/pages/watch_page.py", "lane_section"): (1, "the served lane's twin sentence"),
    ("site/pages/watch_page.py", "plot_watch"): (1, "the plot's title"),
    ("runs/watch.py", "Watcher.speed_wave"): (1, "the watch's speed wave's twin flag"),
    ("speed/baseline.py", "baseline_json"): (1, "a baseline's documents agreeing with its provenance"),
    ("speed/command.py", "SpeedResult.document"): (1, "the speed JSON's twin flag"),
    ("speed/command.py", "print_result"): (1, "the terminal's TWIN label"),
    ("speed/command.py", "speed_command"): (1, "the figures measured on a twin lane"),
    ("speed/lanespeed.py", "save_step"): (1, "a saved baseline's source"),
    ("speed/lanespeed.py", "waves_steps"): (2, "the measured figures and the plot's title"),
    ("speed/provenance.py", "read_provenance"): (1, "the provenance's twin flag"),
    ("steps/runbook.py", "Runbook.__init__"): (1, "the TWIN RUN banner"),
    ("steps/runbook.py", "Runbook._emit"): (1, "the verdict's twin flag"),
    ("verify/canary.py", "proof_step"): (2, "the proof's figure and its label"),
    ("verify/probes.py", "measure_workloads"): (1, "the speed documents' twin flag"),
}
TWIN_ENTRY_POINTS = ("twin/", "cli.py", "demo.py")


def twin_uses() -> dict[tuple[str, str], int]:
    """Each product module's `.twin` reads, counted by enclosing function (dotted through classes)."""
    found: dict[tuple[str, str], int] = {}

    def walk(node: ast.AST, module: str, scope: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                walk(child, module, (*scope, child.name))
                continue
            if isinstance(child, ast.Attribute) and child.attr == "twin":
                key = (module, ".".join(scope) or "<module>")
                found[key] = found.get(key, 0) + 1
            walk(child, module, scope)

    for path in sorted(LIBRARY.rglob("*.py")):
        module = path.relative_to(LIBRARY).as_posix()
        if not module.startswith(TWIN_ENTRY_POINTS):
            walk(ast.parse(path.read_text()), module, ())
    return found


def test_no_product_module_decides_policy_on_the_twin_label():
    """A policy (confirm a change, watch a long probe) reads the lane's `policy:`; `.twin` only labels."""
    allowed = {key: count for key, (count, _labels) in TWIN_LABELS.items()}
    found = twin_uses()
    unlisted = {key: n for key, n in found.items() if n > allowed.get(key, 0)}
    assert unlisted == {}, "decide on the lane's policy, or list a labelling use in TWIN_LABELS"
    assert found == allowed, f"no longer read, drop from TWIN_LABELS: {set(allowed) - set(found)}"


# A library module's tests are tests/test_MODULE.py, MODULE its name or its path joined by "_" (test_twin_engine_core
# for twin/engine_core.py). These few are tested where they are used, in the file named.
TESTED_ELSEWHERE = {
    "nodes/ssh": "test_nodes.py",
    "nodes/scripts/fingerprint_probe": "test_checkout_copy.py",
    "nodes/scripts/weights_probe": "test_weights.py",
    "twin/fault_runs": "test_fault_matrix.py",
    "twin/plugin": "test_plugins.py",
    "twin/standins/__main__": "test_twin_nodes.py",
    "twin/tiny_model": "test_real_vllm.py",
    "twin/tree": "test_twin_scripts.py",
}


def test_no_two_library_modules_share_a_name():
    """A name says which module is meant: recipe/upgrade_plan, ops/checkout_upgrade, runs/upgrade_run, not three
    upgrade.py."""
    by_name: dict[str, list[str]] = {}
    for path in sorted(LIBRARY.rglob("*.py")):
        if path.stem not in ("__init__", "__main__"):
            by_name.setdefault(path.stem, []).append(path.relative_to(LIBRARY).as_posix())
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == {}


def test_every_library_module_has_its_test_file():
    tests = {p.name for p in (REPO / "tests").glob("test_*.py")}
    unpaired = {}
    for path in sorted(LIBRARY.rglob("*.py")):
        parts = path.relative_to(LIBRARY).with_suffix("").parts
        if parts[-1] == "__init__":
            continue
        names = {f"test_{parts[-1]}.py", f"test_{'_'.join(parts)}.py", f"test_{'_'.join(parts[1:])}.py"}
        if not names & tests:
            unpaired["/".join(parts)] = sorted(names)
    elsewhere = {module: test for module, test in TESTED_ELSEWHERE.items() if test in tests}
    assert {m: n for m, n in unpaired.items() if m not in elsewhere} == {}, "name the test file after its module"
    assert set(unpaired) == set(TESTED_ELSEWHERE), "paired now: drop from TESTED_ELSEWHERE"


MAX_ARCHITECTURE_WORDS = 1600


def test_the_map_stays_one_page():
    """A map, not an essay: detail belongs in module docstrings, docs/development.md and docs/decisions.md."""
    words = len(ARCHITECTURE.read_text().split())
    assert words < MAX_ARCHITECTURE_WORDS, f"ARCHITECTURE.md has {words} words"
