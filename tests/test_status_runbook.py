"""The status runbook: read-only, it passes on a lane that is up or cleanly down and says which; it fails on an
orphaned worker (the head died mid-TP, pitfall 16), naming the stop runbook, which then repairs it. A dry run on
the real lane prints the seed's status line and opens no connection. (The up and down passes are in
test_stop_runbook.py, around a stop.)"""
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lanebook import launcher, nodes
from lanebook.params import load_lane
from lanebook.paths import PARAMS_DIR, RUNBOOKS_DIR
from lanebook_runs import dry_run_offline, run
from twin_helpers import private_twin

STATUS_LINE = "head: cd ~/ds4-f-mia-anemll-0731 && PROJECT_NAME=ds4-f-mia-anemll-0731 ./status-deepseek-v4-flash-dspark.sh"



def test_a_dry_run_on_the_real_lane_prints_the_status_line_and_opens_no_connection(tmp_path):
    record, done = dry_run_offline(tmp_path, "status")
    assert record["verdict"] == "dry-run" and record["figures"]["state"] == "not observed (dry run)"
    lines = [line.strip() for line in done.stdout.splitlines()]
    assert STATUS_LINE in lines and "verdict: dry-run" in lines
    assert "local: wait for /health: GET http://192.168.1.11:8888/health every 1 s, bound 5 s" in lines
    assert any(line.startswith("head: docker logs ds4-f-mia-anemll-0731-vllm-dspark-1 2>&1 | grep -E") for line in lines)


@pytest.mark.twin
def test_papermill_with_no_parameters_reports_the_twin_lane(twin, tmp_path):
    out = tmp_path / "status.ipynb"
    done = subprocess.run([str(Path(sys.executable).parent / "papermill"), str(RUNBOOKS_DIR / "status.ipynb"), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = out.read_text()
    assert '"verdict": "pass"' in text and ('"state": "up"' in text or '"state": "down"' in text)


def until(condition, within_s: float = 60.0) -> bool:
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


@pytest.mark.twin
def test_an_orphaned_worker_fails_status_and_stop_repairs_it(tmp_path):
    """Fault head-dies: the head's engine exits a few seconds after ready and the worker's rank stays up,
    holding its GPU. status fails naming the orphan and P16; stop cleans it up and passes; status then passes, down."""
    with private_twin(tmp_path / "twin", ["head-dies"]) as status:
        lane_file = tmp_path / "private-twin.yaml"  # the twin lane, with the private twin's API port
        lane_file.write_text((PARAMS_DIR / "twin.yaml").read_text().replace("api: http://127.0.0.2:8888/v1",
                                                                            f"api: {status['api']}"))
        with nodes.Lane(load_lane(lane_file)) as lane:
            launcher.start_lane(lane)  # may see the head die before its chat request: what matters is what follows
            assert until(lambda: launcher.lane_containers(lane).state == launcher.ORPHANED_WORKER), \
                launcher.lane_containers(lane).summary()

            failed, _ = run(tmp_path, "status", str(lane_file), expect_exit=1)
            assert (failed["verdict"], failed["failed_step"]) == ("fail", "2 containers")
            assert failed["figures"]["state"] == "orphaned worker" and failed["fix"].startswith("run `stop`")  # kept on failure
            text = (tmp_path / "outputs" / failed["output"]).read_text()
            assert "no orphaned worker (P16" in text and "orphaned: {'worker': ['ds4-f-mia-anemll-0731-vllm-dspark-1']}" in text and "run the `stop` runbook now" in text
            assert "| P16 | Head dies mid-TP |" in text

            stopped, _ = run(tmp_path, "stop", str(lane_file), expect_exit=0)
            assert (stopped["verdict"], stopped["figures"]["state_before"]) == ("pass", "orphaned worker"), stopped
            assert launcher.running_containers(lane) == {"head": [], "worker": []}

            down, _ = run(tmp_path, "status", str(lane_file), expect_exit=0)
            assert (down["verdict"], down["figures"]["state"]) == ("pass", "down")
