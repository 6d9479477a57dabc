"""Weights (seed 000 "download once, rsync once"): download on the head only, rsync once to the workers
over the RoCE link, delete `*.incomplete` on the workers, and verify a hub model dir in place in one
round trip (the probe in weights_probe.py runs on the node); `check_weights` does that on every node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Optional

from lanebook.base.checks import NOT_OBSERVED_DRY_RUN, ExpectedResult, NodeResult
from lanebook.lane.params import WeightsParams
from lanebook.nodes.ssh import CommandResult, LaneNodes, Node, NodeError, env_prefix, q, qpath
from lanebook.ops.transfers import RsyncStats, rsync_results, rsync_to_workers

if TYPE_CHECKING:
    from lanebook.steps.runbook import Runbook

PROBE = Path(__file__).parents[1] / "nodes" / "scripts" / "weights_probe.py"


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
        return NodeResult(
            self.ok,
            self.detail(),
            {"shard_count": self.shard_count, "expected_shards": self.expected_shards, "problems": list(self.problems)},
        )


def verify_weights(
    node: Node, weights: WeightsParams, *, sha256: bool = False, workers: int = 4, timeout_s: Optional[float] = None
) -> WeightsReport:
    """Check shard count, `*.incomplete`, each shard's size against its header and the index's total_size,
    and the blobs/snapshots symlinks, without reading the weights; `sha256=True` also hashes every shard
    blob against its name (reads everything, `workers` files at a time).
    """
    command = f"python3 - {qpath(weights.hub_dir)} {int(weights.shards)}" + (
        f" --sha256 {int(workers)}" if sha256 else ""
    )
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


def check_weights(
    nodes: LaneNodes, *, sha256: bool = False, workers: int = 4, what: str = "weights complete on every node"
) -> ExpectedResult:
    """verify_every_node as one node check (launch and rollback ask only: whole on every node?). A node that
    cannot be reached raises its NodeError, which fails the runbook step with its message; a dry run records the
    probes and observes nothing."""
    reports = verify_every_node(nodes, sha256=sha256, workers=workers)
    return ExpectedResult.on_nodes(
        {alias: r.node_result() for alias, r in reports.items()}, what=what, dry_run=nodes.executor.dry_run
    )


def download_command(weights: WeightsParams) -> str:
    """Seed 000: `HF_HUB_OFFLINE=0 TRANSFORMERS_OFFLINE=0 HF_HUB_DISABLE_XET=1 hf download REPO --max-workers 4`."""
    env = dict(weights.download_env)
    if weights.hf_cache.rstrip("/") != WeightsParams.model_fields["hf_cache"].default:
        env["HF_HOME"] = weights.hf_cache  # so the download lands where verify and rsync look
    return f"{env_prefix(env)}hf download {q(weights.repo)} --max-workers {int(weights.max_workers)}"


def download_on_head(
    nodes: LaneNodes, *, timeout_s: float = 12 * 3600, on_line: Optional[Callable[[str], None]] = None
) -> CommandResult:
    """Download on the head only (pitfall 5: never pull ~160 GB over both WANs); workers get it by rsync."""
    return nodes.head.run(download_command(nodes.params.weights), pty=True, timeout=timeout_s, on_line=on_line)


def sync_to_workers(nodes: LaneNodes, **kwargs) -> dict[str, RsyncStats]:
    """rsync the full hub model dir (blobs + snapshots + refs, links kept) from the head to every worker."""
    return rsync_to_workers(nodes, nodes.params.weights.hub_dir, **kwargs)


def make_hub_parent(nodes: LaneNodes, workers: Iterable[Node]) -> None:
    """A worker that never held a model (a Spark new to the lane) may have no hub directory, and rsync makes only the
    last component of its destination (exit 11, "mkdir failed"): its parent is made first, as `hf download` makes it
    on the head."""
    parent = nodes.params.weights.hub_dir.rstrip("/").rpartition("/")[0]
    nodes.each(f"mkdir -p {qpath(parent)}", only=list(workers))


def clean_incomplete_on_workers(nodes: LaneNodes, workers: Optional[Iterable[Node]] = None) -> dict[str, list[str]]:
    """Seed 000: `find $MODEL_DIR -name '*.incomplete' -delete` on the workers only (all, or `workers`);
    returns what was deleted. Never the head: its tree is the source the workers are copied from."""
    command = f"find {qpath(nodes.params.weights.hub_dir)} -name '*.incomplete' -type f -print -delete"
    chosen = nodes.workers if workers is None else [w for w in workers if w.role == "worker"]
    return {w.alias: w.run(command, timeout=300).stdout.splitlines() for w in chosen}


def not_incomplete(deleted: dict[str, list[str]]) -> list[str]:
    """Deleted paths that are not `*.incomplete` files (`node: path`): must be none, weights are never deleted."""
    return [
        f"{alias}: {path}" for alias, paths in deleted.items() for path in paths if not path.endswith(".incomplete")
    ]


def verify_every_node(nodes: LaneNodes, *, sha256: bool = False, workers: int = 4) -> dict[str, WeightsReport]:
    """verify_weights on each node of the lane, by alias (head first, as the lane lists them): the one way every
    runbook verifies weights."""
    return {node.alias: verify_weights(node, nodes.params.weights, sha256=sha256, workers=workers) for node in nodes}


def tree_results(reports: dict[str, WeightsReport]) -> list[ExpectedResult]:
    """One result per node: did the probe report its tree (whole or not), with its summary."""
    return ExpectedResult.per_node(
        {alias: (not r.dry_run, r.summary()) for alias, r in reports.items()}, "{} reports its tree"
    )


def complete_results(reports: dict[str, WeightsReport]) -> list[ExpectedResult]:
    """One result per node: is its tree whole, with its summary."""
    return ExpectedResult.per_node(
        {alias: (r.ok, r.summary()) for alias, r in reports.items()}, "weights complete on {}"
    )


def revisions(reports: dict[str, WeightsReport]) -> list[str]:
    """The distinct revisions the nodes hold, as text in a stable order: one means every node holds the same."""
    return sorted({str(r.revision) for r in reports.values()})


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


# --- the weights runbook's steps (each takes the runbook: it confirms, records and checks) -------------------


def ensure_head_whole(rb: "Runbook", head: WeightsReport, *, sha256: bool = False) -> WeightsReport:
    """The weights runbook's download step: download on the head only when its tree is not whole (P05), then verify it
    again; the head's report."""
    rb.record(downloaded=not head.ok)
    if head.ok:
        rb.skip("the head's tree is whole", f"nothing to download: {head.summary()}")
        return head
    rb.confirm(f"download {rb.params.weights.repo} on {rb.nodes.head.alias} ({head.detail()})")
    download_on_head(rb.nodes)
    head = verify_weights(rb.nodes.head, rb.params.weights, sha256=sha256)
    rb.expect(
        head.ok,
        what="the head's tree is whole after the download (rerun this runbook to resume a cut one)",
        detail=head.summary(),
    )
    return head


def sync_step(rb: "Runbook", head: WeightsReport, before: dict[str, WeightsReport], *, attempts: int) -> dict[str, str]:
    """The weights runbook's sync step: rsync the head's tree once to the workers that need it (workers_to_sync);
    those workers, with why."""
    to_sync = workers_to_sync(head, {w.alias: before[w.alias] for w in rb.nodes.workers})
    rb.record(synced=to_sync)
    if not to_sync:
        rb.skip("every worker's tree verifies at the head's revision", "nothing to send: rsync once")
        return to_sync
    rb.confirm(
        f"rsync {rb.params.weights.hub_dir} from the head to {', '.join(to_sync)} "
        "(adds and updates files; never deletes)"
    )
    fresh = [rb.nodes.node(a) for a in to_sync if not before[a].dry_run and before[a].shard_count == 0]
    if fresh:
        make_hub_parent(rb.nodes, fresh)
    stats = sync_to_workers(rb.nodes, workers=[rb.nodes.node(a) for a in to_sync], attempts=attempts)
    rb.record(rsync={a: vars(s) for a, s in stats.items()})
    rb.expect(rsync_results(stats, runs=True))
    return to_sync


def clean_step(rb: "Runbook", to_sync: dict[str, str]) -> None:
    """The weights runbook's clean-up step: delete `*.incomplete` on the workers just synced (none were synced: nothing
    to delete)."""
    if not to_sync:
        rb.skip("no *.incomplete on any worker", "every worker's tree verified: it holds none")
        return
    rb.confirm(f"delete *.incomplete files under {rb.params.weights.hub_dir} on {', '.join(to_sync)}")
    deleted = clean_incomplete_on_workers(rb.nodes, [rb.nodes.node(a) for a in to_sync])
    rb.record(deleted_incomplete={a: len(paths) for a, paths in deleted.items()})
    rb.expect(
        not not_incomplete(deleted),
        what="only *.incomplete files were deleted",
        detail="; ".join(not_incomplete(deleted)) or f"{sum(map(len, deleted.values()))} deleted",
    )
