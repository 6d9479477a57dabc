"""Memory on the nodes before a launch (lanebook.ops.memory): what each operation sends, and on the twin that its
result is what was observed afterwards: planted segments gone (or named when a wrong cleanup leaves them),
free memory read back, legacy units inactive and masked, sticky memory after a stop until caches drop."""

import pytest
from helpers.twin_helpers import private_twin
from lanebook.lane.params import lane_with, load_lane
from lanebook.nodes import ssh
from lanebook.ops import memory

UNIT = "aiden-vllm.service"
CHECKOUT = "ds4-f-mia-anemll-0731"
PLACEHOLDER = "LANEBOOK_TWIN_ENGINE='python3 -c \"import time; time.sleep(120)\"'"
COMPOSE = "docker compose -p memory-test --env-file .env.dspark -f docker-compose.dspark.yml"
FREE_M = """               total        used        free      shared  buff/cache   available
Mem:          122070       46080       69846           0        6144       75990
Swap:              0           0           0
"""


# --- what is sent, what is read ----------------------------------------------------------------


def test_parse_free():
    assert memory.parse_free(FREE_M) == memory.MemoryFigures(
        total_gib=119.2, free_gib=68.2, available_gib=74.2, cache_gib=6.0
    )
    with pytest.raises(ValueError, match="cannot read `free -m` output"):
        memory.parse_free("free: command not found")


def test_unit_states_from_the_probe():
    assert memory.parse_unit_states("a.service active enabled\nb.service inactive masked\nc.service inactive\n") == {
        "a.service": ("active", "enabled"),
        "b.service": ("inactive", "masked"),
        "c.service": ("inactive", "unknown"),
    }
    assert memory.unit_probe(["a b.service"]) == (
        """for u in 'a b.service'; do printf "%s %s %s\\n" "$u" "$(systemctl is-active "$u" 2>/dev/null)" """
        """"$(systemctl is-enabled "$u" 2>/dev/null)"; done"""
    )


def test_dry_run_sends_the_seed_cleanup_and_observes_nothing():
    nodes = ssh.LaneNodes(load_lane("anemll-0731"), dry_run=True)
    checks = [memory.clean_memory(nodes), memory.mask_legacy_units(nodes), memory.check_sticky_uma(nodes)]
    assert not any(c.ok for c in checks) and {c.detail for c in checks} == {"not observed (dry run)"}
    lines = nodes.executor.commands()
    for alias in ("head", "worker"):
        cleanup = f"{alias}: sudo -n sh -c 'rm -rf /dev/shm/*; sync; echo 3 > /proc/sys/vm/drop_caches'"
        at = lines.index(cleanup)
        assert lines[at - 1] == lines[at + 1] == f"{alias}: ls -A /dev/shm"  # looked at before and after
        assert f"{alias}: sudo -n sh -c 'systemctl mask --now aiden-vllm.service'" in lines
        assert lines.count(f"{alias}: free -m") == 2  # after the cleanup, and the free-memory check


# --- on a twin with a running legacy unit and sticky memory --------------------------------------
# A private twin (its own ports and state dir): the faults legacy-units-active (aiden-vllm.service runs on
# the head, holding memory) and sticky-uma (memory stays held after a container stops until caches drop).


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    with private_twin(tmp_path_factory.mktemp("twin-memory"), ["legacy-units-active", "sticky-uma"]) as status:
        with ssh.LaneNodes(lane_with(load_lane("twin"), api=status["api"])) as connected:
            yield connected


def shm(node):
    return node.run("ls -A /dev/shm").stdout.split()


def plant(nodes, name):
    for node in nodes:
        node.run(f"touch /dev/shm/{name}")
        assert name in shm(node)


@pytest.mark.twin
def test_masking_is_observed_and_frees_the_units_memory(nodes):
    held = memory.check_sticky_uma(nodes)
    assert not held.ok and not held.nodes["head"].ok and held.nodes["worker"].ok  # the running legacy unit holds memory
    assert held.nodes["head"].figures["needed_gib"] == round(0.85 * held.nodes["head"].figures["total_gib"], 1)
    masked = memory.mask_legacy_units(nodes)
    assert masked.ok, masked.detail
    assert masked.nodes["head"].figures == {
        "units": {UNIT: {"active": "inactive", "enabled": "masked"}},
        "was_active": [UNIT],
    }
    assert masked.detail == f"head: {UNIT} masked, inactive (was active); worker: {UNIT} masked, inactive"
    assert memory.mask_legacy_units(nodes).nodes["head"].figures["was_active"] == []
    assert nodes.head.run(f"readlink /etc/systemd/system/{UNIT}").stdout.strip() == "/dev/null"
    assert memory.check_sticky_uma(nodes).ok


@pytest.mark.twin
def test_a_unit_that_cannot_be_masked_fails_the_check(nodes):
    nodes.head.run(
        "printf '[Unit]\\nDescription=local\\n[Service]\\nExecStart=/bin/true\\n' > "
        "/etc/systemd/system/local-vllm.service"
        " && systemctl start local-vllm.service"
    )
    try:
        other = ssh.LaneNodes(lane_with(nodes.params, legacy_units=["local-vllm.service"]), executor=nodes.executor)
        check = memory.mask_legacy_units(other)
        assert not check.ok and not check.nodes["head"].ok
        assert (
            "Failed to mask unit: File /etc/systemd/system/local-vllm.service already exists."
            in check.nodes["head"].detail
        )
        assert "still active: local-vllm.service" in check.nodes["head"].detail
    finally:
        nodes.head.run("systemctl stop local-vllm.service; rm -f /etc/systemd/system/local-vllm.service")


@pytest.mark.twin
def test_cleanup_removes_what_dev_shm_held_and_reads_free_memory(nodes):
    plant(nodes, "nccl-planted")
    cleaned = memory.clean_memory(nodes)
    assert cleaned.ok, cleaned.detail
    for node in nodes:
        result = cleaned.nodes[node.alias]
        assert "nccl-planted" in result.figures["removed"] and result.figures["left"] == []
        assert shm(node) == []
        assert result.figures["cache_gib"] == 0.3 and result.figures["free_gib"] > 100  # the page cache was dropped
    assert cleaned.figure("free_gib") == {n.alias: cleaned.nodes[n.alias].figures["free_gib"] for n in nodes}


@pytest.mark.twin
@pytest.mark.parametrize("wrong", ["rm -rf /dev/shn/*", "rm -rf '/dev/shm/*'", "rm -f /dev/shm/*.seg"])
def test_a_wrong_cleanup_command_fails(nodes, monkeypatch, wrong):
    """A misspelt path, a quoted glob, a pattern that misses: the segments stay, and the check says which."""
    plant(nodes, "nccl-planted")
    monkeypatch.setattr(memory, "SHM_CLEANUP", wrong)
    check = memory.clean_memory(nodes)
    assert not check.ok
    assert all("still in /dev/shm: nccl-planted" in check.nodes[n.alias].detail for n in nodes), check.detail
    monkeypatch.undo()
    assert memory.clean_memory(nodes).ok


@pytest.mark.twin
def test_memory_is_never_cleaned_under_a_vllm_container_and_sticks_after_it(nodes):
    baseline = memory.check_sticky_uma(nodes).nodes["head"].figures["free_gib"]
    nodes.head.run(f"cd {CHECKOUT} && NODE_RANK=0 {PLACEHOLDER} {COMPOSE} up -d")
    try:
        with pytest.raises(
            ssh.NodeError,
            match="not cleaning memory while a vLLM server runs on the pair .head: memory-test-vllm-dspark-1",
        ):
            memory.clean_memory(nodes)
    finally:
        nodes.head.run(f"cd {CHECKOUT} && {COMPOSE} down")
    sticky = memory.check_sticky_uma(nodes, min_free_gib=baseline - 5)
    assert not sticky.ok and 10 <= baseline - sticky.nodes["head"].figures["free_gib"] <= 16  # pitfall 4
    assert memory.clean_memory(nodes).ok
    assert memory.check_sticky_uma(nodes, min_free_gib=baseline - 1).ok


def test_memory_steps_skip_under_a_server_and_a_dry_run_records_the_cleanup():
    from lanebook.steps.runbook import Runbook

    rb = Runbook("launch", "anemll-0731", dry_run=True)
    memory.clean_step(rb, skip_because="the lane is already up")
    memory.free_memory_step(rb, what="enough free memory on every node", skip_because="it holds its memory")
    assert [(c.what, c.detail) for c in rb.checks] == [
        (
            "SHM and page cache cleaned on every node",
            "skipped: the lane is already up; memory is never cleaned under a server",
        ),
        ("enough free memory on every node", "skipped: it holds its memory"),
    ]
    assert rb.commands() == []
    memory.clean_step(rb, confirm="clean the pair")
    memory.free_memory_step(rb, what="enough free memory on every node")
    assert [c.outcome for c in rb.checks[2:]] == ["not observed", "not observed"]
    assert {"free_gib_after_cleanup", "free_gib"} <= set(rb.figures)
    assert any("drop_caches" in c for c in rb.commands())
