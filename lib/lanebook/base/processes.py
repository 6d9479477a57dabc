"""Is a local process still the one that wrote a record? Used by the audit trail (a killed run's pending
record), the lane-pair lock (a stale holder on this machine) and the twin's containers; and which processes a
session holds (a twin container's, to stop or lower them all). Light to import (no typing): the twin's stand-ins,
a process per command a node runs, import it."""

from __future__ import annotations

import os
from pathlib import Path


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), None where /proc is absent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def process_alive(pid: int, started: str | None = None) -> bool:
    """Whether PID still runs (and, given STARTED, is the process that started then): a zombie, or a reused pid
    (another start time), is not it. A pid <= 0 never is (os.kill would signal a process group)."""
    if pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc here: ask the kernel whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's process: alive
            return True
        return True
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0] not in ("Z", "X") and (started is None or fields[19] == started)


def session_processes(session: int) -> list[int]:
    """The live processes (no zombie) of SESSION: those whose session id (/proc/PID/stat field 6) is SESSION."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        if int(fields[3]) == session and fields[0] not in ("Z", "X"):
            pids.append(int(stat.parent.name))
    return pids
