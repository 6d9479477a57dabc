"""The rollback runbook end to end. Offline dry runs on the real lanes print the seed's commands (the stop of the
current checkout, the cleanup, the relaunch of the rollback checkout with its launcher line) and open no
connection. On the session twin, from the twin lane up: a file touched in the rollback lane's checkout after a
recorded fingerprint fails the run at its first step with nothing stopped; with the file gone again, bare
papermill rolls the twin back to the anemll-1m6 shape (fixed K=5), its gates pass as a recorded run of their
own, its fingerprints before and after are equal, and the Hermes default_model change is printed; a second
rollback finds the rollback lane up and verifies it instead of relaunching it, and makes the operator's Hermes config
follow it (backed up, ROUTE_OK through the real CLI); the twin lane's gates, forward again, point the config back."""

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import pytest
from helpers.lanebook_runs import dry_run_offline, run
from lanebook.base.paths import RUNBOOKS_DIR
from lanebook.lane.params import load_lane
from lanebook.nodes import ssh
from lanebook.ops import launcher, rollback
from lanebook.ops.logs import live_command
from lanebook.runs import audit
from lanebook.runs.execute import read_verdict
from lanebook.verify import hermes

BIN = Path(sys.executable).parent
STOP_0731 = "head: cd ~/ds4-f-mia-anemll-0731 && PROJECT_NAME=ds4-f-mia-anemll-0731 ./stop-deepseek-v4-flash-dspark.sh"
OPERATOR_NOTE = "# the operator's own Hermes config: this line and the rest stay as written\n"
CLEANUP = "sudo -n sh -c 'rm -rf /dev/shm/*; sync; echo 3 > /proc/sys/vm/drop_caches'"


def relaunch_line(checkout: str) -> str:
    return (
        f"head: cd ~/{checkout} && PROJECT_NAME={checkout} WAIT_ATTEMPTS=120 WAIT_SECONDS=15 "
        "./start-deepseek-v4-flash-dspark.sh"
    )


def runs(outputs: Path) -> list[dict]:
    return [json.loads(line) for line in (outputs / "runs.jsonl").read_text().splitlines()]


def test_a_dry_run_on_anemll_0731_prints_stop_clean_and_the_1m6_relaunch_and_opens_no_connection(tmp_path):
    record, done = dry_run_offline(tmp_path, "rollback")
    assert record["verdict"] == "dry-run" and record["failed_step"] is None, record
    lines = [line.strip() for line in done.stdout.splitlines()]
    relaunch = relaunch_line("ds4-f-mia-anemll-1m6")
    stop, cleanup, start = lines.index(STOP_0731), lines.index(f"worker: {CLEANUP}"), lines.index(relaunch)
    assert stop < cleanup < start
    probe = (
        "python3 - ~/ds4-f-mia-anemll-1m6 ~/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash "
        "< fingerprint_probe.py"
    )
    assert [i for i, line in enumerate(lines) if line.endswith(probe)][:2] == [stop - 2, stop - 1]  # before the stop
    assert record["figures"]["rollback_lane"] == "anemll-1m6"
    assert record["figures"]["hermes_changes"] == ["default_model: deepseek-v4-flash-0731 → deepseek-v4-flash-dspark"]
    gates = next(r for r in runs(tmp_path) if r["runbook"] == "gates")  # the nested run's own record
    assert (gates["lane"], gates["verdict"], gates["dry_run"]) == ("anemll-1m6", "dry-run", True)
    assert record["figures"]["gates_run_id"] == gates["run_id"]
    notebook = (tmp_path / record["output"]).read_text()
    assert "Hermes providers.spark-ds4.default_model: deepseek-v4-flash-0731 → deepseek-v4-flash-dspark" in notebook


def test_papermill_dry_run_from_anemll_1m6_relaunches_the_c12_checkout(tmp_path):
    out = tmp_path / "out.ipynb"
    done = subprocess.run(
        [
            str(BIN / "papermill"),
            str(RUNBOOKS_DIR / "rollback.ipynb"),
            str(out),
            "-p",
            "lane",
            "anemll-1m6",
            "-p",
            "dry_run",
            "True",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "LANEBOOK_OUTPUTS": str(tmp_path / "outputs")},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    verdict = read_verdict(out)
    assert verdict["verdict"] == "dry-run" and verdict["figures"]["rollback_lane"] == "patch3-c12"
    assert verdict["figures"]["hermes_changes"] == []  # both serve as deepseek-v4-flash-dspark
    commands = verdict["commands"]
    assert commands.index(
        "head: cd ~/ds4-f-mia-anemll-1m6 && PROJECT_NAME=ds4-f-mia-anemll-1m6 ./stop-deepseek-v4-flash-dspark.sh"
    ) < commands.index(relaunch_line("ds4-f-wesche-keys-c12"))
    assert "Nothing changes in `providers.spark-ds4`" in out.read_text()


# --- on the twin -----------------------------------------------------------------------------------


def stop_both_lanes():
    for name in ("twin-1m6", "twin"):
        with ssh.LaneNodes(load_lane(name)) as nodes:
            launcher.stop_lane(nodes)


@pytest.fixture(scope="module")
def rolled_back(twin, tmp_path_factory):
    """The twin lane launched (by the launcher); a promotion's fingerprint of twin-1m6 recorded; a rollback refused over
    a touched
    file; then, the file gone again, bare papermill's rollback. Both lanes stopped afterwards."""
    tmp = tmp_path_factory.mktemp("rollback")
    outputs = tmp / "outputs"
    stray = f"{load_lane('twin-1m6').checkout}/stray-{os.getpid()}"
    stop_both_lanes()
    try:
        with ssh.LaneNodes(load_lane("twin")) as current:  # the launcher alone: the launch runbook has its own tests
            assert launcher.start_lane(current).ok
        with ssh.LaneNodes(load_lane("twin-1m6")) as target:
            recorded = {
                "run_id": "promote0",
                "runbook": "promote",
                "lane": "twin",
                "twin": True,
                "verdict": "pass",
                "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "figures": {rollback.FINGERPRINT_FIGURE: rollback.fingerprint(target)},
            }
            os.environ["LANEBOOK_OUTPUTS"] = str(outputs)
            try:
                audit.append_run(recorded)  # what `lanebook promote` records when it starts
            finally:
                del os.environ["LANEBOOK_OUTPUTS"]
            target.node("worker").run(f"touch {stray}")
            refused, _ = run(tmp, "rollback", "twin", expect_exit=1)
            with ssh.LaneNodes(load_lane("twin")) as current:
                still_up = launcher.lane_containers(current).state
            target.node("worker").run(f"rm {stray}")
        out = tmp / "rollback.ipynb"
        done = subprocess.run(
            [str(BIN / "papermill"), str(RUNBOOKS_DIR / "rollback.ipynb"), str(out)],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "LANEBOOK_OUTPUTS": str(outputs)},
        )
        with ssh.LaneNodes(load_lane("twin-1m6")) as target, ssh.LaneNodes(load_lane("twin")) as current:
            after = {
                "twin": launcher.lane_containers(current).state,
                "twin-1m6": launcher.lane_containers(target).state,
                "command": live_command(target.head, launcher.container_name(target)),
            }
        # the operator's Hermes config, pointed at the twin lane: the second rollback makes it follow
        config = tmp / "hermes" / "config.yaml"
        config.parent.mkdir()
        config.write_text(
            OPERATOR_NOTE + hermes.config_text("spark-ds4", hermes.lane_provider_block(load_lane("twin")))
        )
        original = config.read_text()
        again, _ = run(
            tmp, "rollback", "twin", "-p", f"hermes_config={config}", expect_exit=0
        )  # verified, not relaunched
        followed = config.read_text()
        # forward again: the rollback lane stopped, the twin lane launched, its gates point the config back
        stop_both_lanes()
        with ssh.LaneNodes(load_lane("twin")) as current:
            assert launcher.start_lane(current).ok
        forward, _ = run(tmp, "gates", "twin", "-p", f"hermes_config={config}", expect_exit=0)
        yield {
            "refused": refused,
            "still_up": still_up,
            "stray": stray.removeprefix("~/"),
            "done": done,
            "out": out,
            "outputs": outputs,
            "after": after,
            "again": again,
            "hermes": {"original": original, "followed": followed, "back": config.read_text(), "forward": forward},
        }
    finally:
        stop_both_lanes()


@pytest.mark.twin
def test_a_touched_rollback_checkout_fails_the_first_step_and_stops_nothing(rolled_back):
    refused = rolled_back["refused"]
    assert refused["verdict"] == "fail" and refused["failed_step"] == "1 fingerprint before", refused
    assert refused["fix"].startswith("the rollback lane changed since it was fingerprinted")
    assert rolled_back["still_up"] == "up" and "stop_script" not in refused["figures"]
    executed = (rolled_back["outputs"] / refused["output"]).read_text()
    assert "twin-1m6 untouched since promote run promote0 fingerprinted it" in executed
    assert "worker: checkout " in executed and f"newest file now {Path(rolled_back['stray']).name}" in executed
    assert "head: checkout" not in executed  # only the node where the file was touched


@pytest.mark.twin
def test_bare_papermill_rolls_the_twin_back_to_the_1m6_shape(rolled_back):
    done = rolled_back["done"]
    assert done.returncode == 0, done.stderr[-3000:]
    verdict = read_verdict(rolled_back["out"])
    figures = verdict["figures"]
    assert verdict["verdict"] == "pass" and verdict["twin"] is True, verdict
    assert rolled_back["after"]["twin"] == "down" and rolled_back["after"]["twin-1m6"] == "up"
    assert "num_speculative_tokens_per_batch_size" not in rolled_back["after"]["command"]  # fixed K=5
    assert "--served-model-name deepseek-v4-flash-dspark" in rolled_back["after"]["command"]
    assert figures["state_before"] == "up" and figures["stop_script"] == "ok" and figures["launcher_outcome"] == "ok"
    assert [c["step"] for c in verdict["confirmations"]] == ["2 stop", "4 relaunch"]
    before, after = figures["rollback_fingerprint_before"], figures["rollback_fingerprint_after"]
    assert before["observed"] and set(before["nodes"]) == {"head", "worker"}
    assert rollback.fingerprint_differences(before, after) == [] and figures["fingerprint_compared_with"] == "promote0"
    gates = {
        r["run_id"]: r for r in runs(rolled_back["outputs"]) if r["runbook"] == "gates"
    }  # this run's, the second's
    assert (gates[figures["gates_run_id"]]["lane"], gates[figures["gates_run_id"]]["verdict"]) == ("twin-1m6", "pass")
    assert Path(figures["gates_output"]).is_file()
    text = rolled_back["out"].read_text()
    assert "Hermes providers.spark-ds4.default_model: deepseek-v4-flash-0731 → deepseek-v4-flash-dspark" in text
    assert f"({'../twin-1m6/' + Path(figures['gates_output']).name})" in text  # the link to the gates record
    cells = nbformat.read(rolled_back["out"], as_version=4).cells
    assert not [c for c in cells if c.get("metadata", {}).get("papermill", {}).get("status") == "failed"]


@pytest.mark.twin
def test_a_second_rollback_verifies_the_running_rollback_lane(rolled_back):
    again = rolled_back["again"]
    assert again["verdict"] == "pass" and again["figures"]["rollback_state_before"] == "up", again
    assert "launcher_outcome" not in again["figures"] and "stop_script" not in again["figures"]
    assert again["figures"]["fingerprint_compared_with"] == "promote0"
    assert [c["step"] for c in again["confirmations"]] == ["7 hermes"]  # nothing stopped or launched
    executed = (rolled_back["outputs"] / again["output"]).read_text()
    assert "skipped: twin-1m6 is already up and twin down" in executed
    gates = next(r for r in runs(rolled_back["outputs"]) if r["run_id"] == again["figures"]["gates_run_id"])
    assert (gates["lane"], gates["verdict"]) == ("twin-1m6", "pass")


@pytest.mark.twin
def test_the_operators_hermes_config_follows_the_rollback_and_the_forward_gates_put_it_back(rolled_back):
    """After the rollback the config names twin-1m6's served name (backed up first, every other line kept) and ROUTE_OK
    passed through the real CLI against twin-1m6; the twin lane's gates, forward again, point it back."""
    again, seen = rolled_back["again"], rolled_back["hermes"]
    figures = again["figures"]
    assert figures["hermes_config_changes"] == ["default_model: deepseek-v4-flash-0731 → deepseek-v4-flash-dspark"]
    assert seen["followed"] == seen["original"].replace("deepseek-v4-flash-0731", "deepseek-v4-flash-dspark")
    assert Path(figures["hermes_config_backup"]).read_text() == seen["original"]  # the backup kept
    assert [c["step"] for c in again["confirmations"]] == ["7 hermes"]
    verdict = read_verdict(rolled_back["outputs"] / again["output"])
    checks = {(c["step"], c["what"]): c["outcome"] for c in verdict["checks"]}
    assert checks[("7 hermes", "hermes printed exactly ROUTE_OK")] == "pass"
    assert checks[("7 hermes", "default_model is deepseek-v4-flash-dspark")] == "pass"
    assert figures["hermes_route"]["lane"] == "twin-1m6"
    forward = seen["forward"]
    assert forward["verdict"] == "pass" and seen["back"] == seen["original"], forward
    assert forward["figures"]["hermes_config_changes"] == [
        "default_model: deepseek-v4-flash-dspark → deepseek-v4-flash-0731"
    ]
    assert Path(forward["figures"]["hermes_config_backup"]).read_text() == seen["followed"]
