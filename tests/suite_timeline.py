"""When each test ran and on which worker, for balancing the parallel suite: with LANEBOOK_SUITE_TIMELINE=FILE set,
tests/conftest.py loads this plugin and each test's setup, call and teardown become one JSON line in FILE (emptied
when the run starts); `python benchmarks/suite_timeline.py FILE` then prints each worker's modules and where its
time went.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

TIMELINE_ENV = "LANEBOOK_SUITE_TIMELINE"


def pytest_configure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        Path(os.environ[TIMELINE_ENV]).write_text("")


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
    }
    with open(os.environ[TIMELINE_ENV], "a") as out:
        out.write(json.dumps(line) + "\n")
