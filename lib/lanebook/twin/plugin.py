"""The twin as a lanebook plugin (entry point `twin` in the group `lanebook.plugins`, pyproject.toml).

It gives lane files two meanings: `ssh_config: twin` is the running twin's own ssh config (its nodes'
addresses, keys and known_hosts), and a lane reached that way finds the twin up when a run starts, so
`papermill runbooks/launch.ipynb OUT.ipynb` with no parameters works from a stopped twin. It adds the
book's page of the facts the twin reproduces (twin/facts.py), measured when the book is built, and the fault
matrix's (twin/fault_matrix.py).
"""
from __future__ import annotations

from pathlib import Path

from ..nodes import NodeError
from ..params import LaneParams
from ..plugins import Registry
from . import control, facts, fault_matrix

SSH_CONFIG_NAME = "twin"


def ssh_config() -> Path:
    status = control.status()
    if not status["running"]:
        raise NodeError("the twin is not running: start it with `lanebook twin up`")
    return Path(status["ssh_config"])


def bring_up(lane: LaneParams) -> None:
    """Start the twin (fast: cold-bind and JIT waits shortened, decode rates never) when a twin lane finds it down."""
    if lane.ssh_config == SSH_CONFIG_NAME and not control.status()["running"]:
        control.up(faults=[], fast=True)


def register(registry: Registry) -> None:
    registry.ssh_config(SSH_CONFIG_NAME, ssh_config)
    registry.before_run(bring_up)
    registry.book_page("twin", facts.render_page)
    registry.book_page("faults", fault_matrix.render_page)
