"""System commands on a twin node (lanebook.twin.standins.system): sudo runs what it is given, systemctl keeps
unit state in the node's unit directory, sysctl writes the node's /proc/sys, free reports the node's memory."""

import os
import time

import pytest
from helpers.node_helpers import UNIT, local_node
from lanebook.twin.standins.machine import GIB, PAGE_CACHE_FLOOR_GIB, TOTAL_BYTES
from lanebook.twin.standins.system import DISK_KIB, DISK_USED_KIB, FULL_DISK_FREE_KIB, format_free, unit_name


@pytest.fixture
def node(tmp_path):
    return local_node(tmp_path, legacy_active=True)


def test_sudo_runs_the_command_it_is_given(node):
    (node.machine.shm / "nccl-stale").write_text("x")
    cleaned = node.run("sudo -n sh -c 'rm -rf /dev/shm/*; sync; echo 3 > /proc/sys/vm/drop_caches'")
    assert cleaned.returncode == 0, cleaned.stderr
    assert list(node.machine.shm.iterdir()) == [] and node.machine.drop_caches.read_text() == "3\n"
    assert node.machine.memory()["cache_gib"] == PAGE_CACHE_FLOOR_GIB
    assert node.run("sudo -n sh -c 'exit 7'").returncode == 7  # its exit status is the command's
    missing = node.run("sudo -n no-such-program")
    assert (missing.returncode, missing.stderr.strip()) == (1, "sudo: no-such-program: command not found")
    assert node.run("sudo -u root -E true").returncode == 0
    assert node.run("sudo").returncode == 1


def test_a_wrong_cleanup_leaves_the_segments_as_it_would_on_a_node(node):
    (node.machine.shm / "nccl-stale").write_text("x")
    for wrong in ("rm -rf /dev/shn/*", "rm -rf '/dev/shm/*'", "rm -f /dev/shm"):
        node.run(f"sudo -n sh -c {wrong!r}" if "'" not in wrong else f'sudo -n sh -c "{wrong}"')
        assert (node.machine.shm / "nccl-stale").exists(), wrong
    written = node.run("sudo -n sh -c 'echo 3 > /proc/sys/vm/drop_cache'")  # a typo: no such knob
    assert written.returncode != 0 and node.machine.memory()["cache_gib"] > PAGE_CACHE_FLOOR_GIB


def test_systemctl_masks_in_the_unit_directory(node):
    assert node.run(f"systemctl is-active {UNIT}").stdout.strip() == "active"
    masked = node.run(f"sudo -n sh -c 'systemctl mask --now {UNIT}'")
    assert (
        masked.returncode == 0 and masked.stderr.strip() == f"Created symlink /etc/systemd/system/{UNIT} → /dev/null."
    )
    link = node.machine.unit_dir / UNIT
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert node.run(f"systemctl is-active {UNIT}; systemctl is-enabled {UNIT}").stdout.split() == ["inactive", "masked"]
    refused = node.run(f"systemctl start {UNIT}")
    assert (refused.returncode, refused.stderr.strip()) == (1, f"Failed to start {UNIT}: Unit {UNIT} is masked.")
    assert (
        node.run(f"systemctl unmask {UNIT} && systemctl start aiden-vllm && systemctl is-active {UNIT}").stdout.strip()
        == "active"
    )


def test_systemctl_refuses_to_mask_over_a_unit_file(node):
    (node.machine.unit_dir / "local.service").write_text("[Unit]\nDescription=x\n[Service]\nExecStart=/bin/true\n")
    refused = node.run("systemctl mask local.service")
    assert refused.returncode == 1
    assert refused.stderr.strip() == "Failed to mask unit: File /etc/systemd/system/local.service already exists."
    assert node.run("systemctl is-enabled nothing.service").stdout.strip() == "not-found"
    assert node.run("systemctl mask nothing.service").returncode == 0  # masking works for any name
    assert node.run("systemctl is-enabled nothing.service").stdout.strip() == "masked"


def test_systemctl_reads_state_left_by_other_tools(node):
    (node.machine.unit_dir / UNIT).symlink_to("/dev/null")  # `ln -s /dev/null` is a mask to systemd too
    assert node.run(f"systemctl is-enabled {UNIT}").stdout.strip() == "masked"
    assert node.run(f"ls -l /etc/systemd/system/{UNIT}").stdout.rstrip().endswith(f"{UNIT} -> /dev/null")


def test_systemctl_lists_the_units_in_the_state_asked_for(node):
    """`--state running` lists what runs (the legacy unit the doctor looks for, P13), and nothing once it is masked."""
    listing = "systemctl list-units --type=service --state=running --no-pager"
    running = node.run(listing).stdout.splitlines()
    assert running[0].split() == ["UNIT", "LOAD", "ACTIVE", "SUB", "DESCRIPTION"]
    assert [line.split()[:4] for line in running[1:]] == [[UNIT, "loaded", "active", "running"]]
    node.run(f"sudo -n sh -c 'systemctl mask --now {UNIT}'")
    assert node.run(listing).stdout.splitlines()[1:] == []
    assert [line.split()[:4] for line in node.run("systemctl list-units --state=inactive").stdout.splitlines()[1:]] == [
        [UNIT, "masked", "inactive", "dead"]
    ]


def test_sysctl_writes_the_node_knob(node):
    assert node.run("sysctl vm.drop_caches").stdout.strip() == "vm.drop_caches = 0"
    written = node.run("sudo sysctl -w vm.drop_caches=3")
    assert written.stdout.strip() == "vm.drop_caches = 3" and node.machine.memory()["cache_gib"] == PAGE_CACHE_FLOOR_GIB
    unknown = node.run("sysctl kernel.nope")
    assert (unknown.returncode, unknown.stderr.strip()) == (
        255,
        "sysctl: cannot stat /proc/sys/kernel/nope: No such file or directory",
    )


def test_free_reports_the_node_memory(node):
    out = node.run("free -m").stdout.splitlines()
    assert out[0].split() == ["total", "used", "free", "shared", "buff/cache", "available"]
    total, used, free, shared, cache, available = map(int, out[1].split()[1:])
    assert total == TOTAL_BYTES // 1024**2
    assert used == int((4.5 + 40) * 1024)  # the OS plus the running legacy unit
    assert cache == 6 * 1024 and free == total - used - cache and available == total - used


def test_format_free_units():
    figures = {"total": 2 * GIB, "used": GIB, "free": GIB / 2, "shared": 0, "buff/cache": GIB / 2, "available": GIB}
    assert format_free(figures, ["-g"]).splitlines()[1].split() == ["Mem:", "2", "1", "0", "0", "0", "1"]
    assert format_free(figures, ["-h"]).splitlines()[1].split() == [
        "Mem:",
        "2.0Gi",
        "1.0Gi",
        "512.0Mi",
        "0B",
        "512.0Mi",
        "1.0Gi",
    ]
    assert format_free(figures, []).splitlines()[1].split()[1] == str(2 * 1024 * 1024)


def test_sleep_runs_on_the_twin_clock(node):
    # the --fast shim's own path (plain seconds), the stand-in through it (a suffix) and the stand-in itself
    for command in ("sleep 2", "sleep 2s", "python -m lanebook.twin.standins sleep 2"):
        started = time.monotonic()
        assert node.run(command).returncode == 0  # scaled by the node's time scale (0.01 here)
        assert time.monotonic() - started >= 0.02, command
    assert node.run("sleep 1x").stderr.strip() == "sleep: invalid time interval '1x'"


def test_sleep_waits_in_real_time_for_the_real_engine(node):
    """A launcher whose env file names the real engine exports the knob (`set -a`): its waits are not scaled."""
    for command in ("sleep 0.3", "python -m lanebook.twin.standins sleep 0.3"):
        started = time.monotonic()
        assert node.run(f"LANEBOOK_TWIN_REAL_ENGINE=vllm-cpu {command}").returncode == 0
        assert time.monotonic() - started >= 0.3, command


def test_unit_names_default_to_services():
    assert (unit_name("aiden-vllm"), unit_name("x.socket")) == ("aiden-vllm.service", "x.socket")


def test_sudo_list_says_the_command_is_allowed_and_never_runs_it(node):
    (node.machine.shm / "nccl-stale").write_text("x")
    listed = node.run("sudo -n -l sh -c 'rm -rf /dev/shm/*; sync; echo 3 > /proc/sys/vm/drop_caches'")
    assert listed.returncode == 0 and listed.stdout.split()[1:3] == ["-c", "rm"]
    assert [p.name for p in node.machine.shm.iterdir()] == ["nccl-stale"]  # nothing ran


def test_a_sudo_that_asks_refuses_without_a_prompt(node):
    (node.root / "twin-conditions").mkdir()
    (node.root / "twin-conditions" / "sudo-asks").touch()
    asked = node.run("sudo -n -l sh -c true")
    assert (asked.returncode, asked.stderr.strip()) == (1, "sudo: a password is required")
    assert node.run("sudo -n true").returncode == 1


def test_df_reports_the_node_disk_and_a_full_one(node):
    out = node.run("df -Pk ~").stdout.splitlines()
    assert out[0].split()[:4] == ["Filesystem", "1024-blocks", "Used", "Available"]
    total, used, free = map(int, out[1].split()[1:4])
    assert total == DISK_KIB and free == DISK_KIB - DISK_USED_KIB and used + free == total
    (node.root / "twin-conditions").mkdir()
    (node.root / "twin-conditions" / "disk-full").touch()
    assert int(node.run("df -Pk ~").stdout.splitlines()[1].split()[3]) == FULL_DISK_FREE_KIB
    assert node.run("df /no/such/dir").returncode == 1


def test_a_user_unit_is_enabled_in_the_users_own_instance_and_starts_at_boot_only_while_lingering(node):
    from lanebook.twin.standins.machine import NodeMachine, UserUnits

    unit = "lanebook-watch-twin.service"
    folder = node.root / "home" / ".config" / "systemd" / "user"
    folder.mkdir(parents=True)
    (folder / unit).write_text("[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=default.target\n")
    assert node.run(f"systemctl --user is-enabled {unit}").stdout.strip() == "disabled"
    enabled = node.run(f"systemctl --user daemon-reload && systemctl --user enable --now {unit}")
    assert enabled.returncode == 0 and enabled.stderr.strip() == (
        f"Created symlink ~/.config/systemd/user/default.target.wants/{unit} → ~/.config/systemd/user/{unit}."
    )
    assert node.run(f"systemctl --user is-enabled {unit}; systemctl --user is-active {unit}").stdout.split() == [
        "enabled",
        "active",
    ]
    assert node.run(f"systemctl is-enabled {unit}").stdout.strip() == "not-found"  # not a system unit
    user = UserUnits(node.root, node.root / "home")
    NodeMachine(node.root).boot()
    assert not user.is_active(unit)  # without lingering, nothing of the user's starts at boot
    assert node.run('loginctl enable-linger && loginctl show-user "$(id -un)" -p Linger').stdout.strip() == (
        "Linger=yes"
    )
    NodeMachine(node.root).boot()
    assert user.is_active(unit)
    gone = node.run(f"systemctl --user disable --now {unit} && systemctl --user is-enabled {unit}")
    assert gone.stdout.strip() == "disabled" and not user.is_active(unit)
