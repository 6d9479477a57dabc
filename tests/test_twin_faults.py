"""The twin's node faults (lanebook.twin.control FAULTS shaping node roots, sshd and the stand-ins), on a private twin
(own state dir and ports) so the session twin other tests use is never restarted. The engine's faults (head-dies,
health-never, engine-dies-mid-bench, prefix-evict, tp-hang, drafter-mismatch) are tested with the engine and the
server; every fault met by its runbook, ssh-drop-mid-rsync's cut and resume included, is a row of the fault matrix
(test_fault_matrix.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers.twin_helpers import _free_ports
from lanebook.twin import control

pytestmark = pytest.mark.twin

CHECKOUT = "ds4-f-mia-anemll-0731"
MODEL_DIR = ".cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731"
PLACEHOLDER = "LANEBOOK_TWIN_ENGINE='python3 -c \"import time; time.sleep(120)\"'"
COMPOSE = "docker compose -p fault-test --env-file .env.dspark -f docker-compose.dspark.yml"


@pytest.fixture(scope="module")
def private(tmp_path_factory):
    """Point lanebook at a private twin for this module; bring it down and restore the environment after."""
    ports = dict(
        zip(("LANEBOOK_TWIN_SSH_PORT", "LANEBOOK_TWIN_API_PORT", "LANEBOOK_TWIN_MASTER_PORT"), map(str, _free_ports(3)))
    )
    saved = {key: os.environ.get(key) for key in [*ports, "LANEBOOK_TWIN_DIR"]}
    os.environ.update(ports, LANEBOOK_TWIN_DIR=str(tmp_path_factory.mktemp("private-twin")))
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
    result = subprocess.run(
        ["ssh", "-F", status["ssh_config"], alias, command], capture_output=True, text=True, timeout=300
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"{alias}: {command!r} exit {result.returncode}: {result.stdout[-1500:]} {result.stderr[-1500:]}"
        )
    return result


def used_gib(status: dict, alias: str = "head") -> int:
    return int(ssh(status, alias, "free -g").stdout.splitlines()[1].split()[2])


def test_worker_unreachable(private):
    status = control.up(faults=["worker-unreachable"], fast=True)
    assert status["faults"] == ["worker-unreachable"]
    assert [(n["sshd"], n["reachable"]) for n in status["nodes"]] == [(True, True), (False, False)]
    assert ssh(status, "head", "true").returncode == 0
    refused = ssh(status, "worker", "true", check=False)
    assert refused.returncode == 255 and "refused" in refused.stderr
    assert ssh(status, "head", "ssh 127.0.0.3 true", check=False).returncode == 255


def test_incomplete_and_missing_shards_on_the_worker(private):
    status = control.up(faults=["incomplete-shards", "missing-shard"], fast=True)
    count = f"find {MODEL_DIR} -name '*.incomplete' | wc -l; find {MODEL_DIR} -name 'model-*-of-*.safetensors' | wc -l"
    assert ssh(status, "head", count).stdout.split() == ["0", "48"]
    assert ssh(status, "worker", count).stdout.split() == ["2", "45"]  # 2 unfinished, 1 missing


def test_legacy_units_and_sticky_memory(private):
    status = control.up(faults=["sticky-uma", "legacy-units-active"], fast=True)
    assert ssh(status, "head", "systemctl is-active aiden-vllm.service").stdout.strip() == "active"
    assert ssh(status, "head", "ls /etc/systemd/system/multi-user.target.wants").stdout.split() == [
        "aiden-vllm.service"
    ]
    assert ssh(status, "worker", "systemctl is-active aiden-vllm.service", check=False).stdout.strip() == "inactive"
    held = used_gib(status)
    ssh(status, "head", "sudo -n sh -c 'systemctl mask --now aiden-vllm.service'")
    assert ssh(status, "head", "systemctl is-enabled aiden-vllm.service", check=False).stdout.strip() == "masked"
    assert ssh(status, "head", "readlink /etc/systemd/system/aiden-vllm.service").stdout.strip() == "/dev/null"
    assert ssh(status, "head", "systemctl start aiden-vllm.service", check=False).returncode == 1
    baseline = used_gib(status)
    assert held - baseline >= 30  # the legacy stack's memory is free once it is masked --now
    ssh(status, "head", f"cd {CHECKOUT} && NODE_RANK=0 {PLACEHOLDER} {COMPOSE} up -d && {COMPOSE} down")
    assert 10 <= used_gib(status) - baseline <= 16  # sticky UMA after stop (seed 000 pitfall 4)
    ssh(status, "head", "sudo -n sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches'")
    assert used_gib(status) == baseline
