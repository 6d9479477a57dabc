"""Helpers for tests against the twin.

private_twin: a twin with its own state dir and ports beside the shared one (which stays untouched).
Faults are fixed when a twin comes up, and restarting the shared twin would pull it from under other
sessions; so a test needing a fault brings up its own (LANEBOOK_TWIN_DIR and port variables, which
lanebook.twin reads), uses it, and takes it down again.
"""
from __future__ import annotations

import os
import random
import socket
import time
from contextlib import contextmanager

from lanebook.nodes import q
from lanebook.twin import control

IPS = ("127.0.0.2", "127.0.0.3")


def _free_everywhere(port: int) -> bool:
    for ip in IPS:
        with socket.socket() as sock:
            try:
                sock.bind((ip, port))
            except OSError:
                return False
    return True


def _free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = random.randint(30000, 60000)
        if port not in ports and _free_everywhere(port):
            ports.append(port)
    return ports


@contextmanager
def private_twin(state_dir, faults):
    """Yield the status of a twin with `faults` that only this test uses; always taken down after."""
    ssh, api, master = _free_ports(3)
    env = {"LANEBOOK_TWIN_DIR": str(state_dir), "LANEBOOK_TWIN_SSH_PORT": str(ssh),
           "LANEBOOK_TWIN_API_PORT": str(api), "LANEBOOK_TWIN_MASTER_PORT": str(master)}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield control.up(faults=faults, fast=True)
    finally:
        try:
            control.down()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def prints_nothing(node, command: str, within_s: float = 5.0) -> bool:
    """`command` on the node prints nothing within a bounded wait (polled)."""
    deadline = time.monotonic() + within_s
    while node.run(command, check=False).stdout.strip():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def process_gone(node, pattern: str, within_s: float = 5.0) -> bool:
    """No process on the node matches `pattern` (pgrep -f) within a bounded wait.

    Write the pattern with a bracket (`slee[p] 5`) so pgrep's own command line cannot match it.
    """
    return prints_nothing(node, f"pgrep -f {q(pattern)}", within_s)
