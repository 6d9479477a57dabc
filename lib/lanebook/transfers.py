"""Files on the nodes: copying a directory head -> workers with rsync over the fabric, and testing paths.

rsync runs on the head into each worker's fabric address (seed 000: download once, rsync once;
never --delete, and --partial so a rerun resumes a cut transfer); path tests answer in one round
trip per node. checkout_ok is the launch prerequisite: the checkout's files on every node.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from .checks import NodeCheck, NodeResult
from .compose import COMPOSE_NAME as COMPOSE_FILE
from .nodes import Lane, Node, q, qpath
from .render import ENV_NAME as ENV_FILE


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


def checkout_files(lane: Lane) -> list[tuple[str, str]]:
    """What a lane checkout needs on every node: compose file and .env.dspark, launcher scripts executable."""
    checkout = lane.params.checkout.rstrip("/")
    launcher = lane.params.launcher
    scripts = [launcher.start, launcher.status, launcher.stop]
    return ([("-f", f"{checkout}/{COMPOSE_FILE}"), ("-f", f"{checkout}/{ENV_FILE}")]
            + [("-x", f"{checkout}/{s.removeprefix('./')}") for s in scripts])


def checkout_ok(lane: Lane) -> NodeCheck:
    """The checkout's files on every node; each node's `missing` figure lists what is absent (or not executable)."""
    tests = checkout_files(lane)
    found = {}
    for node in lane.nodes:
        missing = _failed_tests(node, tests)
        found[node.alias] = NodeResult(not missing, f"missing {', '.join(missing)}" if missing else "all present",
                                       {"missing": missing})
    return NodeCheck.not_observed() if lane.executor.dry_run else NodeCheck(found)


# --- rsync head -> workers over the fabric -------------------------------------------------------

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


def rsync_command(lane: Lane, worker: Node, path: str, bwlimit_kib: Optional[int] = None) -> str:
    """`rsync -aH --partial --info=stats2 ~/PATH/ [user@]FABRIC_IP:PATH/` (never --delete; --partial resumes)."""
    path = path.rstrip("/")
    user = f"{worker.params.user}@" if worker.params.user else ""
    limit = f" --bwlimit={int(bwlimit_kib)}" if bwlimit_kib else ""
    return (f"rsync -aH --partial --info=stats2{limit} {qpath(path)}/ "
            f"{q(f'{user}{worker.fabric_ip}:{_remote_path(path)}/')}")


def rsync_to_workers(lane: Lane, path: str, *, timeout_s: float = 4 * 3600, bwlimit_kib: Optional[int] = None,
                     on_line: Optional[Callable[[str], None]] = None) -> dict[str, RsyncStats]:
    """Copy a directory from the head to every worker over the fabric (seed 000: rsync once, never twice over WAN).

    Runs on the head with a terminal, so hitting `timeout_s` stops rsync; rerunning resumes from the
    partial file (--partial). `bwlimit_kib` throttles (KiB/s) when the fabric is shared.
    """
    stats = {}
    for worker in lane.workers:
        result = lane.head.run(rsync_command(lane, worker, path, bwlimit_kib), pty=True, timeout=timeout_s,
                               on_line=on_line)
        stats[worker.alias] = parse_rsync_stats(result.stdout, result.duration_s, result.dry_run)
    return stats


def sync_checkout(lane: Lane, **kwargs) -> dict[str, RsyncStats]:
    """Seed 000: `rsync -a ~/CHECKOUT/ milo@10.0.0.2:~/CHECKOUT/` after rendering the env on the head."""
    return rsync_to_workers(lane, lane.params.checkout, **kwargs)
