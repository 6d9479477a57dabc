"""Rolling a lane back to its `rollback:` lane, and keeping that lane boring.

Seed 000 "Rollback to preview weights": stop the current lane, clean SHM and page cache on both nodes,
relaunch the rollback lane from its own checkout, then `default_model` changes in Hermes. A rollback is
only as good as the lane it falls back to, so that lane's checkout and weights are fingerprinted
(`fingerprint`): before the rollback changes anything, after its relaunch and gates (the two must be
equal), and against the most recent fingerprint an earlier run left in the audit trail under the
figure `rollback_fingerprint` (`lanebook promote` records one when it starts): the rollback lane must
not have been touched since.

Here are the pure parts (comparisons, the audit lookup, the Hermes change) and the one node operation
(the fingerprint, one SSH round trip per node with fingerprint_probe.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Optional

from lanebook.base.errors import LanebookError
from lanebook.lane.params import LaneParams, load_lane
from lanebook.nodes.ssh import LaneNodes, Node, NodeError, qpath
from lanebook.ops import launcher, memory
from lanebook.ops.transfers import checkout_ok
from lanebook.ops.weights import check_weights
from lanebook.recipe.lint import lint_what_lane_runs

if TYPE_CHECKING:
    from lanebook.steps.runbook import Runbook

PROBE = Path(__file__).parents[1] / "nodes" / "scripts" / "fingerprint_probe.py"
FINGERPRINT_FIGURE = "rollback_fingerprint"  # the figure a run records a rollback lane's fingerprint under
PARTS = ("checkout", "weights")
PROBE_TIMEOUT_S = 600.0


def rollback_target(params: LaneParams) -> LaneParams:
    """The lane this lane rolls back to (its `rollback:`), loaded and validated."""
    if not params.rollback:
        raise LanebookError(f"lane {params.name} names no rollback lane (rollback: null in its lane file)")
    return load_lane(params.rollback)


def pair_differences(current: LaneParams, target: LaneParams) -> list[str]:
    """How the rollback lane's nodes differ from this lane's (role, address, port, RoCE IP): a rollback relaunches
    on nodes this lane holds. Every node the rollback lane names must be this lane's, the same; a node only this
    lane has (a four-Spark lane rolling back to its pair) is stopped with it and left idle."""

    def nodes(params: LaneParams) -> dict[str, tuple]:
        return {n.alias: (n.role, n.host, n.port, n.roce_ip) for n in params.nodes}

    mine, theirs = nodes(current), nodes(target)
    return [
        f"{alias}: {current.name} {mine.get(alias)}, {target.name} {theirs[alias]}"
        for alias in theirs
        if mine.get(alias) != theirs[alias]
    ]


# --- fingerprints --------------------------------------------------------------------------------


def probe_trees(node: Node, checkout: str, hub_dir: str) -> Optional[dict]:
    """{"checkout": TREE, "weights": TREE} of one node (see `fingerprint`), one round trip; None in a dry run."""
    result = node.run(f"python3 - {qpath(checkout)} {qpath(hub_dir)}", stdin=PROBE, timeout=PROBE_TIMEOUT_S)
    if result.dry_run:
        return None
    try:
        found = json.loads(result.stdout)
    except ValueError:
        raise NodeError(
            f"{node.alias}: the fingerprint probe printed no report: {result.stdout.strip()[:200]!r}"
        ) from None
    return {part: found[part] for part in PARTS}


def fingerprint(nodes: LaneNodes) -> dict:
    """The lane's checkout and hub model dir on every node, fingerprinted in place (fingerprint_probe.py).

    {"lane", "checkout", "hub_dir", "observed", "nodes": {alias: {"checkout": TREE, "weights": TREE}}} with
    TREE = {"path", "exists", "sha256", "entries", "bytes", "newest"}: JSON, so it is recorded as a figure as it
    is. A dry run sends the probes and observes nothing ("observed": false, no nodes).
    """
    params = nodes.params
    trees: dict[str, dict] = {}
    for node in nodes:
        found = probe_trees(node, params.checkout, params.weights.hub_dir)
        if found is not None:
            trees[node.alias] = found
    return {
        "lane": params.name,
        "checkout": params.checkout,
        "hub_dir": params.weights.hub_dir,
        "observed": not nodes.executor.dry_run,
        "nodes": trees,
    }


def _tree_change(alias: str, part: str, before: Optional[dict], after: Optional[dict]) -> Optional[str]:
    if before is None or after is None:
        return f"{alias}: {part} fingerprinted only {'after' if before is None else 'before'}"
    if before.get("sha256") == after.get("sha256"):
        return None
    if not after.get("exists"):
        return f"{alias}: {part} {after.get('path')} is gone"
    if not before.get("exists"):
        return f"{alias}: {part} {after.get('path')} appeared"
    return (
        f"{alias}: {part} {after.get('path')} changed ({before.get('entries')} → {after.get('entries')} entries, "
        f"{before.get('bytes')} → {after.get('bytes')} bytes; newest file now {after.get('newest')})"
    )


def fingerprint_differences(before: dict, after: dict) -> list[str]:
    """What changed between two fingerprints of one lane, one line per node and part (empty: untouched)."""
    if before.get("lane") != after.get("lane"):
        return [f"fingerprints of different lanes: {before.get('lane')} and {after.get('lane')}"]
    changes = []
    for alias in dict.fromkeys([*before.get("nodes", {}), *after.get("nodes", {})]):
        was, now = before.get("nodes", {}).get(alias), after.get("nodes", {}).get(alias)
        for part in PARTS:
            change = _tree_change(alias, part, (was or {}).get(part), (now or {}).get(part))
            if change:
                changes.append(change)
    return changes


def short(fp: dict) -> dict[str, dict[str, Optional[str]]]:
    """Each node's checkout and weights fingerprints, shortened to 12 hex digits, for display."""
    return {
        alias: {part: (trees[part].get("sha256") or "missing")[:12] for part in PARTS}
        for alias, trees in fp.get("nodes", {}).items()
    }


def recorded_fingerprint(runs: Iterable[dict], lane_name: str) -> Optional[tuple[dict, dict]]:
    """(record, fingerprint) of the most recent run record holding an observed `rollback_fingerprint` of the lane,
    among its figures or, as `lanebook promote` keeps it in a promotion's first record, beside them.

    `runs` in the order the audit trail holds them (oldest first). A dry run's fingerprint observed nothing and
    is passed over.
    """
    for record in reversed(list(runs)):
        # a rollback run's figures, or a promotion's first record (taken before it changed anything)
        found = record.get(FINGERPRINT_FIGURE) or (record.get("figures") or {}).get(FINGERPRINT_FIGURE)
        if isinstance(found, dict) and found.get("lane") == lane_name and found.get("observed") and found.get("nodes"):
            return record, found
    return None


# --- Hermes --------------------------------------------------------------------------------------


def hermes_changes(current: LaneParams, target: LaneParams) -> list[str]:
    """The lines of Hermes's provider block an operator changes to follow the rollback, as `key: old → new`.

    default_model is the served name; api, api_key and context_length come from the lanes too. Empty when the
    two lanes look the same to Hermes.
    """

    def block(params: LaneParams) -> dict[str, Any]:
        return {
            "api": params.api,
            "api_key": params.hermes.api_key,
            "context_length": params.hermes.context_length,
            "default_model": params.served_model_name,
        }

    old, new = block(current), block(target)
    return [f"{key}: {old[key]} → {new[key]}" for key in old if old[key] != new[key]]


# --- the rollback runbook's steps (each takes the runbook: it confirms, records, shows and checks) -------------


def load_target(rb: "Runbook") -> LaneParams:
    """The lane's rollback lane, loaded; one that is not named or does not load fails the step (also in a dry run:
    the failed expectation stops the run)."""
    try:
        return rollback_target(rb.params)
    except LanebookError as exc:
        rb.expect(False, what="the lane names a rollback lane that loads", detail=exc, local=True)


def ready_step(rb: "Runbook", *, target: LaneNodes) -> None:
    """The rollback lane can be launched: what it runs lints clean, its checkout and its weights on every node."""
    name = target.params.name
    # A rollback returns to a lane that ran: how it differs from its own rollback lane (S07) is no reason to stay.
    report = lint_what_lane_runs(target.params, dry_run=rb.dry_run, allow_runtime_and_weights=True)
    rb.expect(report.ok, what=f"what {name} runs lints clean", detail=report.errors_summary(), local=True)
    rb.expect(checkout_ok(target, what=f"{name}'s checkout present on every node"))
    rb.expect(check_weights(target, what=f"{name}'s weights complete on every node"))


def pair_step(rb: "Runbook", *, target: LaneNodes) -> bool:
    """Who holds the pair: no other lane than these two, the rollback lane cleanly down or up, and never both
    lanes up. Whether the rollback already happened (the rollback lane up, this one down)."""
    name = target.params.name
    current, fallback = launcher.lane_containers(rb.nodes), launcher.lane_containers(target)
    rb.record(state_before=current.state, rollback_state_before=fallback.state)
    pair = launcher.pair_occupancy(rb.nodes, also=[target])
    rb.expect(not pair.other_lane_up, what="no other lane serves on the pair", detail=pair.others_found() or "")
    rb.expect(
        fallback.state in (launcher.LANE_DOWN, launcher.LANE_UP),
        what=f"{name} is cleanly down or up",
        detail=fallback.summary(),
    )
    already = fallback.state == launcher.LANE_UP
    rb.expect(
        not already or current.state == launcher.LANE_DOWN,
        what=f"{rb.params.name} and {name} do not both hold the pair",
        detail=f"{rb.params.name}: {current.summary()}",
    )
    return already


def recorded_step(rb: "Runbook", *, name: str, before: dict, runs: Iterable[dict]) -> None:
    """The rollback lane's fingerprint now against the last one a run recorded (none recorded: nothing to compare)."""
    earlier = recorded_fingerprint(runs, name)
    if earlier is None:
        rb.skip(
            f"{name} untouched since its recorded fingerprint",
            f"no run in the audit trail recorded a fingerprint of {name} (`promote` records one)",
        )
        return
    record, recorded = earlier
    rb.record(fingerprint_compared_with=record.get("run_id"))
    changes = fingerprint_differences(recorded, before)
    rb.expect(
        not changes,
        what=f"{name} untouched since {record.get('runbook')} run {record.get('run_id')} "
        f"fingerprinted it ({record.get('started_at')})",
        detail="; ".join(changes) or "equal",
    )


def stop_step(rb: "Runbook", *, target: LaneNodes, already: bool) -> None:
    """Stop this lane on every node (its orphaned workers too), unless the rollback lane already took the pair."""
    name = target.params.name
    if already:
        rb.skip(f"{rb.params.name} stopped on every node", f"{name} is already up and {rb.params.name} down")
        return
    rb.confirm(f"stop lane {rb.params.name} on every node and relaunch {name} from {target.params.checkout}")
    stopped = launcher.stop_lane(rb.nodes)
    rb.record(stop_script=stopped.launcher.outcome)
    rb.expect(stopped.launcher.ok, what="the stop script exits 0", detail=stopped.launcher.summary())
    orphans = launcher.stop_orphaned_workers(rb.nodes)
    rb.record(orphaned_workers_stopped=orphans)
    left = launcher.lane_containers(rb.nodes)
    rb.expect(
        not left.left,
        what=f"no container of {rb.params.name} left on any node",
        detail=(f"stopped orphaned: {orphans}; " if orphans else "") + left.summary(),
    )


def clean_step(rb: "Runbook", *, target: LaneNodes, already: bool) -> None:
    """Clean memory on every node and check there is enough free for the rollback lane (P04), unless it serves."""
    name = target.params.name
    memory.clean_step(rb, skip_because=f"{name} is up" if already else None)
    if not already:
        memory.free_memory_step(rb, target=target, what=f"enough free memory on every node for {name}")


def relaunch_step(rb: "Runbook", *, target: LaneNodes, already: bool) -> None:
    """The rollback runbook's relaunch step: no legacy unit active, the rollback lane launched from its own checkout
    (verified instead when it already serves), up on every node, and its live command carrying every value its lane file
    sets."""
    name = target.params.name
    rb.expect(memory.mask_legacy_units(target))
    launcher.start_step(
        rb,
        target=target,
        skip_because="already up: verifying it instead of restarting it" if already else None,
        what="launcher reports the rollback lane up",
        skipped=f"launcher reports {name} up",
        confirm=f"launch {name} from {target.params.checkout}",
    )
    up = launcher.lane_containers(target)
    rb.expect(up.state == launcher.LANE_UP, what=f"{name} up on every node", detail=up.summary())
    launcher.live_command_step(rb, target=target, what=f"the live command carries every value {name} sets")


def hermes_note(current: LaneParams, target: LaneParams, changes: list[str]) -> str:
    """What the operator changes in the Hermes provider block to follow the rollback, as Markdown."""
    provider = target.hermes.provider
    if changes:
        return f"In `providers.{provider}`:\n\n```text\n" + "\n".join(changes) + "\n```"
    return f"Nothing changes in `providers.{provider}`: `default_model` stays `{target.served_model_name}`."
