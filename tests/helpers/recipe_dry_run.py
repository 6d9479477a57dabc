"""Every node operation the launch and weights runbooks use, in the recipe's order, on a dry-run lane: the
lines a real lane would get (used by the dry-run tests, in-process and under `unshare -n`)."""

from __future__ import annotations

from lanebook.lane.params import load_lane
from lanebook.nodes import ssh
from lanebook.ops import launcher, logs, memory, readiness, transfers, weights


def dry_lane(name: str = "anemll-0731") -> ssh.Lane:
    return ssh.Lane(load_lane(name), dry_run=True)


def every_operation(lane: ssh.Lane) -> list[str]:
    """Call every operation in recipe order; returns the executor's recorded lines."""
    memory.clean_memory(lane)
    memory.mask_legacy_units(lane)
    memory.check_sticky_uma(lane)
    transfers.checkout_ok(lane)
    weights.download_on_head(lane)
    weights.verify_weights(lane.head, lane.params.weights)
    weights.sync_to_workers(lane)
    weights.clean_incomplete_on_workers(lane)
    transfers.sync_checkout(lane)
    launcher.start_lane(lane)
    readiness.wait_lane_ready(lane)
    container = launcher.container_name(lane)
    logs.scan_log(lane.head, container)
    logs.schedule_in_live_command(lane.head, container)
    launcher.run_status_script(lane)
    launcher.stop_lane(lane)
    return lane.executor.commands()
