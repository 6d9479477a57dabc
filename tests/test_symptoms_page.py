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
