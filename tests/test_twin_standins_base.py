"""What the stand-ins share (lanebook.twin.standins.base) and how a node's shim reaches one (the package's main)."""

import json
import subprocess
import sys

import pytest
from lanebook.base.errors import LanebookError
from lanebook.twin.standins import COMMANDS, main
from lanebook.twin.standins.base import ago, node_root, table, take


def test_take_pops_options_in_every_spelling():
    args = ["-p", "proj", "--file=a.yml", "-f", "b.yml", "--detach", "up"]
    assert take(args, "-p", "--project-name") == "proj"
    assert take(args, "-f", "--file", many=True) == ["a.yml", "b.yml"]
    assert take(args, "-d", "--detach", flag=True) is True
    assert take(args, "--missing") is None and args == ["up"]


def test_table_and_durations():
    assert table([["a", "bb"]], ["X", "Y"]) == "X   Y\na   bb"
    assert [ago(s) for s in (0.2, 59, 90, 150, 7300, 200000)] == [
        "1 seconds",
        "59 seconds",
        "About a minute",
        "2 minutes",
        "2 hours",
        "2 days",
    ]


def test_a_stand_in_refuses_to_run_off_a_node(monkeypatch):
    monkeypatch.delenv("LANEBOOK_NODE_ROOT", raising=False)
    with pytest.raises(LanebookError, match="runs on a twin node"):
        node_root()


def test_main_dispatches_to_every_stand_in(capsys):
    assert set(COMMANDS) == {
        "docker",
        "hf",
        "sudo",
        "systemctl",
        "loginctl",
        "sysctl",
        "free",
        "df",
        "sleep",
        "dmesg",
        "journalctl",
        "ip",
        "rdma",
        "ib_write_bw",
    }
    assert main(["no-such"]) == 2 and "usage: python -m lanebook.twin.standins" in capsys.readouterr().err
    assert main(["sleep", "0"]) == 0


# Modules a stand-in's process does without (a fresh interpreter per command, thousands per suite): each costs
# milliseconds of CPU to import, and dataclasses brings inspect, ast, dis and tokenize.
HEAVY = {"dataclasses", "typing", "argparse", "inspect", "hashlib", "tempfile", "shutil", "subprocess"}


@pytest.mark.parametrize("module", sorted({module for module, _ in COMMANDS.values()}))
def test_a_stand_in_starts_without_heavy_imports(module):
    probe = f"import sys, lanebook.twin.standins.{module}; print(__import__('json').dumps(sorted(sys.modules)))"
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, check=True).stdout))
    assert loaded & HEAVY == set()
