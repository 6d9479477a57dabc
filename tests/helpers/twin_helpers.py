"""Helpers for tests against the twin.

private_twin (lanebook.twin.control's): a twin with its own state dir and ports beside the shared one (which
stays untouched). Faults are fixed when a twin comes up, and restarting the shared twin would pull it from
under other sessions; so a test needing a fault brings up its own, uses it, and takes it down again.
"""

from __future__ import annotations

from lanebook.nodes.ssh import q
from lanebook.twin import control
from lanebook.twin.control import private_twin  # noqa: F401 - the tests' import

from helpers.waits import eventually

_free_ports = control.free_ports


def prints_nothing(node, command: str, within_s: float = 5.0) -> bool:
    """`command` on the node prints nothing within a bounded wait (polled)."""
    return eventually(lambda: not node.run(command, check=False).stdout.strip(), within_s, poll_s=0.1)


def process_gone(node, pattern: str, within_s: float = 5.0) -> bool:
    """No process on the node matches `pattern` (pgrep -f) within a bounded wait.

    Write the pattern with a bracket (`slee[p] 5`) so pgrep's own command line cannot match it.
    """
    return prints_nothing(node, f"pgrep -f {q(pattern)}", within_s)
