"""The twin's ib_write_bw: two local nodes meet over its TCP exchange and print perftest's format with the twin's
figures (a healthy rail in PR 108's band, a degraded one at ~13 Gb/s), RC writes above 64 KiB fail as on GB10 with
the responder's syndrome in its kernel log, bad options and devices are refused, and a power cycle heals the rail."""

from __future__ import annotations

import socket
import subprocess

from helpers.node_helpers import local_node
from lanebook.verify.link import parse_ib_write_bw


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_ib_write_bw_between_two_nodes_prints_perftests_format_and_fails_above_64_kib(tmp_path):
    server, client = local_node(tmp_path / "s"), local_node(tmp_path / "c")
    server.machine.degrade_rail("roceP2p1s0f0", 13.2)
    port = _free_port()

    def pair(size: int, device: str) -> tuple[subprocess.CompletedProcess, str]:
        args = f"-d {device} -x 3 -s {size} -q 1 -F --report_gbits -D 3 -p {port}"
        started = subprocess.Popen(
            ["bash", "-c", f"exec ib_write_bw {args}"], env=server.env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(200):  # until it listens
            if subprocess.run(["ss", "-Htln", f"sport = :{port}"], capture_output=True, text=True).stdout:
                break
            subprocess.run(["sleep", "0.05"])
        done = client.run(f"ib_write_bw {args} 127.0.0.1")
        return done, started.communicate(timeout=30)[0]

    done, served = pair(65536, "rocep1s0f0")
    assert done.returncode == 0, done.stderr
    parsed = parse_ib_write_bw(done.stdout)
    assert parsed.measured and 92 <= parsed.bw_average_gbps <= 97 and parsed.message_bytes == 65536
    assert "RDMA_Write BW Test" in done.stdout and " local address: LID 0000 QPN 0x" in done.stdout
    assert "Waiting for client to connect" in served and parse_ib_write_bw(served).bw_average_gbps == (
        parsed.bw_average_gbps
    )
    slow, _ = pair(65536, "roceP2p1s0f0")
    assert 12 <= parse_ib_write_bw(slow.stdout).bw_average_gbps <= 14
    failed, _ = pair(131072, "rocep1s0f0")
    assert failed.returncode == 1 and "Completion with error at client" in failed.stderr
    assert "0x3b 0x0 0x9d" in server.run("dmesg").stdout.splitlines()[-1]
    assert client.run("ib_write_bw --bogus").returncode == 1
    assert "IB device mlx5_0 not found" in client.run("ib_write_bw -d mlx5_0 127.0.0.1").stderr
    server.machine.boot()  # a power cycle recovers the rail
    assert server.machine.rail_cap_gbps("roceP2p1s0f0") is None
