"""What the stand-ins share (lanebook.twin.standins.base) and how a node's shim reaches one (the package's main)."""

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
        "sysctl",
        "free",
        "sleep",
        "dmesg",
        "journalctl",
        "ip",
    }
    assert main(["no-such"]) == 2 and "usage: python -m lanebook.twin.standins" in capsys.readouterr().err
    assert main(["sleep", "0"]) == 0
