"""`lanebook book`: the jupyter-book 1 site — the recipe, the runbooks' rehearsals and the audit trail.

Pages are generated from the one source of each fact (lane files, the pitfall registry, the run index, the stored
baselines; lanebook.site.pages, a module per page, and plugins' pages) into a staging folder, then built offline
from stored outputs: no notebook is executed, and recorded notebooks are copied, never touched. Every page names
the write-ups it cites by title and links each pitfall, symptom and fact id to its row (lanebook.site.pages.links).
Strict builds (tests, `--strict`) fail on any Sphinx warning and on what lanebook.site.bookcheck finds; other
builds return those as warnings.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import nbformat

from lanebook.base.errors import LanebookError
from lanebook.base.paths import BOOK_DIR, RUNBOOKS_DIR
from lanebook.base.redact import redact
from lanebook.lane.params import lane_names, load_lane
from lanebook.lane.plugins import registry
from lanebook.recipe.pitfalls import PITFALLS
from lanebook.recipe.upgrade_plan import recorded_plans
from lanebook.runs.audit import read_runs
from lanebook.runs.execute import RUNBOOKS, read_verdict
from lanebook.runs.watch import incidents, watch_dir
from lanebook.site.bookcheck import check_site, text_problems
from lanebook.site.pages import (
    fleet_page,
    intro_page,
    lanes_page,
    pitfalls_page,
    recipe_page,
    speed_page,
    symptoms_page,
    trail_page,
    upgrades_page,
    watch_page,
)
from lanebook.site.pages.links import defined_anchors, link_text, run_links
from lanebook.site.pages.notebook import notebook_title, page_notebook
from lanebook.site.pages.runs_page import PublishedRun, latest_rehearsals, published_runs
from lanebook.site.pages.sources_page import sources_page
from lanebook.speed.baseline import stored_baseline

# Staged book sources copied as they are: the configuration and the site's own style sheet.
STATIC_SOURCES = ("_config.yml", "_static/lanebook.css")


def _runbook_sources() -> dict[str, Path]:
    return {name: RUNBOOKS_DIR / f"{name}.ipynb" for name in RUNBOOKS if (RUNBOOKS_DIR / f"{name}.ipynb").exists()}


def _stage_recipe(stage: Path, runs: list[PublishedRun]) -> list[str]:
    """recipe/NAME.ipynb per runbook: its latest twin rehearsal, or the bare notebook when it has none."""
    (stage / "recipe").mkdir()
    rehearsals = latest_rehearsals(runs)
    docs = []
    for name, source in _runbook_sources().items():
        title = notebook_title(source)
        run = rehearsals.get(name)
        if run is not None:
            nb = page_notebook(run.path, recipe_page.rehearsal_heading(title, run, read_verdict(run.path)))
        else:
            nb = page_notebook(source, recipe_page.unrehearsed_heading(title, name))
        nbformat.write(nb, stage / "recipe" / f"{name}.ipynb")
        docs.append(f"recipe/{name}")
    return docs


def _stage_trail(stage: Path, runs: list[PublishedRun]) -> None:
    (stage / "audit").mkdir()
    for run in runs:
        nb = page_notebook(run.path, trail_page.run_heading(run))
        # Reached from the index, not from the sidebar: a sidebar of every run would be drawn again on every
        # page, which makes the build grow with the square of the runs.
        nb.metadata["orphan"] = True
        nbformat.write(nb, stage / f"{run.doc}.ipynb")
    (stage / "audit.md").write_text(trail_page.audit_index(runs))


def _stage_speed(stage: Path, runs: list[PublishedRun], twin_page: bool) -> None:
    measured = speed_page.speed_runs(runs)
    entries = []
    for name in lane_names():
        params = load_lane(name)
        entries.append(
            speed_page.LaneSpeed(
                name, params.twin, [r for r in measured if r.record["lane"] == name], stored_baseline(name)
            )
        )
    text, pictures = speed_page.speed_page(entries, twin_page=twin_page)
    (stage / "speed.md").write_text(text)
    for file, png in pictures.items():
        (stage / file).write_bytes(png)


def _stage_upgrades(stage: Path) -> None:
    """upgrades.md, the index of recorded upgrade plans, and a page per plan under upgrades/."""
    (stage / "upgrades").mkdir()
    published = []
    for path, plan in recorded_plans():
        entry = upgrades_page.PublishedPlan(plan, upgrades_page.plan_doc(plan.lane, path.stem))
        (stage / f"{entry.doc}.md").write_text(upgrades_page.upgrade_page(plan))
        published.append(entry)
    (stage / "upgrades.md").write_text(upgrades_page.upgrades_index(published))


def _stage_fleets(stage: Path, runs: list[PublishedRun]) -> None:
    """fleets.md, the index of fleet files, and a page per fleet under fleets/: each lane's latest promotion (linked to
    the page of its last published run) and the fleet's runs."""
    from lanebook.lane.fleet_file import fleet_names, load_fleet
    from lanebook.runs.fleet_dag import LaneOutcome, fleet_status

    (stage / "fleets").mkdir()
    links = {run.record["promotion_id"]: run.doc for run in runs if run.record.get("promotion_id")}  # its last run
    published = []
    for name in fleet_names():
        params, status = load_fleet(name), fleet_status(name)
        entry = fleet_page.PublishedFleet(
            params,
            [LaneOutcome(**lane) for lane in status["lanes"]],
            {lane: load_lane(lane).twin for lane in params.lanes},
            status["runs"],
        )
        (stage / f"{entry.doc}.md").write_text(fleet_page.fleet_page(entry, links))
        published.append(entry)
    (stage / "fleets.md").write_text(fleet_page.fleets_index(published))


def _json_lines(path: Path) -> list[dict]:
    """The objects of a JSON-lines file; a line that is not one (cut short by a crash) is left out."""
    found = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def _stage_watch(stage: Path, runs: list[PublishedRun]) -> None:
    """watch.md: what the watch saw of each lane with a folder under outputs/watch/, and which lanes it never
    watched (lanebook.site.pages.watch_page); its plots beside it."""
    watched, unwatched = [], []
    for name in lane_names():
        folder = watch_dir(name)
        if not folder.is_dir():
            unwatched.append(name)
            continue
        try:
            state = json.loads((folder / "state.json").read_text())
        except (OSError, ValueError):
            state = {}
        watched.append(
            watch_page.WatchedLane(
                name,
                load_lane(name).figures_label,
                probes=_json_lines(folder / "probes.jsonl"),
                incidents=incidents(name),
                speed=_json_lines(folder / "speed.jsonl"),
                link=_json_lines(folder / "link.jsonl"),
                pages=_json_lines(folder / "pages.jsonl"),
                state=state if isinstance(state, dict) else {},
            )
        )
    text, pictures = watch_page.watch_page(watched, unwatched, {run.run_id: run.doc for run in runs})
    (stage / f"{watch_page.DOC}.md").write_text(text)
    for file, png in pictures.items():
        (stage / file).write_bytes(png)


def _markdown_parts(nb: nbformat.NotebookNode) -> list[tuple[object, str]]:
    """(holder, key) of each Markdown text of a staged notebook: its Markdown cells and Markdown outputs."""
    parts: list[tuple[object, str]] = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            parts.append((cell, "source"))
        for output in cell.get("outputs", []):
            if "text/markdown" in output.get("data", {}):
                parts.append((output["data"], "text/markdown"))
    return parts


def _link_pages(stage: Path, runs: list[PublishedRun]) -> None:
    """Every staged page with the write-ups named and linked, each defined id linked to its row, and each link to a
    nested run's record (rollback's gates) made a link to that run's page."""
    run_docs = {Path(run.record["output"]).with_suffix("").as_posix(): run.doc for run in runs}
    markdown = {p.relative_to(stage).with_suffix("").as_posix(): p for p in sorted(stage.rglob("*.md"))}
    notebooks = {
        p.relative_to(stage).with_suffix("").as_posix(): (p, nbformat.read(p, as_version=4))
        for p in sorted(stage.rglob("*.ipynb"))
    }
    texts = {doc: path.read_text() for doc, path in markdown.items()}
    texts.update({doc: "\n".join(h[k] for h, k in _markdown_parts(nb)) for doc, (_, nb) in notebooks.items()})
    anchors = defined_anchors(texts)
    for doc, path in markdown.items():
        path.write_text(link_text(texts[doc], doc, anchors))
    for doc, (path, nb) in notebooks.items():
        for holder, key in _markdown_parts(nb):
            holder[key] = link_text(run_links(holder[key], doc, run_docs), doc, anchors)
        nbformat.write(nb, path)


def stage_book(stage: Path) -> None:
    """Every page source of the book into STAGE (an empty folder)."""
    for name in STATIC_SOURCES:
        (stage / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(BOOK_DIR / name, stage / name)
    all_lanes = [load_lane(n) for n in lane_names()]
    text, picture = intro_page.intro_page((BOOK_DIR / "intro.md").read_text(), all_lanes)
    (stage / "index.md").write_text(text)
    (stage / intro_page.PICTURE).write_bytes(picture)
    reference = intro_page.shown_lanes(all_lanes)[0].name
    (stage / "lanes.md").write_text(lanes_page.lanes_page(all_lanes, reference))
    (stage / "sources.md").write_text(sources_page(all_lanes))
    runs = published_runs(read_runs())
    recipe_docs = _stage_recipe(stage, runs)
    sources = {
        name: [c.source for c in nbformat.read(path, as_version=4).cells] for name, path in _runbook_sources().items()
    }
    steps = pitfalls_page.pitfall_steps(sources, [p.id for p in PITFALLS])
    (stage / "pitfalls.md").write_text(pitfalls_page.pitfalls_page(steps, set(_runbook_sources())))
    (stage / "symptoms.md").write_text(symptoms_page.symptoms_page(set(_runbook_sources())))
    plugin_pages = registry().book_pages
    for name, render in plugin_pages.items():
        (stage / f"{name}.md").write_text(render())
    _stage_speed(stage, runs, twin_page="twin" in plugin_pages)
    _stage_trail(stage, runs)
    _stage_upgrades(stage)
    _stage_fleets(stage, runs)
    _stage_watch(stage, runs)
    toc = ["format: jb-book", "root: index", "parts:", "  - caption: Recipe", "    chapters:"] + [
        f"      - file: {d}" for d in recipe_docs
    ]
    toc += [
        "  - caption: Reference",
        "    chapters:",
        "      - file: lanes",
        "      - file: pitfalls",
        "      - file: symptoms",
        "      - file: speed",
        "      - file: sources",
    ]
    if plugin_pages:
        toc += ["  - caption: Digital twin", "    chapters:"] + [f"      - file: {name}" for name in plugin_pages]
    toc += [
        "  - caption: Audit trail",
        "    chapters:",
        "      - file: audit",
        f"      - file: {watch_page.DOC}",
        "      - file: upgrades",
        "      - file: fleets",
    ]
    (stage / "_toc.yml").write_text("\n".join(toc) + "\n")
    _link_pages(stage, runs)


@dataclass(frozen=True)
class BuiltSite:
    index: Path  # OUT/_build/html/index.html
    warnings: list[str]  # a build that was not strict: Sphinx's warnings and the pages' text problems


def build_book(out: Optional[Path] = None, strict: bool = False) -> BuiltSite:
    """Build the site into OUT/_build/html (default book/_build/html).

    strict: Sphinx warnings fail the build, and so does a broken internal link, an external load or a page's text
    problem (each named with its page and line); otherwise they come back with the site, for the caller to show."""
    out = Path(out or BOOK_DIR).resolve()  # jupyter-book writes OUT/_build/html
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    html = out / "_build" / "html"
    with tempfile.TemporaryDirectory(prefix="lanebook-book-") as tmp:
        stage = Path(tmp)
        stage_book(stage)
        _refuse_secrets(stage)
        if html.exists():
            shutil.rmtree(html)  # pages of runs no longer recorded must not linger
        command = [str(jupyter_book), "build", str(stage), "--path-output", str(out), "--all"]
        proc = subprocess.run(command + (["-W", "--keep-going"] if strict else []), capture_output=True, text=True)
    if proc.returncode != 0:
        raise LanebookError("jupyter-book build failed:\n" + build_problems(proc.stdout + proc.stderr))
    if strict:
        problems = check_site(html) + text_problems(html)
        if problems:
            more = f"\n  ... and {len(problems) - 12} more" if len(problems) > 12 else ""
            raise LanebookError(
                f"the built site has {len(problems)} problem(s):\n  " + "\n  ".join(problems[:12]) + more
            )
    return BuiltSite(html / "index.html", sphinx_problems(proc.stdout + proc.stderr) + text_problems(html))


def show_warnings(site: BuiltSite, limit: int = 12) -> None:
    """On stderr: how many warnings a build that was not strict had, and the first of them."""
    if site.warnings:
        print(f"book: {len(site.warnings)} warning(s) (`lanebook book --strict` fails on them):", file=sys.stderr)
        for line in site.warnings[:limit]:
            print(f"  {line}", file=sys.stderr)


def sphinx_problems(log: str) -> list[str]:
    """Sphinx's warnings and errors in a build log, their staged paths shortened to the page."""
    return [
        re.sub(r"^\S*lanebook-book-[^/]+/", "", line)
        for line in log.strip().splitlines()
        if re.search(r"\b(WARNING|ERROR|CRITICAL)\b|Error:|Exception:", line)
    ]


def build_problems(log: str, limit: int = 12) -> str:
    """What made a build fail: Sphinx's warnings and errors, else the log's last lines."""
    found = sphinx_problems(log)
    return "\n".join(found[:limit] if found else log.strip().splitlines()[-limit:])


def _refuse_secrets(stage: Path) -> None:
    """Nothing is published when a page source holds what redaction would hide: an HF token, API key,
    bearer token, private key or password must never reach a published page."""
    leaked = [
        p.relative_to(stage)
        for p in sorted(stage.rglob("*"))
        if p.suffix in (".md", ".ipynb", ".yml")
        and redact(p.read_text(errors="ignore")) != p.read_text(errors="ignore")
    ]
    if leaked:
        raise LanebookError(f"refusing to publish: {', '.join(map(str, leaked[:3]))} looks like it holds a secret")
