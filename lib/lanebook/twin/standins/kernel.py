"""The kernel's view of a twin node: dmesg, journalctl -k and ip link, printed from the node's state.

Each prints what the node's machine keeps (lanebook.twin.standins.machine): the kernel's messages of this boot and of
the boot before (a persistent journal: `journalctl -b -1` has the previous boot once the node rebooted, and says it
has none before that, as journald does), and the node's links with their MTUs. They only read; the formats are the
real tools' (dmesg's `[seconds] message`, journalctl's short format, `ip link`'s and `ip -o link`'s lines).
"""

from __future__ import annotations

import os
import time
from datetime import datetime

from lanebook.twin.standins.base import fail, node_root, take
from lanebook.twin.standins.machine import NodeMachine


def _host() -> str:
    return f"spark-{os.environ.get('LANEBOOK_NODE', 'node')}"


def dmesg(args: list[str]) -> int:
    """`dmesg [-T]`: the ring buffer of this boot, `[seconds] message` (or -T human times)."""
    human = take(args, "-T", "--ctime", flag=True)
    take(args, "-x", "--decode", "-L", "--color", "-P", "--nopager", flag=True)
    if args:
        return fail(f"dmesg: the twin's dmesg reads the ring buffer only (dmesg [-T]); not {' '.join(args)}")
    found = NodeMachine(node_root()).kernel_messages(0)
    booted, messages = found if found else (time.time(), [])
    for at, message in messages:
        stamp = datetime.fromtimestamp(booted + at).strftime("%a %b %e %H:%M:%S %Y") if human else f"{at:12.6f}"
        print(f"[{stamp}] {message}")
    return 0


def journalctl(args: list[str]) -> int:
    """`journalctl -k [-b [N]] [--no-pager]`: the kernel's messages of a boot, in journalctl's short format."""
    kernel = take(args, "-k", "--dmesg", flag=True)
    boot = take(args, "-b", "--boot")
    take(args, "--no-pager", "-q", "--quiet", "--no-hostname", flag=True)
    output = take(args, "-o", "--output")
    if args or not kernel or output not in (None, "short"):
        return fail("the twin's journalctl keeps the kernel's messages only: journalctl -k [-b [0|-1]] [--no-pager]")
    offset = 0 if boot in (None, "", "0") else int(boot) if boot.lstrip("-").isdigit() else None
    found = NodeMachine(node_root()).kernel_messages(offset) if offset is not None else None
    if found is None:
        return fail(f"Data from the specified boot ({boot}) is not available: No such boot ID in journal")
    booted, messages = found
    if not messages:
        print("-- No entries --")
    for at, message in messages:
        print(f"{datetime.fromtimestamp(booted + at).strftime('%b %d %H:%M:%S')} {_host()} kernel: {message}")
    return 0


def ip(args: list[str]) -> int:
    """`ip [-o] link [show [dev] NAME]`: the node's links, flags and MTU as iproute2 prints them."""
    one_line = take(args, "-o", "-oneline", flag=True)
    if not args or args[0] not in ("link", "l", "li", "lin"):
        return fail("the twin's ip lists links only: ip [-o] link [show [dev] NAME]")
    rest = [a for a in args[1:] if a not in ("show", "list", "dev")]
    machine = NodeMachine(node_root())
    links = [link for link in machine.links() if not rest or link[0] in rest]
    if rest and not links:
        return fail(f'Device "{rest[0]}" does not exist.')
    for n, (name, mtu, kind) in enumerate(machine.links(), 1):
        if (name, mtu, kind) not in links:
            continue
        if kind == "loopback":
            flags, tail = "LOOPBACK,UP,LOWER_UP", "qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000"
        else:
            flags, tail = "BROADCAST,MULTICAST,UP,LOWER_UP", "qdisc mq state UP mode DEFAULT group default qlen 1000"
        brd = "00:00:00:00:00:00" if kind == "loopback" else "ff:ff:ff:ff:ff:ff"
        second = f"link/{kind} {machine.mac(name)} brd {brd}"
        head = f"{n}: {name}: <{flags}> mtu {mtu} {tail}"
        print(f"{head}\\    {second}" if one_line else f"{head}\n    {second}")
    return 0
