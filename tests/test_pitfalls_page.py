"""The pitfalls page: the registry's entries, how each is caught, the steps that name it, where it comes from."""

from lanebook.recipe.pitfalls import pitfall
from lanebook.site.pages.pitfalls_page import caught_by, pitfall_steps, pitfalls_page


def test_steps_are_the_sections_that_name_a_pitfall():
    sources = {
        "stop": [
            "# Stop\nP16 in the intro is no step",
            "## Troubleshooting",
            "troubleshooting_table('stop')",
            "## Prerequisites",
            "orphans (P16)",
            "## Step 2 — Orphaned workers",
            "check P16 and P04",
            "P16 again",
            "## Verdict",
            "P04 in the verdict is no step",
        ],
        "launch": ["## Step 1 — Clean", "P04; P99 is not registered"],
    }
    assert pitfall_steps(sources, ["P04", "P16"]) == {
        "P16": [("stop", "Prerequisites"), ("stop", "Step 2 — Orphaned workers")],
        "P04": [("stop", "Step 2 — Orphaned workers"), ("launch", "Step 1 — Clean")],
    }


def test_how_each_is_caught():
    assert caught_by(pitfall("P09")) == (
        "`lanebook lint` reports P09 from the files; checked on the lane by `gates` "
        "(its troubleshooting table names it)"
    )
    assert caught_by(pitfall("P05")) == "checked on the lane by `weights` (its troubleshooting table names it)"


def test_page_has_every_entry_its_steps_and_origin():
    page = pitfalls_page({"P16": [("stop", "Step 2 — Orphaned workers"), ("gone", "Step 1 — x")]}, {"stop"})
    row = '| **<span class="lanebook-anchor" id="{0}">{0}</span>** |'.format  # each id a link target
    assert all(row(f"P{n:02d}") in page for n in range(1, 18)) and row("S06") in page
    assert "[stop](recipe/stop.ipynb): Step 2 — Orphaned workers<br>`gone`: Step 1 — x" in page
    assert "seed 000 (the recipe), pitfall 16 |" in page and "no seed: how Docker Compose reads an env file" in page
