"""A new lane's checkout made from the known-good one: seed 000's first move, on each node,

    cp -a ~/ds4-f-mia-anemll-1m6 ~/ds4-f-mia-anemll-0731

so the new lane starts as a copy of the lane that works and the old checkout stays the rollback. The source is the
lane's `checkout_from:` (null: its rollback lane's checkout). A node that has the lane's checkout keeps it: nothing is
ever copied over a checkout (the command refuses when the target appeared since it was looked for). The fingerprint
probe (nodes/scripts/fingerprint_probe.py) proves both halves on every node it copied on: the source checkout's tree
is the one it was before the copy, and the copy's tree is the source's (contents, modes, mtimes: `cp -a` keeps them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from lanebook.base.checks import ExpectedResult
from lanebook.base.errors import LanebookError
from lanebook.lane.params import LaneParams
from lanebook.nodes.ssh import CommandFailed, LaneNodes, Node, q, qpath
from lanebook.ops.checkout_env import REFUSED_EXIT
from lanebook.ops.rollback import probe_trees, rollback_target

if TYPE_CHECKING:
    from lanebook.steps.runbook import Runbook


def copy_source(params: LaneParams) -> Optional[str]:
    """The checkout a node without the lane's gets it from: `checkout_from:`, else the rollback lane's checkout;
    None when the lane says never (false) or has neither."""
    if params.checkout_from is False:
        return None
    if params.checkout_from:
        return params.checkout_from
    return rollback_target(params).checkout if params.rollback else None


def copy_command(source: str, target: str) -> str:
    """Seed 000's `cp -a SOURCE TARGET`, refusing (exit REFUSED_EXIT) when TARGET exists: `cp -a` onto a directory
    would copy into it."""
    return (
        f"if test -e {qpath(target)} || test -L {qpath(target)}; then "
        f"echo {q(f'{target} is there: nothing copied over it')} >&2; exit {REFUSED_EXIT}; fi; "
        f"cp -a {qpath(source)} {qpath(target)}"
    )


def absent_on(nodes: LaneNodes, checkout: str) -> list[Node]:
    """The nodes where nothing is at CHECKOUT (a dry run observes nothing: every node, so each copy is shown)."""
    absent = []
    for node in nodes:
        found = node.run(f"test -e {qpath(checkout)} || test -L {qpath(checkout)}", check=False)
        if found.dry_run or not found.ok:
            absent.append(node)
    return absent


def copy_checkout(node: Node, source: str, target: str) -> None:
    try:
        node.run(copy_command(source, target), timeout=600, pty=True)
    except CommandFailed as exc:
        if exc.result.exit_code == REFUSED_EXIT:
            raise LanebookError(
                f"{node.alias}:{target} appeared since it was looked for: nothing copied over it"
            ) from None
        raise


def checkout_tree(node: Node, checkout: str, hub_dir: str) -> Optional[dict]:
    """The fingerprint probe's tree of one checkout on one node (None in a dry run)."""
    trees = probe_trees(node, checkout, hub_dir)
    return None if trees is None else trees["checkout"]


def tree_line(tree: dict) -> str:
    return f"{tree.get('path')}: sha256 {str(tree.get('sha256'))[:12]}, {tree.get('entries')} entries"


def copy_results(before: dict, source_after: dict, copies: dict) -> dict[str, tuple[bool, bool]]:
    """Per node, from probe trees: (the source's tree is the one before the copy, the copy's tree is the source's)."""
    return {
        alias: (
            bool(was.get("exists")) and was.get("sha256") == source_after[alias].get("sha256"),
            bool(copies[alias].get("exists")) and copies[alias].get("sha256") == source_after[alias].get("sha256"),
        )
        for alias, was in before.items()
    }


# --- the env runbook's first step ------------------------------------------------------------------------------------


def copy_step(rb: "Runbook", *, restore: Optional[str] = None) -> None:
    """The env runbook's checkout step: each node without the lane's checkout gets a `cp -a` of the known-good one
    (after confirmation); the source's fingerprint is the same after the copy and the copy's is the source's. A restore
    copies nothing."""
    params, lane = rb.params, rb.nodes
    target = params.checkout
    if restore:
        rb.skip(f"{target} on every node", f"a restore puts back what run {restore} replaced in the checkout there")
        return
    absent = absent_on(lane, target)
    source = copy_source(params)
    if not absent or source is None:
        # with nothing to copy from, the head's checkout must be there; a worker gets the head's in the env runbook's
        # copy step (rsync)
        rb.expect(
            lane.head not in absent,
            what=f"{target} on the head",
            detail="absent; the lane names no checkout to copy it from (checkout_from: false, or no rollback lane)"
            if lane.head in absent
            else "present",
        )
        what = "on every node" if not absent else "on the head (a worker gets the head's by rsync, in the copy step)"
        rb.skip(f"{target} copied where absent", f"the lane's checkout is there {what}: nothing copied")
        return
    missing = ", ".join(n.alias for n in absent)
    hub = params.weights.hub_dir
    before = {n.alias: checkout_tree(n, source, hub) for n in absent}
    if not rb.dry_run:
        found = {a: (t["exists"], tree_line(t)) for a, t in before.items()}
        rb.expect(ExpectedResult.per_node(found, f"{source}, the checkout to copy, on {{}}"))
    rb.confirm(f"cp -a {source} {target} on {missing} (the source stays as it is: the rollback)")
    for node in absent:
        copy_checkout(node, source, target)
    after = {n.alias: checkout_tree(n, source, hub) for n in absent}
    copies = {n.alias: checkout_tree(n, target, hub) for n in absent}
    rb.record(checkout_copied={"from": source, "to": target, "nodes": [n.alias for n in absent]})
    if rb.dry_run:
        rb.expect(True, what=f"{source} unchanged by the copy and {target} its copy on {missing}")  # not observed
        return
    rb.record(checkout_copy_sha256={a: t["sha256"] for a, t in copies.items()})
    judged = copy_results(before, after, copies)
    unchanged = {a: (same, tree_line(after[a])) for a, (same, _) in judged.items()}
    copied = {a: (equal, tree_line(copies[a])) for a, (_, equal) in judged.items()}
    rb.expect(ExpectedResult.per_node(unchanged, f"{source} unchanged on {{}}"))
    rb.expect(ExpectedResult.per_node(copied, f"{target} is its copy on {{}}"))
