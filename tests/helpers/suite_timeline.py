"""When each test ran, on which worker and at what CPU cost, for balancing the parallel suite: with
LANEBOOK_SUITE_TIMELINE=FILE set, tests/conftest.py loads this plugin and each test's setup, call and teardown become
one JSON line in FILE (emptied when the run starts); `python benchmarks/suite_timeline.py FILE` then prints each
worker's modules and where its time went.

CPU: each worker moves itself into a cgroup of its own (cgroup v1 cpuacct, when this machine lets it), so the CPU time
of everything it starts (twins, servers, kernels, browsers) is counted to the test that was running. Without the
cgroup the lines carry no CPU figure.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Optional

TIMELINE_ENV = "LANEBOOK_SUITE_TIMELINE"
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
_usage: Optional[Path] = None  # this worker's cgroup's cpuacct.usage (ns)


def _own_cgroup(worker: str) -> Optional[Path]:
    group = CPUACCT / f"lanebook-suite-{worker}-{os.getpid()}"
    try:
        group.mkdir()
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        return None
    return group / "cpuacct.usage"


def pytest_configure(config):
    global _usage
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        _usage = _own_cgroup(worker)
    else:
        Path(os.environ[TIMELINE_ENV]).write_text("")


def _cpu_s() -> Optional[float]:
    try:
        return int(_usage.read_text()) / 1e9 if _usage else None
    except OSError:
        return None


def pytest_runtest_logreport(report):
    if os.environ.get("PYTEST_XDIST_WORKER") is None and hasattr(report, "node"):
        return  # the controller sees the workers' reports too: each is written once, by its worker
    line = {
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        "test": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "end": time.time(),
        "duration": report.duration,
        "cpu_s": _cpu_s(),  # the worker's cgroup's CPU so far, all its processes
    }
    with open(os.environ[TIMELINE_ENV], "a") as out:
        out.write(json.dumps(line) + "\n")


def pytest_unconfigure(config):
    """The controller, after the workers have ended: their cgroups go (a group still holding a process stays)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        for group in CPUACCT.glob("lanebook-suite-*"):
            try:
                group.rmdir()
            except OSError:
                pass
