"""A fleet promoted by Airflow (lanebook.runs.fleet_dag): what the records say of each lane, wave and fleet (pure,
exact), the DAG generated from a plan, and one real `lanebook fleet promote` through the real Airflow on the twin.

The end-to-end test promotes the shipped twin fleet (params/fleets/twin-fleet.yaml: three twin lanes, each on a pair
of its own loopback addresses): the canary passes, a fault injected on the second wave's lane only (health-never, the
engine never healthy, set with the twin's `control.set_lane_faults`) stops the fleet there, the third wave never
starts, and the canary's lane is left serving as it was.
"""

import json
import subprocess
import sys

import httpx
import pytest
from lanebook.base import paths
from lanebook.lane.fleet_file import Wave
from lanebook.nodes.prometheus import server_root
from lanebook.runs import fleet_dag as runs_fleet
from lanebook.runs.fleet_dag import (
    DRY_RUN,
    GO_ON,
    NOT_RUN,
    RUNNING,
    STOPPED,
    FleetPlan,
    dag_text,
    fleet_outcome,
    lane_outcome,
    task_commands,
    wave_outcome,
)
from lanebook.runs.promote import MAIN_JOB

LANEBOOK = [sys.executable, "-m", "lanebook.cli"]


def promotion(lane, promotion_id, stop_at=None, verdict="fail", fleet_id="f1", dry_run=False, upto=None):
    """A promotion's records as runs.jsonl holds them: every runbook passed up to STOP_AT (which has VERDICT), or up to
    UPTO (still running)."""
    names = MAIN_JOB[: MAIN_JOB.index(stop_at or upto or MAIN_JOB[-1]) + 1]
    passed = "dry-run" if dry_run else "pass"
    return [
        {
            "lane": lane,
            "runbook": name,
            "promotion_id": promotion_id,
            "fleet_id": fleet_id,
            "verdict": verdict if name == stop_at else passed,
            "failed_step": "prerequisites" if name == stop_at else None,
            "dry_run": dry_run,
            "twin": True,
            "started_at": f"2026-12-02T10:0{i}:00+00:00",
            "finished_at": f"2026-12-02T10:0{i}:30+00:00",
        }
        for i, name in enumerate(names)
    ]


def test_a_lanes_outcome_is_its_latest_promotion_of_the_fleet_run():
    records = promotion("a", "p1", stop_at="launch") + promotion("a", "p2", fleet_id="f2") + promotion("b", "p3")
    failed = lane_outcome(records, "a", "f1")
    assert (failed.verdict, failed.promotion_id, failed.stopped_at, failed.failed_step) == (
        "fail",
        "p1",
        "launch",
        "prerequisites",
    )
    assert failed.describe() == "a: promotion p1 fail at launch (step prerequisites)"
    assert (failed.started_at, failed.finished_at) == ("2026-12-02T10:00:00+00:00", "2026-12-02T10:02:30+00:00")
    latest = lane_outcome(records, "a")  # any fleet run, or none: the latest promotion
    assert (latest.verdict, latest.promotion_id, latest.fleet_id) == ("pass", "p2", "f2")
    assert lane_outcome(records, "c", "f1").verdict == NOT_RUN
    assert lane_outcome(promotion("a", "p1", upto="warmup"), "a").verdict == RUNNING
    # a resumed runbook's last run decides
    resumed = promotion("a", "p1", stop_at="gates") + promotion("a", "p1")[4:]
    assert lane_outcome(resumed, "a", "f1").verdict == "pass"
    assert lane_outcome(promotion("a", "p1", dry_run=True), "a").verdict == DRY_RUN


def test_a_gate_stops_the_fleet_when_more_lanes_failed_than_the_budget():
    wave = Wave(1, ("a", "b", "c"), 1)
    one_failed = promotion("a", "p1") + promotion("b", "p2", stop_at="launch") + promotion("c", "p3")
    decided = wave_outcome(wave, one_failed, "f1", dry_run=False)
    assert decided.gate == GO_ON
    assert decided.decision() == (
        "wave 1 let the fleet go on: 1 of 3 lane(s) did not pass (failure budget 1): "
        "b: promotion p2 fail at launch (step prerequisites)"
    )
    # a lane whose promotion recorded nothing (refused by the lane's lock, say) did not pass either
    two_failed = promotion("a", "p1") + promotion("b", "p2", stop_at="gates", verdict="error")
    decided = wave_outcome(wave, two_failed, "f1", dry_run=False)
    assert decided.gate == STOPPED
    assert decided.decision().startswith("wave 1 stopped the fleet: 1 of 3 lane(s) did not pass (failure budget 1)")
    assert wave_outcome(Wave(0, ("a",), 0), [], "f1", False).decision() == "the canary (a) did not start"
    dry = wave_outcome(Wave(0, ("a",), 0), promotion("a", "p1", dry_run=True), "f1", dry_run=True)
    assert dry.decision() == (
        "the canary let the fleet go on: 0 of 1 lane(s) did not pass (failure budget 0) (dry runs: nothing observed)"
    )


def plan(tmp_path, dry_run=False, yes=False):
    waves = (Wave(0, ("a",), 0), Wave(1, ("b", "c"), 1), Wave(2, ("d",), 1))
    return FleetPlan("lab", "f1", dry_run, waves, "2026-12-02T10:00:00+00:00", tmp_path, yes)


def test_the_fleet_stops_at_the_wave_whose_gate_stopped_it_and_names_what_did_not_start(tmp_path):
    records = promotion("a", "p1") + promotion("b", "p2", stop_at="launch") + promotion("c", "p3", stop_at="env")
    outcome = fleet_outcome(plan(tmp_path), records, airflow_exit=1)
    assert [w.gate for w in outcome.waves] == [GO_ON, STOPPED, NOT_RUN]
    assert outcome.verdict == STOPPED
    assert outcome.summary() == (
        "fleet lab (f1) stopped at wave 1: wave 1 stopped the fleet: 2 of 2 lane(s) did not pass (failure budget 1): "
        "b: promotion p2 fail at launch (step prerequisites); c: promotion p3 fail at env (step prerequisites); "
        "not started: d"
    )
    every = promotion("a", "p1") + promotion("b", "p2") + promotion("c", "p3", stop_at="speed") + promotion("d", "p4")
    assert fleet_outcome(plan(tmp_path), every, 0).verdict == "fail"  # every wave ran, c failed within its budget
    passed = promotion("a", "p1") + promotion("b", "p2") + promotion("c", "p3") + promotion("d", "p4")
    assert fleet_outcome(plan(tmp_path), passed, 0).verdict == "pass"
    assert fleet_outcome(plan(tmp_path), promotion("a", "p1"), None).verdict == RUNNING
    assert fleet_outcome(plan(tmp_path), [], 1).verdict == "error"  # Airflow ended and no wave ran
    kept = fleet_outcome(plan(tmp_path), records, 1).to_json()
    assert [w["gate"] for w in kept["waves"]] == ["go on", "stopped", "not run"]
    assert kept["waves"][1]["lanes"][0]["stopped_at"] == "launch" and kept["fleet_id"] == "f1"


def test_each_gate_writes_the_fleets_record_as_it_stands_after_its_wave(tmp_path, monkeypatch):
    """A DAG run by an Airflow deployment has no `lanebook fleet promote` waiting to write fleet.json at the end."""
    outputs, run_dir = tmp_path / "outputs", tmp_path / "run"
    outputs.mkdir(), run_dir.mkdir()
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(outputs))
    fleet = plan(run_dir)
    (run_dir / runs_fleet.PLAN_FILE).write_text(json.dumps(fleet.to_json()))
    records = promotion("a", "p1") + promotion("b", "p2", stop_at="launch") + promotion("c", "p3", stop_at="env")
    (outputs / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records[: len(promotion("a", "p1"))]))
    assert runs_fleet.gate(run_dir, 0).gate == GO_ON
    after_canary = json.loads((run_dir / runs_fleet.RECORD_FILE).read_text())
    assert after_canary["verdict"] == RUNNING and [w["gate"] for w in after_canary["waves"]][0] == GO_ON
    (outputs / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert runs_fleet.gate(run_dir, 1).gate == STOPPED
    assert runs_fleet.gate(run_dir, 2).gate == NOT_RUN  # all_done: Airflow runs it after the stop
    kept = json.loads((run_dir / runs_fleet.RECORD_FILE).read_text())
    assert kept["verdict"] == STOPPED and [w["gate"] for w in kept["waves"]] == [GO_ON, STOPPED, NOT_RUN]


def test_the_dag_runs_each_lanes_promotion_then_its_waves_gate(tmp_path):
    dry = plan(tmp_path, dry_run=True)
    commands = task_commands(dry)
    assert list(commands) == [
        "wave0-lane-a",
        "wave0-gate",
        "wave1-lane-b",
        "wave1-lane-c",
        "wave1-gate",
        "wave2-lane-d",
        "wave2-gate",
    ]
    what, command = commands["wave1-lane-c"]
    assert what == "lane c"
    assert command == LANEBOOK + ["promote", "--lane", "c", "--fleet-id", "f1", "--dry-run"]
    assert commands["wave2-gate"] == ("wave 2 gate", LANEBOOK + ["fleet", "gate", str(tmp_path), "2"])
    text = dag_text(dry)
    compile(text, "dag.py", "exec")  # Python that Airflow can import
    edges = [line.strip() for line in text.splitlines() if ">>" in line]
    assert edges == [
        "[tasks['wave0-lane-a']] >> tasks['wave0-gate']",
        "tasks['wave0-gate'] >> [tasks['wave1-lane-b'], tasks['wave1-lane-c']] >> tasks['wave1-gate']",
        "tasks['wave1-gate'] >> [tasks['wave2-lane-d']] >> tasks['wave2-gate']",
    ]
    assert f"'LANEBOOK_OUTPUTS': {str(paths.outputs_dir())!r}" in text
    assert "--dry-run" not in dag_text(plan(tmp_path))


def test_a_bad_fleet_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run(LANEBOOK + ["fleet", "promote", "nosuch"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("lanebook: unknown fleet 'nosuch'"), done.stderr
    done = subprocess.run(LANEBOOK + ["promote", "--lane", "twin", "--fleet-id", "a b"], capture_output=True, text=True)
    assert done.returncode == 2 and "--fleet-id must be a fleet run's id" in done.stderr, done.stderr


# --- end to end: the real Airflow on the twin ------------------------------------------------------------

FLEET = "twin-fleet"
FLEET_LANES = ["twin-fleet-a", "twin-fleet-b", "twin-fleet-c"]  # the canary, then one lane a wave
FAULTED = "twin-fleet-b"


@pytest.mark.twin
def test_a_fault_stops_the_fleet_at_its_wave_and_no_later_wave_starts(twin, tmp_path, monkeypatch):
    if not runs_fleet.AIRFLOW_BIN.exists():
        pytest.skip(f"Apache Airflow is not installed at {runs_fleet.AIRFLOW_BIN} (make airflow)")
    from lanebook.lane.params import load_lane
    from lanebook.runs.execute import run_runbook

    outputs = tmp_path / "outputs"
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(outputs))
    from lanebook.lane.fleet_file import load_fleet
    from lanebook.twin import control

    assert load_fleet(FLEET).lanes == FLEET_LANES
    control.set_lane_faults(FAULTED, ["health-never"])
    try:
        done = subprocess.run(
            LANEBOOK + ["fleet", "promote", FLEET],
            capture_output=True,
            text=True,
            timeout=900,
        )
        canary_serving = httpx.get(f"{server_root(load_lane(FLEET_LANES[0]).api)}/health", timeout=10).status_code
    finally:
        control.set_lane_faults(FAULTED, [])
        for lane in FLEET_LANES[:2]:  # the twin's pairs left clean for the next test
            run_runbook("stop", load_lane(lane), {})
    out = done.stdout + done.stderr
    assert canary_serving == 200, out  # the canary's lane was left as the fleet found it after its promotion
    assert done.returncode == 1, out
    faulted_at = FLEET_LANES.index(FAULTED)
    assert f"stopped at wave {faulted_at}" in out and f"{FAULTED}: promotion" in out and "fail at launch" in out, out
    assert f"not started: {', '.join(FLEET_LANES[faulted_at + 1 :])}" in out, out
    runs = [json.loads(line) for line in (outputs / "runs.jsonl").read_text().splitlines()]
    (run_dir,) = (outputs / "fleets" / FLEET).iterdir()
    record = json.loads((run_dir / "fleet.json").read_text())
    fleet_id = record["fleet_id"]
    assert record["verdict"] == "stopped" and record["airflow_exit"] != 0
    assert [w["gate"] for w in record["waves"]] == ["go on"] * faulted_at + ["stopped", "not run"]
    promoted = [r for r in runs if r.get("promotion_id")]
    assert {r["lane"] for r in promoted} == set(FLEET_LANES[: faulted_at + 1])  # no later lane was touched
    assert all(r["fleet_id"] == fleet_id for r in promoted)
    assert [r["runbook"] for r in promoted if r["lane"] == FAULTED][-1] == "launch"
    assert (run_dir / "dag.py").is_file() and "DAG TEST" in (run_dir / "airflow.log").read_text()
    status = subprocess.run(
        LANEBOOK + ["fleet", "status", FLEET, "--json"],
        capture_output=True,
        text=True,
    )
    shown = json.loads(status.stdout)
    assert [(lane["lane"], lane["verdict"]) for lane in shown["lanes"]][faulted_at:] == [(FAULTED, "fail")] + [
        (lane, "not run") for lane in FLEET_LANES[faulted_at + 1 :]
    ]
    assert shown["runs"] == [record]


def test_a_confirmed_fleet_confirms_every_lanes_promotion_and_keeps_it_in_its_plan(tmp_path):
    confirmed = plan(tmp_path, yes=True)
    promotes = [command for _, command in task_commands(confirmed).values() if "promote" in command]
    assert promotes and all(command[-1] == "--yes" for command in promotes)
    assert not any("--yes" in command for _, command in task_commands(plan(tmp_path)).values())
    (tmp_path / "plan.json").write_text(json.dumps(confirmed.to_json()))
    assert FleetPlan.read(tmp_path).yes is True
