"""`lanebook book`: the jupyter-book 1 site — the recipe, the runbooks and the audit trail.

Pages are generated from the one source of each fact (lane files, the pitfall registry, the run
index) into a staging folder, then jupyter-book builds it offline from stored outputs (it never
executes a notebook). Audit pages are copies of the recorded notebooks with a heading that says
TWIN or REAL and the verdict; the records themselves are never touched.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import nbformat

from .audit import VERDICT_STYLES, read_runs, resolve_output, tally, verdict_label
from .errors import LanebookError
from .params import lane_names, load_lane
from .paths import BOOK_DIR, RUNBOOKS_DIR
from .plugins import registry
from .redact import redact
from .execute import RUNBOOKS

def _md_table(header: list[str], rows: list[list[object]]) -> str:
    def cell(v: object) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _wide(table: str) -> str:
    """Mark a wide generated table (styled by BOOK_CSS)."""
    return "```{container} lanebook-wide\n" + table + "```\n"


# Staged as _static/lanebook.css (jupyter-book links every CSS file under _static).
BOOK_CSS = """\
/* Wide generated tables (lane matrix, pitfalls, audit index) sit on pages without a contents sidebar:
   let the article take the width the theme keeps for that sidebar, and use a smaller type. */
@media (min-width: 1200px) {
  .bd-content:not(:has(.bd-sidebar-secondary)) .bd-article-container:has(div.lanebook-wide) { max-width: 100%; }
}
div.lanebook-wide table { font-size: 0.85rem; }
div.lanebook-wide table code { font-size: 0.8rem; }
div.lanebook-wide table :is(th, td) { padding: 0.3rem 0.4rem; }
/* Verdicts in the audit trail: a dry run observed nothing, so it never looks like a pass. */
.lanebook-verdict { font-weight: 600; white-space: nowrap; }
""" + "".join(f".lanebook-verdict-{verdict} {{ color: {colour}; }}\n" for verdict, colour in
              {"pass": "#1a7f37", "fail": "#cf222e", "error": "#8250df", "dry-run": "#0969da"}.items())

# The verdict output is for tools (lanebook.execute and tests read it); the page heading states the verdict.
VERDICT_MIME = "application/vnd.lanebook.verdict+json"


def lanes_page() -> str:
    lanes = [load_lane(n) for n in lane_names()]
    keys: list[str] = []
    for lane in lanes:
        keys += [k for k in lane.env if k not in keys]
    rows = [[f"`{k}`"] + [lane.env.get(k, "—") for lane in lanes] for k in keys]
    rows.append(["speculative schedule"] + [lane.speculative.schedule_json() or "fixed K" for lane in lanes])
    rows.append(["checkout"] + [f"`{lane.checkout}`" for lane in lanes])
    rows.append(["launcher PROJECT_NAME"] + [lane.launcher.env["PROJECT_NAME"] for lane in lanes])
    rows.append(["rollback to"] + [lane.rollback or "—" for lane in lanes])
    rows.append(["source"] + [lane.source for lane in lanes])
    chain = " → ".join(_rollback_chain("anemll-0731")) if "anemll-0731" in lane_names() else ""
    return (
        "# Lane matrix\n\nEvery value comes from the lane files under `params/` (the same files that render the env\n"
        "file, patch the compose file, drive the twin and set the gates). A variant is a copy with one line changed.\n\n"
        + (f"**Rollback chain:** {chain}. Keep the rollback lane boring: do not delete it because a canary passed.\n\n" if chain else "")
        + _wide(_md_table(["key"] + [f"**{lane.name}**" + (" (**TWIN**)" if lane.twin else "") for lane in lanes], rows))
        + "\n" + "\n".join(f"- **{lane.name}**: {lane.description}" for lane in lanes) + "\n"
    )


def _rollback_chain(start: str) -> list[str]:
    chain, name = [], start
    while name and name not in chain:
        chain.append(name)
        name = load_lane(name).rollback
    return chain


def pitfalls_page() -> str:
    from .pitfalls import PITFALLS

    rows = [[p.id, p.title, p.severity, p.where, p.fix] for p in PITFALLS]
    return ("# Pitfalls\n\nThe recipe's hard-won lessons, one registry feeding `lanebook lint`, the runbooks'\n"
            "troubleshooting tables, the twin and this page.\n\n" + _wide(_md_table(["id", "pitfall", "severity", "checked in", "what to do"], rows)))


def verdict_html(verdict: str) -> str:
    """The verdict with its mark, in its own colour (classes styled by BOOK_CSS)."""
    css = verdict if verdict in VERDICT_STYLES else "unknown"
    return f'<span class="lanebook-verdict lanebook-verdict-{css}">{verdict_label(verdict)}</span>'


def audit_page(entries: list[tuple[dict, str]]) -> str:
    if not entries:
        return "# Audit trail\n\nNo runs recorded yet. `lanebook run RUNBOOK --lane LANE` records one.\n"
    rows = [[r["started_at"], "**TWIN**" if r["twin"] else "real", r["lane"], r["runbook"] + (" (dry run)" if r.get("dry_run") else ""),
             verdict_html(r["verdict"]), r.get("failed_step") or "", f"[{r['run_id']}]({doc}.ipynb)", r["sha256"][:12]]
            for r, doc in entries]
    return ("# Audit trail\n\nEvery headless run leaves its executed notebook; this is the index (`outputs/runs.jsonl`).\n"
            "Runs marked **TWIN** ran on the digital twin: their figures are twin figures, not a real lane's.\n"
            "A **dry-run** verdict means the commands were recorded, not sent: nothing on the lane was observed, so it\n"
            "is never a pass. `lanebook audit verify` re-hashes every record.\n\n"
            f"**{tally([r for r, _ in entries])}.**\n\n"
            + _wide(_md_table(["started (UTC)", "where", "lane", "runbook", "verdict", "failed step", "notebook", "sha256"], rows)))


def _audit_copy(record: dict, src: Path, dst: Path) -> None:
    nb = nbformat.read(src, as_version=4)
    for cell in nb.cells:  # one H1 per page: the record's heading below
        if cell.cell_type == "markdown":
            cell.source = re.sub(r"^# ", "## ", cell.source, flags=re.M)
        elif cell.cell_type == "code":  # the page copy only: the record keeps its verdict output
            cell.outputs = [o for o in cell.get("outputs", []) if VERDICT_MIME not in o.get("data", {})]
    where = "TWIN" if record["twin"] else "REAL LANE"
    dry = " [DRY RUN]" if record.get("dry_run") else ""  # a dry run opened no connection: not a lane's result
    observed_nothing = " (nothing on the lane was observed: not a pass)" if record["verdict"] == "dry-run" else ""
    heading = (f"# [{where}]{dry} {record['runbook']} · {record['lane']} · {record['started_at']}\n\n"
               f"Verdict {verdict_html(record['verdict'])}{observed_nothing}"
               + (f", failed step: {record['failed_step']}" if record.get("failed_step") else "")
               + f". Record `{record['output']}` (sha256 `{record['sha256'][:16]}…`).")
    if record["twin"]:
        heading += "\n\nThis run was on the digital twin: every figure on this page is a twin figure."
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(heading))
    nbformat.write(nb, dst)


def _stage(stage: Path) -> None:
    shutil.copy(BOOK_DIR / "_config.yml", stage / "_config.yml")
    shutil.copy(BOOK_DIR / "intro.md", stage / "intro.md")
    (stage / "_static").mkdir()
    (stage / "_static" / "lanebook.css").write_text(BOOK_CSS)
    (stage / "lanes.md").write_text(lanes_page())
    (stage / "pitfalls.md").write_text(pitfalls_page())
    (stage / "runbooks").mkdir()
    runbook_docs = []
    for name in RUNBOOKS:
        src = RUNBOOKS_DIR / f"{name}.ipynb"
        if src.exists():
            shutil.copy(src, stage / "runbooks" / src.name)
            runbook_docs.append(f"runbooks/{name}")
    (stage / "audit").mkdir()
    entries = []
    for record in read_runs():
        src = resolve_output(record)
        if src.exists() and src.stat().st_size:
            doc = f"audit/{record['lane']}-{src.stem}"
            _audit_copy(record, src, stage / f"{doc}.ipynb")
            entries.append((record, doc))
    (stage / "audit.md").write_text(audit_page(entries))
    plugin_pages = registry().book_pages
    for name, render in plugin_pages.items():
        (stage / f"{name}.md").write_text(render())
    toc = ["format: jb-book", "root: intro", "parts:",
           "  - caption: Recipe", "    chapters:", "      - file: lanes", "      - file: pitfalls"]
    if runbook_docs:
        toc += ["  - caption: Runbooks", "    chapters:"] + [f"      - file: {d}" for d in runbook_docs]
    if plugin_pages:
        toc += ["  - caption: Digital twin", "    chapters:"] + [f"      - file: {name}" for name in plugin_pages]
    toc += ["  - caption: Audit trail", "    chapters:", "      - file: audit"]
    if entries:
        toc += ["        sections:"] + [f"          - file: {d}" for _, d in entries]
    (stage / "_toc.yml").write_text("\n".join(toc) + "\n")


def build_book(out: Optional[Path] = None) -> Path:
    """Build the site into OUT/_build/html (default book/_build/html); returns the path of its index.html."""
    out = Path(out or BOOK_DIR).resolve()  # jupyter-book writes OUT/_build/html
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    with tempfile.TemporaryDirectory(prefix="lanebook-book-") as tmp:
        stage = Path(tmp)
        _stage(stage)
        _refuse_secrets(stage)
        proc = subprocess.run([str(jupyter_book), "build", str(stage), "--path-output", str(out)],
                              capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise LanebookError(f"jupyter-book build failed:\n{tail}")
    return out / "_build" / "html" / "index.html"


def _refuse_secrets(stage: Path) -> None:
    """Nothing is published when a page source holds what redaction would hide: an HF token, API key,
    bearer token, private key or password must never reach a published page."""
    leaked = [p.relative_to(stage) for p in sorted(stage.rglob("*")) if p.suffix in (".md", ".ipynb", ".yml")
              and redact(p.read_text(errors="ignore")) != p.read_text(errors="ignore")]
    if leaked:
        raise LanebookError(f"refusing to publish: {', '.join(map(str, leaked[:3]))} looks like it holds a secret")
