"""The launch runbook end to end: `lanebook run launch --lane twin` on the session twin cleans what was planted in
both nodes' /dev/shm (step 1), passes only on what it observed, and ends with the post-readiness warmup (step 6):
not sent twice when the launcher's own hook warmed the lane, skipped, saying why, by a lane with
POST_READINESS_WARMUP_ENABLED: 0."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.lanebook_runs import dry_run_offline
from lanebook.base.paths import REPO
from lanebook.lane.params import load_lane
from lanebook.nodes import ssh
from lanebook.ops import launcher


def shm(node):
    return node.run("ls -A /dev/shm").stdout.split()


def run_launch(tmp_path, expect_exit: int) -> dict:
    """`lanebook run launch --lane twin` with its own outputs dir; its exit code checked, its record returned."""
    run = subprocess.run(
        [str(Path(sys.executable).parent / "lanebook"), "run", "launch", "--lane", "twin"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "LANEBOOK_OUTPUTS": str(tmp_path / "outputs")},
    )
    assert run.returncode == expect_exit, run.stdout + run.stderr
    return json.loads((tmp_path / "outputs" / "runs.jsonl").read_text().splitlines()[-1])


@pytest.mark.twin
def test_launch_removes_a_planted_segment(twin, tmp_path):
    """`lanebook run launch --lane twin` on a stopped lane: step 1 cleans what was planted in both nodes' /dev/shm."""
    with ssh.LaneNodes(load_lane("twin")) as nodes:
        launcher.stop_lane(nodes)
        name = f"psm_planted{os.getpid()}"
        for node in nodes:
            node.run(f"touch /dev/shm/{name}")
        try:
            record = run_launch(tmp_path, expect_exit=0)
            assert record["verdict"] == "pass" and set(record["figures"]["free_gib_after_cleanup"]) == {
                "head",
                "worker",
            }
            # step 6: the launcher's hook warmed the lane, so no wave is sent twice; the engine and both logs are
            # checked
            assert record["figures"]["warmed_by"] == "the launcher's post-readiness hook"
            assert "warmup_shapes" not in record["figures"]
            executed = (tmp_path / "outputs" / record["output"]).read_text()
            assert (
                "lanebook's own warmup waves** — skipped: the launcher's hook warmed the lane (Post-readiness "
                "warmup: ok); not sent twice"
            ) in executed
            for what in (
                "/health answers 200 after the warmup (the engine is alive)",
                "no fatal runtime error in head's log",
                "no fatal runtime error in worker's log",
            ):
                assert f"`PASS` **{what}" in executed, what
            for node in nodes:
                assert name not in shm(node)
        finally:
            for node in nodes:
                node.run(f"rm -f /dev/shm/{name}")
            launcher.stop_lane(nodes)


@pytest.mark.twin
def test_a_launcher_override_fails_launch_at_the_live_command(twin, tmp_path):
    """The head's launcher exports a value of its own (the rejected batch-8216 canary) that no file lanebook reads
    shows: the server boots, and launch fails at step 5 naming the flag, the lane's value and the live value."""
    lane_params = load_lane("twin")
    script = f"{lane_params.checkout.removeprefix('~/')}/{lane_params.launcher.start.removeprefix('./')}"
    with ssh.LaneNodes(lane_params) as nodes:
        launcher.stop_lane(nodes)
        original = nodes.head.run(f"cat {script}").stdout
        nodes.head.run(
            f"sed -i 's/^apply_memory_profile$/apply_memory_profile; export MAX_NUM_BATCHED_TOKENS=8216/' {script}"
        )
        assert "MAX_NUM_BATCHED_TOKENS=8216" in nodes.head.run(f"cat {script}").stdout
        try:
            record = run_launch(tmp_path, expect_exit=1)
            assert record["verdict"] == "fail" and record["failed_step"] == "5 models and live command", record
            assert "run `env`" in record["fix"] and record["figures"]["kv_cache_tokens"], (
                record
            )  # what to do, and what was measured
            executed = (tmp_path / "outputs" / record["output"]).read_text()
            assert "--max-num-batched-tokens: lane 8192, live 8216" in executed
        finally:
            restore = tmp_path / "start.sh"
            restore.write_text(original)
            nodes.head.put(restore, script)
            nodes.head.run(f"chmod +x {script}")
            launcher.stop_lane(nodes)


def test_a_lane_that_bypasses_the_warmup_skips_step_6_saying_why(tmp_path):
    """POST_READINESS_WARMUP_ENABLED: 0, the recipe's immediate bypass: a dry run of launch records step 6 as skipped
    and would send no warmup request."""
    text = (REPO / "params" / "anemll-0731.yaml").read_text()
    assert "POST_READINESS_WARMUP_ENABLED: 1" in text
    lane_file = tmp_path / "lane-no-warmup.yaml"
    lane_file.write_text(text.replace("POST_READINESS_WARMUP_ENABLED: 1", "POST_READINESS_WARMUP_ENABLED: 0"))
    record, done = dry_run_offline(tmp_path / "outputs", "launch", str(lane_file))
    assert record["verdict"] == "dry-run"
    executed = (tmp_path / "outputs" / record["output"]).read_text()
    assert (
        "the bounded post-readiness warmup ran** — skipped: the lane sets POST_READINESS_WARMUP_ENABLED: 0 "
        "(the recipe's immediate bypass)"
    ) in executed
    assert "chat/completions" not in done.stdout


@pytest.mark.twin
def test_a_compose_without_the_breakable_injection_fails_launch_and_env_repairs_it(twin, tmp_path):
    """T03 / P01: the head's compose file loses its `VLLM_USE_BREAKABLE_CUDAGRAPH` environment line (the env file
    alone does not reach the container). launch stops at its prerequisites naming P01 before anything is stopped or
    started; the env runbook puts the injection back (with a backup) and what the head runs lints clean again."""
    from helpers.lanebook_runs import run
    from lanebook.recipe.lint import lint_what_lane_runs

    lane_params = load_lane("twin")
    compose = f"{lane_params.checkout.removeprefix('~/')}/docker-compose.dspark.yml"
    with ssh.LaneNodes(lane_params) as nodes:
        nodes.head.run(f"sed -i '/VLLM_USE_BREAKABLE_CUDAGRAPH:/d' {compose}")
        assert "VLLM_USE_BREAKABLE_CUDAGRAPH" not in nodes.head.run(f"cat {compose}").stdout
        failed, _ = run(tmp_path, "launch", "twin", expect_exit=1)
        assert (failed["verdict"], failed["failed_step"]) == ("fail", "prerequisites"), failed
        executed = (tmp_path / "outputs" / failed["output"]).read_text()
        assert "P01" in executed and "run `env`" in failed["fix"]

        repaired, _ = run(tmp_path, "env", "twin", expect_exit=0)
        assert repaired["verdict"] == "pass" and repaired["figures"]["backups"], repaired
        assert "VLLM_USE_BREAKABLE_CUDAGRAPH" in nodes.head.run(f"cat {compose}").stdout
        assert lint_what_lane_runs(lane_params).ok
