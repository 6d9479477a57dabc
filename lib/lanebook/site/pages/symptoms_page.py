"""The Symptoms page, from the registry (lanebook.recipe.pitfalls.SYMPTOMS): a short section per symptom, what you
see, what it means, what to do, the repair runbook, where the lesson was learnt and how many public reports of the
case base (lanebook.recipe.casebase) show it, with links to a few, so it reads at a laptop's width; then the causes
the case base holds one report of. `lanebook doctor` reads the same entries."""

from __future__ import annotations

from collections import defaultdict

from lanebook.recipe.casebase import Case, cases, causes
from lanebook.recipe.pitfalls import SYMPTOMS
from lanebook.recipe.symptoms import NOTE, Symptom
from lanebook.site.pages.links import anchor

LINKED = 3  # reports linked per cause


def runbook_cell(s: Symptom, published: set[str]) -> str:
    return f"[{s.runbook}](recipe/{s.runbook}.ipynb)" if s.runbook in published else f"`{s.runbook}`"


def source_cell(s: Symptom) -> str:
    return f"<{s.source}>" if s.source.startswith("https://") else s.source


def reports_cell(reports: list[Case]) -> str:
    """'N public reports: <url>, <url>, <url>' (distinct threads linked), or none yet."""
    if not reports:
        return "none in the case base yet"
    threads = list(dict.fromkeys(r.thread for r in reports))
    more = f" and {len(threads) - LINKED} more thread(s)" if len(threads) > LINKED else ""
    word = "report" if len(reports) == 1 else "reports"
    return f"{len(reports)} public {word}: " + ", ".join(f"<{t}>" for t in threads[:LINKED]) + more


def by_cause() -> dict[str, list[Case]]:
    found: dict[str, list[Case]] = defaultdict(list)
    for c in cases():
        found[c.cause].append(c)
    return found


def section(s: Symptom, published: set[str], reports: list[Case] | None = None) -> str:
    """One symptom: its id (a link target) and title as a heading, then its facts as short labelled lines."""
    facts = [
        ("What you see", s.seen),
        ("What it means", s.cause),
        ("What to do", s.fix),
        ("Repair runbook", runbook_cell(s, published)),
        ("Learnt from", source_cell(s)),
    ]
    if reports is not None:
        facts.append(("Reports in the case base", reports_cell(reports)))
    return f"### {anchor(s.id)} {s.title}\n\n" + "\n".join(f"- **{label}:** {text}" for label, text in facts) + "\n"


def symptoms_page(published: set[str], symptoms: tuple[Symptom, ...] = SYMPTOMS) -> str:
    """The page; published: runbooks that have a recipe page to link to."""
    faults = [s for s in symptoms if s.kind != NOTE]
    notes = [s for s in symptoms if s.kind == NOTE]
    reports = by_cause()
    once = [c for c in causes() if not c.id]
    return (
        "# Symptoms\n\nWhat a sick lane shows and what it means, from the same registry as the pitfalls. "
        "`lanebook doctor --logs FILE... [--metrics FILE...] [--dmesg FILE]` reads saved logs, a pasted post, "
        "/metrics scrapes and the kernel log for these and prints each finding with its evidence: `confirmed` when a "
        "log line defines the cause, `suspected` when the evidence or the post's words and figures only fit (with what "
        "matched), `unknown` for error lines no cause explains. P-ids are the recipe's pitfalls as they show at run "
        "time; D-ids were learnt from the public reports they cite. A suspected finding also names the public "
        f"reports of the case base most like what you pasted ({len(cases())} reports, each with the cause and fix "
        "its thread established).\n\n## Faults\n\n"
        + "\n".join(section(s, published, reports.get(s.id, [])) for s in faults)
        + "\n## Seen once\n\nCauses the case base holds a single public report of: the doctor's retrieval can name "
        "one (suspected, with the report), and a second report gives it a D-id above.\n\n"
        + "\n".join(f"- **{c.title}** (`{c.key}`): {c.fix} ({reports_cell(reports.get(c.key, []))})" for c in once)
        + "\n\n## Harmless look-alikes\n\nEvidence that resembles a fault on a healthy lane; the doctor names it as "
        f"a note, never as a finding. The case base holds {reports_cell(reports.get('lookalike', []))}.\n\n"
        + "\n".join(section(s, published) for s in notes)
    )
