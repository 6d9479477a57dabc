"""The node session's path mapping (lanebook.twin.session): exact rewrites, quoting kept, a root that needs an
alias, and over real ssh, every command on a node sees that node's /dev/shm, drop_caches and unit directory."""

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from lanebook.twin.session import map_paths, mapped_root, perl_mapping, unmap_paths

ROOT = "/twin/nodes/head"


CASES = [
    (
        "sudo -n sh -c 'rm -rf /dev/shm/*; sync; echo 3 > /proc/sys/vm/drop_caches'",
        f"sudo -n sh -c 'rm -rf {ROOT}/dev/shm/*; sync; echo 3 > {ROOT}/proc/sys/vm/drop_caches'",
    ),
    ('ls -A "/dev/shm" /dev/shm', f'ls -A "{ROOT}/dev/shm" {ROOT}/dev/shm'),
    ("echo 3 | tee /proc/sys/vm/drop_caches>/dev/null", f"echo 3 | tee {ROOT}/proc/sys/vm/drop_caches>/dev/null"),
    (
        "ls /etc/systemd/system/a.service --dir=/dev/shm x:/dev/shm/",
        f"ls {ROOT}/etc/systemd/system/a.service --dir={ROOT}/dev/shm x:{ROOT}/dev/shm/",
    ),
    # not a node path: the tail of another path, a longer name, a variable's path
    (
        "ls $HOME/dev/shm x/dev/shm /dev/shmx /dev/shm.d /etc/systemd/system.conf ~/dev/shm",
        "ls $HOME/dev/shm x/dev/shm /dev/shmx /dev/shm.d /etc/systemd/system.conf ~/dev/shm",
    ),
    ("rm -rf /dev/shn/*", "rm -rf /dev/shn/*"),  # a typo stays a typo
]


LINE = "printf '%s\\n' /dev/shm/a\\ b \"/dev/shm/c d\" '/dev/shm/e'\"f\""  # quoted words, an escaped space


@pytest.mark.parametrize("command, mapped", CASES)
def test_map_paths(command, mapped):
    assert map_paths(command, ROOT) == mapped
    assert unmap_paths(mapped, ROOT) == command


def test_mapping_keeps_the_words_of_a_line():
    words = shlex.split(LINE)
    assert shlex.split(map_paths(LINE, ROOT)) == [w.replace("/dev/shm", ROOT + "/dev/shm") for w in words]


@pytest.mark.parametrize("command", [command for command, _ in CASES] + [LINE, "", "ls /dev/shm\nls /dev/shm"])
def test_the_node_sessions_perl_maps_as_map_paths_does(command):
    mapped = subprocess.run(["perl", "-e", perl_mapping(), ROOT, command], capture_output=True, text=True)
    assert (mapped.returncode, mapped.stdout, mapped.stderr) == (0, map_paths(command, ROOT), "")


def test_the_node_sessions_perl_refuses_an_unsafe_root():
    refused = subprocess.run(["perl", "-e", perl_mapping(), "/it's", "ls /dev/shm"], capture_output=True, text=True)
    assert (refused.returncode, refused.stdout) == (1, "")


def test_a_root_with_unsafe_characters_is_reached_through_an_alias(tmp_path):
    odd = tmp_path / "it's a $root"
    (odd / "dev" / "shm").mkdir(parents=True)
    alias = mapped_root(odd)
    assert alias != str(odd) and os.path.realpath(alias) == str(odd.resolve())
    assert mapped_root(odd) == alias  # stable
    (odd / "dev" / "shm" / "seg").write_text("x")
    listed = subprocess.run(["bash", "-c", map_paths("ls /dev/shm", alias)], capture_output=True, text=True)
    assert listed.stdout.split() == ["seg"]
    with pytest.raises(ValueError, match="not a mapping root"):
        map_paths("ls /dev/shm", str(odd))
    assert mapped_root(tmp_path) == str(tmp_path.resolve())


def ssh(twin, alias, command):
    result = subprocess.run(
        ["ssh", "-F", twin["ssh_config"], alias, command], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def node_root(twin, alias) -> Path:
    return Path(next(n["root"] for n in twin["nodes"] if n["alias"] == alias))


@pytest.mark.twin
def test_every_command_on_a_node_sees_its_own_paths(twin):
    name = f"session-test-{os.getpid()}"
    try:
        ssh(twin, "head", f"touch /dev/shm/{name} && ls -l /etc/systemd/system/ >/dev/null")
        assert (node_root(twin, "head") / "dev" / "shm" / name).is_file()
        assert not Path("/dev/shm", name).exists()  # this machine's /dev/shm is untouched
        # a command bound for the worker is mapped there, into the worker's root
        ssh(
            twin,
            "head",
            f"ssh 127.0.0.3 'touch /dev/shm/{name}' && rsync -a /dev/shm/{name} 127.0.0.3:/dev/shm/{name}.copy",
        )
        assert {p.name for p in (node_root(twin, "worker") / "dev" / "shm").iterdir()} >= {name, f"{name}.copy"}
    finally:
        for alias in ("head", "worker"):
            ssh(twin, alias, f"rm -f /dev/shm/{name} /dev/shm/{name}.copy")
