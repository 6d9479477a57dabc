"""Security on the twin and in the library: host keys are checked everywhere (an unknown or changed key refuses, never
a silent add), the twin's sshd takes only its own key, everything the twin serves listens on loopback, and no SSH
private key reaches a run's outputs, record, logs or the book."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import struct
import subprocess
from pathlib import Path

import pytest
from helpers.lanebook_runs import run
from lanebook.base.paths import REPO
from lanebook.lane.params import lane_with, load_lane
from lanebook.nodes import ssh
from lanebook.ops import launcher
from lanebook.twin import control
from lanebook.twin.nodes import ALIASES, SSHD, TwinAddresses, TwinLayout, client_config

LIB = REPO / "lib" / "lanebook"


# --- host keys -------------------------------------------------------------------------------------------------


def test_no_code_adds_unknown_host_keys_or_turns_checking_off():
    """Fabric's Connection sets paramiko's AutoAddPolicy; lanebook replaces it with RejectPolicy (ssh.py), and no
    module names a policy that adds keys, or an ssh option that stops checking them."""
    lax = re.compile(
        r"AutoAddPolicy|WarningPolicy|StrictHostKeyChecking[ =](no|accept-new|off)|UserKnownHostsFile[ =]/dev/null",
        re.I,
    )
    found = [
        f"{p.relative_to(REPO)}:{n}"
        for p in LIB.rglob("*.py")
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if lax.search(line)
    ]
    assert found == []
    config = client_config(Path("/k/id"), Path("/k/known_hosts"), TwinAddresses())
    assert "  StrictHostKeyChecking yes" in config.splitlines() and "  UserKnownHostsFile /k/known_hosts" in config


def _policy(node: ssh.Node):
    return type(node.connection().client._policy).__name__


@pytest.mark.twin
def test_a_node_refuses_a_host_whose_key_it_does_not_know(twin, tmp_path):
    """Through the twin's ssh config (its own known_hosts) the head connects; with an empty known_hosts, or the
    head presenting the worker's key, or no ssh config at all (ssh's defaults hold no twin key), it refuses."""
    with ssh.LaneNodes(load_lane("twin")) as nodes:
        assert nodes.head.run("true").ok and _policy(nodes.head) == "RejectPolicy"
    config = Path(twin["ssh_config"])
    keys = config.parent / "keys"
    worker_key = " ".join((keys / "ssh_host_worker_ed25519.pub").read_text().split()[:2])
    wrong, empty = tmp_path / "wrong_known_hosts", tmp_path / "empty_known_hosts"
    wrong.write_text(f"[127.0.0.2]:2222 {worker_key}\n")
    empty.write_text("")
    for known in (wrong, empty):
        bad = tmp_path / f"ssh_config-{known.name}"
        bad.write_text(config.read_text().replace(str(keys / "known_hosts"), str(known)))
        with ssh.LaneNodes(lane_with(load_lane("twin"), ssh_config=str(bad))) as nodes:
            with pytest.raises(ssh.NodeUnreachable) as refused:
                nodes.head.run("true")
        assert "known_hosts" in str(refused.value) or "does not match" in str(refused.value), refused.value
    with ssh.LaneNodes(lane_with(load_lane("twin"), ssh_config=None)) as nodes:
        with pytest.raises(ssh.NodeUnreachable, match="not found in known_hosts"):
            nodes.head.run("true")
    twin_nodes = control.status()["nodes"]  # the pair, and any node a lane added (a four-node or fleet lane)
    assert (keys / "known_hosts").read_text().count("ssh-ed25519") == len(twin_nodes)  # the twin's own, nothing added


# --- the twin's sshd: its own key only ---------------------------------------------------------------------------


def _effective_sshd(config: Path) -> dict[str, list[str]]:
    """`sshd -T`: the configuration sshd actually runs with (lower-case keys)."""
    out = subprocess.run([SSHD, "-T", "-f", str(config)], capture_output=True, text=True, check=True).stdout
    found: dict[str, list[str]] = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        found.setdefault(key, []).append(value)
    return found


@pytest.mark.twin
@pytest.mark.parametrize("alias", ALIASES)
def test_the_twin_sshd_takes_only_the_twin_key(twin, alias):
    lay = TwinLayout(Path(twin["twin_dir"]))
    sshd = _effective_sshd(lay.sshd_config(alias))
    assert sshd["authorizedkeysfile"] == [str(lay.authorized_keys)]
    assert sshd["authenticationmethods"] == ["publickey"] and sshd["pubkeyauthentication"] == ["yes"]
    for off in (
        "passwordauthentication",
        "kbdinteractiveauthentication",
        "hostbasedauthentication",
        "permitemptypasswords",
        "allowagentforwarding",
        "allowtcpforwarding",
        "x11forwarding",
    ):
        assert sshd[off] == ["no"], off
    assert [ipaddress.ip_address(a.rsplit(":", 1)[0]).is_loopback for a in sshd["listenaddress"]] == [True]
    authorized = lay.authorized_keys.read_text().split()
    assert authorized[:2] == lay.user_key.with_suffix(".pub").read_text().split()[:2] and len(authorized) == 3


@pytest.mark.twin
def test_another_key_or_a_password_is_refused_by_the_twin_sshd(twin, tmp_path):
    lay = TwinLayout(Path(twin["twin_dir"]))
    other = tmp_path / "id_other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    with_other_key = tmp_path / "ssh_config"
    with_other_key.write_text(Path(twin["ssh_config"]).read_text().replace(str(lay.user_key), str(other)))
    for config, extra in (
        (with_other_key, []),
        (
            Path(twin["ssh_config"]),
            ["-o", "PubkeyAuthentication=no", "-o", "PreferredAuthentications=password,keyboard-interactive"],
        ),
    ):
        done = subprocess.run(
            ["ssh", "-F", str(config), *extra, "head", "true"], capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 255 and "Permission denied" in done.stderr, done.stderr


# --- loopback only -----------------------------------------------------------------------------------------------


def _listening(pids: set[int]) -> list[str]:
    """ip:port of every TCP socket in LISTEN state held by one of PIDS, from /proc/net/tcp and tcp6."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:
                continue
            address, port = local.split(":")
            raw = bytes.fromhex(address)
            packed = b"".join(struct.pack("<I", struct.unpack(">I", raw[i : i + 4])[0]) for i in range(0, len(raw), 4))
            found.append(f"{socket.inet_ntop(family, packed)}:{int(port, 16)}")
    return found


@pytest.fixture(scope="module")
def launched(twin):
    """The twin lane up (launched here when it was down, and stopped again after)."""
    with ssh.LaneNodes(load_lane("twin")) as nodes:
        started = not launcher.ask_api(nodes).healthy
        if started:
            assert launcher.start_lane(nodes).outcome == "ok"
        yield nodes
        if started:
            launcher.stop_lane(nodes)


@pytest.mark.twin
def test_every_socket_the_twin_listens_on_is_loopback(launched, twin):
    """Both sshd, the API server and the engines' ports, read from the kernel's socket tables of the twin's
    processes."""
    listening = _listening(control.twin_processes(Path(twin["twin_dir"])))
    ports = {int(a.rsplit(":", 1)[1]) for a in listening}
    assert {2222, 8888} <= ports, listening
    assert all(ipaddress.ip_address(a.rsplit(":", 1)[0]).is_loopback for a in listening), listening


# --- keys never copied into outputs --------------------------------------------------------------------------------


def _key_bodies(twin) -> dict[str, str]:
    """Each twin private key's base64 body lines (what a leak would carry), by file name."""
    keys = Path(twin["twin_dir"]) / "keys"
    bodies = {}
    for path in keys.iterdir():
        if path.suffix or path.name in ("known_hosts", "authorized_keys"):
            continue
        lines = [line for line in path.read_text().splitlines() if line and not line.startswith("-----")]
        bodies[path.name] = lines
    return bodies


@pytest.mark.twin
def test_no_private_key_reaches_a_run_record_its_notebook_the_twin_logs_or_the_book(launched, twin, tmp_path):
    record, done = run(tmp_path, "status", "twin", expect_exit=0)
    outputs = tmp_path / "outputs"
    places = [
        *outputs.rglob("*"),
        *Path(twin["twin_dir"]).glob("nodes/*/var/*.log"),
        *(REPO / "book" / "_build" / "html").rglob("*.html"),
        *(REPO / "outputs").rglob("*.ipynb"),
    ]
    texts = {str(p): p.read_text(errors="replace") for p in places if p.is_file()}
    texts["terminal"] = done.stdout + done.stderr
    bodies = _key_bodies(twin)
    assert bodies and all(len(lines) >= 3 for lines in bodies.values())
    leaks = [
        (where, name)
        for where, text in texts.items()
        for name, lines in bodies.items()
        if "PRIVATE KEY-----" in text or any(line in text for line in lines)
    ]
    assert leaks == []
    assert record["verdict"] == "pass" and len(texts) > 2
