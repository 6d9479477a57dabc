"""The twin's container runtime (lanebook.twin.standins.runtime): containers as processes on a node, their logs,
exit codes, the shared-memory segments they leave in the node's /dev/shm, and what dockerd starts again at boot."""

import os
import signal
import sys

import pytest
from helpers.node_helpers import local_node
from helpers.waits import eventually
from lanebook.recipe.effective.compose_model import ContainerSpec
from lanebook.twin.standins.base import write_json
from lanebook.twin.standins.machine import STICKY_GIB
from lanebook.twin.standins.runtime import (
    KILLED,
    TERMINATED,
    boot_containers,
    containers,
    find_container,
    power_off,
    remove_container,
    start_container,
    starts_at_daemon_start,
    stop_all_containers,
)

ENGINE = f"{sys.executable} -c 'import sys, time; print(\"engine up\", *sys.argv[1:], flush=True); time.sleep(60)'"


def spec(name="p-vllm-dspark-1", **changes) -> ContainerSpec:
    return ContainerSpec(
        **{
            "name": name,
            "project": "p",
            "service": "vllm-dspark",
            "image": "img:1",
            "environment": {"A": "1"},
            "argv": ["serve", "model", "--gpu-memory-utilization", "0.85"],
            "stop_grace_s": 5.0,
            **changes,
        }
    )


@pytest.fixture
def node(tmp_path, monkeypatch):
    made = local_node(tmp_path)
    monkeypatch.setenv("LANEBOOK_TWIN_ENGINE", ENGINE)
    monkeypatch.setenv("LANEBOOK_TWIN_DIR", made.env["LANEBOOK_TWIN_DIR"])
    yield made
    stop_all_containers(made.root, grace_s=1)


def wait_for_log(container, text, within_s=10.0, times=1):
    logged = eventually(
        lambda: (container.log.read_text() if container.log.exists() else "").count(text) >= times, within_s
    )
    assert logged, f"{text!r} not in the log of {container.name}"


def test_a_container_runs_the_engine_with_its_argv(node):
    container = start_container(node.root, spec())
    wait_for_log(container, "engine up serve model --gpu-memory-utilization 0.85")
    assert container.running and container.state() == "running" and container.session_pids()
    assert (
        find_container(node.root, container.id[:6]) == container
        and find_container(node.root, "p-vllm-dspark-1") == container
    )
    assert [c.name for c in containers(node.root)] == ["p-vllm-dspark-1"]


def test_segments_go_with_a_clean_stop_and_stay_after_a_kill(node):
    stopped = start_container(node.root, spec("a-vllm-dspark-1"))
    killed = start_container(node.root, spec("b-vllm-dspark-1"))
    shm = node.machine.shm
    assert sorted(p.name[:4] for p in shm.iterdir()) == ["nccl", "nccl", "psm_", "psm_"]
    stopped.stop()
    assert stopped.exit_code == TERMINATED and not any(s.exists() for s in stopped.shm_segments())
    killed.stop(signal.SIGKILL, grace_s=1)
    assert killed.exit_code == KILLED and all(s.exists() for s in killed.shm_segments())
    assert sorted(p.name for p in shm.iterdir()) == sorted(s.name for s in killed.shm_segments())
    remove_container(killed)
    assert containers(node.root) == [stopped]


def test_a_refused_entrypoint_exits_with_its_code_and_no_segments(node):
    container = start_container(node.root, spec(entrypoint_error=(2, "error: bad config")))
    assert eventually(lambda: container.exit_code is not None, 10)  # None while running; it refuses at once
    assert container.exit_code == 2 and "error: bad config" in container.log.read_text()
    assert list(node.machine.shm.iterdir()) == []
    assert container.status().startswith("Exited (2)")


def test_a_pid_that_is_now_another_process_is_not_the_container(node):
    container = start_container(node.root, spec())
    wait_for_log(container, "engine up")
    record = container.record
    write_json(container.dir / "record.json", {**record, "pid": os.getpid()})  # a live process, started earlier
    assert not container.running and container.exit_code == KILLED
    write_json(container.dir / "record.json", record)
    assert container.running and container.exit_code is None


def test_sticky_memory_after_a_stop_with_the_fault(tmp_path, monkeypatch):
    node = local_node(tmp_path, faults=("sticky-uma",))
    monkeypatch.setenv("LANEBOOK_TWIN_ENGINE", ENGINE)
    monkeypatch.setenv("LANEBOOK_TWIN_DIR", node.env["LANEBOOK_TWIN_DIR"])
    container = start_container(node.root, spec())
    assert node.machine.memory()["sticky_gib"] == 0.0
    container.stop()
    assert node.machine.memory()["sticky_gib"] == STICKY_GIB
    stop_all_containers(node.root)
    assert containers(node.root) == []


def test_a_power_off_ends_running_containers_without_their_clean_up(node):
    running = start_container(node.root, spec("a-vllm-dspark-1"))
    stopped = start_container(node.root, spec("b-vllm-dspark-1"))
    stopped.stop()
    assert power_off(node.root) == ["a-vllm-dspark-1"]
    assert not running.running and running.session_pids() == [] and running.exit_code == KILLED
    assert running.record["finished_at"] and all(
        s.exists() for s in running.shm_segments()
    )  # the boot empties /dev/shm
    assert stopped.exit_code == TERMINATED


@pytest.mark.parametrize(
    "policy, running, starts",
    [
        ("no", True, False),
        ("no", False, False),
        ("on-failure", True, False),
        ("on-failure:3", True, False),
        ("always", True, True),
        ("always", False, True),
        ("unless-stopped", True, True),
        ("unless-stopped", False, False),
    ],
)
def test_what_dockerd_starts_at_its_start(policy, running, starts):
    assert starts_at_daemon_start(policy, running) is starts


def test_at_boot_dockerd_starts_again_what_the_restart_policy_names(node):
    names = {"always": "a-1", "no": "n-1", "on-failure": "f-1", "unless-stopped": "u-1"}
    made = {policy: start_container(node.root, spec(name, restart=policy)) for policy, name in names.items()}
    held = start_container(node.root, spec("s-1", restart="unless-stopped"))  # stopped with `docker stop`
    stopped_always = start_container(node.root, spec("t-1", restart="always"))
    for container in containers(node.root):
        wait_for_log(container, "engine up")
    for container in (held, stopped_always):
        container.stop(grace_s=1)
    before = {c.name: (c.id, c.pid, c.record["started_at"]) for c in containers(node.root)}
    assert power_off(node.root) == ["a-1", "f-1", "n-1", "u-1"]
    assert boot_containers(node.root) == ["a-1", "t-1", "u-1"]
    for container in (made["always"], made["unless-stopped"], stopped_always):
        wait_for_log(container, "engine up serve model", times=2)  # the same command again, the log appended
        identity, pid, started = before[container.name]
        assert container.running and container.id == identity and container.pid != pid
        assert container.record["started_at"] > started and container.status().startswith("Up ")
        assert len(container.shm_segments()) == 2 and all(s.exists() for s in container.shm_segments())
    assert (
        made["no"].status().startswith("Exited (137)")
        and made["on-failure"].status().startswith("Exited (137)")
        and held.status().startswith("Exited (143)")
    )
    assert not any("running_at_power_off" in c.record for c in containers(node.root))
    assert boot_containers(node.root) == []  # running already, or left stopped: a second boot start changes nothing
