"""The twin's fleet lanes (params/twin-fleet-a/b/c.yaml), each on a pair of its own loopback addresses added to the
session twin when a run starts: two serve side by side; each pair has its own lock; a fault set on one lane
(control.set_lane_faults, `lanebook twin fault --lane`) fails that lane's launch and leaves the other serving."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers.lanebook_runs import LANEBOOK, last_record
from lanebook.base.errors import LanebookError
from lanebook.lane.params import load_lane
from lanebook.runs.lock import LOCK_CLAIM_ENV, lane_pair_lock
from lanebook.twin import control

pytestmark = pytest.mark.twin


def run(outputs, runbook: str, lane_name: str, expect_exit: int) -> dict:
    """`lanebook run RUNBOOK --lane LANE` as another operator's process would (no lock claim inherited)."""
    env = {key: value for key, value in os.environ.items() if key != LOCK_CLAIM_ENV}
    done = subprocess.run(
        [LANEBOOK, "run", runbook, "--lane", lane_name],
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, "LANEBOOK_OUTPUTS": str(outputs)},
    )
    assert done.returncode == expect_exit, done.stdout[-3000:] + done.stderr[-3000:]
    recorded = (outputs / "runs.jsonl").exists()  # a run refused by the lock runs nothing and records nothing
    return {**(last_record(outputs) if recorded else {}), "stderr": done.stderr}


def test_the_fleet_lanes_each_have_their_own_pair_checkout_and_project():
    lanes = [load_lane(f"twin-fleet-{name}") for name in "abc"]
    hosts = [node.host for lane in lanes for node in lane.nodes]
    assert hosts == ["127.0.1.2", "127.0.1.3", "127.0.2.2", "127.0.2.3", "127.0.3.2", "127.0.3.3"]
    assert len({lane.checkout for lane in lanes}) == len({lane.launcher.env["PROJECT_NAME"] for lane in lanes}) == 3
    assert [lane.api for lane in lanes] == [f"http://127.0.{n}.2:8888/v1" for n in (1, 2, 3)]
    assert all(lane.twin and lane.rollback is None for lane in lanes)  # a fleet promotes; it does not roll back


def test_a_fault_on_one_fleet_lane_fails_its_launch_and_leaves_the_other_serving(twin, tmp_path):
    """a launched; health-never set on b only; while another run holds a's pair, a's launch is refused and b's runs
    (the locks are per pair) and fails at its start; a still serves and passes its gates."""
    a, b = "twin-fleet-a", "twin-fleet-b"
    outputs = tmp_path / "outputs"
    try:
        assert run(outputs, "weights", a, 0)["verdict"] == "pass"  # its new worker gets the head's tree
        assert run(outputs, "launch", a, 0)["verdict"] == "pass"
        with pytest.raises(LanebookError, match="twin-wide only"):
            control.set_lane_faults(b, ["sticky-uma"])
        faulted = control.set_lane_faults(b, ["health-never"])
        assert faulted["lane_faults"] == {b: ["health-never"]} and faulted["faults"] == []
        aliases = [node["alias"] for node in faulted["nodes"]]
        assert {"a-head", "a-worker", "b-head", "b-worker"} <= set(aliases) and "c-head" not in aliases
        with lane_pair_lock(load_lane(a), "test", "held"):
            refused = run(outputs / "refused", "launch", a, 1)
            assert "is locked by" in refused["stderr"] and "running test on lane twin-fleet-a" in refused["stderr"]
            assert "verdict" not in refused
            assert run(outputs, "weights", b, 0)["verdict"] == "pass"
            failed = run(outputs, "launch", b, 1)
        assert failed["lane"] == b and failed["verdict"] == "fail" and failed["failed_step"] == "3 start"
        gates = run(outputs, "gates", a, 0)
        assert gates["verdict"] == "pass" and gates["lane"] == a
        shown = subprocess.run(
            [sys.executable, "-m", "lanebook.cli", "twin", "fault", "--lane", b, "--clear"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert shown.returncode == 0 and control.status()["lane_faults"] == {}, shown.stderr
    finally:
        control.set_lane_faults(b, [])
        for lane in (a, b):
            run(outputs / "stop", "stop", lane, 0)
