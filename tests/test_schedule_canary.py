"""The verify schedule's own A/B (lanebook.verify.schedule_canary): which sides it compares, when it runs, and a dry
run's path (the real A/B, restore and proof run on the twin in test_diagnose_runbook)."""

import pytest
from lanebook.lane.params import load_lane
from lanebook.steps.runbook import Runbook
from lanebook.verify import schedule_canary as sc
from lanebook.verify.canary import Trials


def plan_of(enabled=True, schedule=None, restore=None):
    measured = Trials(workloads=["count"], concurrency=[1, 4, 6], trials=3, max_tokens=64)
    return sc.SchedulePlan(enabled=enabled, schedule=schedule, restore=restore, tolerance=0.05, measured=measured)


def test_the_two_sides_differ_only_in_the_schedule():
    params = load_lane("anemll-0731")
    plan = plan_of()
    fixed, scheduled = plan.side_params(params, sc.FIXED), plan.side_params(params, sc.SCHEDULE)
    assert fixed.speculative.schedule is None and scheduled.speculative.schedule == params.speculative.schedule
    assert fixed.env == scheduled.env == params.env and sc.side_of(params) == sc.SCHEDULE
    assert plan.describe(params, sc.FIXED) == "fixed K=5"
    assert (
        plan.describe(params, sc.SCHEDULE) == "num_speculative_tokens_per_batch_size=[[1, 1, 5], [2, 4, 4], [5, 6, 3]]"
    )


def test_a_fixed_k_lane_needs_the_schedule_side_given():
    params = load_lane("anemll-1m6")  # fixed K=5
    assert "no schedule was given" in plan_of().skip_reason(params)
    given = plan_of(schedule=[[1, 1, 5], [2, 6, 4]])
    assert given.skip_reason(params) is None and given.side_params(params, sc.SCHEDULE).speculative.schedule == [
        (1, 1, 5),
        (2, 6, 4),
    ]
    assert "needs the ranges" in plan_of(restore="schedule").restore_problem(params)
    assert "give 'fixed'" in plan_of(restore="off").restore_problem(params)
    assert plan_of(enabled=False).skip_reason(params) == "schedule_canary=False"


@pytest.mark.parametrize(
    "schedule, fixed_k, levels, alike",
    [
        ([[1, 1, 5], [2, 4, 4], [5, 6, 3]], 5, [1, 4, 6], [1]),  # seed 000's 5/4/3 against K=5: only C1 runs alike
        ([[1, 2, 5], [3, 6, 4]], 5, [1, 2, 3, 6], [1, 2]),  # C3 passes through bs 3 (K=4) as its streams finish
        ([[1, 1, 5], [2, 4, 4], [5, 6, 3]], 4, [1, 4, 6], []),  # K=4 fixed: C1 differs (5 against 4)
        ([[2, 6, 4]], 5, [1, 2], [1]),  # a batch size no range holds verifies fixed K
    ],
)
def test_alike_levels_are_those_where_every_batch_size_verifies_fixed_k(schedule, fixed_k, levels, alike):
    assert sc.alike_levels(schedule, fixed_k, levels) == alike


@pytest.mark.parametrize("restore, kept", [(None, sc.FIXED), ("schedule", sc.SCHEDULE), ("fixed", sc.FIXED)])
def test_the_kept_side_is_the_operators_else_the_schedule_only_when_kept(restore, kept):
    assert sc.kept_side(plan_of(restore=restore), None) == kept


def test_a_dry_run_records_both_sides_the_restore_and_the_lane_file_and_writes_nothing():
    rb = Runbook("diagnose", "anemll-0731", dry_run=True)
    before = rb.params.file.read_text()
    plan = plan_of()
    ab = sc.ab_step(rb, plan)
    assert ab is not None and ab.other == sc.FIXED and ab.running is None
    assert sc.decision_step(rb, plan, ab) is None
    sc.restore_step(rb, plan, decision=None, ab=ab)  # a dry run decides nothing: the restore path, recorded
    assert rb.params.file.read_text() == before
    lines = rb.nodes.executor.commands()
    assert sum(line.startswith("local: speed count: 3 trial(s) × C1,4,6") for line in lines) == 2
    assert any(line.startswith("local: set speculative.schedule: null in ") for line in lines)
    assert {c.outcome for c in rb.checks} <= {"pass", "not observed", "skipped"}


def test_restore_only_skips_the_ab_and_relaunches_the_operators_side():
    rb = Runbook("diagnose", "anemll-0731", dry_run=True)
    plan = plan_of(restore="fixed")
    assert sc.ab_step(rb, plan) is None and sc.decision_step(rb, plan, None) is None
    sc.restore_step(rb, plan, decision=None, ab=None)
    assert [c.detail for c in rb.checks[:2]] == [
        "skipped: restore=fixed: the operator's side is put back without an A/B"
    ] * 2
    assert sum("./start-deepseek-v4-flash-dspark.sh" in line for line in rb.nodes.executor.commands()) == 1
