"""Weights (seed 000 "download once, rsync once"): download on the head only, rsync once to the workers
over the fabric, delete `*.incomplete` on the workers, and verify a hub model dir in place in one
round trip (the probe in weights_probe.py runs on the node); `check_weights` does that on every node.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional

from .checks import NOT_OBSERVED_DRY_RUN, ExpectedResult, NodeResult
from .nodes import CommandResult, Lane, Node, NodeError, env_prefix, q, qpath
from .transfers import RsyncStats, rsync_to_workers
from .params import WeightsParams

PROBE = Path(__file__).with_name("weights_probe.py")


@dataclass
class WeightsReport:
    """What the probe found in one node's hub model dir. `problems` empty = whole."""

    node: str
    hub_dir: str
    revision: Optional[str] = None
    shard_count: int = 0
    expected_shards: int = 0
    problems: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    missing_shards: list[str] = field(default_factory=list)
    bad_shards: dict[str, str] = field(default_factory=dict)
    broken_symlinks: list[str] = field(default_factory=list)
    not_blob_links: list[str] = field(default_factory=list)
    total_size: Optional[int] = None
    size_basis: Optional[str] = None
    sha256_checked: int = 0
    sha256_mismatches: list[str] = field(default_factory=list)
    seconds_on_node: float = 0.0
    duration_s: float = 0.0
    round_trips: int = 1
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return not self.dry_run and not self.problems

    def detail(self) -> str:
        if self.dry_run:
            return NOT_OBSERVED_DRY_RUN
        state = "; ".join(self.problems) if self.problems else "complete"
        return f"{self.shard_count}/{self.expected_shards} shards, {state}"

    def summary(self) -> str:
        return f"{self.node}: {self.detail()}"

    def node_result(self) -> NodeResult:
        return NodeResult(self.ok, self.detail(), {"shard_count": self.shard_count, "expected_shards": self.expected_shards,
                                                   "problems": list(self.problems)})


def verify_weights(node: Node, weights: WeightsParams, *, sha256: bool = False, workers: int = 4,
                   timeout_s: Optional[float] = None) -> WeightsReport:
    """Check shard count, `*.incomplete`, each shard's size against its header and the index's total_size,
    and the blobs/snapshots symlinks, without reading the weights; `sha256=True` also hashes every shard
    blob against its name (reads everything, `workers` files at a time).
    """
    command = f"python3 - {qpath(weights.hub_dir)} {int(weights.shards)}" + (f" --sha256 {int(workers)}" if sha256 else "")
    timeout = timeout_s or (6 * 3600 if sha256 else 120)
    result = node.run(command, stdin=PROBE, timeout=timeout)
    if result.dry_run:
        return WeightsReport(node.alias, weights.hub_dir, expected_shards=weights.shards, dry_run=True)
    try:
        found = json.loads(result.stdout)
    except ValueError:
        raise NodeError(f"{node.alias}: the weights probe printed no report: {result.stdout.strip()[:200]!r}") from None
    known = WeightsReport.__dataclass_fields__
    report = WeightsReport(node.alias, **{k: v for k, v in found.items() if k in known and k != "node"})
    report.duration_s = result.duration_s
    return report


def check_weights(lane: Lane, *, sha256: bool = False, workers: int = 4) -> ExpectedResult:
    """verify_weights on every node of the lane. A node that cannot be reached fails its part of the check
    (its error is the detail) without stopping the others; a dry run records the probes and observes nothing."""
    found: dict[str, NodeResult] = {}
    for node in lane.nodes:
        try:
            found[node.alias] = verify_weights(node, lane.params.weights, sha256=sha256, workers=workers).node_result()
        except NodeError as exc:
            found[node.alias] = NodeResult(False, str(exc))
    return ExpectedResult.on_nodes(found, dry_run=lane.executor.dry_run)


def download_command(weights: WeightsParams) -> str:
    """Seed 000: `HF_HUB_OFFLINE=0 TRANSFORMERS_OFFLINE=0 HF_HUB_DISABLE_XET=1 hf download REPO --max-workers 4`."""
    env = dict(weights.download_env)
    if weights.hf_cache.rstrip("/") != WeightsParams.model_fields["hf_cache"].default:
        env["HF_HOME"] = weights.hf_cache  # so the download lands where verify and rsync look
    return f"{env_prefix(env)}hf download {q(weights.repo)} --max-workers {int(weights.max_workers)}"


def download_on_head(lane: Lane, *, timeout_s: float = 12 * 3600,
                     on_line: Optional[Callable[[str], None]] = None) -> CommandResult:
    """Download on the head only (pitfall 5: never pull ~160 GB over both WANs); workers get it by rsync."""
    return lane.head.run(download_command(lane.params.weights), pty=True, timeout=timeout_s, on_line=on_line)


def sync_to_workers(lane: Lane, **kwargs) -> dict[str, RsyncStats]:
    """rsync the full hub model dir (blobs + snapshots + refs, links kept) from the head to every worker."""
    return rsync_to_workers(lane, lane.params.weights.hub_dir, **kwargs)


def clean_incomplete_on_workers(lane: Lane, workers: Optional[Iterable[Node]] = None) -> dict[str, list[str]]:
    """Seed 000: `find $MODEL_DIR -name '*.incomplete' -delete` on the workers only (all, or `workers`);
    returns what was deleted. Never the head: its tree is the source the workers are copied from."""
    command = f"find {qpath(lane.params.weights.hub_dir)} -name '*.incomplete' -type f -print -delete"
    chosen = lane.workers if workers is None else [w for w in workers if w.role == "worker"]
    return {w.alias: w.run(command, timeout=300).stdout.splitlines() for w in chosen}


def not_incomplete(deleted: dict[str, list[str]]) -> list[str]:
    """Deleted paths that are not `*.incomplete` files (`node: path`): must be none, weights are never deleted."""
    return [f"{alias}: {path}" for alias, paths in deleted.items() for path in paths if not path.endswith(".incomplete")]


def verify_every_node(lane: Lane, *, sha256: bool = False) -> dict[str, WeightsReport]:
    """verify_weights on each node of the lane, by alias (head first, as the lane lists them)."""
    return {node.alias: verify_weights(node, lane.params.weights, sha256=sha256) for node in lane.nodes}


def workers_to_sync(head: WeightsReport, workers: dict[str, WeightsReport]) -> dict[str, str]:
    """The workers the head's tree must be copied to, each with why: its tree is not whole, or it holds another
    revision than the head's (refs/main differs, e.g. after the head downloaded a newer one). A worker whose tree
    verifies at the head's revision gets nothing: rsync once. Nothing observed (dry run) means every worker."""
    reasons = {}
    for alias, report in workers.items():
        if report.dry_run or head.dry_run:
            reasons[alias] = NOT_OBSERVED_DRY_RUN
        elif not report.ok:
            reasons[alias] = "; ".join(report.problems)
        elif report.revision != head.revision:
            reasons[alias] = f"revision {report.revision}, the head has {head.revision}"
    return reasons
