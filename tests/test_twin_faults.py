"""`twin up/down/status` and the node faults, on a private twin (own state dir, ssh port 2232, API port 8898)
so the shared session twin other tests use is never restarted. Ends with the launcher end to end."""
from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from lanebook.errors import LanebookError
from lanebook.twin import control

pytestmark = pytest.mark.twin

PRIVATE = {"LANEBOOK_TWIN_SSH_PORT": "2232", "LANEBOOK_TWIN_API_PORT": "8898", "LANEBOOK_TWIN_MASTER_PORT": "25010"}
CHECKOUT = "ds4-f-mia-anemll-0731"
MODEL_DIR = ".cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731"
PLACEHOLDER = "LANEBOOK_TWIN_ENGINE='python3 -c \"import time; time.sleep(120)\"'"
COMPOSE = "docker compose -p fault-test --env-file .env.dspark -f docker-compose.dspark.yml"


@pytest.fixture(scope="module")
def private(tmp_path_factory):
    """Point lanebook at a private twin for this module; bring it down and restore the environment after."""
    keys = [*PRIVATE, "LANEBOOK_TWIN_DIR"]
    saved = {key: os.environ.get(key) for key in keys}
    os.environ.update(PRIVATE, LANEBOOK_TWIN_DIR=str(tmp_path_factory.mktemp("private-twin")))
    try:
        yield Path(os.environ["LANEBOOK_TWIN_DIR"])
    finally:
        control.down()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def ssh(status: dict, alias: str, command: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["ssh", "-F", status["ssh_config"], alias, command], capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"{alias}: {command!r} exit {result.returncode}: {result.stdout[-1500:]} {result.stderr[-1500:]}")
    return result


def used_gib(status: dict, alias: str = "head") -> int:
    return int(ssh(status, alias, "free -g").stdout.splitlines()[1].split()[2])


def test_up_is_idempotent_and_down_leaves_no_process(private):
    first = control.up(fast=True)
    assert first["running"] and first["nodes"][0]["port"] == 2232 and first["api"] == "http://127.0.0.2:8898/v1"
    assert control.up(fast=True)["nodes"] == first["nodes"]  # same sshd, nothing restarted
    ssh(first, "head", f"cd {CHECKOUT} && NODE_RANK=0 {PLACEHOLDER} {COMPOSE} up -d")
    session = subprocess.Popen(["ssh", "-F", first["ssh_config"], "worker", "sleep 300"])
    try:
        assert control.twin_processes(private)  # sshd, the container, the open session
        control.down()
        assert session.wait(timeout=10) != 0
    finally:
        session.kill()
    assert control.twin_processes(private) == set()
    leftovers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and str(private) in _cmdline(p)]
    assert leftovers == []
    assert control.status()["running"] is False
    control.down()  # idempotent


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_unknown_fault_and_taken_port_are_clear_errors(private):
    with pytest.raises(LanebookError, match="unknown fault no-such-fault .*known: worker-unreachable"):
        control.up(faults=["no-such-fault"], fast=True)
    control.down()
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # recent connections linger in TIME_WAIT
        squatter.bind(("127.0.0.2", 2232))
        squatter.listen()
        with pytest.raises(LanebookError, match="127.0.0.2:2232 .* already in use"):
            control.up(fast=True)


def test_worker_unreachable(private):
    status = control.up(faults=["worker-unreachable"], fast=True)
    assert status["faults"] == ["worker-unreachable"] and status["faults_pending"] == []
    assert [n["sshd"] for n in status["nodes"]] == [True, False]
    assert ssh(status, "head", "true").returncode == 0
    refused = ssh(status, "worker", "true", check=False)
    assert refused.returncode == 255 and "refused" in refused.stderr
    assert ssh(status, "head", "ssh 127.0.0.3 true", check=False).returncode == 255


def test_incomplete_and_missing_shards_on_the_worker(private):
    status = control.up(faults=["incomplete-shards", "missing-shard"], fast=True)
    count = f"find {MODEL_DIR} -name '*.incomplete' | wc -l; find {MODEL_DIR} -name 'model-*-of-*.safetensors' | wc -l"
    assert ssh(status, "head", count).stdout.split() == ["0", "48"]
    assert ssh(status, "worker", count).stdout.split() == ["2", "45"]  # 2 unfinished, 1 missing


def test_ssh_drop_mid_rsync_needs_a_resume(private):
    status = control.up(faults=["ssh-drop-mid-rsync"], fast=True)
    assert ssh(status, "worker", f"test -e {MODEL_DIR}", check=False).returncode == 1
    push = f"rsync -aH --partial --info=stats2 {MODEL_DIR}/ 127.0.0.3:{MODEL_DIR}/"
    cut = ssh(status, "head", push, check=False)
    assert cut.returncode != 0
    assert ssh(status, "head", push).returncode == 0  # resumed
    digest = f"cd {MODEL_DIR} && find . -type f -o -type l | sort | xargs sha256sum | sha256sum"
    assert ssh(status, "head", digest).stdout == ssh(status, "worker", digest).stdout


def test_legacy_units_and_sticky_memory(private):
    status = control.up(faults=["sticky-uma", "legacy-units-active"], fast=True)
    assert ssh(status, "head", "systemctl is-active aiden-vllm.service").stdout.strip() == "active"
    assert ssh(status, "worker", "systemctl is-active aiden-vllm.service", check=False).stdout.strip() == "inactive"
    held = used_gib(status)
    ssh(status, "head", "sudo -n sh -c 'systemctl mask --now aiden-vllm.service'")
    assert ssh(status, "head", "systemctl is-enabled aiden-vllm.service", check=False).stdout.strip() == "masked"
    assert ssh(status, "head", "systemctl start aiden-vllm.service", check=False).returncode == 1
    baseline = used_gib(status)
    assert held - baseline >= 30  # the legacy stack's memory is free once it is masked --now
    ssh(status, "head", f"cd {CHECKOUT} && NODE_RANK=0 {PLACEHOLDER} {COMPOSE} up -d && {COMPOSE} down")
    assert 10 <= used_gib(status) - baseline <= 16  # sticky UMA after stop (seed 000 pitfall 4)
    ssh(status, "head", "sudo -n sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches'")
    assert used_gib(status) == baseline


def test_faults_the_engine_does_not_handle_are_listed_as_pending(private):
    status = control.up(faults=["prefix-evict", "health-never"], fast=True)
    pending = {p["name"] for p in status["faults_pending"]}
    assert pending == {"prefix-evict", "health-never"} - control.engine_faults_handled()
    assert all("not implemented" in p["note"] for p in status["faults_pending"])


def test_launcher_brings_the_twin_lane_up_and_down(private):
    status = control.up(fast=True)
    start = ssh(status, "head", f"cd {CHECKOUT} && PROJECT_NAME=ds4-f-mia-anemll-0731 WAIT_ATTEMPTS=120 WAIT_SECONDS=15 "
                                "./start-deepseek-v4-flash-dspark.sh")
    assert "start: healthy" in start.stdout
    models = httpx.get(status["api"] + "/models", timeout=10).json()["data"]
    assert [(m["id"], m["max_model_len"]) for m in models] == [("deepseek-v4-flash-0731", 1048576)]
    assert ssh(status, "head", f"cd {CHECKOUT} && PROJECT_NAME=ds4-f-mia-anemll-0731 ./status-deepseek-v4-flash-dspark.sh").returncode == 0
    ssh(status, "head", f"cd {CHECKOUT} && PROJECT_NAME=ds4-f-mia-anemll-0731 ./stop-deepseek-v4-flash-dspark.sh")
    for alias in ("head", "worker"):
        assert ssh(status, alias, "docker ps -a -q").stdout.strip() == ""
