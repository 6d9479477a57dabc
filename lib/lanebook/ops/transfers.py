"""Files on the nodes: copying a directory head -> workers with rsync over the RoCE link, and testing paths.

rsync runs on the head into each worker's RoCE address (seed 000: download once, rsync once;
never --delete, and --partial so a rerun resumes a cut transfer); path tests answer in one round
trip per node. checkout_ok is the launch prerequisite: the checkout's files on every node.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from lanebook.base.checks import ExpectedResult, NodeResult
from lanebook.base.progress import Progress
from lanebook.nodes.ssh import CommandFailed, LaneNodes, Node, q, qpath
from lanebook.recipe.compose import COMPOSE_NAME as COMPOSE_FILE
from lanebook.recipe.render import ENV_NAME as ENV_FILE

# --- path tests -------------------------------------------------------------------------------------


def _failed_tests(node: Node, tests: list[tuple[str, str]]) -> list[str]:
    """Run `test FLAG PATH` for each pair in one command; returns the paths whose test failed."""
    if not tests:
        return []
    command = "; ".join(f"test {flag} {qpath(path)} || echo {q(path)}" for flag, path in tests)
    result = node.run(command, timeout=60)
    return [line for line in result.stdout.splitlines() if line]


def path_exists(node: Node, path: str) -> bool:
    return not _failed_tests(node, [("-e", path)])


def missing_paths(node: Node, paths: Iterable[str]) -> list[str]:
    """The paths (files or directories, ~ = the node's home) that do not exist on the node, in one round trip."""
    return _failed_tests(node, [("-e", p) for p in paths])


def checkout_files(nodes: LaneNodes) -> list[tuple[str, str]]:
    """What a lane checkout needs on every node: compose file and .env.dspark, launcher scripts executable."""
    checkout = nodes.params.checkout.rstrip("/")
    launcher = nodes.params.launcher
    scripts = [launcher.start, launcher.status, launcher.stop]
    return [("-f", f"{checkout}/{COMPOSE_FILE}"), ("-f", f"{checkout}/{ENV_FILE}")] + [
        ("-x", f"{checkout}/{s.removeprefix('./')}") for s in scripts
    ]


def checkout_ok(nodes: LaneNodes, *, what: str = "checkout present on every node") -> ExpectedResult:
    """The checkout's files on every node; each node's `missing` figure lists what is absent (or not executable)."""
    tests = checkout_files(nodes)
    found = {}
    for node in nodes:
        missing = _failed_tests(node, tests)
        found[node.alias] = NodeResult(
            not missing, f"missing {', '.join(missing)}" if missing else "all present", {"missing": missing}
        )
    return ExpectedResult.on_nodes(found, what=what, dry_run=nodes.executor.dry_run)


# --- rsync head -> workers over the RoCE link -------------------------------------------------------


@dataclass
class RsyncStats:
    """The figures rsync's --info=stats2 prints (None when not printed, e.g. in dry-run)."""

    files_transferred: Optional[int] = None
    total_file_size: Optional[int] = None
    transferred_file_size: Optional[int] = None
    literal_data: Optional[int] = None
    matched_data: Optional[int] = None
    duration_s: float = 0.0
    dry_run: bool = False
    attempts: int = 1  # rsync runs it took: more than one when a cut connection was resumed


def rsync_results(stats: dict[str, RsyncStats], *, runs: bool = False) -> list[ExpectedResult]:
    """One result per worker: rsync finished with its statistics (files and bytes sent; `runs`: and the rsync runs
    it took)."""
    return ExpectedResult.per_node(
        {
            alias: (
                s.files_transferred is not None,
                f"{s.files_transferred} files, {s.transferred_file_size} bytes sent"
                + (f" in {s.attempts} run(s)" if runs else ""),
            )
            for alias, s in stats.items()
        },
        "rsync to {} finished with its statistics",
    )


# rsync exit codes of a connection lost mid-transfer (socket I/O 10, stream 12, timeouts 30/35, ssh 255):
# a rerun resumes from the partial file. Others (23 partial transfer from file errors, 11 file I/O,
# 1 syntax, 20 signal) say something a rerun would meet again, and are not retried.
RESUMABLE_EXITS = frozenset({10, 12, 30, 35, 255})


_STATS = {
    "files_transferred": "Number of regular files transferred",
    "total_file_size": "Total file size",
    "transferred_file_size": "Total transferred file size",
    "literal_data": "Literal data",
    "matched_data": "Matched data",
}


def parse_rsync_stats(text: str, duration_s: float = 0.0, dry_run: bool = False) -> RsyncStats:
    figures = {}
    for key, label in _STATS.items():
        match = re.search(rf"^{label}: ([\d,]+)", text, re.M)
        figures[key] = int(match.group(1).replace(",", "")) if match else None
    return RsyncStats(**figures, duration_s=duration_s, dry_run=dry_run)


def _remote_path(path: str) -> str:
    """A node path as rsync's remote side takes it: relative = the login's home (so ~/x → x)."""
    return path.removeprefix("~/") if path.startswith("~/") else path


def rsync_command(nodes: LaneNodes, worker: Node, path: str, bwlimit_kib: Optional[int] = None) -> str:
    """`rsync -aH --partial --info=stats2 ~/PATH/ [user@]FABRIC_IP:PATH/` (never --delete; --partial resumes)."""
    path = path.rstrip("/")
    user = f"{worker.params.user}@" if worker.params.user else ""
    limit = f" --bwlimit={int(bwlimit_kib)}" if bwlimit_kib else ""
    return (
        f"rsync -aH --partial --info=stats2{limit} {qpath(path)}/ {q(f'{user}{worker.roce_ip}:{_remote_path(path)}/')}"
    )


def rsync_to_workers(
    nodes: LaneNodes,
    path: str,
    *,
    timeout_s: float = 4 * 3600,
    bwlimit_kib: Optional[int] = None,
    on_line: Optional[Callable[[str], None]] = None,
    workers: Optional[Iterable[Node]] = None,
    attempts: int = 1,
) -> dict[str, RsyncStats]:
    """Copy a directory from the head to every worker (or to `workers`) over the RoCE link (seed 000: rsync once,
    never twice over WAN).

    Runs on the head with a terminal, so hitting `timeout_s` stops rsync; rerunning resumes from the
    partial file (--partial). With `attempts` > 1 a connection lost mid-transfer (RESUMABLE_EXITS) is resumed
    at once, after the worker's receiver has exited (it saves the partial file as it goes). `bwlimit_kib`
    throttles (KiB/s) when the RoCE link is shared. Progress is shown per worker and attempt (lanebook.base.progress).
    """
    stats = {}
    targets = nodes.workers if workers is None else list(workers)
    shown = None if nodes.executor.dry_run else Progress(f"rsync {path} to workers", len(targets), "worker(s)")
    for done, worker in enumerate(targets):
        command = rsync_command(nodes, worker, path, bwlimit_kib)
        for attempt in range(1, max(1, attempts) + 1):
            if shown:
                shown.update(done, f"{worker.alias}: attempt {attempt}/{max(1, attempts)}")
            try:
                result = nodes.head.run(command, pty=True, timeout=timeout_s, on_line=on_line)
                break
            except CommandFailed as exc:
                if attempt >= attempts or exc.result.exit_code not in RESUMABLE_EXITS:
                    if shown:
                        shown.finish(done, f"{worker.alias}: exit {exc.result.exit_code}", ok=False)
                    raise
                wait_receiver_gone(worker, path)
        stats[worker.alias] = parse_rsync_stats(result.stdout, result.duration_s, result.dry_run)
        stats[worker.alias].attempts = attempt
    if shown:
        shown.finish(
            len(targets),
            ", ".join(f"{alias}: {s.attempts} attempt(s), {s.duration_s:.0f} s" for alias, s in stats.items()),
        )
    return stats


def receivers_of(pgrep_lines: str, path: str) -> list[str]:
    """The `pgrep -af 'rsync --server'` lines of receivers writing into `path` (a sender has --sender)."""
    target = f" {_remote_path(path.rstrip('/'))}/"
    return [line for line in pgrep_lines.splitlines() if " --sender" not in line and line.rstrip().endswith(target)]


def wait_receiver_gone(worker: Node, path: str, within_s: float = 30.0) -> bool:
    """Wait (bounded) until no rsync receiver on the worker writes into `path`: after a cut connection it may
    still be saving the partial file, which a resumed run must find whole. False when one is still there."""
    deadline = time.monotonic() + within_s
    while receivers_of(worker.run("pgrep -af 'rsync --server' || true", timeout=60).stdout, path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def sync_checkout(nodes: LaneNodes, **kwargs) -> dict[str, RsyncStats]:
    """Seed 000: `rsync -a ~/CHECKOUT/ milo@10.0.0.2:~/CHECKOUT/` after rendering the env on the head."""
    return rsync_to_workers(nodes, nodes.params.checkout, **kwargs)
