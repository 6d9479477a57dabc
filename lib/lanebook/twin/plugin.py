"""The twin as a lanebook plugin (entry point `twin` in the group `lanebook.plugins`, pyproject.toml).

It gives lane files two meanings: `ssh_config: twin` is the running twin's own ssh config (its nodes'
addresses, keys and known_hosts), and a lane reached that way finds the twin up when a run starts, so
`papermill runbooks/launch.ipynb OUT.ipynb` with no parameters works from a stopped twin. A runbook that needs
a twin lane serving (speed, diagnose) launches it when found cleanly down, and `lanebook speed` knows the twin's
API by its truth log. It adds the book's page of the facts the twin reproduces (twin/facts.py), measured when the
book is built, and the fault matrix's (twin/fault_matrix.py).

Every process that loads the plugins imports this module (a runbook's kernel too), so what only some need (the
book pages' models, headless runs, HTTP) is imported where it is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lanebook.lane.params import LaneParams
from lanebook.lane.plugins import Registry
from lanebook.nodes.http import direct_client
from lanebook.nodes.ssh import NodeError
from lanebook.twin import control

if TYPE_CHECKING:
    from lanebook.steps.runbook import Runbook

SSH_CONFIG_NAME = control.SSH_CONFIG_NAME


def ssh_config() -> Path:
    status = control.status()
    if not status["running"]:
        raise NodeError("the twin is not running: start it with `lanebook twin up`")
    return Path(status["ssh_config"])


def bring_up(params: LaneParams) -> None:
    """Start the twin (fast: cold-bind and JIT waits shortened, decode rates never) when a twin lane finds it down, and
    the nodes the lane names that it lacks (control.bring_up)."""
    if params.ssh_config == SSH_CONFIG_NAME:
        control.bring_up(params)


def launch_lane_if_down(rb: Runbook) -> None:
    """Runbooks that need the lane up (speed, diagnose) launch a twin lane they find cleanly down, through the
    `launch` runbook (its own record, linked in rb's figures as `launched`, and expected to pass), so they run
    from bare papermill; the twin changes nothing real. A real lane is never launched this way, and a dry run
    launches nothing."""
    from lanebook.ops.launcher import LANE_DOWN, ask_api, lane_containers
    from lanebook.runs.execute import run_runbook

    nodes = rb.nodes
    if (
        nodes.executor.dry_run
        or not nodes.params.twin
        or ask_api(nodes).healthy
        or lane_containers(nodes).state != LANE_DOWN
    ):
        return
    launched = run_runbook("launch", rb.params, {})
    rb.record(launched={"run_id": launched["run_id"], "verdict": launched["verdict"]})
    rb.expect(
        launched["verdict"] == "pass",
        what="the twin lane, found cleanly down, launched by the `launch` runbook",
        detail=f"{launched['output']}: verdict {launched['verdict']}",
    )


def serves_twin(api: str) -> bool:
    """The twin answers GET /twin/requests (its truth log); no real vLLM does."""
    import httpx

    from lanebook.nodes.prometheus import server_root

    try:
        with direct_client(timeout=5.0) as client:
            return client.get(f"{server_root(api)}/twin/requests").status_code == 200
    except httpx.HTTPError:
        return False


def facts_page() -> str:
    from lanebook.twin import facts

    return facts.render_page()


def faults_page() -> str:
    from lanebook.twin import fault_matrix

    return fault_matrix.render_page()


def register(registry: Registry) -> None:
    registry.ssh_config(SSH_CONFIG_NAME, ssh_config)
    registry.before_run(bring_up)
    registry.launch_when_down(launch_lane_if_down)
    registry.twin_api(serves_twin)
    registry.book_page("twin", facts_page)
    registry.book_page("faults", faults_page)
