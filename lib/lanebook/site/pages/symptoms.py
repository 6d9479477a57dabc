"""The Symptoms page, from the registry (lanebook.recipe.pitfalls.SYMPTOMS): what you see on a sick lane, what it
means, what to do, the repair runbook, and where the lesson was learnt. `lanebook doctor` reads the same entries."""

from __future__ import annotations

from lanebook.recipe.pitfalls import SYMPTOMS
from lanebook.recipe.symptoms import NOTE, Symptom
from lanebook.site.pages.links import anchor
from lanebook.site.pages.markup import md_table, wide


def runbook_cell(s: Symptom, published: set[str]) -> str:
    return f"[{s.runbook}](recipe/{s.runbook}.ipynb)" if s.runbook in published else f"`{s.runbook}`"


def source_cell(s: Symptom) -> str:
    return f"<{s.source}>" if s.source.startswith("https://") else s.source


def symptoms_page(published: set[str], symptoms: tuple[Symptom, ...] = SYMPTOMS) -> str:
    """The page; published: runbooks that have a recipe page to link to."""
    header = ["id", "symptom", "what you see", "what it means", "what to do", "repair runbook", "learnt from"]
    faults = [s for s in symptoms if s.kind != NOTE]
    notes = [s for s in symptoms if s.kind == NOTE]

    def row(s: Symptom) -> list[str]:
        return [f"**{anchor(s.id)}**", s.title, s.seen, s.cause, s.fix, runbook_cell(s, published), source_cell(s)]

    return (
        "# Symptoms\n\nWhat a sick lane shows and what it means, from the same registry as the pitfalls. "
        "`lanebook doctor --logs FILE... [--metrics FILE...] [--dmesg FILE]` reads saved logs, /metrics scrapes and "
        "the kernel log for these and prints each finding with its evidence. P-ids are the recipe's pitfalls as they "
        "show at run time; D-ids were learnt from the public reports they cite.\n\n"
        + wide(md_table(header, [row(s) for s in faults]))
        + "\n## Harmless look-alikes\n\nEvidence that resembles a fault on a healthy lane; the doctor names it as a "
        "note, never as a finding.\n\n" + wide(md_table(header, [row(s) for s in notes]))
    )
