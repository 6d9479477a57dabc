"""The batch-size verify schedule's own A/B, and its one-line rollback (seed 000).

Seed 000 promoted num_speculative_tokens_per_batch_size and named its rollback: restore fixed K by removing the
schedule, restart through the same launcher, and confirm the live command no longer carries the key. The canary
measures the lane with the schedule against fixed K (MTP_NUM_TOKENS), all else equal: the running side first,
then the other relaunched through the launcher (lanebook.verify.canary), on the same workloads, levels, trials and
max_tokens. The schedule stays only on the batch canary's rule (lanebook.verify.diagnose.canary_decision), judged
where the sides differ (a level where the schedule verifies fixed K's count at every batch size weighs neither way);
otherwise fixed K runs and the live command must no longer carry the key. The decided side is written to the lane
file (only `speculative.schedule`, backed up first); `restore="fixed"` or `"schedule"` does the same without the A/B.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

from lanebook.base.files import read_text
from lanebook.lane.params import LaneParams, lane_with
from lanebook.lane.values import read_schedule, schedule_text, write_schedule
from lanebook.ops.launcher import container_name
from lanebook.ops.logs import live_command
from lanebook.recipe.effective.mismatches import live_mismatches
from lanebook.recipe.speculative import SCHEDULE_KEY, k_for_batch
from lanebook.verify.canary import (
    Relaunch,
    Trials,
    VariantTrial,
    relaunch_with,
    show_change,
    show_documents,
    try_variant,
)
from lanebook.verify.diagnose import CanaryDecision, canary_decision

if TYPE_CHECKING:
    from lanebook.steps.runbook import Runbook

FIXED, SCHEDULE = "fixed", "schedule"  # the two sides, as `restore` names them


def with_schedule(params: LaneParams, schedule: Optional[Sequence[Sequence[int]]]) -> LaneParams:
    """The lane with only its verify schedule changed (None: fixed K = MTP_NUM_TOKENS)."""
    speculative = params.speculative.model_dump()
    speculative["schedule"] = None if schedule is None else [list(r) for r in schedule]
    return lane_with(params, speculative=speculative)


def alike_levels(schedule: Optional[Sequence[Sequence[int]]], fixed_k: int, concurrency: Sequence[int]) -> list[int]:
    """The concurrencies at which the schedule verifies fixed K at every batch size a wave passes through (C streams,
    then fewer as they finish): there both sides run the same K, so the two cannot be told apart and their difference
    is the machine's noise (a 14% swing at C1 once flipped the decision), which must not decide."""
    return [c for c in concurrency if all(k_for_batch(schedule, fixed_k, b) == fixed_k for b in range(1, c + 1))]


def side_of(params: LaneParams) -> str:
    return FIXED if params.speculative.schedule is None else SCHEDULE


@dataclass(frozen=True, kw_only=True)
class SchedulePlan:
    """What the diagnose runbook's schedule-canary parameters ask for. schedule: the schedule side's ranges (None:
    the lane's own); restore: the side the operator puts back without an A/B (None: the A/B decides); measured: what
    each side measures."""

    enabled: bool
    schedule: Optional[list[list[int]]]
    tolerance: float
    measured: Trials
    restore: Optional[str] = None

    def ranges(self, params: LaneParams) -> Optional[list[list[int]]]:
        """The schedule side's ranges: the plan's, else the lane's own (None when neither gives one)."""
        own = params.speculative.schedule
        return self.schedule if self.schedule is not None else None if own is None else [list(r) for r in own]

    def side_params(self, params: LaneParams, side: str) -> LaneParams:
        """The lane's params for one side of the A/B: the schedule's ranges set, or none (fixed K)."""
        return with_schedule(params, self.ranges(params) if side == SCHEDULE else None)

    def skip_reason(self, params: LaneParams) -> Optional[str]:
        """Why the A/B does not run (None: it runs)."""
        if not self.enabled:
            return "schedule_canary=False"
        if self.restore is not None:
            return f"restore={self.restore}: the operator's side is put back without an A/B"
        if self.ranges(params) is None:
            return "the lane verifies fixed K and no schedule was given (-p k_schedule=[[START, END, K], ...])"
        return None

    def restore_problem(self, params: LaneParams) -> Optional[str]:
        """What is wrong with `restore` (None: nothing)."""
        if self.restore not in (None, FIXED, SCHEDULE):
            return f"restore is {self.restore!r}: give {FIXED!r} (fixed K) or {SCHEDULE!r}"
        if self.restore == SCHEDULE and self.ranges(params) is None:
            return "restore='schedule' on a fixed-K lane needs the ranges: -p k_schedule=[[START, END, K], ...]"
        return None

    def describe(self, params: LaneParams, side: str) -> str:
        k = params.num_speculative_tokens
        return f"{SCHEDULE_KEY}={schedule_text(self.ranges(params))}" if side == SCHEDULE else f"fixed K={k}"


@dataclass
class ScheduleAB:
    """Both sides measured: the lane's own side first, then the other side relaunched (trial)."""

    documents: dict[str, Optional[list[dict]]]  # side -> speed documents
    trial: VariantTrial
    other: str  # the side relaunched

    @property
    def running(self) -> Optional[str]:
        """The side the lane runs now (None: unknown, a dry run)."""
        if self.trial.relaunch.ok and not self.trial.failed:
            return self.other
        return (
            None if self.trial.restored is None or not self.trial.restored.ok else side_of(self.trial.restored.params)
        )


def ab_step(rb: "Runbook", plan: SchedulePlan) -> Optional[ScheduleAB]:
    """The A/B: the side the lane runs measured, then the other side relaunched through the launcher and measured."""
    p = rb.params
    own = side_of(p)
    other = FIXED if own == SCHEDULE else SCHEDULE
    if reason := plan.skip_reason(p):
        rb.skip("the schedule and fixed K measured on matched workloads", reason)
        return None
    documents: dict[str, Optional[list[dict]]] = {own: plan.measured.measure(rb.nodes)}
    show_documents(rb, f"schedule_canary_{own}", documents[own])
    failed = None if documents[own] is None else sum(r["errors"] for d in documents[own] for r in d["runs"])
    rb.expect(failed == 0, what=f"every request measured with {plan.describe(p, own)}", detail=failed)
    rb.confirm(f"relaunch lane {p.name} with {plan.describe(p, other)} (stop, clean memory, start) and measure it")
    trial = try_variant(rb.nodes, plan.side_params(p, other), lambda: plan.measured.measure(rb.nodes))
    documents[other] = trial.documents
    rb.record(schedule_canary_relaunch=trial.figures())
    show_change(rb, trial.relaunch)
    show_documents(rb, f"schedule_canary_{other}", trial.documents)
    what = f"the lane is up with {plan.describe(p, other)} and the live command carries it"
    rb.expect(trial.relaunch.ok, what=what, detail=trial.relaunch.summary())
    rb.expect(
        trial.error is None,
        what=f"{', '.join(plan.measured.workloads)} measured with {plan.describe(p, other)}",
        detail=trial.error,
    )
    return ScheduleAB(documents, trial, other)


def decision_step(rb: "Runbook", plan: SchedulePlan, ab: Optional[ScheduleAB]) -> Optional[CanaryDecision]:
    """The decision: keep the schedule only on a clear gain over fixed K (the batch canary's rule), else fixed K."""
    what = "an explicit keep or restore-fixed-K from the measured figures"
    if reason := plan.skip_reason(rb.params):
        rb.skip(what, reason)
        return None
    decision = None
    if ab and ab.documents[FIXED] and ab.documents[SCHEDULE]:
        fixed, scheduled = (plan.describe(rb.params, side) for side in (FIXED, SCHEDULE))
        ranges = schedule_text(plan.ranges(rb.params))
        alike = alike_levels(plan.ranges(rb.params), rb.params.num_speculative_tokens, plan.measured.concurrency)
        decision = canary_decision(
            SCHEDULE_KEY, fixed, ranges, ab.documents[FIXED], ab.documents[SCHEDULE], plan.tolerance, alike
        )
        rb.record(schedule_canary=decision.figures())
        verdict = "keep the schedule" if decision.decision == "keep" else f"restore {fixed}"
        rb.show(markdown=f"### Decision: **{verdict}** ({scheduled} against {fixed})\n\n{decision.summary()}")
        rb.show(decision.comparison.frame() if decision.comparison else decision.reasons)
    rb.expect(decision is not None, what=what, detail=None if decision is None else decision.summary())
    return decision


def kept_side(plan: SchedulePlan, decision: Optional[CanaryDecision]) -> str:
    """The operator's side when asked for; else the schedule only when kept (a dry run shows the restore)."""
    if plan.restore is not None:
        return plan.restore
    return SCHEDULE if decision is not None and decision.decision == "keep" else FIXED


def restore_step(
    rb: "Runbook", plan: SchedulePlan, *, decision: Optional[CanaryDecision], ab: Optional[ScheduleAB]
) -> Optional[Relaunch]:
    """The restore: the kept side is what runs (relaunched through the launcher unless it already runs), the live
    command carries the schedule's key exactly when the schedule is kept, and the lane file says the same; the
    relaunch."""
    p = rb.params
    if reason := None if plan.restore else plan.skip_reason(p):
        rb.skip("the kept side is what the lane runs", reason)
        return None
    problem = plan.restore_problem(p)
    rb.expect(not problem, what="restore names a side the lane can run", detail=problem, local=True)
    side = kept_side(plan, decision)
    kept = plan.side_params(p, side)
    running = ab.running if ab else None  # the operator's restore always goes through the launcher
    relaunch = None
    if running != side or rb.dry_run:
        rb.confirm(f"relaunch lane {p.name} with {plan.describe(p, side)} through its launcher")
        relaunch = relaunch_with(rb.nodes, kept)
        rb.record(schedule_canary_restore=relaunch.figures())
        show_change(rb, relaunch)
        rb.expect(relaunch.ok, what=f"the lane is up again with {plan.describe(p, side)}", detail=relaunch.summary())
    command = live_command(rb.nodes.head, container_name(rb.nodes))
    mismatches = live_mismatches(kept, command)
    rb.expect(
        not mismatches,
        what=f"the live command carries {plan.describe(p, side)}",
        detail="; ".join(map(str, mismatches)),
    )
    carries = None if command is None else SCHEDULE_KEY in command
    rb.record(schedule_kept={"side": side, "live_command_has_schedule_key": carries})
    rb.expect(
        carries == (side == SCHEDULE),
        what=f"the live process command {'contains' if side == SCHEDULE else 'no longer contains'} {SCHEDULE_KEY}",
        detail="not read" if carries is None else f"{SCHEDULE_KEY} {'present' if carries else 'absent'}",
    )
    lane_file_step(rb, kept, plan.describe(p, side))
    return relaunch


def lane_file_step(rb: "Runbook", kept: LaneParams, described: str) -> None:
    """The lane file says the kept side: written by lanebook when it did not (backed up first; a dry run only says)."""
    path, schedule = rb.params.file, kept.speculative.schedule
    what = f"the lane file says {described}"
    if path is None:
        rb.expect(False, what=what, detail="the lane was not read from a file", local=True)
        return
    rb.nodes.executor.record_local(f"set speculative.schedule: {schedule_text(schedule)} in {path} (backup first)")
    if rb.dry_run:
        rb.skip(what, "a dry run writes no lane file")
        return
    saved = write_schedule(path, schedule, f"{described}: kept by the schedule canary (diagnose)")
    rb.record(schedule_lane_file={"path": str(path), "backup": None if saved is None else str(saved)})
    if saved:
        rb.show(markdown=f"The lane file now says {described}; what it said before is kept in `{saved}`.")
    on_file = read_schedule(read_text(path, "lane file"))
    wanted = None if schedule is None else [list(r) for r in schedule]
    rb.expect(on_file == wanted, what=what, detail=f"speculative.schedule: {schedule_text(on_file)}", local=True)
