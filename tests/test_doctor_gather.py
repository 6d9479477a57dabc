"""The doctor on a live lane (lanebook.verify.doctor_gather): a dry run lists every read it would send and opens no
connection; on the twin a healthy launched lane gives no finding, and the doctor changed nothing on the nodes (their
files, containers and the lane-pair lock are as before: only the nodes' session records and the running server's own
log, which only grows, differ) and sent only the commands it lists."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.lanebook_runs import dry_run_offline, run
from lanebook.lane.params import load_lane
from lanebook.nodes import ssh
from lanebook.ops import launcher
from lanebook.twin.nodes import TwinLayout, twin_dir
from lanebook.verify.doctor_gather import gather

SESSION_RECORDS = ("var/commands.log", "var/sshd.log")  # sshd's own records of each session, as a node's auth log


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lanebook.cli", *args], capture_output=True, text=True, timeout=300, env=os.environ
    )


def test_a_dry_run_lists_every_read_on_every_node_and_opens_no_connection():
    with ssh.LaneNodes(load_lane("anemll-0731"), dry_run=True) as nodes:
        gathered = gather(nodes, sleep=lambda s: pytest.fail("a dry run waits for nothing"))
        commands = nodes.executor.commands()
    assert all(n._connection is None for n in nodes) and gathered.logs == [] and gathered.metrics == []
    container = "ds4-f-mia-anemll-0731-vllm-dspark-1"
    for node in ("head", "worker"):
        for command in (
            f"docker inspect -f '{{{{.State.StartedAt}}}}' {container}",
            f"docker top {container}",
            "free -m",
            "systemctl list-units --type=service --state=running --no-pager",
            "journalctl -k -b 0 --no-pager",
            "journalctl -k -b -1 --no-pager",
            "ip -o link",
        ):
            assert f"{node}: {command}" in commands
    for node in ("head", "worker"):  # the engine processes' CPU: the container's processes, a second top frame 1 s on
        cpu = next(c for c in commands if c.startswith(f"{node}: p=$(docker top {container} -o pid,args"))
        assert "top -b -n 2 -d 0.5 -c -w 512 -p" in cpu and "n==2" in cpu
    for node in ("head", "worker"):
        weights = next(c for c in commands if c.startswith(f"{node}: hub=~/.cache/huggingface/hub/models--"))
        assert "model.safetensors.index.json" in weights and "-name '*.incomplete' -printf" in weights
    assert "local: GET http://192.168.1.11:8888/metrics twice, 3 s apart" in commands
    for command in commands:  # nothing that writes: no root, no removal, no lock, no redirection into a file
        assert not any(w in command for w in ("sudo", " rm ", "mkdir", "lock", "mv ", "tee ", "drop_caches")), command
        safe = command.replace("2>&1", "").replace(">&2", "").replace("2>/dev/null", "").replace("'%p -> %l", "")
        assert ">" not in safe, command

    done = cli("doctor", "--lane", "anemll-0731", "--dry-run")
    assert done.returncode == 0 and f"head: docker logs --since STARTED_AT {container} 2>&1" in done.stdout


def test_files_and_lane_are_one_or_the_other():
    done = cli("doctor", "--lane", "twin", "--logs", "x.log")
    assert done.returncode == 2 and "either --lane LANE or --logs" in done.stderr


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    found = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = Path(directory, name)
            rel = str(path.relative_to(root))
            if not rel.endswith(SESSION_RECORDS):
                st = path.lstat()
                found[rel] = (st.st_mtime_ns, st.st_size)
    return found


@pytest.fixture(scope="module")
def launched(twin):
    with ssh.LaneNodes(load_lane("twin")) as nodes:
        assert launcher.start_lane(nodes).ok
        yield nodes
        launcher.stop_lane(nodes)


@pytest.mark.twin
def test_a_healthy_twin_lane_gives_no_finding_and_the_doctor_changes_nothing(launched, tmp_path):
    nodes = TwinLayout(twin_dir()).root / "nodes"
    containers = launcher.running_containers(launched)
    before = _listing(nodes)
    logs = {p: p.read_bytes() for p in nodes.glob("*/var/containers/*/log")}
    commands_before = {a: TwinLayout(twin_dir()).command_log(a).read_bytes() for a in ("head", "worker")}
    locks = sorted(nodes.glob("*/home/.lanebook/lane-pair.lock*"))  # a broken lock an earlier test left may be there

    done = cli("doctor", "--lane", "twin", "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    sent = [
        c.decode()
        for a in ("head", "worker")
        for c in TwinLayout(twin_dir()).command_log(a).read_bytes()[len(commands_before[a]) :].split(b"\0")
        if c
    ]
    found = json.loads(done.stdout)
    assert found["healthy"] is True and found["findings"] == []
    assert {n["id"] for n in found["notes"]} <= {"P11", "H01"}  # a cold bind's SHM lines are named harmless
    read = "\n".join(found["read"])
    for node in ("head", "worker"):
        assert f"{node}: docker logs ds4-f-mia-anemll-0731-vllm-dspark-1" in read and f"{node}: ip -o link" in read
        assert f"{node}: journalctl -k -b 0 --no-pager" in read
        assert f"{node}: systemctl list-units --type=service --state=running --no-pager" in read
        assert "vllm" in found["live_commands"][node] and "serve" in found["live_commands"][node]
        assert f"{node}: weights index against shards (1 lines)" in read  # "index names 48 shard(s)", nothing else
        assert f"{node}: engine processes' CPU (top) (" in read  # the twin's processes, none of them hot
        previous = f"{node}: journalctl -k -b -1 --no-pager: exit 1: Data from the specified boot (-1) is not available"
        assert previous in "\n".join(found["not_read"])
    assert "(scrape 2," in read

    after = _listing(nodes)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert all(k.startswith(tuple(str(p.relative_to(nodes)) for p in logs)) for k in changed), changed
    assert all(p.read_bytes().startswith(text) for p, text in logs.items())  # the server's own log only grew
    assert launcher.running_containers(launched) == containers
    assert sorted(nodes.glob("*/home/.lanebook/lane-pair.lock*")) == locks  # no lock taken
    assert sent and all(
        c.startswith(("docker inspect -f", "docker logs --since", "docker top", "free -m", "journalctl -k", "ip -o"))
        or c.startswith("systemctl list-units ")
        or "/sys/class/infiniband" in c
        or c.startswith(("find ", "hub=", "p=$(docker top "))
        for c in sent
    ), sent


@pytest.mark.twin
def test_the_doctor_runbook_records_a_pass_with_no_finding_on_the_healthy_twin(launched, tmp_path):
    nodes = TwinLayout(twin_dir()).root / "nodes"
    locks = sorted(nodes.glob("*/home/.lanebook/lane-pair.lock*"))  # a broken lock an earlier test left may be there
    record, done = run(tmp_path, "doctor", "twin", expect_exit=0)
    assert (record["verdict"], record["twin"]) == ("pass", True), done.stdout[-2000:]
    figures = record["figures"]
    assert figures["healthy"] is True and figures["findings"] == [] and figures["confirmed"] == []
    assert any(r.startswith("head: docker logs ") for r in figures["read"])
    assert sorted(nodes.glob("*/home/.lanebook/lane-pair.lock*")) == locks  # no lock taken


def test_the_doctor_runbook_dry_run_on_the_real_lane_opens_no_connection(tmp_path):
    record, done = dry_run_offline(tmp_path, "doctor")
    assert record["verdict"] == "dry-run" and record["figures"]["healthy"] is None
    assert "head: free -m" in done.stdout and "worker: ip -o link" in done.stdout


def test_the_doctor_reads_every_rank_of_a_four_node_lane():
    """`lanebook doctor --lane anemll-0731-tp4 --dry-run`: each of the four nodes read the same way, no connection."""
    with ssh.LaneNodes(load_lane("anemll-0731-tp4"), dry_run=True) as nodes:
        gather(nodes, sleep=lambda s: pytest.fail("a dry run waits for nothing"))
        commands = nodes.executor.commands()
    assert all(n._connection is None for n in nodes)
    container = "ds4-f-mia-anemll-0731-tp4-vllm-dspark-1"
    for node in ("head", "worker", "worker2", "worker3"):
        assert f"{node}: docker top {container}" in commands and f"{node}: free -m" in commands
    done = cli("doctor", "--lane", "anemll-0731-tp4", "--dry-run")
    assert done.returncode == 0
    for node in ("head", "worker", "worker2", "worker3"):
        assert f"{node}: docker logs --since STARTED_AT {container} 2>&1" in done.stdout
