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
from typing import Any, Iterable, Optional

from .errors import LanebookError
from .nodes import Lane, NodeError, qpath
from .params import LaneParams, load_lane

PROBE = Path(__file__).with_name("fingerprint_probe.py")
FINGERPRINT_FIGURE = "rollback_fingerprint"  # the figure a run records a rollback lane's fingerprint under
PARTS = ("checkout", "weights")
PROBE_TIMEOUT_S = 600.0


def rollback_target(lane: LaneParams) -> LaneParams:
    """The lane this lane rolls back to (its `rollback:`), loaded and validated."""
    if not lane.rollback:
        raise LanebookError(f"lane {lane.name} names no rollback lane (rollback: null in its lane file)")
    return load_lane(lane.rollback)


def pair_differences(current: LaneParams, target: LaneParams) -> list[str]:
    """How the two lanes' nodes differ (role, address, port, fabric IP): a rollback relaunches on the same pair."""
    def nodes(lane: LaneParams) -> dict[str, tuple]:
        return {n.alias: (n.role, n.host, n.port, n.fabric_ip) for n in lane.nodes}

    mine, theirs = nodes(current), nodes(target)
    return [f"{alias}: {current.name} {mine.get(alias)}, {target.name} {theirs.get(alias)}"
            for alias in dict.fromkeys([*mine, *theirs]) if mine.get(alias) != theirs.get(alias)]


# --- fingerprints --------------------------------------------------------------------------------

def fingerprint(lane: Lane) -> dict:
    """The lane's checkout and hub model dir on every node, fingerprinted in place (fingerprint_probe.py).

    {"lane", "checkout", "hub_dir", "observed", "nodes": {alias: {"checkout": TREE, "weights": TREE}}} with
    TREE = {"path", "exists", "sha256", "entries", "bytes", "newest"}: JSON, so it is recorded as a figure as it
    is. A dry run sends the probes and observes nothing ("observed": false, no nodes).
    """
    params = lane.params
    command = f"python3 - {qpath(params.checkout)} {qpath(params.weights.hub_dir)}"
    nodes: dict[str, dict] = {}
    for node in lane.nodes:
        result = node.run(command, stdin=PROBE, timeout=PROBE_TIMEOUT_S)
        if result.dry_run:
            continue
        try:
            found = json.loads(result.stdout)
        except ValueError:
            raise NodeError(f"{node.alias}: the fingerprint probe printed no report: {result.stdout.strip()[:200]!r}") from None
        nodes[node.alias] = {part: found[part] for part in PARTS}
    return {"lane": params.name, "checkout": params.checkout, "hub_dir": params.weights.hub_dir,
            "observed": not lane.executor.dry_run, "nodes": nodes}


def _tree_change(alias: str, part: str, before: Optional[dict], after: Optional[dict]) -> Optional[str]:
    if before is None or after is None:
        return f"{alias}: {part} fingerprinted only {'after' if before is None else 'before'}"
    if before.get("sha256") == after.get("sha256"):
        return None
    if not after.get("exists"):
        return f"{alias}: {part} {after.get('path')} is gone"
    if not before.get("exists"):
        return f"{alias}: {part} {after.get('path')} appeared"
    return (f"{alias}: {part} {after.get('path')} changed ({before.get('entries')} → {after.get('entries')} entries, "
            f"{before.get('bytes')} → {after.get('bytes')} bytes; newest file now {after.get('newest')})")


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
    return {alias: {part: (trees[part].get("sha256") or "missing")[:12] for part in PARTS}
            for alias, trees in fp.get("nodes", {}).items()}


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
    def block(lane: LaneParams) -> dict[str, Any]:
        return {"api": lane.api, "api_key": lane.hermes.api_key, "context_length": lane.hermes.context_length,
                "default_model": lane.served_model_name}

    old, new = block(current), block(target)
    return [f"{key}: {old[key]} → {new[key]}" for key in old if old[key] != new[key]]
