"""The pitfalls page, from the registry (lanebook.recipe.pitfalls): what happens, how lanebook catches it, where, and
the write-up each lesson comes from.

Which runbook step meets a pitfall is read from the runbooks themselves: a step is a `## ` section of a runbook
notebook (Prerequisites, Step 1 …, Gate 1 …; not Troubleshooting or Verdict), up to the next `## ` heading, and it
meets the pitfalls whose ids its cells name.
"""

from __future__ import annotations

import re
from typing import Iterable

from lanebook.recipe.pitfalls import PITFALLS, Pitfall
from lanebook.site.pages.links import anchor
from lanebook.site.pages.markup import badge, md_table, wide

SECTION = re.compile(r"^## (.+)$", re.M)
NOT_STEPS = ("Troubleshooting", "Verdict")  # the sections of a runbook that are not steps


def pitfall_steps(runbooks: dict[str, Iterable[str]], ids: Iterable[str]) -> dict[str, list[tuple[str, str]]]:
    """pitfall id -> [(runbook, step heading)] for every step whose cells name the id.

    runbooks: runbook name -> the sources of its cells in order (Markdown and code alike)."""
    known = set(ids)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(known))) + r")\b")
    found: dict[str, list[tuple[str, str]]] = {}
    for runbook, sources in runbooks.items():
        step = None
        for source in sources:
            heading = SECTION.search(source)
            if heading:  # a new section: a step, or one that is not (troubleshooting, verdict)
                step = None if heading.group(1).startswith(NOT_STEPS) else heading.group(1).strip()
            if step is None:
                continue
            for pitfall_id in dict.fromkeys(pattern.findall(source)):
                if (runbook, step) not in found.setdefault(pitfall_id, []):
                    found[pitfall_id].append((runbook, step))
    return found


def caught_by(pitfall: Pitfall) -> str:
    """How lanebook catches it: a static check in lint, and/or the runbooks that check it on a live lane."""
    ways = []
    if pitfall.check is not None:
        ways.append(f"`lanebook lint` reports {pitfall.id} from the files")
    if pitfall.runbooks:
        ways.append(
            "checked on the lane by "
            + ", ".join(f"`{name}`" for name in pitfall.runbooks)
            + " (its troubleshooting table names it)"
        )
    return "; ".join(ways)


def steps_cell(steps: list[tuple[str, str]], published: set[str]) -> str:
    parts = []
    for runbook, step in steps:
        name = f"[{runbook}](recipe/{runbook}.ipynb)" if runbook in published else f"`{runbook}`"
        parts.append(f"{name}: {step}")
    return "<br>".join(parts) or "—"


def pitfalls_page(
    steps: dict[str, list[tuple[str, str]]], published: set[str], pitfalls: tuple[Pitfall, ...] = PITFALLS
) -> str:
    """The page; published: runbooks that have a recipe page to link to."""
    rows = [
        [
            f"**{anchor(p.id)}**",
            p.title,
            p.text,
            caught_by(p),
            steps_cell(steps.get(p.id, []), published),
            p.fix,
            badge(p.severity, "fail" if p.severity == "error" else "warning"),
            p.origin,
        ]
        for p in pitfalls
    ]
    return (
        "# Pitfalls\n\nThe recipe's hard-won lessons and lanebook's own checks: one registry feeds `lanebook lint`, "
        "the runbooks' troubleshooting tables, the twin and this page. P01–P17 are the recipe's numbered pitfalls "
        "in its order; S-ids are checks lanebook adds. *Runbook steps* are the steps whose cells name the pitfall.\n\n"
        + wide(
            md_table(
                [
                    "id",
                    "pitfall",
                    "what happens",
                    "how lanebook catches it",
                    "runbook steps",
                    "what to do",
                    "severity",
                    "comes from",
                ],
                rows,
            )
        )
    )
