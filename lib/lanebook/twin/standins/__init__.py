"""Stand-ins on the twin nodes' PATH for what cannot exist here: docker, hf, sudo, systemctl, loginctl, sysctl, free,
df, sleep, dmesg, journalctl, ip, rdma, ib_write_bw.

Each accepts the command lines the real lanes get and acts on the node it runs on ($LANEBOOK_NODE_ROOT), never on
this machine: docker (runtime), hf (hf), the system commands (system, machine), the kernel's log and links, ip and
rdma (kernel), perftest's ib_write_bw over the RoCE rails (perftest).
The node's bin/ holds shims, `exec python -m lanebook.twin.standins NAME "$@"`, so each runs as a process of its
own, like the real tool; what it prints is a twin figure. A --fast node's bin/sleep sleeps plain seconds itself
(lanebook.twin.nodes.sleep_shim). A suite runs them thousands of times, so each imports only what its command
needs: no dataclasses or typing on their import path, heavy modules inside the functions that use them.
"""

from __future__ import annotations

import importlib
import sys

from lanebook.base.errors import LanebookError
from lanebook.twin.standins.base import fail

# command -> (module, function): imported on use, so each stand-in starts only what it needs
COMMANDS = {
    "docker": ("docker", "docker"),
    "hf": ("hf", "hf"),
    "sudo": ("system", "sudo"),
    "systemctl": ("system", "systemctl"),
    "loginctl": ("system", "loginctl"),
    "sysctl": ("system", "sysctl"),
    "free": ("system", "free"),
    "df": ("system", "df"),
    "sleep": ("system", "sleep"),
    "dmesg": ("kernel", "dmesg"),
    "journalctl": ("kernel", "journalctl"),
    "ip": ("kernel", "ip"),
    "rdma": ("kernel", "rdma"),
    "ib_write_bw": ("perftest", "ib_write_bw"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        return fail(f"usage: python -m lanebook.twin.standins {{{','.join(COMMANDS)}}} ARGS...", 2)
    module, function = COMMANDS[argv[0]]
    command = getattr(importlib.import_module(f"{__name__}.{module}"), function)
    try:
        return command(argv[1:])
    except LanebookError as exc:
        return fail(f"{argv[0]}: {exc}")
    except BrokenPipeError:
        return 0
