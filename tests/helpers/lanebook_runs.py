"""`lanebook run` as a user types it, for runbook tests: each run with its own outputs dir, its exit code checked
and its audit record returned; and a dry run with no network at all but loopback (the notebook kernel talks to
papermill over it), the honest proof that a dry run opens no connection."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

LANEBOOK = str(Path(sys.executable).parent / "lanebook")
RUN_BOUND_S = 600  # a hang's bound, not a speed goal: a twin runbook takes seconds to a few minutes
# how far into a run a step line (runs.papermill_engine.step_line) says it started
STEP_AT = re.compile(r" \(at \d+:\d\d\)$")


def steps_started(said: list[str]) -> list[str]:
    """The step lines among what a run said (runs.papermill_engine.step_line), each without its time into the run."""
    return [STEP_AT.sub("", line) for line in said if line.startswith("step ")]


def lanebook_command(args: list[str], outputs: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    """The `lanebook` command as a user types it, its records in OUTPUTS. Past TIMEOUT (a hang's bound, not a speed
    goal) the test fails with what the command said on stderr: the steps it started and its waits, where it was."""
    try:
        return subprocess.run(
            [LANEBOOK, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "LANEBOOK_OUTPUTS": str(outputs)},
        )
    except subprocess.TimeoutExpired as exc:
        said = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        pytest.fail(f"lanebook {' '.join(args)} still running after {timeout} s; it said:\n{said[-4000:]}")


def stand_in_notebook(*cells: str, parameters: str = 'lane = "twin"\ndry_run = False') -> nbformat.NotebookNode:
    """A small runbook standing in for a real one: its parameters cell, then CELLS, on the python3 kernel."""
    params = nbformat.v4.new_code_cell(parameters)
    params.metadata["tags"] = ["parameters"]
    nb = nbformat.v4.new_notebook(cells=[params] + [nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def verdict_cell(figures: str = "figures", failure: str = "None") -> str:
    """Code that emits a stand-in's verdict as rb.finish() does: `verdict` (a name the cell's code sets), FIGURES
    and FAILURE as Python expressions."""
    from lanebook.steps.runbook import VERDICT_MIME

    return (
        "from IPython.display import display\n"
        f"display({{{VERDICT_MIME!r}: {{'verdict': verdict, 'checks': [], 'figures': {figures}, 'commands': [], "
        f"'failure': {failure}}}}}, raw=True)"
    )


def use_runbooks(monkeypatch, folder: Path, outputs: Path) -> None:
    """`lanebook run` (and the book) read the runbooks in FOLDER and record into OUTPUTS, for this test only."""
    from lanebook.base import paths
    from lanebook.runs import execute

    monkeypatch.setattr(execute, "RUNBOOKS_DIR", folder)
    monkeypatch.setattr(paths, "RUNBOOKS_DIR", folder)
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(outputs))


def last_record(outputs: Path) -> dict:
    return json.loads((outputs / "runs.jsonl").read_text().splitlines()[-1])


def run(
    tmp_path: Path, runbook: str, lane_name: str, *args: str, expect_exit: int
) -> tuple[dict, subprocess.CompletedProcess]:
    """`lanebook run RUNBOOK --lane LANE ARGS` with outputs in TMP/outputs; its exit code checked, its record
    returned."""
    done = lanebook_command(["run", runbook, "--lane", lane_name, *args], tmp_path / "outputs", timeout=RUN_BOUND_S)
    assert done.returncode == expect_exit, done.stdout + done.stderr
    return last_record(tmp_path / "outputs"), done


def dry_run_offline(
    tmp_path: Path, runbook: str, lane_name: str = "anemll-0731"
) -> tuple[dict, subprocess.CompletedProcess]:
    """`lanebook run RUNBOOK --lane LANE --dry-run` under `unshare -n` with only loopback up; must exit 0."""
    done = offline(tmp_path, f"run {runbook} --lane {lane_name} --dry-run", timeout=300)
    return last_record(tmp_path), done


def offline(tmp_path: Path, arguments: str, timeout: int) -> subprocess.CompletedProcess:
    """`lanebook ARGUMENTS` under `unshare -n` with only loopback up, its outputs in TMP_PATH; must exit 0."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-n", "true"]).returncode != 0:
        pytest.skip("unshare -n is not available here (needs root or user namespaces)")
    done = subprocess.run(
        ["unshare", "-n", "sh", "-c", f"ip link set lo up && {LANEBOOK} {arguments}"],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "LANEBOOK_OUTPUTS": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done
