"""`lanebook upgrade --lane LANE --to REF`: the recipe moved; upgrade the lane's checkout knowing what will change.

The upgrade promotes a new checkout, never edits the old one (lanebook.ops.checkout_upgrade makes it beside the old,
at REF of its own remote, on the head and every worker). The plan (lanebook.recipe.upgrade_plan, via `plan_sides`)
is recorded first; a `blocked` plan stops there. Otherwise the lane is stopped and the usual promotion runs on a
candidate lane file under outputs/LANE/: the operator's file byte for byte, only its `checkout:` line changed. On a
pass the operator's file gets that line (backed up first); on a failure it is untouched and still names the old
checkout, which nothing wrote to. The record (STAMP-upgraded-ID.json) keeps the old tree's fingerprints before and
after, the plan, both commits and the promotion's verdict; `rollback_checkout` goes back to the old checkout. A dry
run opens no connection and writes nothing.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from lanebook.base.errors import LanebookError
from lanebook.base.files import read_text, utc_stamp, write_atomic
from lanebook.base.paths import outputs_dir
from lanebook.lane.params import LaneParams, load_lane
from lanebook.lane.values import checkout_text, write_checkout
from lanebook.recipe.effective.checkout import CheckoutFiles

if TYPE_CHECKING:
    from lanebook.nodes.ssh import LaneNodes

BLOCKED = "blocked"
BEFORE_LAUNCH = ("weights", "env")  # the promotion's runbooks that start nothing
FIGURE = "upgrade"  # what the promotion's first record carries: the upgrade's id, record, plan verdict, checkouts


@dataclass
class Upgrade:
    """What an upgrade did: its id, the checkouts and commits, the plan's verdict, the runs it made and its verdict
    (pass, fail, blocked, dry-run)."""

    upgrade_id: str
    lane: str
    ref: str
    old_checkout: str
    new_checkout: Optional[str] = None
    old_commit: Optional[str] = None
    new_commit: Optional[str] = None
    plan_verdict: Optional[str] = None
    plan_record: Optional[Path] = None
    verdict: str = "error"
    reason: str = ""
    record: Optional[Path] = None
    candidate: Optional[Path] = None
    lane_file_backup: Optional[Path] = None
    old_tree_before: dict = field(default_factory=dict)
    old_tree_after: dict = field(default_factory=dict)
    old_tree_changes: list[str] = field(default_factory=list)
    stop_record: Optional[dict] = None
    promotion_id: Optional[str] = None
    records: list[dict] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.verdict == "pass"

    def to_json(self) -> dict:
        paths = ("plan_record", "candidate", "lane_file_backup")
        shown = {"record", "records", "commands", "stop_record", *paths}
        data = {key: value for key, value in self.__dict__.items() if key not in shown}
        return {
            **data,
            **{key: shown_path(getattr(self, key)) for key in paths},
            "stop_run": self.stop_record and self.stop_record["run_id"],
            "runs": [{"runbook": r["runbook"], "run_id": r["run_id"], "verdict": r["verdict"]} for r in self.records],
        }


def plan_sides(params: LaneParams, old: CheckoutFiles, new: CheckoutFiles) -> tuple[str, Path]:
    """The one call into the upgrade plan: what the new checkout changes of what the lane runs, recorded; its verdict
    (`same lane`, `changes` or `blocked`) and its record."""
    from lanebook.recipe.upgrade_plan import plan_upgrade, print_plan, write_plan

    plan = plan_upgrade(params, old, new)
    print_plan(plan)
    return plan.verdict, write_plan(plan)


def shown_path(path: Optional[Path]) -> Optional[str]:
    """A path as the record keeps it: under outputs relative to it, else as it is."""
    if path is None:
        return None
    return str(path.relative_to(outputs_dir())) if path.is_relative_to(outputs_dir()) else str(path)


def _record_path(lane_name: str, upgrade_id: str, suffix: str) -> Path:
    folder = outputs_dir() / lane_name
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{utc_stamp()}-upgraded-{upgrade_id}{suffix}"  # not -upgrade-: plan records are named so


def write_record(upgrade: Upgrade) -> Path:
    """The upgrade's record (JSON, atomic), named once and rewritten as the upgrade goes on."""
    upgrade.record = upgrade.record or _record_path(upgrade.lane, upgrade.upgrade_id, ".json")
    write_atomic(upgrade.record, json.dumps(upgrade.to_json(), indent=1, default=str) + "\n")
    return upgrade.record


def write_candidate(params: LaneParams, upgrade: Upgrade) -> LaneParams:
    """The operator's lane file with only its checkout line set to the new checkout, kept beside the upgrade's
    record; loaded back, validated, as the lane the promotion runs."""
    if params.file is None:
        raise LanebookError(f"lane {params.name} was built in memory: an upgrade writes a lane loaded from its file")
    text = checkout_text(
        read_text(params.file, "lane file"),
        upgrade.new_checkout,
        f"upgrade {upgrade.upgrade_id}: {upgrade.ref} at {upgrade.new_commit}",
    )
    upgrade.candidate = upgrade.record.with_suffix(".yaml")
    write_atomic(upgrade.candidate, text)
    return load_lane(upgrade.candidate)


def upgrade(
    params: LaneParams,
    ref: str,
    *,
    dry_run: bool = False,
    yes: bool = False,
    on_stage: Callable[[str], None] = lambda what: None,
    on_record: Callable[[dict], None] = lambda record: None,
) -> Upgrade:
    """Upgrade the lane's checkout to REF of its own remote (see the module's text). PARAMS is the lane as loaded
    where the command started; its file is written only when the promotion passed."""
    from lanebook.lane.plugins import prepare_lane
    from lanebook.nodes.ssh import LaneNodes
    from lanebook.ops import checkout_upgrade as ops
    from lanebook.ops.launcher import LANE_DOWN, lane_containers
    from lanebook.runs.execute import refuse_unconfirmed, run_runbook
    from lanebook.runs.promote import promote

    ops.check_ref(ref)
    refuse_unconfirmed("upgrade", params, dry_run=dry_run, yes=yes)
    done = Upgrade(uuid.uuid4().hex[:12], params.name, ref, params.checkout)
    if not dry_run:
        prepare_lane(params)  # the twin starts itself for a twin lane
    with LaneNodes(params, dry_run=dry_run) as nodes:
        on_stage("the old checkout's fingerprint on every node")
        done.old_tree_before = ops.old_checkout_trees(nodes)
        on_stage(f"the new checkout beside {params.checkout} at {ref}")
        made = ops.make_beside(nodes, ref)
        done.new_checkout, done.new_commit, done.old_commit = made.path, made.commit, made.old_commit
        on_stage(f"{made.path} on every worker")
        copied = ops.copy_to_workers(nodes, made)
        if dry_run:
            done.verdict, done.reason, done.commands = "dry-run", "no connection opened", nodes.executor.commands()
            return done
        if copied.outcome != "pass":
            raise LanebookError(f"{made.path} is not the same on every node: {copied.detail}")
        on_stage("the plan: the two checkouts' files")
        done.plan_verdict, done.plan_record = plan_sides(
            params, *ops.read_sides(nodes.head, params.checkout, made.path)
        )
        write_record(done)
        if done.plan_verdict == BLOCKED:
            done.verdict, done.reason = BLOCKED, "the plan is blocked: nothing launched"
            return _finish(done, nodes)
        serving = lane_containers(nodes).state != LANE_DOWN
    candidate = write_candidate(params, done)
    write_record(done)
    if serving:
        on_stage(f"stop lane {params.name} on its old checkout")
        done.stop_record = run_runbook("stop", params, {}, yes=yes, link={FIGURE: done.upgrade_id})
        on_record(done.stop_record)
        if done.stop_record["verdict"] != "pass":
            done.verdict, done.reason = "fail", f"stopping the lane failed: {done.stop_record['output']}"
            return _after(done, params)
    link = {
        "upgrade_id": done.upgrade_id,
        "record": shown_path(done.record),
        "plan_record": shown_path(done.plan_record),
        "plan_verdict": done.plan_verdict,
        "from": {"checkout": done.old_checkout, "commit": done.old_commit},
        "to": {"checkout": done.new_checkout, "commit": done.new_commit, "ref": ref},
    }
    on_stage(f"promotion of {done.new_checkout}")
    promotion = promote(candidate, yes=yes, first_fields={FIGURE: link}, on_record=on_record)
    done.promotion_id, done.records = promotion.plan.promotion_id, promotion.records
    if promotion.ok:
        done.verdict, done.reason = "pass", promotion.summary(params.name)
        done.lane_file_backup = write_checkout(
            params.file, done.new_checkout, f"upgraded to {ref} ({done.new_commit}) by upgrade {done.upgrade_id}"
        )
    else:
        done.verdict, done.reason = "fail", promotion.summary(params.name)
        if any(r["runbook"] not in BEFORE_LAUNCH for r in promotion.records):  # the launcher ran: ranks may be up
            on_stage(f"stop what the new checkout started: the old one, {params.checkout}, launches as before")
            done.stop_record = run_runbook("stop", candidate, {}, yes=yes, link={FIGURE: done.upgrade_id})
            on_record(done.stop_record)
    return _after(done, params)


def _after(done: Upgrade, params: LaneParams) -> Upgrade:
    from lanebook.nodes.ssh import LaneNodes

    with LaneNodes(params) as nodes:
        return _finish(done, nodes)


def _finish(done: Upgrade, nodes: LaneNodes) -> Upgrade:
    """The old checkout fingerprinted again (it must be as before) and the record written."""
    from lanebook.ops import checkout_upgrade as ops

    done.old_tree_after = ops.old_checkout_trees(nodes)
    done.old_tree_changes = ops.tree_changes(done.old_tree_before, done.old_tree_after)
    if done.old_tree_changes and done.verdict == "pass":
        done.verdict, done.reason = "fail", "the old checkout changed: " + "; ".join(done.old_tree_changes)
    write_record(done)
    return done


def rollback_checkout(params: LaneParams, checkout: str, *, yes: bool = False) -> list[dict]:
    """Put the lane back on CHECKOUT (an upgrade's old one): the `stop` runbook on the lane as it is, the lane file's
    checkout line set back (backed up first), then `launch` and `gates` on it. The records, in order; it stops at
    the first run that does not pass."""
    from lanebook.runs.execute import run_runbook

    records = [run_runbook("stop", params, {}, yes=yes)]
    if records[-1]["verdict"] != "pass":
        return records
    write_checkout(params.file, checkout, f"rolled back from {params.checkout}")
    back = load_lane(params.file)
    for name in ("launch", "gates"):
        records.append(run_runbook(name, back, {}, yes=yes))
        if records[-1]["verdict"] != "pass":
            break
    return records


def upgrade_shown(lane_name: str, ref: str, *, dry_run: bool = False, yes: bool = False, as_json: bool = False) -> int:
    """`lanebook upgrade --lane LANE --to REF` on the terminal: the lane loaded once, each stage and run as it ends,
    the plan, the outcome and the record (AS_JSON: the record's JSON last); the exit code (0 pass or a dry run, 1
    otherwise)."""
    from rich.console import Console

    from lanebook.runs.promote import show_record

    console = Console()
    done = upgrade(
        load_lane(lane_name),
        ref,
        dry_run=dry_run,
        yes=yes,
        on_stage=lambda what: console.rule(what),
        on_record=lambda record: show_record(console, record, record["runbook"]),
    )
    if dry_run:
        console.print("[yellow]upgrade: dry-run (nothing observed)[/] — commands it would send (none were sent):")
        for line in done.commands:
            console.out(f"    {line}", highlight=False)
        return 0
    color = "green" if done.ok else "red"
    console.print(f"plan: {done.plan_verdict}; {done.old_checkout} ({done.old_commit}) → {done.new_checkout}")
    console.print(f"[{color}]upgrade {done.upgrade_id}: {done.verdict}[/] — {done.reason}")
    if not done.ok:
        console.print(
            f"  the lane file still names {done.old_checkout}: `lanebook run launch --lane {lane_name}` starts it"
        )
    console.print(f"  record: {done.record}", soft_wrap=True)
    if as_json:
        console.out(json.dumps(done.to_json(), indent=1, default=str), highlight=False)
    return 0 if done.ok else 1
