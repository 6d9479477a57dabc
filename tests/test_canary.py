"""The canary's relaunch (lanebook.canary): the recipe's sequence as a dry run records it, and on the session twin a
variant whose measurement fails is replaced by the lane's own values at once (env file and live command)."""
import pytest

from lanebook import canary, launcher, logs, nodes
from lanebook.errors import LanebookError
from lanebook.params import lane_with, load_lane


def test_a_dry_run_records_render_copy_stop_clean_start_and_observes_nothing():
    lane_params = load_lane("anemll-0731")
    variant = lane_with(lane_params, env={"MAX_NUM_BATCHED_TOKENS": 8216})
    with nodes.Lane(lane_params, dry_run=True) as lane:
        relaunch = canary.relaunch_with(lane, variant)
        commands = lane.executor.commands()
    assert (relaunch.ok, relaunch.live, relaunch.error) == (False, None, None)
    assert "+MAX_NUM_BATCHED_TOKENS=8216" in relaunch.change.diff and relaunch.change.dry_run
    kinds = []
    for line in commands:
        for kind, start in (("read", "head: for f in "), ("write", "head: set -e; cd ~/ds4-f-mia-anemll-0731;"),
                            ("rsync", "head: rsync -aH --partial"), ("stop", "head: cd ~/ds4-f-mia-anemll-0731 && PROJECT_NAME=ds4-f-mia-anemll-0731 ./stop"),
                            ("clean", "head: sudo -n sh -c 'rm -rf /dev/shm/*"), ("clean", "worker: sudo -n sh -c 'rm -rf /dev/shm/*"),
                            ("start", "head: cd ~/ds4-f-mia-anemll-0731 && PROJECT_NAME=ds4-f-mia-anemll-0731 WAIT_ATTEMPTS=120"),
                            ("live", "head: docker top ")):
            if line.startswith(start) and (not kinds or kinds[-1] != kind):
                kinds.append(kind)
    assert kinds == ["read", "write", "rsync", "stop", "clean", "start", "live"]
    assert relaunch.figures()["launcher"] == "not run" and relaunch.figures()["live_mismatches"] is None


@pytest.mark.twin
def test_a_variant_that_fails_is_replaced_by_the_lanes_values(twin):
    lane_params = load_lane("twin")
    variant = lane_with(lane_params, env={"MAX_NUM_BATCHED_TOKENS": 8216})

    def measure():
        raise LanebookError("queue not idle after 120 s")

    with nodes.Lane(lane_params) as lane:
        try:
            trial = canary.try_variant(lane, variant, measure)
            assert trial.relaunch.ok and trial.relaunch.figures()["live_mismatches"] == [], trial.relaunch.summary()
            assert trial.failed and trial.error == "queue not idle after 120 s"
            assert trial.restored is not None and trial.restored.ok, trial.restored.summary()
            assert canary.head_env_value(lane, "MAX_NUM_BATCHED_TOKENS") == "8192"
            command = logs.live_command(lane.head, launcher.container_name(lane))
            assert "--max-num-batched-tokens 8192" in command
            # each render kept a backup of what it replaced: the variant's of 8192, the restore's of 8216
            backups = [b["backup"] for b in trial.figures()["relaunch"]["backups"] + trial.figures()["restored_after_failure"]["backups"]]
            held = [lane.head.run(f"grep MAX_NUM_BATCHED_TOKENS {b}").stdout.strip() for b in backups]
            assert held == ["MAX_NUM_BATCHED_TOKENS=8192", "MAX_NUM_BATCHED_TOKENS=8216"]
        finally:
            launcher.stop_lane(lane)
