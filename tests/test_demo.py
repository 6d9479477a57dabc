"""`make demo` (lanebook.demo): it passes only when every runbook it runs exists and every run passed; a missing
runbook is named and fails the demo instead of being skipped under a pass. After the main job it rehearses every
other runbook, in the operator's order, ending with the twin lane up."""

from lanebook import demo
from lanebook.base import paths
from lanebook.runs.execute import RUNBOOKS


def test_every_runbook_passed():
    ok, line = demo.demo_outcome([(name, "pass") for name in demo.MAIN_JOB], [])
    assert ok and line == "demo passed: weights, env, launch, warmup, gates, speed all pass"


def test_missing_runbooks_fail_the_demo_and_are_named():
    ok, line = demo.demo_outcome([("launch", "pass")], ["weights", "env", "warmup", "gates", "speed"])
    assert not ok
    assert line == "demo failed — missing runbooks (not written yet): weights, env, warmup, gates, speed"


def test_a_failed_stage_and_what_it_left_unrun():
    ok, line = demo.demo_outcome([("weights", "pass"), ("env", "pass"), ("launch", "fail")], ["speed"])
    assert not ok
    assert line == (
        "demo failed — missing runbooks (not written yet): speed; not passed: launch fail; "
        "not run after that: warmup, gates"
    )


def test_a_dry_run_or_error_is_not_a_pass():
    for verdict in ("dry-run", "error"):
        verdicts = [(name, verdict if name == "gates" else "pass") for name in demo.MAIN_JOB]
        ok, _ = demo.demo_outcome(verdicts, [])
        assert not ok


def test_missing_runbooks_are_found_on_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "RUNBOOKS_DIR", tmp_path)
    for name in ("weights", "launch"):
        (tmp_path / f"{name}.ipynb").write_text("{}")
    assert demo.missing_runbooks() == ["env", "warmup", "gates", "speed"]


def test_every_runbook_is_rehearsed_in_the_operators_order_and_the_twin_lane_is_left_up():
    runs = demo.demo_runs("twin-1m6")
    assert {name for name, _, _ in runs} | set(demo.MAIN_JOB) == set(RUNBOOKS)
    assert [(name, lane) for name, lane, _ in runs] == [
        ("diagnose", "twin"),
        ("doctor", "twin"),
        ("rollback", "twin"),
        ("stop", "twin-1m6"),  # the way forward again, as the rollback runbook names it
        ("launch", "twin"),
        ("status", "twin"),  # the last word: the twin lane up
    ]
    labels = demo.demo_labels("twin-1m6")
    assert labels[len(demo.MAIN_JOB) :] == ("diagnose", "doctor", "rollback", "stop (twin-1m6)", "launch", "status")
    ok, line = demo.demo_outcome([(label, "pass") for label in labels], [], labels)
    assert ok and line.endswith("launch, status all pass")


def test_a_run_after_the_main_job_that_fails_names_the_rest_unrun():
    labels = demo.demo_labels("twin-1m6")
    verdicts = [(label, "pass") for label in demo.MAIN_JOB] + [("diagnose", "pass"), ("doctor", "pass")]
    ok, line = demo.demo_outcome(verdicts + [("rollback", "fail")], [], labels)
    assert not ok
    assert line == "demo failed — not passed: rollback fail; not run after that: stop (twin-1m6), launch, status"


def test_the_demo_records_the_twin_lanes_upgrade_plan_for_the_book(tmp_path, monkeypatch):
    """The plan July 31 -> August 22 of the twin's recipe remote, by real Compose: the memory key's move is in it."""
    from lanebook.recipe.upgrade_plan import CHANGES, recorded_plans

    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(tmp_path))
    demo.record_upgrade_plan()
    [(path, plan)] = recorded_plans()
    assert path.parent == tmp_path / "twin" and plan.verdict == CHANGES
    assert plan.render_writes == {"GPU_MEMORY_UTILIZATION_TEXT": "0.85"}  # the twin lane keeps its 0.85
