"""The upgrade as a promotion on the twin (lanebook.runs.upgrade_run): a twin lane whose checkout is a clone of the
recipe at its July-31 commit is upgraded to the August-22 commit.

One private twin (its engine faults switch between launches), one test: a first upgrade meets a fault injected in
its launch (health-never) and fails, the lane file untouched and the old checkout's tree as it was, and the old lane
then launches as before; a second upgrade of the lane launched from its old checkout stops it, promotes the new
checkout beside it (the same one, found again), writes the lane file's checkout line and serves the lane's values
through the new launcher's memory profile; the rollback to the old checkout passes its launch and gates."""

import json

import pytest
from helpers.twin_helpers import private_twin
from lanebook.lane.params import load_lane
from lanebook.nodes.ssh import LaneNodes
from lanebook.ops.launcher import container_name
from lanebook.ops.logs import live_command
from lanebook.recipe.effective.checkout import CheckoutFiles
from lanebook.recipe.upgrade_plan import read_plan
from lanebook.runs.execute import run_runbook
from lanebook.runs.upgrade_run import rollback_checkout, upgrade
from lanebook.twin import control
from lanebook.twin.nodes import TwinAddresses
from lanebook.twin.remote import AUG22, JUL31

pytestmark = pytest.mark.twin


def at_this_twin(text: str) -> str:
    """The twin lane's file with this private twin's API and master ports: in the lane file, as an operator names
    them, so that a checkout the lane is rendered into anew serves where the lane says."""
    addresses = TwinAddresses.from_env()
    text = text.replace("\napi: http://127.0.0.2:8888/v1\n", f"\napi: {addresses.api}\n")
    ports = f"\n  VLLM_PORT: {addresses.api_port}\n  MASTER_PORT: {addresses.master_port}"
    return text.replace("\n  VLLM_HOST: 127.0.0.2", ports + "\n  VLLM_HOST: 127.0.0.2", 1)


def env_of(params, checkout):
    with LaneNodes(params) as nodes:
        return CheckoutFiles.fetch(nodes.head, checkout).env.text


def test_a_july_lane_upgrades_to_august_and_rolls_back(tmp_path, monkeypatch):
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(tmp_path / "outputs"))
    lane_file = tmp_path / "twin.yaml"
    with private_twin(tmp_path / "twin", faults=[]) as twin:
        lane_file.write_text(at_this_twin(load_lane("twin").file.read_text()))
        original = lane_file.read_bytes()
        params = load_lane(lane_file)
        assert params.api == twin["api"] and str(params.env["VLLM_PORT"]) in params.api
        shas = control.recipe_shas()
        assert control.lay_out_checkout(params, JUL31) == shas[JUL31]
        assert "GPU_MEMORY_UTILIZATION=0.85" in env_of(params, params.checkout).splitlines()  # no profile on July 31

        control.switch_engine_faults(["health-never"])
        failed = upgrade(params, shas[AUG22])
        assert failed.verdict == "fail" and failed.records[-1]["runbook"] == "launch", failed.reason
        assert failed.new_checkout == f"{params.checkout}@{shas[AUG22][:12]}" and failed.old_commit == shas[JUL31]
        assert failed.stop_record and failed.stop_record["verdict"] == "pass"  # what the new checkout started, stopped
        assert lane_file.read_bytes() == original and not failed.old_tree_changes and failed.old_tree_before
        kept = json.loads(failed.record.read_text())
        assert kept["verdict"] == "fail" and kept["plan_verdict"] == "changes" and kept["new_commit"] == shas[AUG22]
        plan = read_plan(tmp_path / "outputs" / kept["plan_record"])  # the plan, recorded as `upgrade --record` does
        assert plan.verdict == "changes" and plan.lane == "twin"
        link = failed.records[0]["upgrade"]  # the promotion's first record links both records
        assert link["record"] == str(failed.record.relative_to(tmp_path / "outputs"))
        assert link["plan_record"] == kept["plan_record"]

        control.switch_engine_faults([])
        relaunched = run_runbook("launch", load_lane(lane_file), {})
        assert relaunched["verdict"] == "pass", relaunched  # the old checkout launches as before

        done = upgrade(load_lane(lane_file), shas[AUG22])
        assert done.ok, done.reason
        assert done.stop_record["verdict"] == "pass" and [r["runbook"] for r in done.records] == [
            "weights",
            "env",
            "launch",
            "warmup",
            "gates",
            "speed",
        ]
        assert not done.old_tree_changes and done.old_tree_after == done.old_tree_before
        # the head's old checkout as the failed upgrade found it (the July launcher copies its files to the worker's)
        assert done.old_tree_after["head"] == failed.old_tree_before["head"]
        upgraded = load_lane(lane_file)
        assert upgraded.checkout == done.new_checkout and done.lane_file_backup.read_bytes() == original
        new_env = env_of(upgraded, upgraded.checkout).splitlines()
        assert "GPU_MEMORY_UTILIZATION_TEXT=0.85" in new_env  # the August launcher's profile key carries the value
        with LaneNodes(upgraded) as nodes:
            live = live_command(nodes.head, container_name(nodes))
        assert "--gpu-memory-utilization 0.85" in live and "num_speculative_tokens_per_batch_size" in live, live

        back = rollback_checkout(upgraded, params.checkout)
        assert [(r["runbook"], r["verdict"]) for r in back] == [("stop", "pass"), ("launch", "pass"), ("gates", "pass")]
        assert load_lane(lane_file).checkout == params.checkout
