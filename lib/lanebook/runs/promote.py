"""`lanebook promote`: the main job (weights → env → launch → warmup → gates → speed), one recorded run each.

A promotion's runs share a `promotion_id`, each names the run before it (`previous_run_id`), and it stops at the first
runbook that does not pass. `--resume` continues there, or earlier when the lane file changed since (`plan_resume`, a
pure function of the recorded runs). A lane changing runtime and weights at once against its rollback lane is refused
unless `--allow-runtime-and-weights` (lint's S07). A new promotion keeps the rollback lane's fingerprint in its first
record, for the `rollback` runbook to compare against.
"""

from __future__ import annotations

import hashlib
import json
import sys
import uuid
from dataclasses import dataclass, field
from typing import Callable, Optional, TextIO

from lanebook.base import paths
from lanebook.base.errors import LanebookError
from lanebook.lane.changes import ALLOW_FLAG, ALLOW_PARAMETER, change_from_rollback
from lanebook.lane.keys import lane_keys
from lanebook.lane.params import LaneParams, load_lane

MAIN_JOB = ("weights", "env", "launch", "warmup", "gates", "speed")
LINTING = ("env", "launch")  # the job's runbooks that lint what the lane runs (they take allow_runtime_and_weights)


def missing_runbooks(job: tuple[str, ...] = MAIN_JOB) -> list[str]:
    """Runbooks of the job not written yet (no runbooks/NAME.ipynb)."""
    return [name for name in job if not (paths.RUNBOOKS_DIR / f"{name}.ipynb").exists()]


# What part of a lane each runbook of the main job stands on: a resume after a lane edit starts again at the
# first runbook the edited part feeds. The weights block feeds weights; the gates and Hermes blocks feed only
# gates; everything else (env, schedule, checkout, launcher, request, ...) feeds the render, so env.
LANE_PARTS = {"weights": ("weights",), "gates": ("gates", "hermes")}
PART_RESTARTS_AT = {"weights": "weights", "rest": "env", "gates": "gates"}
PART_NAMES = {"weights": "weights", "rest": "env and launch settings", "gates": "gates and Hermes settings"}


def lane_digest(params: LaneParams) -> dict[str, Optional[str]]:
    """What a resume compares: the lane file's bytes (as loaded) and, apart, the parts of the lane that different
    runbooks use."""
    data = params.model_dump(mode="json")

    def digest(value) -> str:
        return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()

    named = {key for keys in LANE_PARTS.values() for key in keys}
    parts = {part: digest({key: data[key] for key in keys}) for part, keys in LANE_PARTS.items()}
    parts["rest"] = digest({key: value for key, value in data.items() if key not in named})
    return {"file": params.file_sha256, **parts}


def changed_parts(recorded: Optional[dict], digest: dict[str, str]) -> list[str]:
    """The lane's parts edited since `recorded` (a record's lane_digest); a comment-only edit changes none."""
    return [part for part in PART_RESTARTS_AT if (recorded or {}).get(part) != digest[part]]


@dataclass(frozen=True)
class Plan:
    """Where a promotion starts: its id, the runbooks to run, the run it continues from, and why."""

    promotion_id: str
    runbooks: tuple[str, ...]
    previous_run_id: Optional[str] = None
    reason: str = ""


def new_plan() -> Plan:
    return Plan(uuid.uuid4().hex[:12], MAIN_JOB, None, "a new promotion")


def latest_promotion(runs: list[dict], lane_name: str, matches: Callable[[dict], bool] = lambda r: True) -> list[dict]:
    """The records of the lane's latest promotion among RUNS (oldest first) whose records MATCH, oldest first; empty
    when it has none."""
    ours = [r for r in runs if r.get("promotion_id") and r.get("lane") == lane_name and matches(r)]
    return [r for r in ours if r["promotion_id"] == ours[-1]["promotion_id"]] if ours else []


def plan_resume(runs: list[dict], lane_name: str, digest: dict[str, str], *, dry_run: bool = False) -> Plan:
    """Continue the lane's latest promotion (of the same kind: dry or not) at its first runbook that did not pass."""
    chain = latest_promotion(runs, lane_name, lambda r: bool(r.get("dry_run")) == dry_run)
    if not chain:
        kind = "dry-run promotion" if dry_run else "promotion"
        raise LanebookError(
            f"--resume: no earlier {kind} of lane {lane_name} is recorded; "
            f"run `lanebook promote --lane {lane_name}` first"
        )
    promotion_id = chain[-1]["promotion_id"]
    passed = "dry-run" if dry_run else "pass"
    latest = {r["runbook"]: r for r in chain}  # the last run of each runbook in this promotion
    start = next((i for i, name in enumerate(MAIN_JOB) if latest.get(name, {}).get("verdict") != passed), None)
    if start is None:
        raise LanebookError(
            f"--resume: promotion {promotion_id} of lane {lane_name} already passed every runbook; "
            f"start a new one without --resume"
        )
    reason = f"resuming promotion {promotion_id} at {MAIN_JOB[start]}"
    # A runbook that passed before a lane edit is repeated when the edit feeds it, with every runbook after it.
    edited = {
        part for r in chain if r["runbook"] in MAIN_JOB[:start] for part in changed_parts(r.get("lane_digest"), digest)
    }
    restart = min((MAIN_JOB.index(PART_RESTARTS_AT[part]) for part in edited), default=start)
    if restart < start:
        start = restart
        what = ", ".join(PART_NAMES[part] for part in PART_RESTARTS_AT if part in edited)
        reason = f"resuming promotion {promotion_id} at {MAIN_JOB[start]}: the lane's {what} changed since it ran"
    return Plan(promotion_id, MAIN_JOB[start:], chain[-1]["run_id"], reason)


@dataclass
class Promotion:
    """What a promotion did: its plan and the records of the runs it made, in order."""

    plan: Plan
    records: list[dict] = field(default_factory=list)

    @property
    def stopped_at(self) -> Optional[dict]:
        """The record of the runbook that did not pass, if one did not."""
        return next((r for r in self.records if r["verdict"] != self.passed_verdict), None)

    @property
    def passed_verdict(self) -> str:
        return "dry-run" if self.records and self.records[0]["dry_run"] else "pass"

    @property
    def ok(self) -> bool:
        return bool(self.records) and self.stopped_at is None and len(self.records) == len(self.plan.runbooks)

    def summary(self, lane_name: str) -> str:
        stop = self.stopped_at
        if stop is None:
            done = "dry-run (nothing observed)" if self.passed_verdict == "dry-run" else "passed"
            return f"promotion {self.plan.promotion_id} {done}: {', '.join(r['runbook'] for r in self.records)}"
        line = f"promotion {self.plan.promotion_id} stopped at {stop['runbook']}: {stop['verdict']}"
        if stop.get("failed_step"):
            line += f" at step '{stop['failed_step']}'"
        if stop.get("fix"):
            line += f" — {stop['fix']}"
        return line + f"; when it is fixed: lanebook promote --lane {lane_name} --resume"


def one_change_refusal(params: LaneParams, allowed: bool) -> Optional[str]:
    """Why a promotion of PARAMS is refused under seed 000's "do not change runtime and weights the same weekend"
    (S07): the lane changes both against its rollback lane and the operator did not allow it. None: it may go."""
    change = change_from_rollback(params)
    if allowed or change is None or not change.changes_both:
        return None
    return (
        f"{change.describe()}: seed 000 says do not change runtime and weights the same weekend (lint S07); "
        f"promote one change first, or add {ALLOW_FLAG} to go ahead knowingly"
    )


def promote(
    params: LaneParams,
    *,
    resume: bool = False,
    dry_run: bool = False,
    yes: bool = False,
    break_lock: bool = False,
    allow_runtime_and_weights: bool = False,
    first_fields: Optional[dict] = None,
    fleet_id: Optional[str] = None,
    on_plan: Callable[[Plan], None] = lambda plan: None,
    on_ready: Callable[[list], None] = lambda items: None,
    on_start: Callable[[str], None] = lambda name: None,
    on_record: Callable[[dict], None] = lambda record: None,
    echo: Optional[TextIO] = None,
) -> Promotion:
    """Run the main job (or the rest of it) on a lane, one recorded run per runbook, stopping at the first not passed.
    One lane pair lock is held across the runbooks (not in a dry run); they run inside it. PARAMS, loaded once where
    the command starts, is the lane every runbook runs on. A lane that changes runtime and weights at once against
    its rollback lane is refused unless ALLOW_RUNTIME_AND_WEIGHTS; allowed, the runbooks that lint are told so. A lane
    whose prerequisites fail (lanebook.verify.preflight: the list `lanebook check` shows) is refused before any runbook
    runs (NotReady, exit 1).
    FIRST_FIELDS: what the promotion's first record carries besides (an upgrade's link to its plan). FLEET_ID: the
    fleet promotion this one is a lane of (lanebook.runs.fleet_dag), carried by every record of it. ECHO: where each
    runbook says its steps as they start, and what its cells print (lanebook.runs.execute.run_runbook)."""
    from lanebook.runs.audit import read_runs
    from lanebook.runs.execute import refuse_unconfirmed, run_runbook
    from lanebook.runs.lock import hold_lane_pair
    from lanebook.verify.preflight import check_before_promotion

    missing = missing_runbooks()
    if missing:
        raise LanebookError(f"the main job is incomplete: runbook(s) {', '.join(missing)} not written yet")
    refuse_unconfirmed("promote", params, dry_run=dry_run, yes=yes)
    refusal = one_change_refusal(params, allow_runtime_and_weights)
    if refusal:
        raise LanebookError(refusal)
    lane_keys(params)  # a keyed lane's keys read and checked before any runbook starts
    digest = lane_digest(params)
    plan = plan_resume(read_runs(), params.name, digest, dry_run=dry_run) if resume else new_plan()
    on_plan(plan)
    promotion = Promotion(plan)
    previous = plan.previous_run_id
    with hold_lane_pair(params, "promote", plan.promotion_id, needed=not dry_run, break_lock=break_lock):
        if not dry_run:  # the prerequisites `lanebook check` shows: one list
            on_ready(check_before_promotion(params))
        first = {**({} if resume or dry_run else rollback_reference(params)), **(first_fields or {})}
        for name in plan.runbooks:
            on_start(name)
            link = {"promotion_id": plan.promotion_id, "previous_run_id": previous, "lane_digest": digest, **first}
            if fleet_id:
                link["fleet_id"] = fleet_id
            first = {}
            allowed = {ALLOW_PARAMETER: True} if allow_runtime_and_weights and name in LINTING else {}
            record = run_runbook(name, params, allowed, dry_run=dry_run, yes=yes, link=link, echo=echo)
            promotion.records.append(record)
            on_record(record)
            previous = record["run_id"]
            if record["verdict"] != promotion.passed_verdict:
                break  # each stage stands on the one before it
    return promotion


def rollback_reference(params: LaneParams) -> dict:
    """The rollback lane's fingerprint as the promotion's first record keeps it (nothing when the lane has none)."""
    if not params.rollback:
        return {}
    from lanebook.lane.plugins import prepare_lane
    from lanebook.nodes.ssh import LaneNodes
    from lanebook.ops.rollback import FINGERPRINT_FIGURE, fingerprint, rollback_target

    target = rollback_target(params)
    prepare_lane(target)  # the twin starts itself for a twin lane
    with LaneNodes(target) as nodes:
        return {FINGERPRINT_FIGURE: fingerprint(nodes)}


def show_record(console, record: dict, label: str, soft_wrap: bool = False) -> None:
    """A recorded run's ending on the terminal, as LABEL: its verdict, failed step and check, what to do next, the
    executed notebook, and in a dry run the commands it would have sent."""
    from lanebook.runs.audit import VERDICT_STYLES, verdict_label

    color = VERDICT_STYLES.get(record["verdict"], ("yellow", ""))[0]
    failed = f" — failed step: {record['failed_step']}" if record["failed_step"] else ""
    console.print(f"[{color}]{label}: {verdict_label(record['verdict'])}[/]{failed}")
    if record.get("failed_check"):
        console.print(f"  failed: {record['failed_check']}", soft_wrap=soft_wrap, markup=False, highlight=False)
    if record.get("fix"):
        console.print(f"  what to do next: {record['fix']}")
    console.print(f"  executed notebook: {record['output']}", soft_wrap=soft_wrap)
    if record["dry_run"]:
        console.print("  commands it would send (none were sent):", highlight=False)
        for line in record.get("commands") or ["(none)"]:
            console.out(f"    {line}", highlight=False)


def promote_shown(lane_name: str, **options) -> Promotion:
    """`promote` on the terminal (LANE as the operator named it): the lane loaded once, the plan, each runbook as it
    starts and ends (its steps and waits on stderr between), and the summary line."""
    from rich.console import Console

    console = Console()

    def planned(plan: Plan) -> None:
        console.print(f"[bold]promotion {plan.promotion_id}[/]: {plan.reason} — {' → '.join(plan.runbooks)}")

    def checked(items: list) -> None:
        warned = [f"{i.node} {i.name}: {i.seen}" for i in items if i.ok is False]
        console.print(f"prerequisites (`lanebook check`): ready, {sum(bool(i.ok) for i in items)} items observed")
        for line in warned:
            console.print(f"  warning: {line}")

    def started(name: str) -> None:
        console.rule(f"runbook {name}")

    def ended(record: dict) -> None:
        show_record(console, record, record["runbook"])

    shown = {"on_plan": planned, "on_ready": checked, "on_start": started, "on_record": ended}
    promotion = promote(load_lane(lane_name), echo=sys.stderr, **shown, **options)
    # One line, never wrapped: a fleet's task names the lane's outcome by it (lanebook.runs.fleet_dag).
    console.print(f"[{'green' if promotion.ok else 'red'}]{promotion.summary(lane_name)}[/]", soft_wrap=True)
    return promotion
