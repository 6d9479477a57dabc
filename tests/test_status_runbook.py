"""The status runbook: read-only, it passes on a lane that is up or cleanly down and says which. A dry run on the
real lane prints the seed's status line and opens no connection. (The up and down passes are in
test_stop_runbook.py, around a stop; an orphaned worker failing it, named P16 and repaired by stop, and a lane
whose worker rebooted (its container started again, the head's engine dead: /health 503) are rows of the fault
matrix, test_fault_matrix.py.)"""

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.lanebook_runs import dry_run_offline
from lanebook.base.paths import RUNBOOKS_DIR

STATUS_LINE = (
    "head: cd ~/ds4-f-mia-anemll-0731 && PROJECT_NAME=ds4-f-mia-anemll-0731 ./status-deepseek-v4-flash-dspark.sh"
)


def test_a_dry_run_on_the_real_lane_prints_the_status_line_and_opens_no_connection(tmp_path):
    record, done = dry_run_offline(tmp_path, "status")
    assert record["verdict"] == "dry-run" and record["figures"]["state"] == "not observed (dry run)"
    lines = [line.strip() for line in done.stdout.splitlines()]
    assert STATUS_LINE in lines and "verdict: dry-run" in lines
    assert "local: wait for /health: GET http://192.168.1.11:8888/health every 1 s, bound 5 s" in lines
    assert any(
        line.startswith("head: docker logs ds4-f-mia-anemll-0731-vllm-dspark-1 2>&1 | grep -E") for line in lines
    )


@pytest.mark.twin
def test_papermill_with_no_parameters_reports_the_twin_lane(twin, tmp_path):
    out = tmp_path / "status.ipynb"
    done = subprocess.run(
        [str(Path(sys.executable).parent / "papermill"), str(RUNBOOKS_DIR / "status.ipynb"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = out.read_text()
    assert '"verdict": "pass"' in text and ('"state": "up"' in text or '"state": "down"' in text)
