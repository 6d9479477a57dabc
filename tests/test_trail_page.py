"""The audit trail's index, grouped by promotion, and each run's heading: twin and dry runs marked, never a pass."""

from pathlib import Path

from lanebook.site.pages.runs_page import PublishedRun
from lanebook.site.pages.trail_page import audit_index, link, promotion_groups, promotion_outcome, run_heading


def run(run_id, runbook, started, verdict="pass", *, promotion=None, twin=True, dry=False, intact=True, failed=None):
    record = {
        "run_id": run_id,
        "runbook": runbook,
        "lane": "twin" if twin else "anemll-0731",
        "twin": twin,
        "dry_run": dry,
        "started_at": started,
        "finished_at": started,
        "verdict": verdict,
        "failed_step": failed,
        "output": f"twin/X-{runbook}-{run_id}.ipynb",
        "sha256": "ab" * 32,
        "promotion_id": promotion,
    }
    return PublishedRun(record, Path("x.ipynb"), f"audit/twin-X-{runbook}-{run_id}", intact)


RUNS = [
    run("d0000001", "weights", "2026-12-01T10:00", promotion="p1"),
    run("d0000002", "env", "2026-12-01T10:01", "fail", promotion="p1", failed="2 lint"),
    run("d0000003", "launch", "2026-12-01T11:00", "dry-run", twin=False, dry=True, intact=False),
    run("d0000004", "weights", "2026-12-01T12:00", promotion="p2"),
    run("d0000005", "env", "2026-12-01T12:01", promotion="p2"),
]


def test_promotions_grouped_newest_first():
    groups, alone = promotion_groups(RUNS)
    assert [(pid, [r.run_id for r in members]) for pid, members in groups] == [
        ("p2", ["d0000004", "d0000005"]),
        ("p1", ["d0000001", "d0000002"]),
    ]
    assert [r.run_id for r in alone] == ["d0000003"]
    assert promotion_outcome(groups[1][1]) == "stopped at env: fail at step 2 lint"
    assert promotion_outcome(groups[0][1]) == "every runbook passed (weights, env)"


def test_index_marks_twin_dry_and_changed_runs():
    page = audit_index(RUNS)
    assert "**5 runs: 3 pass, 1 fail, 1 dry-run (observed nothing, not counted as passes).**" in page
    assert page.index("### Promotion p2") < page.index("### Promotion p1") < page.index("## Single runs")
    assert (
        '<span class="lanebook-badge lanebook-badge-real">REAL LANE</span> '
        '<span class="lanebook-badge lanebook-badge-dry-run">DRY RUN</span> | anemll-0731 | launch | '
        '<span class="lanebook-badge lanebook-badge-dry-run">DRY-RUN</span>'
    ) in page
    assert (
        '[d0000003](audit/twin-X-launch-d0000003.ipynb) <span class="lanebook-badge lanebook-badge-error">CHANGED '
        "SINCE RECORDED</span>" in page
    )
    assert audit_index([]).startswith("# Audit trail\n\nNo runs recorded yet.")


def test_run_heading():
    dry = run_heading(RUNS[2])
    assert dry.startswith("# [REAL LANE] [DRY RUN] launch · anemll-0731 · 2026-12-01T11:00\n")
    assert "nothing on the lane was observed: not a pass." in dry and "**changed since it was recorded**" in dry
    twin = run_heading(RUNS[1])
    assert (
        twin.startswith("# [TWIN] env · twin")
        and "- failed step: 2 lint" in twin
        and "every figure on this page is a twin figure" in twin
    )
    assert "[Back to the audit trail](../audit.md)" in twin
    assert link(RUNS[0], "recipe/weights") == "[d0000001](../audit/twin-X-weights-d0000001.ipynb)"
