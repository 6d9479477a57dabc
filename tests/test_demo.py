"""`make demo` (lanebook.demo): it passes only when every runbook of the main job exists and passed; a missing
runbook is named and fails the demo instead of being skipped under a pass."""

from lanebook import demo
from lanebook.base import paths


def test_every_runbook_passed():
    ok, line = demo.demo_outcome({name: "pass" for name in demo.MAIN_JOB}, [])
    assert ok and line == "demo passed: weights, env, launch, warmup, gates, speed all pass"


def test_missing_runbooks_fail_the_demo_and_are_named():
    ok, line = demo.demo_outcome({"launch": "pass"}, ["weights", "env", "warmup", "gates", "speed"])
    assert not ok
    assert line == "demo failed — missing runbooks (not written yet): weights, env, warmup, gates, speed"


def test_a_failed_stage_and_what_it_left_unrun():
    ok, line = demo.demo_outcome({"weights": "pass", "env": "pass", "launch": "fail"}, ["speed"])
    assert not ok
    assert line == (
        "demo failed — missing runbooks (not written yet): speed; not passed: launch fail; "
        "not run after that: warmup, gates"
    )


def test_a_dry_run_or_error_is_not_a_pass():
    for verdict in ("dry-run", "error"):
        ok, _ = demo.demo_outcome({**{name: "pass" for name in demo.MAIN_JOB}, "gates": verdict}, [])
        assert not ok


def test_missing_runbooks_are_found_on_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "RUNBOOKS_DIR", tmp_path)
    for name in ("weights", "launch"):
        (tmp_path / f"{name}.ipynb").write_text("{}")
    assert demo.missing_runbooks() == ["env", "warmup", "gates", "speed"]
