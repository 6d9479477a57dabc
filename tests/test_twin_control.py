"""`twin up | down | status` (lanebook.twin.control) on private twins (own state dirs and ports, so the session twin
other tests use is never restarted): idempotent up, a down that leaves no process, clear errors, and `running`
meaning reachable from here."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from helpers.twin_helpers import _free_ports, private_twin
from helpers.waits import eventually
from lanebook.base.errors import LanebookError
from lanebook.twin import control
from lanebook.twin.nodes import LIB_DIR

pytestmark = pytest.mark.twin

CHECKOUT = "ds4-f-mia-anemll-0731"
PLACEHOLDER = "LANEBOOK_TWIN_ENGINE='python3 -c \"import time; time.sleep(120)\"'"
COMPOSE = "docker compose -p control-test --env-file .env.dspark -f docker-compose.dspark.yml"


def ssh(status: dict, alias: str, command: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        ["ssh", "-F", status["ssh_config"], alias, command], capture_output=True, text=True, timeout=120
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{alias}: {command!r} exit {result.returncode}: {result.stderr[-1500:]}")
    return result


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _wait_for_process(cmdline: str, timeout_s: float = 60.0) -> None:
    running = eventually(
        lambda: any(_cmdline(p) == cmdline for p in Path("/proc").iterdir() if p.name.isdigit()), timeout_s, 0.1
    )
    assert running, f"no process {cmdline!r} after {timeout_s:g} s"


def test_up_is_idempotent_and_down_leaves_no_process(tmp_path):
    state_dir = tmp_path / "twin"
    with private_twin(state_dir, []) as first:
        assert first["running"] and all(n["sshd"] and n["reachable"] for n in first["nodes"])
        assert set(first) >= {"running", "ssh_config", "nodes", "api", "faults"} and "faults_pending" not in first
        assert control.up(fast=True)["nodes"] == first["nodes"]  # same sshd, nothing restarted
        ssh(first, "head", f"cd {CHECKOUT} && NODE_RANK=0 {PLACEHOLDER} {COMPOSE} up -d")
        # The session's client reads a copy of the ssh config kept outside the twin's dir: down() ends any process
        # whose command line names that dir, and a client ended that way says nothing of the node's side.
        client_config = tmp_path / "client_ssh_config"
        shutil.copyfile(first["ssh_config"], client_config)
        # /bin/sleep: the node's own `sleep` keeps the twin's time scale, and a fast twin's 300 s end in 1.5 s
        session = subprocess.Popen(["ssh", "-F", str(client_config), "worker", "/bin/sleep 300"])
        try:
            _wait_for_process("/bin/sleep 300 ")  # the session is open on the node
            assert control.twin_processes(state_dir)  # sshd, the container, the open session
            control.down()
            assert session.wait(timeout=10) == 255  # ssh: the connection closed, by the node's side
        finally:
            session.kill()
        assert control.twin_processes(state_dir) == set()
        assert [p for p in Path("/proc").iterdir() if p.name.isdigit() and str(state_dir) in _cmdline(p)] == []
        assert control.status()["running"] is False
        control.down()  # idempotent


def test_lanes_starting_at_once_on_a_down_twin_bring_it_up_once(tmp_path):
    """Two runs of twin lanes start together (a fleet's wave on an Airflow deployment): one brings the twin up, the
    other finds it up; neither takes the other's nodes down."""
    with private_twin(tmp_path / "twin", []):
        control.down()
        env = {**os.environ, "PYTHONPATH": str(LIB_DIR)}
        start = "from lanebook.lane.params import load_lane; from lanebook.twin import control; "
        start += "control.bring_up(load_lane('twin')); print(control.read_state(control.layout())['pids'])"
        runs = [
            subprocess.Popen([sys.executable, "-c", start], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(2)
        ]
        outputs = [run.communicate(timeout=120) for run in runs]
        assert [run.returncode for run in runs] == [0, 0], outputs
        assert outputs[0][0] == outputs[1][0]  # both saw the same nodes: one `up`
        up = control.status()
        assert up["running"] and all(n["sshd"] and n["reachable"] for n in up["nodes"]), up


def test_private_twins_of_a_process_reuse_its_last_ports_while_they_are_free():
    """So a process's private twins one after another (the fault matrix's rows) render their checkouts once."""
    ports = control.private_ports()
    assert len(set(ports)) == 3 and control.private_ports() == ports
    with socket.socket() as taken:
        taken.bind(("127.0.0.3", ports[1]))  # another program took one on the worker's address
        fresh = control.private_ports()
    assert len(set(fresh)) == 3 and ports[1] not in fresh


def test_unknown_fault_and_taken_port_are_clear_errors(tmp_path, monkeypatch):
    ssh_port, api_port, master_port = _free_ports(3)
    for name, value in (
        ("LANEBOOK_TWIN_DIR", str(tmp_path / "twin")),
        ("LANEBOOK_TWIN_SSH_PORT", str(ssh_port)),
        ("LANEBOOK_TWIN_API_PORT", str(api_port)),
        ("LANEBOOK_TWIN_MASTER_PORT", str(master_port)),
    ):
        monkeypatch.setenv(name, value)
    with pytest.raises(LanebookError, match="unknown fault no-such-fault .*known: worker-unreachable"):
        control.up(faults=["no-such-fault"], fast=True)
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.2", ssh_port))
        squatter.listen()
        with pytest.raises(LanebookError, match=rf"127.0.0.2:{ssh_port} .* already in use"):
            control.up(fast=True)
        assert not control.answers_ssh("127.0.0.2", ssh_port, timeout_s=0.5)  # it listens, but is no sshd
    control.down()


def test_a_twin_in_another_network_namespace_is_not_running_here(tmp_path, monkeypatch):
    """Its sshd lives (same process table) but its address does not answer from this namespace: not running."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-n", "true"]).returncode != 0:
        pytest.skip("unshare -n is not available here (needs root or user namespaces)")
    ssh_port, api_port, master_port = _free_ports(3)
    env = {
        "LANEBOOK_TWIN_DIR": str(tmp_path / "twin"),
        "LANEBOOK_TWIN_SSH_PORT": str(ssh_port),
        "LANEBOOK_TWIN_API_PORT": str(api_port),
        "LANEBOOK_TWIN_MASTER_PORT": str(master_port),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    start = (
        'ip link set lo up && exec "$0" -c \'from lanebook.twin import control; '
        'print(control.up(fast=True)["running"])\''
    )
    elsewhere = subprocess.run(
        ["unshare", "-n", "sh", "-c", start, sys.executable],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(LIB_DIR)},
    )
    try:
        assert elsewhere.stdout.strip() == "True", elsewhere.stderr[-1500:]  # up and reachable in its own namespace
        here = control.status()
        assert [(n["sshd"], n["reachable"]) for n in here["nodes"]] == [(True, False), (True, False)]
        assert here["running"] is False and here["faults"] == []
    finally:
        control.down()  # by pid, across namespaces
    assert control.twin_processes(tmp_path / "twin") == set()


def test_print_status(tmp_path, capsys):
    with private_twin(tmp_path / "twin", ["sticky-uma"]) as status:
        control.print_status(status)
    shown = capsys.readouterr().out
    assert "lanebook twin: running (fast)" in shown and "fault sticky-uma: ~12 GiB stays used" in shown


def test_a_reboot_ends_the_nodes_processes_empties_its_memory_and_keeps_its_files(tmp_path):
    """The worker reboots: sessions end, /dev/shm empties, files stay; docker starts again the container of the
    recipe's default policy (unless-stopped), not the one created with DSPARK_RESTART_POLICY=no."""
    with private_twin(tmp_path / "twin", []) as first:
        default_policy = f"NODE_RANK=1 {PLACEHOLDER} {COMPOSE} up -d"
        no_policy = (
            f"NODE_RANK=1 DSPARK_RESTART_POLICY=no {PLACEHOLDER} {COMPOSE.replace('control-test', 'control-no')} up -d"
        )
        ssh(first, "worker", f"cd {CHECKOUT} && {default_policy} && {no_policy} && touch /dev/shm/psm_planted")
        inspect = (
            "docker inspect --format '{{.Id}} {{.State.Pid}} {{.State.StartedAt}} {{.RestartCount}}' "
            "control-test-vllm-dspark-1"
        )
        before = ssh(first, "worker", inspect).stdout.split()
        # /bin/sleep: the fast twin's `sleep` is scaled, and a busy machine's reboot can outlast 300 scaled seconds
        session = subprocess.Popen(["ssh", "-F", first["ssh_config"], "worker", "/bin/sleep 300"])
        head_session = subprocess.Popen(["ssh", "-F", first["ssh_config"], "head", "/bin/sleep 300"])
        files = f"find {CHECKOUT} .cache -type f | sort | xargs sha256sum"
        kept = ssh(first, "worker", files).stdout
        try:
            assert control.node_processes("worker")
            after = control.reboot("worker")
            assert session.wait(timeout=10) != 0 and head_session.poll() is None  # the head was not rebooted
        finally:
            session.kill()
            head_session.kill()
        worker = after["nodes"][1]
        assert worker["reachable"] and worker["containers"] == [
            "control-test-vllm-dspark-1"
        ]  # sshd back, docker's start
        shm = ssh(after, "worker", "ls -A /dev/shm").stdout.split()
        assert (
            sorted(name[:4] for name in shm) == ["nccl", "psm_"] and "psm_planted" not in shm
        )  # the new process's only
        assert ssh(after, "worker", files).stdout == kept
        statuses = ssh(after, "worker", "docker ps -a --format '{{.Names}} {{.Status}}'").stdout.splitlines()
        assert [line.split(" ", 2)[:2] for line in statuses] == [
            ["control-no-vllm-dspark-1", "Exited"],
            ["control-test-vllm-dspark-1", "Up"],
        ]
        assert statuses[0].startswith("control-no-vllm-dspark-1 Exited (137)")
        identity, pid, started, restarts = ssh(after, "worker", inspect).stdout.split()
        assert identity == before[0] and pid != before[1] and restarts == before[3] == "0"
        assert datetime.fromisoformat(started) > datetime.fromisoformat(before[2])  # a fresh start, the same container
        with pytest.raises(LanebookError, match="unknown twin node gpu3"):
            control.reboot("gpu3")
        cli = [sys.executable, "-m", "lanebook.cli", "twin", "reboot"]  # the private twin's variables are inherited
        unknown = subprocess.run([*cli, "gpu3"], capture_output=True, text=True, timeout=60)
        assert (
            unknown.returncode == 2
            and unknown.stderr.strip() == "lanebook: unknown twin node gpu3 (known: head, worker)"
        )
        head = subprocess.run([*cli, "head"], capture_output=True, text=True, timeout=120)
        assert head.returncode == 0 and "lanebook twin: running (fast)" in head.stdout, head.stderr
        assert control.status()["nodes"][0]["reachable"] and ssh(control.status(), "head", "echo up").stdout == "up\n"


def _lane_on(nodes: list[tuple[str, str, str]]):
    """The twin lane on NODES ((alias, role, address), head first)."""
    from lanebook.lane.params import lane_with, load_lane

    twin = load_lane("twin")
    return lane_with(
        twin,
        name="twin-three",
        nodes=[{"alias": a, "role": r, "host": ip, "port": 2222, "roce_ip": ip} for a, r, ip in nodes],
    )


def test_a_lane_naming_more_nodes_gets_them_added_to_the_running_twin(tmp_path):
    """worker2 is started beside the pair without restarting it; every node reaches it; its home holds the lane's
    checkout and no weights (the head fans them out); a node at another address is one clear error; down stops all."""
    state_dir = tmp_path / "twin"
    lane = _lane_on(
        [("head", "head", "127.0.0.2"), ("worker", "worker", "127.0.0.3"), ("worker2", "worker", "127.0.0.4")]
    )
    with private_twin(state_dir, []) as first:
        pair_pids = dict(control.read_state(control.layout())["pids"])
        control.bring_up(lane)
        after = control.status()
        assert [(n["alias"], n["host"], n["reachable"]) for n in after["nodes"]] == [
            ("head", "127.0.0.2", True),
            ("worker", "127.0.0.3", True),
            ("worker2", "127.0.0.4", True),
        ]
        assert [n["root"] for n in after["nodes"][:2]] == [n["root"] for n in first["nodes"]]
        pids = control.read_state(control.layout())["pids"]
        assert {alias: pids[alias] for alias in ("head", "worker")} == pair_pids  # the pair was not restarted
        assert ssh(after, "head", "ssh worker2 hostname && ssh 127.0.0.4 true").returncode == 0
        assert (
            ssh(after, "worker2", f"test -f {CHECKOUT}/.env.dspark && ls -A .cache 2>/dev/null | wc -l").stdout == "0\n"
        )
        control.bring_up(lane)  # nothing missing: nothing started
        assert control.status()["nodes"] == after["nodes"]
        moved = _lane_on([("head", "head", "127.0.0.2"), ("worker", "worker", "127.0.0.9")])
        with pytest.raises(
            LanebookError, match="puts twin node worker at 127.0.0.9, but the running twin has it at 127.0.0.3"
        ):
            control.bring_up(moved)
        taken = _lane_on([("head", "head", "127.0.0.2"), ("gpu9", "worker", "127.0.0.4")])
        with pytest.raises(LanebookError, match="127.0.0.4, where the running twin's node worker2 listens"):
            control.bring_up(taken)
        control.down()
        assert control.twin_processes(state_dir) == set()
        assert not any(n["sshd"] for n in control.status()["nodes"])


def test_node_conditions_are_set_replaced_and_refused_when_unknown(twin):
    from lanebook.twin import control

    with pytest.raises(LanebookError, match="unknown node condition nope"):
        control.set_node_conditions("worker", ["nope"])
    root = control.layout().node("worker") / "twin-conditions"
    assert control.set_node_conditions("worker", ["sudo-asks", "disk-full"]) == ["disk-full", "sudo-asks"]
    assert control.set_node_conditions("worker", ["docker-denied"]) == ["docker-denied"]
    assert sorted(p.name for p in root.iterdir()) == ["docker-denied"]
    assert control.set_node_conditions("worker", []) == []
