"""The Symptoms page: a short section per registry symptom (what you see, what it means, what to do, its repair
runbook, linked when the runbook has a recipe page, and where it was learnt), no wide table; look-alikes apart."""

from lanebook.recipe.pitfalls import SYMPTOMS
from lanebook.site.pages.symptoms_page import symptoms_page


def test_every_symptom_has_a_section_with_its_runbook_and_source():
    page = symptoms_page({"stop", "launch"})
    heading = '### <span class="lanebook-anchor" id="{0}">{0}</span> '.format  # each id a link target
    assert all(heading(s.id) + s.title in page for s in SYMPTOMS)
    assert "- **Repair runbook:** [stop](recipe/stop.ipynb)" in page and "- **Repair runbook:** `gates`" in page
    assert "- **Learnt from:** <https://github.com/vllm-project/vllm/pull/41834>" in page
    assert "seed 000 (the recipe), pitfall 4" in page
    assert page.count("- **What you see:**") == len(SYMPTOMS) and "|---|" not in page  # sections, not a table
    faults, notes = page.split("## Harmless look-alikes")
    assert heading("H01") in notes and heading("H01") not in faults and heading("D01") in faults


def test_each_cause_says_how_many_public_reports_it_was_learnt_from_with_links():
    from collections import Counter

    from lanebook.recipe.casebase import cases, causes

    page = symptoms_page({"stop"})
    counts = Counter(c.cause for c in cases())
    shm = next(c for c in causes() if c.key == "container-shm-too-small-nccl")
    section = page.split(f'id="{shm.id}">')[1].split("### ")[0]
    assert f"- **Reports in the case base:** {counts[shm.id]} public reports: <https://" in section
    assert section.count("<https://") <= 1 + 3  # where it was learnt, then a few of its threads
    once = page.split("## Seen once")[1].split("## Harmless look-alikes")[0]
    assert all(f"(`{c.key}`)" in once for c in causes() if not c.id)
    assert f"The case base holds {counts['lookalike']} public reports" in page
