"""tools/os_packages.py: the OS packages each make target needs, by distribution, and the one line a plain user
is given for the missing ones."""

import importlib.util
import os
import platform
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "os_packages.py"
spec = importlib.util.spec_from_file_location("os_packages", TOOL)
os_packages = importlib.util.module_from_spec(spec)
spec.loader.exec_module(os_packages)

RELEASES = {
    "debian-12": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n',
    "debian-13": 'PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nID=debian\nVERSION_ID="13"\n',
    "ubuntu-22.04": 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="22.04"\n',
    "ubuntu-24.04": 'PRETTY_NAME="Ubuntu 24.04.3 LTS"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n',
}


def release(tmp_path, name):
    path = tmp_path / "os-release"
    path.write_text(RELEASES[name])
    return os_packages.os_release(str(path))


def nothing_installed(_path):
    return False


@pytest.mark.parametrize("name", sorted(RELEASES))
def test_every_distribution_gets_names_it_has_and_a_browser_only_for_the_tests(tmp_path, name, monkeypatch):
    monkeypatch.setattr(os_packages, "has_venv", lambda python: True)
    rel = release(tmp_path, name)
    demo, unmet = os_packages.missing(
        "demo", rel, python=sys.executable, machine="x86_64", environ={}, exists=nothing_installed
    )
    assert demo == ["openssh-server", "rsync", "git"] and unmet == []
    test, _ = os_packages.missing(
        "test", rel, python=sys.executable, machine="x86_64", environ={}, exists=nothing_installed
    )
    fonts = ["fonts-dejavu-core", "fonts-liberation"]
    if name.startswith("debian"):
        assert test == [*demo, "chromium", *fonts, "systemd"]
    else:  # Ubuntu's chromium is a snap: no package names it, the browser tests skip
        assert test == [*demo, *fonts, "systemd"]


def test_venv_support_is_named_for_the_python_in_use_where_ensurepip_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(os_packages, "has_venv", lambda python: False)
    monkeypatch.setattr(os_packages, "python_version", lambda python: (3, 12))
    packages, _ = os_packages.missing(
        "demo", release(tmp_path, "ubuntu-24.04"), python="python3", machine="x86_64", environ={}, exists=lambda p: True
    )
    assert packages == ["python3.12-venv"]


@pytest.mark.parametrize(
    ("name", "wanted"),
    [("debian-13", ["docker-compose"]), ("ubuntu-24.04", ["docker-compose-v2"]), ("debian-12", [])],
)
def test_an_arm64_machine_without_compose_v2_is_given_its_distributions_package(tmp_path, monkeypatch, name, wanted):
    monkeypatch.setattr(os_packages, "has_venv", lambda python: True)
    packages, unmet = os_packages.missing(
        "demo", release(tmp_path, name), python=sys.executable, machine="aarch64", environ={"PATH": str(tmp_path)},
        exists=lambda p: True,
    )  # fmt: skip
    assert packages == wanted
    if not wanted:  # Debian 12 packages Compose v1 only
        assert len(unmet) == 1 and "docker-compose-plugin" in unmet[0] and "LANEBOOK_COMPOSE" in unmet[0]
    with_setting = {"PATH": str(tmp_path), "LANEBOOK_COMPOSE": "/opt/compose"}
    assert os_packages.missing(
        "demo", release(tmp_path, name), python=sys.executable, machine="aarch64", environ=with_setting,
        exists=lambda p: True,
    ) == ([], [])  # fmt: skip


def test_a_plain_user_gets_one_sudo_line_naming_exactly_the_missing_packages(monkeypatch, capsys):
    monkeypatch.setattr(os_packages, "DEMO_NEEDS", (("/nowhere/sshd", {"debian": "openssh-server"}),) * 1)
    monkeypatch.setattr(os_packages, "os_release", lambda: {"ID": "debian", "VERSION_ID": "12", "PRETTY_NAME": "D12"})
    monkeypatch.setattr(os_packages.os, "geteuid", lambda: 1000)
    assert os_packages.main(["demo"]) == 1
    said = capsys.readouterr().err
    assert said.splitlines()[-1] == "  sudo apt-get install -y openssh-server"
    assert os_packages.main(["demo", "--print"]) == 0
    assert capsys.readouterr().out.strip() == "openssh-server"


def test_an_old_python_is_refused_with_what_to_install(monkeypatch, capsys):
    monkeypatch.setattr(os_packages, "python_version", lambda python: (3, 10))
    assert os_packages.main(["demo", "--python", "python3"]) == 1
    assert "needs Python 3.11 or newer; python3 is 3.10" in capsys.readouterr().err
    assert os_packages.main(["bogus"]) == 2


def test_this_machine_has_what_the_demo_needs():
    """`make setup` ran before the suite: nothing the demo needs is missing here."""
    packages, unmet = os_packages.missing(
        "demo", os_packages.os_release(), python=sys.executable, machine=platform.machine(), environ=dict(os.environ)
    )
    assert (packages, unmet) == ([], [])
