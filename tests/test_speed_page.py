"""The speed page: latest bands, history per lane (twin and real never on one axis), each run against its baseline."""

from pathlib import Path

from lanebook.site.pages.runs_page import PublishedRun
from lanebook.site.pages.speed_page import LaneSpeed, bands_rows, reference_medians, series, speed_page, speed_runs
from lanebook.speed.baseline import stored_baseline
from lanebook.speed.references import PUBLISHED_FIGURES


def band(c, stream, aggregate, trials=3):
    return {
        "workload": "probe",
        "concurrency": c,
        "trials": trials,
        "complete": trials >= 3,
        "errors": 0,
        "mean_stream_decode_tok_s": {"median": stream, "min": stream - 1, "max": stream + 1},
        "wall_aggregate_tok_s": {"median": aggregate, "min": aggregate, "max": aggregate},
        "ttft_s_median": None,
        "acceptance_rate": {"median": 0.5, "min": 0.5, "max": 0.5},
    }


def run(run_id, started, bands, *, dry=False, runbook="speed", judged="pass"):
    record = {
        "run_id": run_id,
        "runbook": runbook,
        "lane": "twin",
        "twin": True,
        "dry_run": dry,
        "verdict": "pass",
        "started_at": started,
        "figures": {
            "bands": bands,
            "baseline": {"verdict": judged, "reason": "same setup"},
            "provenance": {"twin": True, "image": "img:1"},
        },
    }
    return PublishedRun(record, Path(f"{run_id}.ipynb"), f"audit/twin-{run_id}", True)


RUNS = [
    run("c0000002", "2026-12-02T10:00:00+00:00", {"probe": [band(1, 81.0, 75.0), band(4, 62.0, 220.0)]}),
    run("c0000001", "2026-12-01T10:00:00+00:00", {"probe": [band(1, 80.0, 74.0)]}),
    run("c0000003", "2026-12-03T10:00:00+00:00", {}, dry=True),
    run("c0000004", "2026-12-03T11:00:00+00:00", {"probe": [band(1, 1.0, 1.0)]}, runbook="launch"),
]


def test_series_and_speed_runs():
    measured = speed_runs(RUNS)
    assert [r.run_id for r in measured] == ["c0000001", "c0000002"]  # oldest first; no dry run, no other runbook
    assert series([r.record["figures"]["bands"] for r in measured], "mean_stream_decode_tok_s") == {
        ("probe", 1): [(0, 80.0, 79.0, 81.0), (1, 81.0, 80.0, 82.0)],
        ("probe", 4): [(1, 62.0, 61.0, 63.0)],
    }
    assert bands_rows({"probe": [band(4, 62.0, 220.0), band(1, 81.0, 75.0, trials=1)]}) == [
        ["probe", "C1", "1 (incomplete)", "81.0 (80.0–82.0)", "75.0", "—", "0.500", "0"],
        ["probe", "C4", "3", "62.0 (61.0–63.0)", "220.0", "—", "0.500", "0"],
    ]


def test_a_lane_draws_only_a_baseline_of_its_own_kind():
    seed = stored_baseline("anemll-1m6")  # seed 003's streaming table: real-lane figures
    assert reference_medians(seed, "wall_aggregate_tok_s") == {
        ("probe", 1): 76.6,
        ("probe", 4): 211.6,
        ("probe", 6): 219.2,
    }
    assert LaneSpeed("anemll-1m6", False, [], seed).reference is seed
    assert LaneSpeed("twin", True, [], seed).reference is None  # a twin lane's plot never carries real figures
    assert LaneSpeed("twin", True, [], stored_baseline("twin")).reference is not None


def test_page_has_a_plot_per_lane_and_the_seeds_figures():
    lanes = [
        LaneSpeed("anemll-1m6", False, [], stored_baseline("anemll-1m6")),
        LaneSpeed("twin", True, speed_runs(RUNS), stored_baseline("twin")),
        LaneSpeed("patch3-c12", False, [], None),
    ]
    text, pictures = speed_page(lanes, twin_page=True)
    assert sorted(pictures) == ["speed-anemll-1m6.png", "speed-twin.png"]
    assert all(png.startswith(b"\x89PNG") for png in pictures.values())
    assert "| anemll-1m6 | probe | C1 | 82.8 | 76.6 | seed 003," in text and "[twin page](twin.md)" in text
    assert "Run [c0000002](audit/twin-c0000002.ipynb)" in text  # the latest run's bands
    assert '<span class="lanebook-badge lanebook-badge-pass">PASS</span> same setup' in text
    assert "## patch3-c12" in text and "No speed run recorded yet." in text
    assert "[twin page]" not in speed_page(lanes, twin_page=False)[0]


def test_the_published_figures_are_shown_as_labelled_references_with_their_source():
    """Each figure the write-ups cite from other runs (lanebook.speed.references) is on the speed page once, in the
    references table, labelled a reference with who measured it and the write-up citing it, never in a lane's
    bands or the seeds' baseline table."""
    text, _ = speed_page([LaneSpeed("anemll-1m6", False, [], stored_baseline("anemll-1m6"))])
    section = text[text.index("## Published references") :].split("\n## ", 1)[0]
    assert "**not lanebook's measurements**" in section
    for figure in PUBLISHED_FIGURES:
        [row] = [line for line in section.splitlines() if f"| {figure.value} {figure.unit} |" in line]
        assert row.startswith('| <span class="lanebook-badge lanebook-badge-skipped">REFERENCE</span> ')
        assert f"| {figure.measured_by} |" in row and row.endswith(f"| {figure.source} |")
        assert text.count(f"{figure.value} {figure.unit}") == 1
    assert {f.value for f in PUBLISHED_FIGURES} == {"~72", "~137", "~66.6", "~60.4", "95.9", "90.70"}
