"""The launch runbook's memory steps end to end: `lanebook run launch --lane twin` on the session twin cleans what
was planted in both nodes' /dev/shm (step 1) and passes only on what it observed."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lanebook import launcher, nodes
from lanebook.params import load_lane


def shm(node):
    return node.run("ls -A /dev/shm").stdout.split()


def run_launch(tmp_path, expect_exit: int) -> dict:
    """`lanebook run launch --lane twin` with its own outputs dir; its exit code checked, its record returned."""
    run = subprocess.run([str(Path(sys.executable).parent / "lanebook"), "run", "launch", "--lane", "twin"],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "LANEBOOK_OUTPUTS": str(tmp_path / "outputs")})
    assert run.returncode == expect_exit, run.stdout + run.stderr
    return json.loads((tmp_path / "outputs" / "runs.jsonl").read_text().splitlines()[-1])


@pytest.mark.twin
def test_launch_removes_a_planted_segment(twin, tmp_path):
    """`lanebook run launch --lane twin` on a stopped lane: step 1 cleans what was planted in both nodes' /dev/shm."""
    with nodes.Lane(load_lane("twin")) as lane:
        launcher.stop_lane(lane)
        name = f"psm_planted{os.getpid()}"
        for node in lane.nodes:
            node.run(f"touch /dev/shm/{name}")
        try:
            record = run_launch(tmp_path, expect_exit=0)
            assert record["verdict"] == "pass" and set(record["figures"]["free_gib_after_cleanup"]) == {"head", "worker"}
            for node in lane.nodes:
                assert name not in shm(node)
        finally:
            for node in lane.nodes:
                node.run(f"rm -f /dev/shm/{name}")
            launcher.stop_lane(lane)


@pytest.mark.twin
def test_a_launcher_override_fails_launch_at_the_live_command(twin, tmp_path):
    """The head's launcher exports a value of its own (the rejected batch-8216 canary) that no file lanebook reads
    shows: the server boots, and launch fails at step 5 naming the flag, the lane's value and the live value."""
    lane_params = load_lane("twin")
    script = f"{lane_params.checkout.removeprefix('~/')}/{lane_params.launcher.start.removeprefix('./')}"
    with nodes.Lane(lane_params) as lane:
        launcher.stop_lane(lane)
        original = lane.head.run(f"cat {script}").stdout
        lane.head.run(f"sed -i 's/^apply_memory_profile$/apply_memory_profile; export MAX_NUM_BATCHED_TOKENS=8216/' {script}")
        assert "MAX_NUM_BATCHED_TOKENS=8216" in lane.head.run(f"cat {script}").stdout
        try:
            record = run_launch(tmp_path, expect_exit=1)
            assert record["verdict"] == "fail" and record["failed_step"] == "5 models and live command", record
            assert "run `env`" in record["fix"] and record["figures"]["kv_cache_tokens"], record  # what to do, and what was measured
            executed = (tmp_path / "outputs" / record["output"]).read_text()
            assert "--max-num-batched-tokens: lane 8192, live 8216" in executed
        finally:
            restore = tmp_path / "start.sh"
            restore.write_text(original)
            lane.head.put(restore, script)
            lane.head.run(f"chmod +x {script}")
            launcher.stop_lane(lane)
