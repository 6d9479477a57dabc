"""A runbook's recipe page: its latest twin rehearsal under a heading with that run's checks, or the bare notebook."""

from pathlib import Path

from lanebook.site.pages.recipe_page import rehearsal_heading, unrehearsed_heading, verdict_table
from lanebook.site.pages.runs_page import PublishedRun

CHECKS = {
    "checks": [
        {"step": "1 stop", "what": "stop script exits 0", "outcome": "pass", "detail": "exit 0"},
        {"step": "2 orphans", "what": "no orphaned worker", "outcome": "fail", "detail": "worker | holds GPU"},
    ]
}


def test_verdict_table_from_the_emitted_checks():
    assert verdict_table(CHECKS) == (
        "```{container} lanebook-wide\n| step | expected result | outcome | seen |\n|---|---|---|---|\n"
        '| 1 stop | stop script exits 0 | <span class="lanebook-badge lanebook-badge-pass">PASS</span> | exit 0 |\n'
        '| 2 orphans | no orphaned worker | <span class="lanebook-badge lanebook-badge-fail">FAIL</span> | worker \\| '
        "holds GPU |\n"
        "```\n"
    )
    assert verdict_table(None).startswith("The run emitted no checks")


def test_rehearsal_heading_says_twin_and_links_the_record():
    run = PublishedRun(
        {
            "run_id": "b0000001",
            "runbook": "stop",
            "lane": "twin",
            "twin": True,
            "started_at": "2026-12-01T10:00:00+00:00",
            "verdict": "fail",
            "failed_step": "2 orphans",
        },
        Path("x.ipynb"),
        "audit/twin-X-stop-b0000001",
        True,
    )
    heading = rehearsal_heading("Stop the lane", run, CHECKS)
    assert heading.startswith("# Stop the lane — twin rehearsal\n")
    assert "run [b0000001](../audit/twin-X-stop-b0000001.ipynb)" in heading and "never a real lane's" in heading
    assert (
        '**Verdict of this run:** <span class="lanebook-badge lanebook-badge-fail">FAIL</span>. It stopped at step **2 '
        "orphans**." in heading
    )


def test_unrehearsed_page_says_so_and_leaves_troubleshooting_to_the_notebook():
    heading = unrehearsed_heading("Stop the lane", "stop")
    assert heading.startswith("# Stop the lane — not rehearsed yet\n") and "`lanebook run stop --lane twin`" in heading
    assert "Troubleshooting" not in heading  # the notebook's own Markdown cell carries the table, run or not
