"""The canary's relaunch (lanebook.verify.canary): the recipe's sequence as a dry run records it, what makes a relaunch
ok,
and a variant that fails anywhere replaced by the lane's own values at once (relaunches recorded, not run: the
real relaunches run on the twin in test_diagnose_runbook)."""

from types import SimpleNamespace

import pytest
from lanebook.base.errors import LanebookError
from lanebook.lane.params import lane_with, load_lane
from lanebook.nodes import ssh
from lanebook.nodes.ssh import Executor
from lanebook.ops import launcher
from lanebook.recipe.effective.mismatches import LiveMismatch
from lanebook.verify import canary


def test_a_dry_run_records_render_copy_stop_clean_start_and_observes_nothing():
    lane_params = load_lane("anemll-0731")
    variant = lane_with(lane_params, env={"MAX_NUM_BATCHED_TOKENS": 8216})
    with ssh.LaneNodes(lane_params, dry_run=True) as nodes:
        relaunch = canary.relaunch_with(nodes, variant)
        commands = nodes.executor.commands()
    assert (relaunch.ok, relaunch.live, relaunch.error) == (False, None, None)
    assert "+MAX_NUM_BATCHED_TOKENS=8216" in relaunch.change.diff and relaunch.change.dry_run
    kinds = []
    for line in commands:
        for kind, start in (
            ("read", "head: for f in "),
            ("write", "head: set -e; cd ~/ds4-f-mia-anemll-0731;"),
            ("rsync", "head: rsync -aH --partial"),
            ("stop", "head: cd ~/ds4-f-mia-anemll-0731 && PROJECT_NAME=ds4-f-mia-anemll-0731 ./stop"),
            ("clean", "head: sudo -n sh -c 'rm -rf /dev/shm/*"),
            ("clean", "worker: sudo -n sh -c 'rm -rf /dev/shm/*"),
            ("start", "head: cd ~/ds4-f-mia-anemll-0731 && PROJECT_NAME=ds4-f-mia-anemll-0731 WAIT_ATTEMPTS=120"),
            ("live", "head: docker top "),
        ):
            if line.startswith(start) and (not kinds or kinds[-1] != kind):
                kinds.append(kind)
    assert kinds == ["read", "write", "rsync", "stop", "clean", "start", "live"]
    assert relaunch.figures()["launcher"] == "not run" and relaunch.figures()["live_mismatches"] is None


def fake_relaunches(monkeypatch, ok_for):
    """relaunch_with replaced by a recorder whose relaunch is ok for the lanes named in ok_for."""
    calls = []

    def relaunch_with(nodes, params):
        calls.append(params.env["MAX_NUM_BATCHED_TOKENS"])
        ok = params.env["MAX_NUM_BATCHED_TOKENS"] in ok_for
        return canary.Relaunch(
            params,
            started=launcher.LauncherResult(0 if ok else 1, "ok" if ok else "health timeout", "", "", 1.0),
            live=[] if ok else None,
        )

    monkeypatch.setattr(canary, "relaunch_with", relaunch_with)
    return calls


@pytest.mark.parametrize(
    "ok_for, measure_fails, relaunched, measured",
    [
        ({8192, 8216}, False, [8216], True),  # healthy variant: measured, nothing restored (the runbook decides)
        ({8192, 8216}, True, [8216, 8192], False),  # measuring failed: the lane's values relaunched at once
        ({8192}, False, [8216, 8192], False),  # the variant did not come up: not measured, the lane's values relaunched
    ],
)
def test_try_variant_restores_the_lanes_values_whenever_the_variant_fails(
    monkeypatch, ok_for, measure_fails, relaunched, measured
):
    calls = fake_relaunches(monkeypatch, ok_for)
    lane_params = load_lane("twin")
    measures = []

    def measure():
        measures.append(1)
        if measure_fails:
            raise LanebookError("queue not idle after 120 s")
        return [{"workload": "count", "runs": []}]

    lane = SimpleNamespace(params=lane_params, executor=Executor())  # nothing reaches a node: relaunches are recorded
    trial = canary.try_variant(lane, lane_with(lane_params, env={"MAX_NUM_BATCHED_TOKENS": 8216}), measure)
    assert calls == relaunched
    assert trial.failed is (relaunched != [8216]) and (trial.restored is not None) is trial.failed
    assert (trial.documents is not None) is measured and bool(measures) is (8216 in ok_for)
    assert trial.error == ("queue not idle after 120 s" if measure_fails else None)
    assert trial.figures()["restored_after_failure"] == (trial.restored.figures() if trial.restored else None)


def test_a_relaunch_is_ok_only_up_and_carrying_its_values():
    params = load_lane("twin")
    up = launcher.LauncherResult(0, "ok", "", "", 1.0)
    assert canary.Relaunch(params, started=up, live=[]).ok
    assert not canary.Relaunch(params, started=up, live=None).ok  # the live command not read
    mismatch = canary.Relaunch(params, started=up, live=[LiveMismatch("--max-num-batched-tokens", "8216", "8192")])
    assert not mismatch.ok
    assert (
        mismatch.summary() == "launcher ok (exit 0, 1 s); live command: --max-num-batched-tokens: lane 8216, live 8192"
    )
    assert (
        canary.Relaunch(params, error="head: no container named x").summary()
        == "relaunch stopped: head: no container named x"
    )


def plan_of(enabled=True, value=8216):
    measured = canary.Trials(workloads=["count"], concurrency=[1], trials=3, max_tokens=64)
    return canary.CanaryPlan(
        enabled=enabled, key="MAX_NUM_BATCHED_TOKENS", value=value, tolerance=0.05, measured=measured
    )


def test_the_kept_lane_and_what_the_lane_file_must_say():
    params = load_lane("anemll-0731")
    plan = plan_of()
    assert plan.variant(params).env["MAX_NUM_BATCHED_TOKENS"] == 8216 and params.env["MAX_NUM_BATCHED_TOKENS"] == 8192
    keep, reject = SimpleNamespace(decision="keep"), SimpleNamespace(decision="reject")
    assert canary.kept_lane(params, plan, keep).env["MAX_NUM_BATCHED_TOKENS"] == 8216
    assert canary.kept_lane(params, plan, reject) is params and canary.kept_lane(params, plan, None) is params
    assert canary.lane_file_note(params, "MAX_NUM_BATCHED_TOKENS", 8192) == ""
    assert canary.lane_file_note(params, "MAX_NUM_BATCHED_TOKENS", 8216) == (
        "the lane file says 8192: set env.MAX_NUM_BATCHED_TOKENS: 8216 in params/anemll-0731.yaml "
        "so the lane file is the truth again"
    )


def test_a_canary_turned_off_skips_every_part_saying_so():
    from lanebook.steps.runbook import Runbook

    rb = Runbook("diagnose", "anemll-0731", dry_run=True)
    plan = plan_of(enabled=False)
    assert canary.baseline_step(rb, plan) is None and canary.variant_step(rb, plan) is None
    assert canary.decision_step(rb, plan, baseline=None, trial=None) is None
    canary.restore_step(rb, plan, None)
    assert [(c.what, c.detail) for c in rb.checks] == [
        ("the lane's own value measured", "skipped: canary=False: parts 1-2 only"),
        ("the lane relaunched with MAX_NUM_BATCHED_TOKENS=8216 and measured", "skipped: canary=False"),
        ("an explicit keep or reject from the measured figures", "skipped: canary=False"),
        ("the kept value is what the lane runs", "skipped: canary=False"),
    ]
    assert rb.commands() == []


def test_a_dry_run_canary_records_both_sides_and_decides_nothing():
    from lanebook.steps.runbook import Runbook

    rb = Runbook("diagnose", "anemll-0731", dry_run=True)
    plan = plan_of()
    assert canary.baseline_step(rb, plan) is None
    trial = canary.variant_step(rb, plan)
    assert trial.documents is None and not trial.relaunch.ok
    assert canary.decision_step(rb, plan, baseline=None, trial=trial) is None  # not observed: a dry run fails nothing
    canary.restore_step(rb, plan, None)  # the reject path: the lane's own value rendered back
    assert {c.outcome for c in rb.checks} == {"pass", "not observed"}
    assert rb.figures["canary_kept"] == {"MAX_NUM_BATCHED_TOKENS": 8192, "head_env_file": None}


def test_the_proof_reports_the_best_clean_trial_beside_the_write_ups_figure():
    docs = [
        {
            "runs": [
                {"errors": 0, "mean_stream_decode_tok_s": 88.1},
                {"errors": 0, "mean_stream_decode_tok_s": 90.2},
                {"errors": 1, "mean_stream_decode_tok_s": 99.0},  # a failed trial is no best run
            ]
        }
    ]
    assert canary.best_stream_tok_s(docs) == 90.2 and canary.best_stream_tok_s(None) is None
    assert canary.count_300_reference().value == "90.70"


def test_the_proof_skips_when_nothing_relaunched_and_records_every_check_in_a_dry_run():
    from lanebook.steps.runbook import Runbook

    rb = Runbook("diagnose", "anemll-0731", dry_run=True)
    canary.proof_step(rb, relaunched=False, trials=3)
    assert rb.checks[-1].detail == "skipped: no canary relaunched the lane"
    canary.proof_step(rb, relaunched=True, trials=3)
    lines = rb.nodes.executor.commands()
    assert any(line.startswith("local: speed count: 3 trial(s) × C1, max_tokens 300") for line in lines)
    assert any("until running = waiting = 0" in line for line in lines)
    outcomes = [
        c.outcome for c in rb.checks[1:]
    ]  # a dry run observed nothing from the lane (the Hermes block is local)
    assert set(outcomes) == {"pass", "not observed"} and outcomes[0] == "not observed"
