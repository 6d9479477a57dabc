"""perftest's `ib_write_bw` on a twin node: RC RDMA writes between two nodes' rails, with the twin's link figures.

It takes perftest's command line: the server with no host (`ib_write_bw -d DEV [-x GID] [-s SIZE] [-q QPS] [-F]
[--report_gbits] [-D SECONDS | -n ITERS] [-p PORT] [-c RC]`), the client the same with the server's address last.
As perftest does, the two meet over a TCP socket on the port (18515 unless -p), exchange their ends (device, QP,
GID) and both print the test's header, the local and remote address lines and the results table, in perftest's
formats (perftest_parameters.h: RESULT_LINE, RESULT_FMT_G, REPORT_FMT). A rail's bandwidth is the twin's: a healthy
ConnectX-7 logical interface ~94 Gb/s (92.57-97.28 measured: dgx-spark-playbooks PR 108), a rail the boot left
degraded (fault link-degraded) ~13 Gb/s, a little seeded noise on both; small messages are held to a message rate.
RC writes above 64 KiB fail as they do on GB10 (linux-rdma/perftest issue 394): the requester reports a completion
with error, the responder's kernel logs the local protection error with the syndrome tuple that issue quotes. What
it prints is a twin figure. The wait is the twin's clock, at most half a second.
"""

from __future__ import annotations

import json
import random
import socket
import sys
import time

from lanebook.twin.standins.base import fail, node_root, time_scale, twin_state

HEALTHY_GBPS, HEALTHY_NOISE = 94.3, 1.1  # dgx-spark-playbooks PR 108: 92.57 and 97.28 per logical interface
DEGRADED_NOISE = 0.4  # around the degraded rail's own figure (13.23 Gb/s with eight QPs in PR 108)
MSG_RATE_MPPS_PER_QP = 2.64  # what small writes reach on one QP (a CX-class HCA, perftest issue 132's table)
GB10_MAX_RC_WRITE = 65536  # larger RC writes fail on GB10 (linux-rdma/perftest issue 394)
GB10_RC_FAULT = "0x3b 0x0 0x9d"  # the responder's local protection error as that issue quotes it
DEFAULT_PORT = 18515
ACCEPT_S = 60.0
RESULT_LINE = "-" * 87
RESULT_FMT_G = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
RESULT_FMT = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
USAGE = " Invalid Command or flag.\n Please check command line and run again."


def _options(args: list[str]) -> dict | None:
    """perftest's options this stand-in takes; None for anything else (perftest refuses it)."""
    values = {"-d": "dev", "--ib-dev": "dev", "-x": "gid", "--gid-index": "gid", "-s": "size", "--size": "size"}
    values |= {"-q": "qps", "--qp": "qps", "-D": "duration", "--duration": "duration", "-n": "iters"}
    values |= {"--iters": "iters", "-p": "port", "--port": "port", "-c": "connection", "--connection": "connection"}
    values |= {"-i": "ib_port", "--ib-port": "ib_port"}
    flags = {"-F": "cpu_freq", "--CPU-freq": "cpu_freq", "--report_gbits": "gbits", "--report-gbits": "gbits"}
    found: dict = {"host": None}
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, inline = arg.partition("=")
        if name in values:
            if eq:
                found[values[name]] = inline
            elif i + 1 < len(args):
                found[values[name]] = args[i + 1]
                i += 1
            else:
                return None
        elif arg in flags:
            found[flags[arg]] = True
        elif not arg.startswith("-") and found["host"] is None:
            found["host"] = arg
        else:
            return None
        i += 1
    try:
        for key, default in (("size", 65536), ("qps", 1), ("port", DEFAULT_PORT), ("ib_port", 1)):
            found[key] = int(found.get(key, default))
        for key in ("gid", "duration", "iters"):
            found[key] = int(found[key]) if key in found else None
    except ValueError:
        return None
    if found.get("connection", "RC") != "RC" or found["qps"] < 1 or found["size"] < 1:
        return None
    return found


def _end(machine, device: str, address: str) -> dict:
    """This node's end of the test: its device's cap, the RoCE path MTU its netdev allows, a QP's numbers."""
    netdev = dict(machine.rdma_devices())[device]
    mtu = next((m for name, m, _ in machine.links() if name == netdev), 1500)
    rng = random.Random(f"{machine.root}:{device}:{time.time_ns()}")
    return {
        "device": device,
        "cap": machine.rail_cap_gbps(device),
        "roce_mtu": max(m for m in (256, 512, 1024, 2048, 4096) if m <= max(mtu - 100, 256)),
        "qpn": rng.randrange(0x100, 0xFFFF),
        "psn": rng.randrange(0, 0xFFFFFF),
        "rkey": rng.randrange(0x1000, 0xFFFFFF),
        "vaddr": 0x7F0000000000 + rng.randrange(0, 0xFFFFFFF) * 0x1000,
        "address": address,
    }


def _header(opts: dict, end: dict, client: bool) -> str:
    timed = opts["duration"] is not None
    lines = [
        RESULT_LINE,
        "                    RDMA_Write BW Test",
        f" Dual-port       : OFF\t\tDevice         : {opts['dev']}",
        f" Number of qps   : {opts['qps']}\t\tTransport type : IB",
        " Connection type : RC\t\tUsing SRQ      : OFF",
        " PCIe relax order: ON",
        " ibv_wr* API     : ON",
    ]
    if client:
        lines.append(" TX depth        : 128")
    lines += [
        f" CQ Moderation   : {1 if timed else 100}",
        f" Mtu             : {end['roce_mtu']}[B]",
        " Link type       : Ethernet",
        f" GID index       : {3 if opts['gid'] is None else opts['gid']}",
        " Max inline data : 0[B]",
        " rdma_cm QPs\t : OFF",
        " Data ex. method : Ethernet",
        RESULT_LINE,
    ]
    return "\n".join(lines)


def _address(side: str, end: dict) -> str:
    gid = ":".join(["00"] * 10 + ["255", "255"] + [f"{int(b):02d}" for b in end["address"].split(".")])
    return (
        f" {side} address: LID 0000 QPN {end['qpn']:#06x} PSN {end['psn']:#08x} RKey {end['rkey']:#08x} "
        f"VAddr {end['vaddr']:#016x}\n GID: {gid}"
    )


def _results(opts: dict, result: dict) -> str:
    if opts.get("gbits"):
        row = f" {result['size']:<7d}    {result['iters']:<10d}       {result['peak']:<7.2f}            "
        row += f"{result['avg']:<7.2f}\t\t     {result['rate']:<7.6f}"
        return "\n".join([RESULT_FMT_G, row, RESULT_LINE])
    to_mb = 1e9 / 8 / 1048576
    row = f" {result['size']:<7d}    {result['iters']:<10d}       {result['peak'] * to_mb:<7.2f}            "
    row += f"{result['avg'] * to_mb:<7.2f}\t\t     {result['rate']:<7.6f}"
    return "\n".join([RESULT_FMT, row, RESULT_LINE])


def _measure(opts: dict, local: dict, remote: dict, seed: str) -> dict:
    """The twin's figures for one run: the slower end's rate, a little noise, a message-rate bound."""
    rng = random.Random(seed)
    caps = [c for c in (local["cap"], remote["cap"]) if c is not None]
    gbps = min(caps) + rng.uniform(-DEGRADED_NOISE, DEGRADED_NOISE) if caps else HEALTHY_GBPS
    if not caps:
        gbps += rng.uniform(-HEALTHY_NOISE, HEALTHY_NOISE)
    gbps = min(gbps, opts["size"] * 8 * MSG_RATE_MPPS_PER_QP * opts["qps"] / 1e3)
    rate = gbps * 1e9 / 8 / opts["size"] / 1e6
    if opts["duration"] is not None:
        iters, peak = int(rate * 1e6 * opts["duration"]), 0.0
    else:
        iters, peak = opts["iters"] or 5000, gbps * rng.uniform(1.0, 1.02)
    return {"size": opts["size"], "iters": iters, "peak": peak, "avg": gbps, "rate": rate}


def _wait(opts: dict) -> None:
    seconds = opts["duration"] if opts["duration"] is not None else (opts["iters"] or 5000) / 1e6
    time.sleep(min(seconds * time_scale(), 0.5))


def _lines(sock: socket.socket):
    buffer = b""
    while True:
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield json.loads(line)
        chunk = sock.recv(65536)
        if not chunk:
            return
        buffer += chunk


def _send(sock: socket.socket, message: dict) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def ib_write_bw(args: list[str]) -> int:
    from lanebook.twin.standins.machine import NodeMachine

    opts = _options(list(args))
    if opts is None:
        return fail(USAGE)
    machine = NodeMachine(node_root())
    devices = dict(machine.rdma_devices())
    device = opts.get("dev") or next(iter(devices))
    if device not in devices:
        return fail(f" IB device {device} not found\n Unable to find the Infiniband/RoCE device")
    opts["dev"] = device
    timed = opts["duration"] is not None
    if opts["host"] is None:
        return _server(opts, machine)
    return _client(opts, machine, timed)


def _server(opts: dict, machine) -> int:
    stars = "*" * 36
    print(f"\n{stars}\n* Waiting for client to connect... *\n{stars}")
    sys.stdout.flush()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("0.0.0.0", opts["port"]))
    except OSError:
        return fail(f" Couldn't listen to port {opts['port']}\n Unable to open file descriptor for socket connection")
    listener.listen(1)
    listener.settimeout(ACCEPT_S)
    try:
        conn, _ = listener.accept()
    except socket.timeout:
        return fail(" Unable to init the socket connection")
    with conn:
        messages = _lines(conn)
        remote = next(messages)
        local = _end(machine, opts["dev"], conn.getsockname()[0])
        _send(conn, local)
        print(_header(opts, local, client=False))
        print(_address("local", local))
        print(_address("remote", remote))
        print(RESULT_LINE)
        sys.stdout.flush()
        outcome = next(messages, None)
        if outcome is None or "failed" in outcome:
            if outcome and outcome.get("failed") == "rc-write-too-large":
                machine.kernel_message(
                    f"mlx5_core 0000:01:00.0: {opts['dev']}: responder CQE error: local protection error "
                    f"({GB10_RC_FAULT}), QPN {local['qpn']:#06x}, WR 0"
                )
            return fail(" Failed to exchange data between server and clients")
        print(_results(opts, outcome["result"]))
    return 0


def _own_address() -> tuple[str, int] | None:
    """This node's address on the twin (its RoCE address), the source of the client's connection."""
    import os

    nodes = twin_state().get("addresses", {}).get("nodes", [])
    found = dict((alias, ip) for alias, ip in nodes).get(os.environ.get("LANEBOOK_NODE", ""))
    return (found, 0) if found else None


def _client(opts: dict, machine, timed: bool) -> int:
    try:
        conn = socket.create_connection((opts["host"], opts["port"]), timeout=10, source_address=_own_address())
    except OSError:
        return fail(
            f"Couldn't connect to {opts['host']}:{opts['port']}\nUnable to open file descriptor for socket "
            "connection\n Unable to init the socket connection"
        )
    with conn:
        local = _end(machine, opts["dev"], conn.getsockname()[0])
        _send(conn, local)
        remote = next(_lines(conn))
        if timed:
            print(" WARNING: BW peak won't be measured in this run.")
        print(_header(opts, local, client=True))
        print(_address("local", local))
        print(_address("remote", remote))
        print(RESULT_LINE)
        print(RESULT_FMT_G if opts.get("gbits") else RESULT_FMT)
        sys.stdout.flush()
        if opts["size"] > GB10_MAX_RC_WRITE:
            _send(conn, {"failed": "rc-write-too-large"})
            return fail(
                " Completion with error at client\n Failed status 10: wr_id 0 syndrom 0x9d\n scnt=128, ccnt=0\n"
                " Failed to complete run_iter_bw function successfully"
            )
        _wait(opts)
        result = _measure(opts, local, remote, f"{local['device']}:{remote['device']}:{local['qpn']}")
        _send(conn, {"result": result})
        print("\n".join(_results(opts, result).splitlines()[1:]))
    return 0
