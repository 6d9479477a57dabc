"""The audit trail: the index of every recorded run, grouped by promotion, and each run's page heading.

Each run's page is its executed notebook (lanebook.site.pages.notebook) under a heading that says where it ran
(TWIN or REAL LANE), whether it was a dry run, its verdict, and the record it is. The index links every run
to its page; its verdicts are badges in their colours, and a dry run is never shown as a pass.
"""

from __future__ import annotations

import posixpath

from lanebook.runs.audit import tally
from lanebook.site.pages.markup import badge, dry_badge, md_table, verdict_badge, where_badge, wide
from lanebook.site.pages.runs_page import PublishedRun


def link(run: PublishedRun, from_doc: str = "audit") -> str:
    """A Markdown link to the run's page, relative to the page FROM_DOC (without suffix)."""
    target = posixpath.relpath(run.doc, posixpath.dirname(from_doc) or ".")
    return f"[{run.run_id}]({target}.ipynb)"


def changed_badge(run: PublishedRun) -> str:
    return "" if run.intact else " " + badge("changed since recorded", "error")


def _row(run: PublishedRun) -> list[str]:
    r = run.record
    where = where_badge(r["twin"]) + (" " + dry_badge() if r.get("dry_run") else "")
    return [
        r["started_at"],
        where,
        r["lane"],
        r["runbook"],
        verdict_badge(r["verdict"]),
        r.get("failed_step") or "",
        link(run) + changed_badge(run),
        f"`{r['sha256'][:12]}`",
    ]


HEADER = ["started (UTC)", "where", "lane", "runbook", "verdict", "failed step", "notebook", "sha256"]


def promotion_groups(runs: list[PublishedRun]) -> tuple[list[tuple[str, list[PublishedRun]]], list[PublishedRun]]:
    """([(promotion id, its runs in order)], newest promotion first; runs outside any promotion, newest first)."""
    groups: dict[str, list[PublishedRun]] = {}
    alone = []
    for run in runs:
        pid = run.record.get("promotion_id")
        if pid:
            groups.setdefault(pid, []).append(run)
        else:
            alone.append(run)
    ordered = sorted(groups.items(), key=lambda item: item[1][0].record["started_at"], reverse=True)
    return ordered, sorted(alone, key=lambda run: run.record["started_at"], reverse=True)


def promotion_outcome(runs: list[PublishedRun]) -> str:
    """What the promotion came to, as its runs say: the latest run of each runbook decides."""
    latest = {run.record["runbook"]: run.record for run in runs}
    failed = [r for r in latest.values() if r["verdict"] != "pass"]
    if not failed:
        return f"every runbook passed ({', '.join(latest)})"
    first = failed[0]
    return f"stopped at {first['runbook']}: {first['verdict']}" + (
        f" at step {first['failed_step']}" if first.get("failed_step") else ""
    )


def audit_index(runs: list[PublishedRun]) -> str:
    if not runs:
        return "# Audit trail\n\nNo runs recorded yet. `lanebook run RUNBOOK --lane LANE` records one.\n"
    groups, alone = promotion_groups(runs)
    parts = [
        "# Audit trail\n\nEvery headless run leaves its executed notebook; this is the index (`outputs/runs.jsonl`),\n"
        "each run linking to its notebook. Runs marked " + badge("twin", "twin") + " ran on the digital twin: their "
        "figures are twin figures, not a real lane's. A " + verdict_badge("dry-run") + " verdict means the commands "
        "were recorded, not sent: nothing on the lane was observed, so it is never a pass. `lanebook audit verify` "
        "re-hashes every record.\n",
        f"**{tally([run.record for run in runs])}.**\n",
    ]
    if any(not run.intact for run in runs):
        parts.append(
            badge("changed since recorded", "error") + " marks a notebook whose bytes no longer have the hash "
            "its record holds: `lanebook audit verify` names it.\n"
        )
    if groups:
        parts.append(
            "## Promotions\n\nThe runs of one `lanebook promote` share a promotion id (a resume continues it).\n"
        )
        for pid, members in groups:
            first = members[0].record
            kind = " (dry run)" if first.get("dry_run") else ""
            parts.append(
                f"### Promotion {pid}{kind}\n\nLane **{first['lane']}**, from {first['started_at']}: "
                f"{promotion_outcome(members)}. {tally([m.record for m in members])}.\n\n"
                + wide(md_table(HEADER, [_row(m) for m in members]))
            )
    if alone:
        parts.append(
            "## Single runs\n\nRuns of `lanebook run`, outside any promotion, newest first.\n\n"
            + wide(md_table(HEADER, [_row(run) for run in alone]))
        )
    return "\n".join(parts)


def run_heading(run: PublishedRun) -> str:
    """The heading of a run's page: where, dry or not, the verdict, and the record it is."""
    r = run.record
    where = "TWIN" if r["twin"] else "REAL LANE"
    dry = " [DRY RUN]" if r.get("dry_run") else ""  # a dry run opened no connection: not a lane's result
    lines = [
        f"# [{where}]{dry} {r['runbook']} · {r['lane']} · {r['started_at']}",
        "",
        " ".join(
            b
            for b in (where_badge(r["twin"]), dry_badge() if r.get("dry_run") else "", verdict_badge(r["verdict"]))
            if b
        )
        + (" nothing on the lane was observed: not a pass." if r["verdict"] == "dry-run" else ""),
        "",
    ]
    facts = [f"run `{r['run_id']}`, {r['started_at']} → {r.get('finished_at') or '?'}"]
    if r.get("failed_step"):
        facts.append(f"failed step: {r['failed_step']}")
    if r.get("fix"):
        facts.append(f"what to do next: {r['fix']}")
    if r.get("promotion_id"):
        facts.append(f"promotion `{r['promotion_id']}`")
    facts.append(
        f"record `{r['output']}` (sha256 `{r['sha256'][:16]}…`)"
        + ("" if run.intact else " — **changed since it was recorded**: `lanebook audit verify` names it")
    )
    lines += [f"- {fact}" for fact in facts] + ["", "[Back to the audit trail](../audit.md)"]
    if r["twin"]:
        lines += ["", "This run was on the digital twin: every figure on this page is a twin figure."]
    return "\n".join(lines) + "\n"
