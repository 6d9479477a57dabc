"""The kernel's view of a twin node: dmesg, journalctl -k, ip link and rdma link, printed from the node's state.

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


def _ip_entry(machine: NodeMachine, index: int, name: str, mtu: int, kind: str) -> dict:
    """One link as `ip -j link` prints it."""
    loopback = kind == "loopback"
    return {
        "ifindex": index,
        "ifname": name,
        "flags": ["LOOPBACK", "UP", "LOWER_UP"] if loopback else ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
        "mtu": mtu,
        "qdisc": "noqueue" if loopback else "mq",
        "operstate": "UNKNOWN" if loopback else "UP",
        "linkmode": "DEFAULT",
        "group": "default",
        "txqlen": 1000,
        "link_type": kind,
        "address": machine.mac(name),
        "broadcast": "00:00:00:00:00:00" if loopback else "ff:ff:ff:ff:ff:ff",
    }


def ip(args: list[str]) -> int:
    """`ip [-o|-j] link [show [dev] NAME]`: the node's links, flags and MTU as iproute2 prints them (-j: its JSON)."""
    import json

    one_line = take(args, "-o", "-oneline", flag=True)
    as_json = take(args, "-j", "-json", flag=True)
    if not args or args[0] not in ("link", "l", "li", "lin"):
        return fail("the twin's ip lists links only: ip [-o|-j] link [show [dev] NAME]")
    rest = [a for a in args[1:] if a not in ("show", "list", "dev")]
    machine = NodeMachine(node_root())
    links = [link for link in machine.links() if not rest or link[0] in rest]
    if rest and not links:
        return fail(f'Device "{rest[0]}" does not exist.')
    if as_json:
        shown = [_ip_entry(machine, n, *link) for n, link in enumerate(machine.links(), 1) if link in links]
        print(json.dumps(shown, separators=(",", ":")))
        return 0
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


def rdma(args: list[str]) -> int:
    """`rdma [-j] [-p] link [show [DEV[/PORT]]]`: the node's RDMA ports, their state and netdev, as iproute2's rdma
    tool prints them (`link DEV/1 state ACTIVE physical_state LINK_UP netdev NAME`; -j: its JSON)."""
    import json

    as_json = take(args, "-j", "-json", "--json", flag=True)
    pretty = take(args, "-p", "-pretty", "--pretty", flag=True)
    if not args or args[0] not in ("link", "l", "li", "lin"):
        return fail("the twin's rdma shows links only: rdma [-j] link [show [DEV[/PORT]]]")
    rest = [a for a in args[1:] if a not in ("show", "list")]
    machine = NodeMachine(node_root())
    links = {name: n for n, (name, _, _) in enumerate(machine.links(), 1)}
    ports = [(device, 1, netdev) for device, netdev in machine.rdma_devices()]
    if rest:
        device, _, port = rest[0].partition("/")
        if device not in {d for d, _, _ in ports}:
            return fail("Wrong device name")
        if port and port != "1":
            return fail("Wrong port number")
        ports = [p for p in ports if p[0] == device]
    if as_json:
        shown = [
            {
                "ifindex": index,
                "ifname": device,
                "port": port,
                "state": "ACTIVE",
                "physical_state": "LINK_UP",
                "netdev": netdev,
                "netdev_index": links.get(netdev, 0),
            }
            for index, (device, port, netdev) in enumerate(ports)
        ]
        print(json.dumps(shown, indent=4 if pretty else None, separators=None if pretty else (",", ":")))
        return 0
    for device, port, netdev in ports:
        print(f"link {device}/{port} state ACTIVE physical_state LINK_UP netdev {netdev}")
    return 0
