"""Runbooks end to end: notebook → library → SSH → twin, with audit records and the book.

Each test writes its records into a temporary outputs dir (LANEBOOK_OUTPUTS), never the repo's.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from helpers.lanebook_runs import dry_run_offline, steps_started
from lanebook.base.paths import REPO, RUNBOOKS_DIR
from lanebook.runs.papermill_engine import step_name

BIN = Path(sys.executable).parent
LAUNCH_STEPS = [  # the launch runbook's steps, in order, as its cells name them
    name
    for cell in nbformat.read(RUNBOOKS_DIR / "launch.ipynb", as_version=4).cells
    if (name := step_name(cell.source))
]


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    out = tmp_path / "outputs"
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(out))
    return out


def lanebook(*args, env=None, timeout=600):
    return subprocess.run(
        [str(BIN / "lanebook"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def stop_twin_lane():
    """Start each launch from a stopped lane (launch verifies an up lane instead of starting it)."""
    from lanebook.lane.params import load_lane
    from lanebook.nodes.ssh import LaneNodes
    from lanebook.ops import launcher

    with LaneNodes(load_lane("twin")) as nodes:
        launcher.stop_lane(nodes)


@pytest.fixture
def stopped_lane(twin):
    """Start from a stopped twin lane and leave it stopped, so other tests find the pair free."""
    stop_twin_lane()
    yield
    stop_twin_lane()


def records(outputs):
    return [json.loads(line) for line in (outputs / "runs.jsonl").read_text().splitlines()]


def test_launch_on_the_twin_passes_and_leaves_a_record(stopped_lane, outputs):
    run = lanebook("run", "launch", "--lane", "twin")
    assert run.returncode == 0, run.stdout + run.stderr
    printed = Path(run.stdout.strip().splitlines()[0])
    assert printed.exists() and printed.parent == outputs / "twin"
    # headless, not silent: each step as it started, and the launcher's wait, on stderr
    said = run.stderr.splitlines()
    assert steps_started(said) == [f"step {name}" for name in LAUNCH_STEPS], said
    assert any(line.startswith("launcher: ") and "launcher ok" in line for line in said), said
    (record,) = records(outputs)
    assert record["verdict"] == "pass" and record["failed_step"] is None
    assert record["twin"] is True and record["runbook"] == "launch" and record["lane"] == "twin"
    assert set(record) >= {"run_id", "started_at", "finished_at", "output", "sha256", "params", "git_commit", "figures"}
    low, high = 2_200_000, 2_500_000
    assert low <= record["figures"]["kv_cache_tokens"] <= high  # T02, read from the twin's startup log
    nb = nbformat.read(printed, as_version=4)
    text = json.dumps(nb)
    assert "TWIN RUN" in text and record["run_id"] in printed.name

    # Launch is idempotent: a second run verifies the running lane instead of restarting it.
    again = lanebook("run", "launch", "--lane", "twin")
    assert again.returncode == 0, again.stdout + again.stderr
    assert records(outputs)[-1]["verdict"] == "pass"
    second = Path(again.stdout.strip().splitlines()[0]).read_text()
    assert "skipped: already up" in second and "launcher ok" not in second

    verify = lanebook("audit", "verify")
    assert verify.returncode == 0, verify.stdout
    shown = lanebook("audit", "--json")
    assert [r["run_id"] for r in json.loads(shown.stdout)] == [r["run_id"] for r in records(outputs)]

    # Tampering with a record is caught.
    printed.write_text(printed.read_text().replace("TWIN RUN", "REAL RUN"))
    assert lanebook("audit", "verify").returncode == 1

    site = lanebook("book", "--out", str(outputs.parent / "site"))
    assert site.returncode == 0, site.stderr
    pages = list((outputs.parent / "site" / "_build" / "html" / "audit").glob("*.html"))
    assert len(pages) == 2 and all("[TWIN]" in p.read_text() for p in pages)


def test_papermill_without_parameters_brings_the_twin_up(stopped_lane, outputs, tmp_path):
    from lanebook.twin import control

    control.down()
    assert not control.status()["running"]
    out = tmp_path / "out.ipynb"
    run = subprocess.run(
        [str(BIN / "papermill"), str(REPO / "runbooks" / "launch.ipynb"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert control.status()["running"]
    verdicts = [
        o["data"]["application/vnd.lanebook.verdict+json"]
        for c in nbformat.read(out, as_version=4).cells
        for o in c.get("outputs", [])
        if "application/vnd.lanebook.verdict+json" in o.get("data", {})
    ]
    assert verdicts and verdicts[0]["verdict"] == "pass" and verdicts[0]["twin"] is True


def test_dry_run_on_a_real_lane_opens_no_connection(outputs):
    _, run = dry_run_offline(outputs, "launch")  # loopback only: a connection to a lane address would fail it
    (record,) = records(outputs)
    assert record["dry_run"] is True and record["twin"] is False and record["verdict"] == "dry-run"  # observed nothing
    notebook = Path(run.stdout.strip().splitlines()[0]).read_text()
    for text in (run.stdout, notebook):  # printed on the terminal and kept in the record
        assert (
            "PROJECT_NAME=ds4-f-mia-anemll-0731 WAIT_ATTEMPTS=120 WAIT_SECONDS=15 ./start-deepseek-v4-flash-dspark.sh"
            in text
        )
        assert "docker logs ds4-f-mia-anemll-0731-vllm-dspark-1" in text
        assert "drop_caches" in text and "/dev/shm" in text


def test_bad_runbook_parameters_exit_2(outputs):
    for args, needle in [
        (["run", "launch", "--lane", "twin", "-p", "bogus=1"], "unknown parameter(s) for launch: bogus"),
        (["run", "launch", "--lane", "twin", "-p", "novalue"], "use -p KEY=VALUE"),
        (["run", "nosuch", "--lane", "twin"], "unknown runbook 'nosuch'"),
        (["run", "launch", "--lane", "anemll-0731"], "add --yes to confirm"),
    ]:
        out = lanebook(*args)
        assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)
    assert not (outputs / "runs.jsonl").exists()


def test_dry_run_still_fails_on_what_it_checks_locally(outputs, tmp_path):
    """A dry run observes nothing on the lane, but lint runs here: a planted P07 fails the run."""
    text = (
        (REPO / "params" / "anemll-0731.yaml")
        .read_text()
        .replace("GPU_MEMORY_UTILIZATION: 0.85", "GPU_MEMORY_UTILIZATION: 0.80")
    )
    lane_file = tmp_path / "lane-080.yaml"
    lane_file.write_text(text)
    run = lanebook("run", "launch", "--lane", str(lane_file), "--dry-run")
    assert run.returncode == 1, run.stdout + run.stderr
    (record,) = records(outputs)
    assert record["verdict"] == "fail" and record["failed_step"] == "prerequisites"
    # the terminal says what failed, not only where: the check and what it saw
    assert f"failed: {record['failed_check']}" in run.stdout and "P07" in record["failed_check"]
