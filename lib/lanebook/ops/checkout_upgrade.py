"""A lane's checkout upgraded beside itself: the recipe's commit REF as a new checkout next to the old one.

An upgrade is a promotion, never an edit in place: the old checkout stays as it is and becomes the rollback. On
the head, the old checkout's own remote (`git -C CHECKOUT remote get-url origin`, read only) is cloned into a
staging directory beside it, REF is fetched there when the clone lacks it, the work tree is put at REF's commit,
and the directory is renamed `CHECKOUT@SHORTSHA`; the copy goes to every worker with rsync (never --delete) and
every node's checkout holds the head's bytes. Fetching into the old checkout (`git -C CHECKOUT fetch`) would write
its .git (FETCH_HEAD, objects) and change the rollback's fingerprint: nothing here writes under it. Its
fingerprint (the probe's checkout tree) is taken on every node before and after, and the two must be equal.

A new checkout already there at REF's commit is used again (a second run of a failed upgrade); one at another
commit is refused, never replaced.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from lanebook.base.checks import ExpectedResult
from lanebook.base.errors import LanebookError
from lanebook.nodes.ssh import CommandFailed, LaneNodes, Node, q, qpath
from lanebook.ops.checkout_env import REFUSED_EXIT, same_checkout
from lanebook.ops.rollback import probe_trees
from lanebook.ops.transfers import rsync_to_workers
from lanebook.recipe.effective.checkout import CheckoutFiles

SHORT = 12  # hex digits of the commit in the new checkout's name
REF_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")  # a commit, branch or tag name (no option, no `..`)
MADE_RE = re.compile(r"^upgrade-checkout (?P<state>new|again) (?P<sha>[0-9a-f]{40}) (?P<old>[0-9a-f]{40}|-)$", re.M)
CLONE_TIMEOUT_S = 1800.0


def check_ref(ref: str) -> str:
    """REF as git takes it on a command line: a commit, branch or tag name, never an option or a range."""
    if not REF_RE.fullmatch(ref) or ".." in ref or ref.endswith((".lock", "/")):
        raise LanebookError(f"--to {ref!r}: give a commit, branch or tag of the checkout's own remote")
    return ref


def beside(checkout: str, sha: str) -> str:
    """The new checkout's path: the old one's with @ and the commit's first SHORT hex digits."""
    return f"{checkout.rstrip('/')}@{sha[:SHORT]}"


@dataclass(frozen=True)
class NewCheckout:
    """The checkout an upgrade made (or found again) beside the old one, and the two commits."""

    path: str
    commit: Optional[str]  # None in a dry run: nothing was asked
    old_commit: Optional[str]
    made: bool  # False: it was there already, at the same commit


def make_command(checkout: str, ref: str) -> str:
    """On the head: clone the old checkout's origin beside it, fetch REF when the clone lacks it, put the work tree at
    REF's commit and name the directory CHECKOUT@SHORTSHA. Prints `upgrade-checkout new|again SHA OLDSHA`; exits
    REFUSED_EXIT when that directory is there at another commit (nothing replaced). Never writes under CHECKOUT."""
    return (
        "set -eu; "
        f"old={qpath(checkout.rstrip('/'))}; "
        'url=$(git -C "$old" remote get-url origin); '
        'oldsha=$(git -C "$old" rev-parse --verify --quiet HEAD || echo -); '
        'stage=$(mktemp -d "$old@fetch.XXXXXX"); '
        "trap 'rm -rf -- \"$stage\"' EXIT; "
        'git clone --quiet --no-checkout -- "$url" "$stage/tree"; '
        f'sha=$(git -C "$stage/tree" rev-parse --verify --quiet {q(ref + "^{commit}")}) || '
        f'{{ git -C "$stage/tree" fetch --quiet origin {q(ref)}; '
        "sha=$(git -C \"$stage/tree\" rev-parse --verify 'FETCH_HEAD^{commit}'); }; "
        f'new="$old@$(printf %s "$sha" | cut -c1-{int(SHORT)})"; '
        'if test -e "$new" || test -L "$new"; then '
        'there=$(git -C "$new" rev-parse --verify --quiet HEAD || true); '
        'if test "$there" = "$sha"; then echo "upgrade-checkout again $sha $oldsha"; exit 0; fi; '
        f'echo "$new is there at another commit (${{there:-none}}): nothing replaced" >&2; exit {REFUSED_EXIT}; fi; '
        'git -C "$stage/tree" checkout --quiet --detach "$sha"; '
        'mv -T -- "$stage/tree" "$new"; '
        'echo "upgrade-checkout new $sha $oldsha"'
    )


def make_beside(nodes: LaneNodes, ref: str) -> NewCheckout:
    """The new checkout on the head at REF (see make_command). A dry run records the command and knows no commit."""
    checkout = nodes.params.checkout
    try:
        result = nodes.head.run(make_command(checkout, check_ref(ref)), timeout=CLONE_TIMEOUT_S)
    except CommandFailed as exc:
        if exc.result.exit_code == REFUSED_EXIT:
            said = exc.result.stderr.strip() or exc.result.stdout.strip()
            raise LanebookError(f"{nodes.head.alias}: {said}") from None
        raise
    if result.dry_run:  # nothing asked: a full commit names the directory as a run would, else REF stands for it
        named = beside(checkout, ref) if re.fullmatch(r"[0-9a-f]{40}", ref) else f"{checkout.rstrip('/')}@{ref}"
        return NewCheckout(named, None, None, True)
    found = MADE_RE.search(result.stdout)
    if not found:
        raise LanebookError(f"{nodes.head.alias}: the new checkout was not reported: {result.stdout.strip()[-200:]!r}")
    old = None if found["old"] == "-" else found["old"]
    return NewCheckout(beside(checkout, found["sha"]), found["sha"], old, found["state"] == "new")


def copy_to_workers(nodes: LaneNodes, new: NewCheckout) -> ExpectedResult:
    """The new checkout on every worker with the head's bytes (rsync -aH, never --delete), then compared."""
    rsync_to_workers(nodes, new.path, attempts=2)
    return same_checkout(nodes, checkout=new.path)


def old_checkout_trees(nodes: LaneNodes) -> dict[str, dict]:
    """The old checkout's tree (the fingerprint probe's) on every node; empty in a dry run."""
    trees = {}
    for node in nodes:
        found = probe_trees(node, nodes.params.checkout, nodes.params.weights.hub_dir)
        if found is not None:
            trees[node.alias] = found["checkout"]
    return trees


def tree_changes(before: dict[str, dict], after: dict[str, dict]) -> list[str]:
    """Where the old checkout's tree differs between two readings, one line per node (empty: untouched)."""
    return [
        f"{alias}: {(after.get(alias) or {}).get('path', alias)} changed "
        f"({(before.get(alias) or {}).get('sha256', 'missing')[:12]} → "
        f"{(after.get(alias) or {}).get('sha256', 'missing')[:12]})"
        for alias in dict.fromkeys([*before, *after])
        if (before.get(alias) or {}).get("sha256") != (after.get(alias) or {}).get("sha256")
    ]


def read_sides(head: Node, old: str, new: str) -> tuple[CheckoutFiles, CheckoutFiles]:
    """Both checkouts' files as the head holds them (the one reader: CheckoutFiles.fetch)."""
    return CheckoutFiles.fetch(head, old), CheckoutFiles.fetch(head, new)
