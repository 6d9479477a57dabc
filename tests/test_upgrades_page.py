"""lanebook.site.pages.upgrades_page: a plan's page and the index of plans, from plain plans."""

from __future__ import annotations

import tempfile

from lanebook.recipe.upgrade_plan import CHANGES, Difference, ExampleMoved, LaneValue, UpgradePlan
from lanebook.site.pages.upgrades_page import PublishedPlan, plan_doc, upgrade_page, upgrades_index


def plan() -> UpgradePlan:
    return UpgradePlan(
        "anemll-0731",
        "real lane",
        f"{tempfile.gettempdir()}/july31",
        f"{tempfile.gettempdir()}/august22",
        CHANGES,
        differences=[
            Difference("flag", "--revision", None, "9e16"),
            Difference("flag", "--enable-prompt-tokens-details", None, ""),
            Difference("environment", "VLLM_HOST_IP", "10.0.0.1", "10.0.0.9", "worker"),
        ],
        lane_values=[
            LaneValue("GPU_MEMORY_UTILIZATION", "0.85", "0.835 (default)", "ignored", "read no more", "X_TEXT=0.85")
        ],
        render_writes={"X_TEXT": "0.85"},
        example_moved=[ExampleMoved("IMAGE", "img:1", "img:1@sha256:ab", "img:1", "env.dspark.example:170")],
        created_at="2026-08-22T10:00:00+00:00",
        plan_id="a1b2c3d4",
    )


def test_a_plan_page_is_the_before_after_table_with_no_local_path():
    page = upgrade_page(plan())
    assert page.startswith("---\norphan: true\n---\n")
    assert "| flag | `--revision` | head and worker | absent | `9e16` |" in page
    assert "| flag | `--enable-prompt-tokens-details` | head and worker | absent | set |" in page
    assert "| environment | `VLLM_HOST_IP` | worker | `10.0.0.1` | `10.0.0.9` |" in page
    assert "| `GPU_MEMORY_UTILIZATION` | `0.85` | 0.835 (default) | ignored: read no more | X_TEXT=0.85 |" in page
    assert "- `X_TEXT=0.85`" in page and "lanebook-badge-warning" in page
    assert tempfile.gettempdir() not in page and "`$TMPDIR/july31`" in page
    assert "| `IMAGE` | `img:1` | `img:1` | `img:1@sha256:ab` | env.dspark.example:170 |" in page


def test_the_index_links_each_plan_newest_first():
    older = UpgradePlan.from_json({**plan().to_json(), "created_at": "2026-08-01T00:00:00+00:00", "plan_id": "b0"})
    entries = [PublishedPlan(older, plan_doc("anemll-0731", "S-upgrade-b0")), PublishedPlan(plan(), "upgrades/x")]
    index = upgrades_index(entries)
    assert index.index("[a1b2c3d4](upgrades/x.md)") < index.index("[b0](upgrades/anemll-0731-S-upgrade-b0.md)")
    assert "No plan recorded yet" in upgrades_index([])
