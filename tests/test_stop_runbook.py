"""The stop runbook end to end on the session twin: after the launcher starts the lane, status reports it up; a
stop nobody confirmed changes nothing and names --yes; a confirmed stop leaves no container of the lane on any
node, cleans memory and reads free memory back; status then reports the lane cleanly down. A dry run on the real
lane prints the seed's stop line and opens no connection."""

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.lanebook_runs import dry_run_offline, run
from lanebook.base.paths import RUNBOOKS_DIR
from lanebook.lane.params import load_lane
from lanebook.nodes import ssh
from lanebook.ops import launcher

STOP_LINE = "head: cd ~/ds4-f-mia-anemll-0731 && PROJECT_NAME=ds4-f-mia-anemll-0731 ./stop-deepseek-v4-flash-dspark.sh"


def test_a_dry_run_on_the_real_lane_prints_the_stop_line_and_opens_no_connection(tmp_path):
    record, done = dry_run_offline(tmp_path, "stop")
    assert record["verdict"] == "dry-run" and record["failed_step"] is None
    lines = [line.strip() for line in done.stdout.splitlines()]
    assert STOP_LINE in lines and "verdict: dry-run" in lines
    cleanup = lines.index("worker: sudo -n sh -c 'rm -rf /dev/shm/*; sync; echo 3 > /proc/sys/vm/drop_caches'")
    assert lines.index(STOP_LINE) < cleanup < lines.index("worker: free -m", cleanup + 2)  # stop, clean, then read back


@pytest.mark.twin
def test_launch_status_stop_status(twin, tmp_path):
    with ssh.LaneNodes(load_lane("twin")) as nodes:
        try:
            assert launcher.start_lane(nodes).ok  # the launcher alone: the launch runbook has its own tests
            up, _ = run(tmp_path, "status", "twin", expect_exit=0)
            assert (up["verdict"], up["figures"]["state"]) == ("pass", "up")
            assert up["figures"]["status_script_exit"] == 0 and up["figures"]["models"] == ["deepseek-v4-flash-0731"]

            # papermill with confirmation refused: the run stops before the lane changes
            unconfirmed = tmp_path / "unconfirmed.ipynb"
            refused = subprocess.run(
                [
                    str(Path(sys.executable).parent / "papermill"),
                    str(RUNBOOKS_DIR / "stop.ipynb"),
                    str(unconfirmed),
                    "-p",
                    "confirm",
                    "False",
                ],
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert refused.returncode != 0
            assert (
                "1 stop script: stop lane twin on every node and clean their memory needs confirmation (--yes or -p "
                "confirm=True)" in refused.stdout + refused.stderr
            )
            assert "rerun with --yes" in unconfirmed.read_text()
            assert launcher.lane_containers(nodes).state == "up"

            stopped, _ = run(tmp_path, "stop", "twin", expect_exit=0)  # the runner confirms a twin lane itself
            assert stopped["verdict"] == "pass" and stopped["figures"]["state_before"] == "up", stopped
            assert stopped["figures"]["stop_script"] == "ok" and stopped["figures"]["orphaned_workers_stopped"] == {}
            assert set(stopped["figures"]["free_gib"]) == {"head", "worker"}
            assert [c["step"] for c in stopped["confirmations"]] == ["1 stop script"]
            assert launcher.running_containers(nodes) == {"head": [], "worker": []}

            down, _ = run(tmp_path, "status", "twin", expect_exit=0)
            assert (down["verdict"], down["figures"]["state"], down["figures"]["status_script_exit"]) == (
                "pass",
                "down",
                0,
            )

            # papermill with no parameters: the twin lane, confirmed because it is the twin; a down lane stops cleanly
            again = subprocess.run(
                [
                    str(Path(sys.executable).parent / "papermill"),
                    str(RUNBOOKS_DIR / "stop.ipynb"),
                    str(tmp_path / "again.ipynb"),
                ],
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert again.returncode == 0, again.stderr[-2000:]
        finally:
            launcher.stop_lane(nodes)
