"""Every node operation the launch and weights runbooks use, in the recipe's order, on a dry-run lane: the
lines a real lane would get (used by the dry-run tests, in-process and under `unshare -n`)."""

from __future__ import annotations

from lanebook.lane.params import load_lane
from lanebook.nodes import ssh
from lanebook.ops import launcher, logs, memory, readiness, transfers, weights


def dry_lane(name: str = "anemll-0731") -> ssh.LaneNodes:
    return ssh.LaneNodes(load_lane(name), dry_run=True)


def every_operation(nodes: ssh.LaneNodes) -> list[str]:
    """Call every operation in recipe order; returns the executor's recorded lines."""
    memory.clean_memory(nodes)
    memory.mask_legacy_units(nodes)
    memory.check_sticky_uma(nodes)
    transfers.checkout_ok(nodes)
    weights.download_on_head(nodes)
    weights.verify_weights(nodes.head, nodes.params.weights)
    weights.sync_to_workers(nodes)
    weights.clean_incomplete_on_workers(nodes)
    transfers.sync_checkout(nodes)
    launcher.start_lane(nodes)
    readiness.wait_lane_ready(nodes)
    container = launcher.container_name(nodes)
    logs.scan_log(nodes.head, container)
    logs.schedule_in_live_command(nodes.head, container)
    launcher.run_status_script(nodes)
    launcher.stop_lane(nodes)
    return nodes.executor.commands()
