"""The lane's env on its nodes: render it into the head's checkout over SSH, put a render's backups back, and check
that every node's checkout holds the same bytes.

Everything is planned (lanebook.recipe.render) and linted before anything is written. A write refuses a file that
changed since it was read, backs it up beside itself (NAME.bak-UTCSTAMP, never over an earlier backup) and replaces it
atomically; a restore puts backups back byte for byte only while each file still holds what the render wrote, backing
up what it replaces. A dry run opens no connection: it plans on lanebook's reference checkout and records the writes.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional

from lanebook.base.checks import ExpectedResult, NodeResult
from lanebook.base.errors import LanebookError
from lanebook.base.files import utc_stamp
from lanebook.lane.keys import lane_keys
from lanebook.lane.params import LaneParams, lane_path
from lanebook.nodes.ssh import CommandFailed, LaneNodes, Node, q, qpath
from lanebook.ops.transfers import rsync_results, sync_checkout
from lanebook.recipe.compose import COMPOSE_NAME
from lanebook.recipe.effective.checkout import (
    ENV_NAME,
    EXAMPLE_NAMES,
    REFERENCE,
    CheckoutFiles,
    TextFile,
    node_prefix,
    read_checkout,
    read_node_files,
)
from lanebook.recipe.lint import LintReport, lint_checkout_files, lint_lane_on_reference
from lanebook.recipe.render import Backup, RenderPlan, RenderResult, diff_text, plan_render, sha256

if TYPE_CHECKING:
    from lanebook.steps.runbook import Runbook

RUNBOOK = "env"
# What a dry run's write command requires the file to hold: a dry run reads nothing, so the command shows where
# the sha256 read would go (and, sent as it is, would refuse and change nothing).
DRY_RUN_EXPECT = "SHA256-AS-READ"
REFUSED_EXIT = 3  # a command on a checkout (write, restore, copy) found it not as expected, and changed nothing


@dataclass
class EnvPlan:
    """What a render would write into the head's checkout, computed without writing, and the lint of the result."""

    params: LaneParams
    checkout: str
    read: dict[str, bytes]  # checkout-relative name → the bytes read from the head (none in a dry run)
    render: RenderPlan  # its writes and diff are what apply_plan writes and shows
    lint: LintReport
    source: str  # where the files planned on came from

    @property
    def writes(self) -> dict[str, str]:
        return self.render.writes

    @property
    def diff(self) -> str:
        return self.render.diff

    @property
    def changed(self) -> list[str]:
        return [_join(self.checkout, name) for name in self.writes]


def _join(checkout: str, name: str) -> str:
    return f"{checkout.rstrip('/')}/{name}"


def _split(path: str) -> tuple[str, str]:
    directory, _, name = path.rpartition("/")
    return directory, name


def plan_on_head(
    nodes: LaneNodes,
    params: Optional[LaneParams] = None,
    source: str | Path | None = None,
    *,
    allow_runtime_and_weights: bool = False,
) -> EnvPlan:
    """Read the head's checkout, plan the render of PARAMS (default the lane's) and lint the checkout as rendered.

    SOURCE: the lane's file, named in findings on the lane's own values (default params/NAME.yaml);
    ALLOW_RUNTIME_AND_WEIGHTS: the operator allowed changing both against the rollback lane (lint S07 warns)."""
    allowed = {"allow_runtime_and_weights": allow_runtime_and_weights}
    params = params or nodes.params
    source = lane_path(source) if source is not None else None
    checkout = params.checkout
    read = read_checkout(nodes.head, checkout)
    if nodes.executor.dry_run:
        files = CheckoutFiles.read(REFERENCE)
        where = "lanebook's reference checkout (dry run: the head's checkout is not read)"
    else:
        prefix = node_prefix(nodes.head, checkout)
        if COMPOSE_NAME not in read:
            raise LanebookError(f"{prefix}{COMPOSE_NAME} not found: is {checkout} the lane's checkout on the head?")
        files = CheckoutFiles.from_bytes(read, prefix)
        where = "the head's checkout, read over ssh"
    plan = plan_render(params, files, lane_keys(params))
    if nodes.executor.dry_run:
        report = lint_lane_on_reference(params, source, **allowed)
        report.note = "dry run: no connection opened; linted the lane file against lanebook's reference checkout"
    else:
        rendered = files.replace(
            compose=TextFile(files.compose.name, plan.compose),
            env=TextFile(f"{files.compose.name.rsplit('/', 1)[0]}/{ENV_NAME}", plan.env),
        )
        report = lint_checkout_files(params, rendered, source, "head's checkout as rendered", **allowed)
    return EnvPlan(params, checkout, read, plan, report, where)


# --- replacing a file on the head -------------------------------------------------------------------


def replace_command(
    checkout: str,
    name: str,
    stamp: str,
    expect: Optional[str],
    *,
    from_stdin: bool = False,
    from_path: Optional[str] = None,
    private: bool = False,
) -> str:
    """One command that replaces NAME in CHECKOUT, or refuses (exit REFUSED_EXIT) changing nothing.

    expect: the sha256 NAME must hold now (None: no file may be there). The file there is backed up first (copied,
    or moved aside when nothing replaces it); the new bytes come from stdin or from a file on the node, through
    a temporary file renamed over NAME. Prints `SHA256  PATH` of the backup and of the new file. PRIVATE: the new
    file is mode 0600 whatever the old one's was (it holds a keyed lane's API keys)."""
    n = q(name)
    parts = ["set -e", f"cd {qpath(checkout)}"]
    if expect is None:
        parts.append(
            f"test ! -e {n} || {{ echo {q(f'{name}: a file is there now, where lanebook read none')} >&2; "
            f"exit {REFUSED_EXIT}; }}"
        )
    else:
        parts.append(
            f'test "$(sha256sum < {n} 2>/dev/null | cut -c1-64)" = {q(expect)} || {{ '
            f"echo {q(f'{name}: not the bytes lanebook expected (changed since)')} >&2; exit {REFUSED_EXIT}; }}"
        )
        base = q(f"{name}.bak-{stamp}")
        keep = "cp -p" if (from_stdin or from_path) else "mv"
        parts.append(f'b={base}; i=1; while test -e "$b"; do i=$((i + 1)); b={base}-$i; done; {keep} {n} "$b"')
    if from_stdin or from_path:
        parts.append(f"t=$(mktemp {q(f'.lanebook-{name}-XXXXXX')})")
        parts.append("trap 'rm -f \"$t\"' EXIT")
        if from_path:
            parts.append(f'cp -p {qpath(from_path)} "$t"')
        else:
            parts.append('cat > "$t"')
            if private:
                parts.append('chmod 600 "$t"')
            elif expect is not None:
                parts.append(f'chmod --reference={n} "$t"')
        parts.append(f'sync "$t"; mv -f "$t" {n}')
    parts.append(f'if test -n "${{b:-}}"; then sha256sum -- "$b"; fi; if test -e {n}; then sha256sum -- {n}; fi')
    return "; ".join(parts)


def _hashes(stdout: str) -> dict[str, str]:
    """`sha256sum` lines → {name: sha256}."""
    found = {}
    for line in stdout.splitlines():
        digest, _, name = line.partition("  ")
        if len(digest) == 64 and name:
            found[name] = digest
    return found


def run_replace(node: Node, command: str, path: str, stdin: Optional[Path] = None) -> dict[str, str]:
    """Run a replace_command on NODE: `{name: sha256}` of the backup and the new file; its refusal as one line."""
    try:
        result = node.run(command, timeout=60, stdin=stdin)
    except CommandFailed as exc:
        if exc.result.exit_code == REFUSED_EXIT:
            raise LanebookError(
                f"{node.alias}:{path}: {exc.result.stderr.strip().split(': ', 1)[-1]}; nothing was changed"
            ) from None
        raise
    return _hashes(result.stdout)


def _backup_of(checkout: str, name: str, hashes: dict[str, str], new_sha: Optional[str]) -> Backup:
    """The Backup a replace reported, checked against the bytes expected there."""
    path = _join(checkout, name)
    kept = [n for n in hashes if n != name]
    if hashes.get(name) != new_sha:
        raise LanebookError(
            f"{path}: the node holds sha256 {hashes.get(name)} after the write, not the {new_sha} "
            f"written" + (f"; the earlier file is kept as {_join(checkout, kept[0])}" if kept else "")
        )
    return Backup(path, _join(checkout, kept[0]) if kept else None, hashes[kept[0]] if kept else None, new_sha)


def apply_plan(nodes: LaneNodes, plan: EnvPlan) -> RenderResult:
    """Write a plan's files into the head's checkout, each backed up first and replaced atomically (see module)."""
    started_from = plan.render.started_from.name if plan.render.started_from else None
    change = RenderResult(
        plan.diff,
        plan.changed,
        started_from=started_from,
        unresolved=plan.render.unresolved,
        dry_run=nodes.executor.dry_run,
    )
    stamp = utc_stamp()
    with tempfile.TemporaryDirectory(prefix="lanebook-env-") as tmp:
        for name, text in plan.writes.items():
            content = Path(tmp) / name  # the command is recorded as `... < NAME`
            content.write_text(text)
            content.chmod(0o600)
            before = plan.read.get(name)
            expect = sha256(before) if before is not None else (DRY_RUN_EXPECT if change.dry_run else None)
            private = name == ENV_NAME and plan.params.keyed
            command = replace_command(plan.checkout, name, stamp, expect, from_stdin=True, private=private)
            hashes = run_replace(nodes.head, command, _join(plan.checkout, name), stdin=content)
            if change.dry_run:
                continue
            backup = _backup_of(plan.checkout, name, hashes, sha256(text.encode()))
            if before is not None and backup.sha256_backup != sha256(before):
                raise LanebookError(
                    f"{backup.backup}: the backup's sha256 is not that of the file read; keep it and "
                    f"compare it with {backup.path} by hand"
                )
            change.backups.append(backup)
    return change


def render_on_head(nodes: LaneNodes, params: Optional[LaneParams] = None) -> RenderResult:
    """Render PARAMS (default the lane's) into the head's checkout: each changed file backed up beside it, then
    written atomically; nothing changes (and no backup is made) when the checkout already runs PARAMS.

    It does not lint: the env runbook plans (plan_on_head), refuses on lint errors, then applies (apply_plan)."""
    return apply_plan(nodes, plan_on_head(nodes, params))


# --- restoring ------------------------------------------------------------------------------------------


@dataclass
class RestorePlan:
    backups: list[Backup]
    diff: str  # what the restore changes (secrets redacted); '' in a dry run


def check_backups(nodes: LaneNodes, backups: Iterable[Backup], checkout: Optional[str] = None) -> RestorePlan:
    """Refuse (LanebookError naming the file) unless each file is inside the lane's checkout, still holds what the
    env run wrote, and its backup still holds what was backed up. Reads both in one command."""
    backups = list(backups)
    checkout = (checkout or nodes.params.checkout).rstrip("/")
    for b in backups:
        for path in (b.path, b.backup):
            if path is not None and (_split(path)[0] != checkout or "/" in _split(path)[1]):
                raise LanebookError(
                    f"{path} is not a file of lane {nodes.params.name}'s checkout {checkout}: restore refuses"
                )
    paths = [p for b in backups for p in (b.path, b.backup) if p is not None]
    data = dict(zip(paths, read_node_files(nodes.head, paths)))
    if nodes.executor.dry_run:
        return RestorePlan(backups, "")
    diff = ""
    for b in backups:
        now = data[b.path]
        if (sha256(now) if now is not None else None) != b.sha256_new:
            found = "no file" if now is None else f"sha256 {sha256(now)}"
            wrote = "no file" if b.sha256_new is None else f"sha256 {b.sha256_new}"
            raise LanebookError(
                f"{nodes.head.alias}:{b.path} was edited since the env run changed it (it holds {found}; "
                f"the run left {wrote}): restore refuses; nothing was restored"
            )
        kept = data[b.backup] if b.backup else None
        if b.backup and (kept is None or sha256(kept) != b.sha256_backup):
            raise LanebookError(
                f"{nodes.head.alias}:{b.backup}: the backup is missing or changed (sha256 "
                f"{sha256(kept) if kept is not None else 'none'}, recorded {b.sha256_backup}): restore refuses"
            )
        old = now.decode("utf-8", errors="replace") if now is not None else None
        back = kept.decode("utf-8", errors="replace") if kept is not None else None
        diff += diff_text(old, back, f"a/{_split(b.path)[1]}", f"b/{_split(b.path)[1]}")
    return RestorePlan(backups, diff)


def restore_backups(nodes: LaneNodes, backups: Iterable[Backup], checkout: Optional[str] = None) -> RenderResult:
    """Put an env run's backups back on the head byte for byte (see check_backups for when it refuses).

    The restore's own backups (of the files it replaced) are returned, so restoring those undoes the restore."""
    plan = check_backups(nodes, backups, checkout)
    change = RenderResult(plan.diff, [b.path for b in plan.backups], dry_run=nodes.executor.dry_run)
    stamp = utc_stamp()
    for b in plan.backups:
        directory, name = _split(b.path)
        # The backup copied back over what the run left (backed up first); a file the run created moved aside.
        command = replace_command(directory, name, stamp, b.sha256_new, from_path=b.backup)
        hashes = run_replace(nodes.head, command, b.path)
        if not change.dry_run:
            change.backups.append(_backup_of(directory, name, hashes, b.sha256_backup))
    return change


def backups_of_run(record: Mapping[str, Any], lane_name: str) -> list[Backup]:
    """The backups an env run recorded (figures.backups), refusing a run of another runbook or lane, a dry run, or
    a run that changed nothing."""
    run_id = record.get("run_id")
    if record.get("runbook") != RUNBOOK:
        raise LanebookError(
            f"run {run_id} is a {record.get('runbook')} run, not an env run: only env runs record backups"
        )
    if record.get("lane") != lane_name:
        raise LanebookError(
            f"run {run_id} was on lane {record.get('lane')}, not {lane_name}: restore it on its own lane"
        )
    if record.get("dry_run"):
        raise LanebookError(f"run {run_id} was a dry run: it changed nothing, so there is nothing to restore")
    entries = (record.get("figures") or {}).get("backups")
    if not entries:
        raise LanebookError(f"run {run_id} changed no file (it recorded no backups): nothing to restore")
    return [Backup.from_json(e) for e in entries]


# --- the same bytes on every node ---------------------------------------------------------------------------


def compared_names(params: LaneParams) -> list[str]:
    """The checkout files compared on every node besides those under scripts/: the compose file, the env file, the
    example, the launcher scripts."""
    launcher = params.launcher
    return [
        COMPOSE_NAME,
        ENV_NAME,
        *EXAMPLE_NAMES,
        *(s.removeprefix("./") for s in (launcher.start, launcher.status, launcher.stop)),
    ]


def _digests(node: Node, checkout: str, names: list[str], scripts: bool = False) -> dict[str, str]:
    """sha256 of each of NAMES that is a file in the node's checkout (and, with SCRIPTS, of every file under scripts/);
    none when the node has no such checkout."""
    listed = " ".join(q(n) for n in names)
    command = (
        f"cd {qpath(checkout)} 2>/dev/null || exit 0; for f in {listed}; "
        'do if test -f "$f"; then sha256sum -- "$f"; fi; done'
    )
    if scripts:
        command += "; if test -d scripts; then find scripts -type f -exec sha256sum -- {} +; fi"
    return _hashes(node.run(command, timeout=60).stdout)


def same_checkout(
    nodes: LaneNodes, *, checkout: Optional[str] = None, what: str = "every node holds the head's bytes"
) -> ExpectedResult:
    """Every worker's checkout holds the head's bytes: each of compared_names and every file under scripts/ the head
    has, hashed on each node (figures: sha256 by file). A file only a worker has does not count: nothing runs it."""
    checkout = checkout or nodes.params.checkout
    head = _digests(nodes.head, checkout, compared_names(nodes.params), scripts=True)
    if nodes.executor.dry_run:  # the head's answer is unknown: each worker is asked what the head was
        for worker in nodes.workers:
            _digests(worker, checkout, compared_names(nodes.params), scripts=True)
        return ExpectedResult.on_nodes({}, what=what, dry_run=True)
    names = sorted(head)
    results = {
        nodes.head.alias: NodeResult(
            bool(head), f"{len(head)} files hashed" if head else "no checkout file found", {"sha256": head}
        )
    }
    for worker in nodes.workers:
        theirs = _digests(worker, checkout, names)
        missing = [n for n in names if n not in theirs]
        differ = [n for n in names if n in theirs and theirs[n] != head[n]]
        detail = "; ".join(
            part
            for part in (
                f"differs: {', '.join(differ)}" if differ else "",
                f"missing: {', '.join(missing)}" if missing else "",
            )
            if part
        )
        results[worker.alias] = NodeResult(
            bool(names) and not (missing or differ),
            detail or f"the head's {len(names)} files, same bytes",
            {"sha256": theirs},
        )
    return ExpectedResult.on_nodes(results, what=what)


# --- the env runbook's steps (each takes the runbook: it confirms, records, shows and checks) ------------------


def show_diff(rb: "Runbook", diff: str, where: str) -> None:
    rb.show(markdown=f"Changes ({where}):\n\n```diff\n{diff}```" if diff else f"No change ({where}).")


def lint_errors(report: LintReport) -> list[str]:
    """The report's errors as `ID file:line message` (what the env runbook records and shows)."""
    return [f"{f.id} {f.file}:{f.line} {f.message}" for f in report.findings if f.severity == "error"]


def plan_step(
    rb: "Runbook", *, source: str, restored: Optional[dict] = None, allow_runtime_and_weights: bool = False
) -> tuple[Optional[EnvPlan], list[Backup]]:
    """The env runbook's plan step: render mode plans the lane into the head's checkout (the diff shown); restore mode
    reads the backups of the run `restored` (its record, from the run index) and checks every file still holds what that
    run wrote. (the plan, the backups). ALLOW_RUNTIME_AND_WEIGHTS: as plan_on_head."""
    if restored is None:
        plan = plan_on_head(rb.nodes, source=source, allow_runtime_and_weights=allow_runtime_and_weights)
        rb.record(changed=plan.changed)
        show_diff(rb, plan.diff, plan.source)
        rb.expect(
            bool(plan.read),
            what="the head's checkout read",
            detail=f"{len(plan.read)} files; "
            + ("changes " + ", ".join(plan.changed) if plan.writes else "nothing to change"),
        )
        return plan, []
    restore = restored["run_id"]
    backups = backups_of_run(restored, rb.params.name)
    restoring = check_backups(rb.nodes, backups)
    rb.record(changed=[b.path for b in backups])
    show_diff(rb, restoring.diff, f"what restoring run {restore} puts back on {rb.nodes.head.alias}")
    rb.expect(
        True,
        what=f"every file holds what run {restore} wrote, every backup what it replaced",
        detail=", ".join(b.path for b in backups),
    )
    return None, backups


def lint_step(rb: "Runbook", plan: Optional[EnvPlan], *, restore: Optional[str] = None) -> None:
    """The env runbook's lint step: the checkout as rendered lints clean (a restore puts back earlier bytes: nothing to
    lint)."""
    if plan is None:
        rb.skip("the checkout as rendered lints clean", f"a restore puts back what run {restore} replaced")
        return
    errors = lint_errors(plan.lint)
    rb.record(lint_errors=errors)
    rb.expect(
        plan.lint.ok,
        what="the checkout as rendered lints clean",
        detail="; ".join(errors) or plan.lint.linted_summary(),
        local=True,
    )


def write_step(
    rb: "Runbook", plan: Optional[EnvPlan], backups: list[Backup], *, source: str, restore: Optional[str] = None
) -> None:
    """The env runbook's write step: write the plan on the head (each file backed up first) and plan again, or restore
    run `restore`'s backups and check each file holds their bytes; nothing to write is no backup."""
    head = rb.nodes.head.alias
    if plan is not None and not plan.writes:
        rb.record(backups=[])
        rb.skip(
            "files written on the head", "the head's checkout already runs the lane: nothing written, no backup made"
        )
    elif plan is not None:
        rb.confirm(f"write {', '.join(plan.changed)} on {head} (each backed up beside it first)")
        change = apply_plan(rb.nodes, plan)
        rb.record(backups=[b.to_json() for b in change.backups])
        again = plan_on_head(rb.nodes, source=source)
        rb.expect(
            not again.writes,
            what="the head's checkout runs the lane now: planning again changes nothing",
            detail=", ".join(again.changed) or "backups: " + ", ".join(str(b.backup) for b in change.backups),
        )
    else:
        rb.confirm(
            f"restore {', '.join(b.path for b in backups)} on {head} from run {restore}'s backups "
            f"(each file there now backed up first)"
        )
        change = restore_backups(rb.nodes, backups)
        rb.record(backups=[b.to_json() for b in change.backups])
        check_backups(rb.nodes, change.backups)  # each file now holds the backup's bytes, or this raises
        rb.expect(
            not change.dry_run,
            what=f"every file holds the bytes run {restore} replaced",
            detail=", ".join(f"{b.path} sha256 {b.sha256_new}" for b in change.backups),
        )


def copy_step(rb: "Runbook") -> None:
    """The env runbook's copy step: rsync the head's checkout to the workers that do not hold its bytes (adds and
    updates, never deletes)."""
    if same_checkout(rb.nodes).ok:
        rb.skip("checkout copied to every worker", "every worker already holds the head's bytes")
        return
    rb.confirm(
        f"rsync {rb.params.checkout} from the head to {', '.join(w.alias for w in rb.nodes.workers)} "
        "(adds and updates files; never deletes)"
    )
    stats = sync_checkout(rb.nodes)
    rb.record(rsync={a: vars(s) for a, s in stats.items()})
    rb.expect(rsync_results(stats))
