"""Fixtures shared by every test module: the session's twin; and how the suite runs in parallel (`make test`).

There each pytest-xdist worker runs in a network namespace of its own (tests/netns-python) with a twin of its own
under the run's suite dir, so the twins' fixed loopback addresses never meet; the modules that relaunch lanes are
handed out first so the run's tail is short; and the run ends with a check that nothing it started still runs.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

SUITE_DIR = "LANEBOOK_SUITE_DIR"  # a parallel run's scratch dir: every worker's twin dir is under it
SUITE_NETNS = "LANEBOOK_SUITE_NETNS"  # the network namespace of the run's controller, which its workers must leave
SUITE_CONTROLLER = "LANEBOOK_SUITE_CONTROLLER"  # the controller's pid: its namespace still reaches the package indexes
# xdist hands out whole modules (loadfile) in the order the items have, and gives each worker one module, then at once
# a second to every worker with at most two tests pending. The real vLLM's module goes first: its worker waits for
# the venv `make test` builds beside setup and the suite, then the server boots and serves the launcher's readiness
# chat at normal priority (about 40 s of CPU), then serves at nice 19 (twin/vllm_cpu.py: the clients reading its
# streams come first), so its tests get what the rest leaves: the earlier it starts, the less of the run's end is it
# alone. Sixteen tests: no second module is queued behind it at once. The others follow slowest first, by their
# seconds in a whole parallel run (MODULE_SECONDS, written by benchmarks/suite_timeline.py --write-order), so the
# long ones start at once and the short ones fill the end; a module not listed there comes last, as collected.
FIRST = "test_real_vllm.py"
MODULE_SECONDS = Path(__file__).with_name("module_seconds.txt")
_started_twins: list[Path] = []  # twin dirs whose twin this session brought up (and stops at its end)


def _netns() -> str:
    return os.readlink("/proc/self/ns/net")


def pytest_configure(config):
    if os.environ.get("LANEBOOK_SUITE_TIMELINE"):
        from helpers import suite_timeline

        config.pluginmanager.register(suite_timeline)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        if os.environ.get(SUITE_NETNS) == _netns():
            raise pytest.UsageError(
                "parallel workers share one network namespace, so their twins would collide: "
                "start them through tests/netns-python (as `make test` does)"
            )
        os.environ["LANEBOOK_TWIN_DIR"] = str(Path(os.environ[SUITE_DIR]) / worker / "twin")
    elif config.getoption("dist", "no") != "no" and config.getoption("tx", None):
        os.environ[SUITE_DIR] = tempfile.mkdtemp(prefix="lanebook-suite-")
        os.environ[SUITE_NETNS] = _netns()
        os.environ[SUITE_CONTROLLER] = str(os.getpid())


# PYTHONDONTWRITEBYTECODE (this machine sets it) also keeps pytest from storing the test modules it rewrites for its
# assertion messages, and every worker of a parallel run collects every module: each rewrote all of them, about 7 s of
# CPU apiece. The suite stores them (tests/__pycache__, ignored by git; pytest rewrites one whose source changed) and
# its first worker collects alone, so that the others read what it stored.
sys.dont_write_bytecode = False
_first_collection = None  # the lock the worker collecting first holds until its collection ends


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session):
    global _first_collection
    if not (os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get(SUITE_DIR)):
        return
    suite = Path(os.environ[SUITE_DIR])
    lock = open(suite / "collection.lock", "a")
    fcntl.flock(lock, fcntl.LOCK_EX)  # waits while the first worker collects
    if (suite / "collected").exists():
        lock.close()
    else:
        _first_collection = lock


def pytest_collection_finish(session):
    global _first_collection
    if _first_collection is not None:
        (Path(os.environ[SUITE_DIR]) / "collected").touch()
        _first_collection.close()
        _first_collection = None


def module_seconds() -> dict[str, float]:
    """Module file name -> its seconds in a measured parallel run (MODULE_SECONDS: "SECONDS  tests/NAME.py" lines)."""
    seconds = {}
    for line in MODULE_SECONDS.read_text().splitlines() if MODULE_SECONDS.exists() else []:
        if line.strip() and not line.lstrip().startswith("#"):
            value, module = line.split()
            seconds[Path(module).name] = float(value)
    return seconds


def pytest_collection_modifyitems(items):
    """FIRST, then the measured modules slowest first, then the others as collected."""
    seconds = module_seconds()

    def rank(item) -> tuple[int, float]:
        name = item.path.name
        return (0, 0.0) if name == FIRST else (1, -seconds[name]) if name in seconds else (2, 0.0)

    items.sort(key=rank)


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def left_running(twin_dirs: list[Path], suite: Path | None) -> dict[int, str]:
    """pid -> command line of each process still running that the suite started: a process of one of its twins
    (lanebook.twin.control.twin_processes), or, in a parallel run, any whose environment points lanebook at a twin
    dir under the run's suite dir (the workers' children all do)."""
    from lanebook.twin import control

    pids = set().union(*(control.twin_processes(root) for root in twin_dirs if root.exists()))
    if suite:
        marker = f"LANEBOOK_TWIN_DIR={suite.resolve()}/".encode()
        pids |= {
            int(entry.name)
            for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and marker in _environ(int(entry.name))
        }
    found = {}
    for pid in pids:
        try:
            found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:100]
        except OSError:
            continue
    return found


def _repository_files() -> dict[str, str]:
    """The repository's lane files and stored baselines by content: what runs write only into copies."""
    from lanebook.base.files import sha256_file
    from lanebook.base.paths import PARAMS_DIR, REPO
    from lanebook.speed.bands import BASELINES_DIR

    files = [p for p in [*PARAMS_DIR.rglob("*"), *BASELINES_DIR.iterdir()] if p.is_file()]  # lanes and fleets
    return {str(p.relative_to(REPO)): sha256_file(p) for p in sorted(files)}


_files_at_start: dict[str, str] = {}


def pytest_sessionstart(session):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        _files_at_start.update(_repository_files())


@pytest.hookimpl(hookwrapper=True)
def pytest_sessionfinish(session):
    """After the workers have ended (xdist stops them in its own sessionfinish): no process of the suite's twins, nor
    anything else started for them, may still run, and no lane file or stored baseline of the repository changed (a
    canary writes the lane file it ran on: tests give it a copy). A leftover fails the run, named; a clean run's suite
    dir goes."""
    yield
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    changed = sorted(set(_repository_files().items()) ^ set(_files_at_start.items()))
    if changed:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"the suite changed the repository's files: {', '.join(sorted({name for name, _ in changed}))}", red=True
        )
    suite = Path(os.environ[SUITE_DIR]) if os.environ.get(SUITE_DIR) else None
    roots = [suite] if suite else _started_twins
    stray = left_running(roots, suite)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if stray:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        reporter.write_line(
            f"left running after the suite: {'; '.join(f'{p} {c}' for p, c in sorted(stray.items()))}", red=True
        )
    elif roots:
        reporter.write_line(f"nothing the suite started is left running (checked {', '.join(map(str, roots))})")
        if suite:
            shutil.rmtree(suite, ignore_errors=True)


@pytest.fixture(scope="session")
def twin():
    """The twin's status dict (`lanebook twin status --json`), brought up with --fast when it is down. A twin this
    session brought up is stopped at its end, so the suite leaves nothing running; one it found running (an
    operator's) stays."""
    from lanebook.twin import control
    from lanebook.twin.nodes import twin_dir

    status = control.status()
    if status["running"]:
        yield status
        return
    _started_twins.append(twin_dir())
    yield control.up(faults=[], fast=True)
    control.down()
