"""lanebook.base.processes: a live process, a dead one, a zombie and a reused pid are told apart."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from helpers.waits import eventually
from lanebook.base.processes import process_alive, process_start, session_processes


def _finished_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_this_process_is_alive_with_or_without_its_start_time():
    me = os.getpid()
    assert process_alive(me, process_start(me)) and process_alive(me)


def test_a_pid_with_another_start_time_was_reused():
    assert not process_alive(os.getpid(), "1")


def test_a_finished_process_and_pid_zero_are_not_alive():
    assert not process_alive(_finished_pid()) and not process_alive(0)


def test_a_zombie_is_not_alive():
    zombie = subprocess.Popen(["true"])
    while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.01)
    assert not process_alive(zombie.pid)
    zombie.wait()


def test_a_sessions_processes_are_its_live_members():
    leader = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"],
        start_new_session=True,
    )
    try:
        assert eventually(lambda: len(session_processes(leader.pid)) >= 2, 10)
        members = session_processes(leader.pid)
        assert leader.pid in members and len(members) == 2 and os.getpid() not in members
    finally:
        os.killpg(leader.pid, 9)
        leader.wait()
    assert eventually(lambda: session_processes(leader.pid) == [], 10)  # the child ends with the group
