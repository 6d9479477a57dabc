"""The fleet pages (lanebook.site.pages.fleet_page): each lane's state and latest promotion, and the waves as they
ran."""

from lanebook.lane.fleet_file import FleetParams
from lanebook.runs.fleet_dag import LaneOutcome
from lanebook.site.pages.fleet_page import PublishedFleet, fleet_page, fleets_index, lane_state, utc_span

FLEET = FleetParams.model_construct(
    name="lab", description="every lane of the lab", lanes=["a", "b", "c"], canary="a", wave_size=1, failure_budget=0
)
LANES = [
    LaneOutcome(
        "a", "pass", "p1", "f1", started_at="2026-12-02T10:00:00+00:00", finished_at="2026-12-02T10:05:00+00:00"
    ),
    LaneOutcome(
        "b", "fail", "p2", "f1", "launch", "3 warmup", "2026-12-02T10:06:00+00:00", "2026-12-02T10:07:00+00:00"
    ),
    LaneOutcome("c", "not run"),
]
RUN = {
    "fleet_id": "f1",
    "created_at": "2026-12-02T09:59:00+00:00",
    "dry_run": False,
    "verdict": "stopped",
    "summary": "fleet lab (f1) stopped at wave 1: ...",
    "waves": [
        {
            "index": 0,
            "budget": 0,
            "gate": "go on",
            "decision": "the canary let the fleet go on",
            "lanes": [{"lane": "a", "verdict": "pass"}],
        },
        {
            "index": 1,
            "budget": 0,
            "gate": "stopped",
            "decision": "wave 1 stopped the fleet",
            "lanes": [{"lane": "b", "verdict": "fail"}],
        },
        {
            "index": 2,
            "budget": 0,
            "gate": "not run",
            "decision": "wave 2 (c) did not start",
            "lanes": [{"lane": "c", "verdict": "not run"}],
        },
    ],
}


def test_a_lanes_state_says_what_its_latest_promotion_left():
    assert [lane_state(o) for o in LANES] == [
        "serving what its latest promotion proved",
        "latest promotion stopped at launch (step 3 warmup)",
        "never promoted",
    ]


def test_the_page_shows_each_lane_and_the_waves_as_they_ran():
    page = fleet_page(PublishedFleet(FLEET, LANES, {"a": True, "b": True, "c": True}, [RUN]), {"p2": "audit/b-X"})
    assert page.startswith("---\norphan: true\n---\n\n# Fleet lab\n")
    assert "Planned: canary: a; wave 1: b; wave 2: c." in page
    assert "| b | " in page and "[p2](../audit/b-X.ipynb)" in page and "`p1`" in page  # p1 has no page: its id
    assert "latest promotion stopped at launch (step 3 warmup)" in page
    assert "### Run `f1` · 2026-12-02 09:59:00 UTC" in page and "2026-12-02 10:00:00 → 10:05:00" in page
    rows = [line for line in page.splitlines() if line.startswith(("| canary |", "| wave 1 |", "| wave 2 |"))]
    assert [row.split(" | ")[0] for row in rows] == ["| canary", "| wave 1", "| wave 2"]
    assert 'lanebook-badge-fail">STOPPED' in rows[1] and 'lanebook-badge-skipped">NOT RUN' in rows[2]
    assert "- wave 1 stopped the fleet\n" in page


def test_the_index_links_each_fleet_with_its_latest_run():
    index = fleets_index([PublishedFleet(FLEET, LANES, {}, [RUN])])
    assert (
        '| [lab](fleets/lab.md) | a, b, c | a | 1 | <span class="lanebook-badge lanebook-badge-fail">STOPPED</span> |'
        in index
    )
    assert "No fleet file" in fleets_index([])
    assert "no run yet" in fleets_index([PublishedFleet(FLEET, LANES, {}, [])])


def test_a_span_is_short_and_names_the_end_date_only_when_it_differs():
    assert utc_span("2026-12-02T22:20:08.5+00:00", "2026-12-02T22:20:11+00:00") == "2026-12-02 22:20:08 → 22:20:11"
    assert utc_span("2026-12-02T23:59:00+00:00", "2026-12-03T00:01:00+00:00") == (
        "2026-12-02 23:59:00 → 2026-12-03 00:01:00"
    )
    assert (utc_span("2026-12-02T23:59:00+00:00", None), utc_span(None, None)) == ("2026-12-02 23:59:00 →", "")
