"""The recipe chapter: one page per runbook, showing its latest rehearsal on the twin.

A rehearsed runbook's page is the executed notebook of its latest twin run that was not a dry run, its stored
outputs as they were recorded (never executed again), under a heading that says it is a twin rehearsal and
gives that run's verdict table: every check of every step, as the run emitted it. A runbook never rehearsed
shows its notebook without outputs and says so. Paths of the machine that ran it are shown relative to the
repository (lanebook.base.paths.shown_paths). Either way the notebook carries its troubleshooting table (the
registry's, a Markdown cell after its last step), so the page shows it without a run.
"""

from __future__ import annotations

from typing import Optional

from lanebook.base.paths import shown_paths
from lanebook.site.pages.markup import md_table, outcome_badge, verdict_badge, wide
from lanebook.site.pages.runs_page import PublishedRun
from lanebook.site.pages.trail_page import link


def verdict_table(emitted: Optional[dict]) -> str:
    """The run's checks (step, expected result, outcome, what was seen) from the verdict it emitted."""
    if not emitted or not emitted.get("checks"):
        return "The run emitted no checks (it stopped before its first step).\n"
    rows = [
        [c["step"], shown_paths(c["what"]), outcome_badge(c["outcome"]), shown_paths(c.get("detail") or "")]
        for c in emitted["checks"]
    ]
    return wide(md_table(["step", "expected result", "outcome", "seen"], rows))


def rehearsal_heading(title: str, run: PublishedRun, emitted: Optional[dict]) -> str:
    r = run.record
    doc = f"recipe/{r['runbook']}"
    failed = f" It stopped at step **{r['failed_step']}**." if r.get("failed_step") else ""
    return (
        f"# {title} — twin rehearsal\n\n"
        "```{admonition} Twin rehearsal\n:class: warning\n"
        f"This is the `{r['runbook']}` runbook as it last ran on the digital twin (lane `{r['lane']}`, "
        f"{r['started_at']}, run {link(run, doc)}): its stored outputs, not executed again for this page. Every "
        "figure on it is a twin figure, never a real lane's. On a real lane: "
        f"`lanebook run {r['runbook']} --lane LANE --dry-run` shows the commands first.\n```\n\n"
        f"**Verdict of this run:** {verdict_badge(r['verdict'])}.{failed}\n\n"
        f"## Checks of this run\n\n{verdict_table(emitted)}\n"
        "The notebook follows, with the outputs the run recorded.\n"
    )


def unrehearsed_heading(title: str, runbook: str) -> str:
    return (
        f"# {title} — not rehearsed yet\n\n"
        "```{admonition} Not rehearsed yet\n:class: note\n"
        f"No twin run of `{runbook}` is recorded, so this page shows the notebook without outputs. "
        f"`lanebook run {runbook} --lane twin` records one; the next build of the book shows it here.\n```\n"
    )
