"""`lanebook run` as a user types it, for runbook tests: each run with its own outputs dir, its exit code checked
and its audit record returned; and a dry run with no network at all but loopback (the notebook kernel talks to
papermill over it), the honest proof that a dry run opens no connection."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

LANEBOOK = str(Path(sys.executable).parent / "lanebook")


def last_record(outputs: Path) -> dict:
    return json.loads((outputs / "runs.jsonl").read_text().splitlines()[-1])


def run(tmp_path: Path, runbook: str, lane: str, *args: str, expect_exit: int) -> tuple[dict, subprocess.CompletedProcess]:
    """`lanebook run RUNBOOK --lane LANE ARGS` with outputs in TMP/outputs; its exit code checked, its record returned."""
    done = subprocess.run([LANEBOOK, "run", runbook, "--lane", lane, *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "LANEBOOK_OUTPUTS": str(tmp_path / "outputs")})
    assert done.returncode == expect_exit, done.stdout + done.stderr
    return last_record(tmp_path / "outputs"), done


def dry_run_offline(tmp_path: Path, runbook: str, lane: str = "anemll-0731") -> tuple[dict, subprocess.CompletedProcess]:
    """`lanebook run RUNBOOK --lane LANE --dry-run` under `unshare -n` with only loopback up; must exit 0."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-n", "true"]).returncode != 0:
        pytest.skip("unshare -n is not available here (needs root or user namespaces)")
    done = subprocess.run(["unshare", "-n", "sh", "-c", f"ip link set lo up && {LANEBOOK} run {runbook} --lane {lane} --dry-run"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "LANEBOOK_OUTPUTS": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    return last_record(tmp_path), done
