"""The watcher's systemd unit (lanebook.runs.watch_unit): what it runs and how it restarts, checked by the real
`systemd-analyze verify` as a user unit and as a system unit (skipped, saying so, where systemd is not installed:
tools/os_packages.py lists it for the suite). Installing it on a twin head is tested with the watch itself
(tests/test_watch.py)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from lanebook.lane.params import load_lane
from lanebook.runs.watch_unit import unit_name, unit_text, verify_command

needs_systemd_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed (Debian package systemd)"
)


def lanebook_stand_in(tmp_path) -> str:
    """An executable where the unit's ExecStart points (verify checks that it exists and runs)."""
    program = tmp_path / "bin" / "lanebook"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    return str(program)


def test_the_unit_runs_the_watch_on_the_lane_file_and_restarts_it_unless_it_refused(tmp_path):
    params = load_lane("twin")
    text = unit_text(params, lanebook="/opt/lane book/lanebook", environ={"LANEBOOK_OUTPUTS": "/srv/out", "HOME": "/h"})
    assert f'ExecStart="/opt/lane book/lanebook" watch --lane "{params.file}"' in text.splitlines()
    assert 'Environment="LANEBOOK_OUTPUTS=/srv/out"' in text and "HOME" not in text
    assert {"Restart=on-failure", "RestartPreventExitStatus=2", "WantedBy=default.target"} <= set(text.splitlines())
    system = unit_text(params, lanebook="/usr/bin/lanebook", system=True, environ={})
    assert {"WantedBy=multi-user.target", "Wants=network-online.target"} <= set(system.splitlines())
    assert unit_name("twin") == "lanebook-watch-twin.service"


@needs_systemd_analyze
@pytest.mark.parametrize("system", [False, True], ids=["user unit", "system unit"])
def test_systemd_analyze_verify_accepts_the_unit(tmp_path, system):
    path = tmp_path / unit_name("twin")
    path.write_text(unit_text(load_lane("twin"), lanebook=lanebook_stand_in(tmp_path), system=system))
    done = subprocess.run(verify_command(path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and path.name not in done.stderr, done.stderr
