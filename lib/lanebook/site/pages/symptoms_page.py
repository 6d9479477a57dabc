"""The Symptoms page, from the registry (lanebook.recipe.pitfalls.SYMPTOMS): a short section per symptom, what you
see, what it means, what to do, the repair runbook, and where the lesson was learnt, so it reads at a laptop's width.
`lanebook doctor` reads the same entries."""

from __future__ import annotations

from lanebook.recipe.pitfalls import SYMPTOMS
from lanebook.recipe.symptoms import NOTE, Symptom
from lanebook.site.pages.links import anchor


def runbook_cell(s: Symptom, published: set[str]) -> str:
    return f"[{s.runbook}](recipe/{s.runbook}.ipynb)" if s.runbook in published else f"`{s.runbook}`"


def source_cell(s: Symptom) -> str:
    return f"<{s.source}>" if s.source.startswith("https://") else s.source


def section(s: Symptom, published: set[str]) -> str:
    """One symptom: its id (a link target) and title as a heading, then its five facts as short labelled lines."""
    facts = [
        ("What you see", s.seen),
        ("What it means", s.cause),
        ("What to do", s.fix),
        ("Repair runbook", runbook_cell(s, published)),
        ("Learnt from", source_cell(s)),
    ]
    return f"### {anchor(s.id)} {s.title}\n\n" + "\n".join(f"- **{label}:** {text}" for label, text in facts) + "\n"


def symptoms_page(published: set[str], symptoms: tuple[Symptom, ...] = SYMPTOMS) -> str:
    """The page; published: runbooks that have a recipe page to link to."""
    faults = [s for s in symptoms if s.kind != NOTE]
    notes = [s for s in symptoms if s.kind == NOTE]
    return (
        "# Symptoms\n\nWhat a sick lane shows and what it means, from the same registry as the pitfalls. "
        "`lanebook doctor --logs FILE... [--metrics FILE...] [--dmesg FILE]` reads saved logs, a pasted post, "
        "/metrics scrapes and the kernel log for these and prints each finding with its evidence: `confirmed` when a "
        "log line defines the cause, `suspected` when the evidence or the post's words and figures only fit (with what "
        "matched), `unknown` for error lines no cause explains. P-ids are the recipe's pitfalls as they show at run "
        "time; D-ids were learnt from the public reports they cite.\n\n## Faults\n\n"
        + "\n".join(section(s, published) for s in faults)
        + "\n## Harmless look-alikes\n\nEvidence that resembles a fault on a healthy lane; the doctor names it as a "
        "note, never as a finding.\n\n" + "\n".join(section(s, published) for s in notes)
    )
