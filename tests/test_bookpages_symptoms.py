"""The Symptoms page: every registry symptom with what you see, what it means, what to do, its repair runbook
(linked when the runbook has a recipe page) and where it was learnt; look-alikes apart."""

from lanebook.recipe.pitfalls import SYMPTOMS
from lanebook.site.pages.symptoms import symptoms_page


def test_every_symptom_is_on_the_page_with_its_runbook_and_source():
    page = symptoms_page({"stop", "launch"})
    row = '| **<span class="lanebook-anchor" id="{0}">{0}</span>** |'.format  # each id a link target
    assert all(row(s.id) in page for s in SYMPTOMS)
    assert "[stop](recipe/stop.ipynb)" in page and "`gates`" in page
    assert "<https://github.com/vllm-project/vllm/pull/41834>" in page
    assert "seed 000 (the recipe), pitfall 4" in page
    faults, notes = page.split("## Harmless look-alikes")
    assert row("H01") in notes and row("H01") not in faults and row("D01") in faults
