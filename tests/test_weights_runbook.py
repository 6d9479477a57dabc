"""The weights runbook end to end: `lanebook run weights` verifies an intact twin without sending anything, repairs a
damaged worker (missing shard, *.incomplete blobs) from the head, downloads on the head only when the head's tree
is incomplete, refuses destructive steps it was not let take, and on a real lane's dry run prints the seed's
commands without opening a connection. (An rsync cut mid-tree and resumed is a row of the fault matrix,
test_fault_matrix.py.)"""

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from helpers.lanebook_runs import dry_run_offline
from helpers.twin_helpers import private_twin
from lanebook.base.paths import REPO
from lanebook.lane.params import lane_with, load_lane
from lanebook.nodes import ssh
from lanebook.ops import weights
from lanebook.steps.runbook import VERDICT_MIME

BIN = Path(sys.executable).parent
NOTEBOOK = REPO / "runbooks" / "weights.ipynb"


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    out = tmp_path / "outputs"
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(out))
    return out


def run_weights(*args, expect_exit: int = 0) -> subprocess.CompletedProcess:
    run = subprocess.run([str(BIN / "lanebook"), "run", "weights", *args], capture_output=True, text=True, timeout=600)
    assert run.returncode == expect_exit, run.stdout + run.stderr
    return run


def last_record() -> dict:
    return json.loads((Path(os.environ["LANEBOOK_OUTPUTS"]) / "runs.jsonl").read_text().splitlines()[-1])


def emitted_verdict(path: Path) -> dict:
    (verdict,) = [
        o["data"][VERDICT_MIME]
        for c in nbformat.read(path, as_version=4).cells
        for o in c.get("outputs", [])
        if VERDICT_MIME in o.get("data", {})
    ]
    return verdict


def private_lane_file(status: dict, path: Path) -> Path:
    """The twin lane pointed at a private twin's API (its nodes are reached through the twin's own ssh config)."""
    path.write_text(json.dumps(lane_with(load_lane("twin"), api=status["api"]).model_dump(mode="json")))  # JSON is YAML
    return path


def incomplete_files(nodes: ssh.LaneNodes) -> dict[str, str]:
    hub = ssh.qpath(nodes.params.weights.hub_dir)
    return {n.alias: n.run(f"find {hub} -name '*.incomplete'").stdout for n in nodes}


def hashed_whole(nodes: ssh.LaneNodes) -> dict[str, bool]:
    return {n.alias: weights.verify_weights(n, nodes.params.weights, sha256=True).ok for n in nodes}


@pytest.mark.twin
def test_an_intact_twin_is_verified_and_nothing_is_sent(twin, outputs, tmp_path):
    """Both trees verify at one revision: no download, no rsync, no deletion, so nothing needed confirming."""
    run_weights("--lane", "twin")
    record = last_record()
    assert record["verdict"] == "pass" and record["twin"] is True, record
    assert record["figures"]["downloaded"] is False and record["figures"]["synced"] == {}
    assert record["figures"]["shards_after"] == {"head": 48, "worker": 48} and record["confirmations"] == []
    executed = (outputs / record["output"]).read_text()
    assert "skipped: nothing to send: rsync once" in executed and "skipped: nothing to download" in executed

    out = tmp_path / "papermill.ipynb"  # no parameters: the twin lane, unconfirmed, and nothing to confirm
    run = subprocess.run(
        [str(BIN / "papermill"), str(NOTEBOOK), str(out)], capture_output=True, text=True, timeout=600, cwd=REPO
    )
    assert run.returncode == 0, run.stderr[-2000:]
    verdict = emitted_verdict(out)
    assert verdict["verdict"] == "pass" and verdict["twin"] is True and verdict["lane"] == "twin"


@pytest.mark.twin
def test_a_damaged_worker_is_refused_unconfirmed_then_repaired(outputs, tmp_path):
    """Faults missing-shard + incomplete-shards (the worker lacks shard 7 and holds 3 and 17 as *.incomplete).
    Unconfirmed, the run stops at the rsync naming --yes and the worker is untouched; the runner (which confirms
    twin lanes) then copies the head's tree once, deletes the worker's *.incomplete and verifies every shard."""
    with private_twin(tmp_path / "twin", ["missing-shard", "incomplete-shards"]) as status:
        lane_file = private_lane_file(status, tmp_path / "private-twin.yaml")
        with ssh.LaneNodes(load_lane(lane_file)) as nodes:
            damaged = weights.verify_weights(nodes.node("worker"), nodes.params.weights)
            assert damaged.shard_count == 45 and len(damaged.incomplete) == 2

            out = tmp_path / "unconfirmed.ipynb"
            run = subprocess.run(
                [
                    str(BIN / "papermill"),
                    str(NOTEBOOK),
                    str(out),
                    "-p",
                    "lane",
                    str(lane_file),
                    "-p",
                    "confirm",
                    "False",
                ],
                capture_output=True,
                text=True,
                timeout=600,
                cwd=REPO,
            )
            assert run.returncode != 0 and "StepFailed" in run.stderr, run.stderr[-2000:]
            assert (
                "3 rsync to workers: rsync" in run.stderr
                and "needs confirmation (--yes or -p confirm=True)" in run.stderr
            )
            untouched = weights.verify_weights(nodes.node("worker"), nodes.params.weights)
            assert (untouched.shard_count, untouched.incomplete) == (45, damaged.incomplete)

            run_weights("--lane", str(lane_file), "-p", "sha256=True")
            record = last_record()
            assert record["verdict"] == "pass", record
            assert list(record["figures"]["synced"]) == ["worker"] and record["figures"]["downloaded"] is False
            assert record["figures"]["rsync"]["worker"]["files_transferred"] == 3  # only what the worker lacked
            assert record["figures"]["deleted_incomplete"] == {"worker": 2}
            assert [c["step"] for c in record["confirmations"]] == [
                "3 rsync to workers",
                "4 delete *.incomplete on workers",
            ]
            assert incomplete_files(nodes) == {"head": "", "worker": ""}
            assert hashed_whole(nodes) == {"head": True, "worker": True}

            # The head loses a shard (and so does the worker): the head downloads, the worker gets it by rsync.
            hub = ssh.qpath(nodes.params.weights.hub_dir)
            shard = "model-00009-of-00048.safetensors"
            for node in nodes:
                node.run(f"rm -f $(readlink -f {hub}/snapshots/*/{shard}) {hub}/snapshots/*/{shard}")
            run_weights("--lane", str(lane_file))
            record = last_record()
            assert record["verdict"] == "pass" and record["figures"]["downloaded"] is True, record
            assert record["figures"]["rsync"]["worker"]["files_transferred"] == 1
            assert [c["step"] for c in record["confirmations"]][0] == "2 download on head"
            assert hashed_whole(nodes) == {"head": True, "worker": True}


def test_dry_run_on_a_real_lane_prints_the_seed_commands_and_opens_no_connection(outputs):
    record, run = dry_run_offline(outputs, "weights")  # loopback only: a connection to a lane address would fail it
    assert record["dry_run"] is True and record["verdict"] == "dry-run" and record["confirmations"] == []
    hub = "~/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731"
    expected = [
        "head: HF_HUB_OFFLINE=0 TRANSFORMERS_OFFLINE=0 HF_HUB_DISABLE_XET=1 "
        "hf download deepseek-ai/DeepSeek-V4-Flash-0731 --max-workers 4",
        f"head: rsync -aH --partial --info=stats2 {hub}/ milo@10.0.0.2:{hub.removeprefix('~/')}/",
        f"worker: find {hub} -name '*.incomplete' -type f -print -delete",
    ]
    printed = [line.strip() for line in run.stdout.splitlines()]
    assert [line for line in printed if line in expected] == expected  # in the seed's order
    assert "--delete " not in run.stdout and not any(line.startswith("head: find") for line in printed)
    notebook = Path(run.stdout.strip().splitlines()[0]).read_text()
    assert all(json.dumps(line)[1:-1] in notebook for line in expected)  # kept in the record too


def test_a_real_lane_is_refused_without_yes(outputs):
    run = run_weights("--lane", "anemll-0731", expect_exit=2)
    assert "add --yes to confirm" in run.stderr and "Traceback" not in run.stderr
    assert not (outputs / "runs.jsonl").exists()
