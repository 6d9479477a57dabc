"""The step API a runbook notebook calls (lanebook.steps.runbook): checks, steps, skips, and the verdict it emits.

A dry run observes nothing on the lane: what the lane would show is "not observed", and the verdict is
"dry-run", never "pass"; checks made on this machine (local=True) still fail it.
"""

from typing import Optional

import pytest
from lanebook.base.checks import ExpectedResult
from lanebook.lane import plugins
from lanebook.lane.params import LanePolicy, lane_with, load_lane
from lanebook.steps import runbook
from lanebook.steps.runbook import VERDICT_MIME, Runbook, StepFailed, verdict_of


@pytest.fixture
def registry(monkeypatch):
    fresh = plugins.Registry()
    monkeypatch.setattr(plugins, "_loaded", fresh)
    return fresh


@pytest.fixture
def shown(monkeypatch):
    """What the runbook displays in the notebook: markdown text and raw outputs, in order."""
    seen = []
    monkeypatch.setattr(
        runbook, "_display", lambda obj=None, markdown=None, raw=None: seen.append(markdown or raw or obj)
    )
    return seen


def _lab_lane(registry, tmp_path, twin: bool = True, policy: Optional[LanePolicy] = None) -> str:
    """A lane reached through a plugin's ssh config (nothing is run on it by these tests): the twin lane's file, or
    with twin=False a real lane's (twin false, the default policy); POLICY replaces the lane's policy."""
    config = tmp_path / "ssh_config"
    config.write_text("")
    registry.ssh_config("lab", lambda: config)
    lane_file = tmp_path / "lab.yaml"
    if policy is None:
        policy = load_lane("twin").policy if twin else LanePolicy()
    params = lane_with(load_lane("twin"), ssh_config="lab", twin=twin, policy=policy)
    lane_file.write_text(params.model_dump_json())  # JSON is YAML
    return str(lane_file)


def dry(lane_name="anemll-0731"):
    return Runbook("launch", lane_name, dry_run=True)


def test_a_dry_run_observes_nothing_on_the_lane_and_is_never_a_pass(shown):
    rb = dry()
    with rb.step("1 clean memory"):
        rb.expect(True, what="SHM cleaned on every node", detail="head, worker")
        rb.expect(False, what="checkout present on every node")  # not observed: does not fail a dry run
    rb.nodes.head.run("free -m")
    verdict = rb.finish()
    assert verdict["verdict"] == "dry-run" and verdict["dry_run"] is True
    assert verdict["checks"] == [
        {
            "step": "1 clean memory",
            "what": "SHM cleaned on every node",
            "outcome": "not observed",
            "detail": "not observed (dry run)",
        },
        {
            "step": "1 clean memory",
            "what": "checkout present on every node",
            "outcome": "not observed",
            "detail": "not observed (dry run)",
        },
    ]
    assert verdict["commands"] == ["head: free -m"]
    assert "**DRY RUN**" in shown[0] and "the verdict is `dry-run`, never pass" in shown[0]
    assert shown[1] == "`NOT OBSERVED` **SHM cleaned on every node** — not observed (dry run)"


def test_a_local_check_fails_a_dry_run():
    rb = dry()
    rb.expect(True, what="lane lints clean", local=True)
    with pytest.raises(StepFailed, match=r"^prerequisites: parameters valid \(min_free_gib must be positive\)$"):
        rb.expect(False, what="parameters valid", detail="min_free_gib must be positive", local=True)
    assert [c.outcome for c in rb.checks] == ["pass", "fail"]
    assert rb.finish()["verdict"] == "fail"


def test_skips_are_recorded_and_do_not_fail():
    rb = dry()
    with rb.step("3 start"):
        rb.skip("launcher reports the lane up", "already up")
    assert rb.checks == [ExpectedResult("3 start", "launcher reports the lane up", "skipped", "skipped: already up")]
    assert rb.finish()["verdict"] == "dry-run"


def test_warnings_are_recorded_and_do_not_fail(registry, tmp_path):
    """A fail-open step (the warmup) records its problems as warnings: the verdict stays pass."""
    rb = Runbook("warmup", _lab_lane(registry, tmp_path))
    with rb.step("1 warmup"):
        rb.expect(
            ExpectedResult.judged(
                "",
                "queues idle before the warmup",
                False,
                "the warmup was not sent: queue not idle",
                fail_open=True,
            )
        )
    assert rb.checks == [
        ExpectedResult(
            "1 warmup",
            "queues idle before the warmup",
            "warning",
            "the warmup was not sent: queue not idle",
            fail_open=True,
        )
    ]
    assert rb.finish()["verdict"] == "pass"


def test_results_the_library_judged_warn_only_when_observed_and_fail_open(registry, tmp_path):
    """Results a library call judged (the warmup's, a gate's): a fail-open one that did not hold is a warning, any
    other failure stops the run; a dry run observed none but the local ones."""
    judged = ExpectedResult.judged
    results = [
        judged("", "a", True, fail_open=True),
        judged("", "b", False, "queue busy", fail_open=True),
        judged("", "c", False, "2 preempted"),
    ]
    rb = Runbook("warmup", _lab_lane(registry, tmp_path))
    with pytest.raises(StepFailed, match=r"^1 warmup: c \(2 preempted\)$"):
        with rb.step("1 warmup", fix="run `warmup` again"):
            rb.expect(results)
    assert [(c.step, c.what, c.outcome, c.detail, c.fix) for c in rb.checks] == [
        ("1 warmup", "a", "pass", "", "run `warmup` again"),
        ("1 warmup", "b", "warning", "queue busy", "run `warmup` again"),
        ("1 warmup", "c", "fail", "2 preempted", "run `warmup` again"),
    ]
    unobserved = dry()
    unobserved.expect(iter([*results, judged("", "lane file", True, local=True)]))
    assert [(c.outcome, c.detail) for c in unobserved.checks] == [("not observed", "not observed (dry run)")] * 3 + [
        ("pass", "")
    ]


def test_the_verdict_rule():
    observed = [ExpectedResult("s", "a", "pass"), ExpectedResult("s", "b", "skipped")]
    assert verdict_of(observed, dry_run=False) == "pass"
    assert verdict_of(observed, dry_run=True) == "dry-run"
    assert verdict_of([], dry_run=True) == "dry-run"
    assert verdict_of([*observed, ExpectedResult("s", "c", "fail")], dry_run=True) == "fail"
    assert verdict_of([*observed, ExpectedResult("s", "c", "fail")], dry_run=False) == "fail"
    assert verdict_of([ExpectedResult("s", "a", "not observed")], dry_run=True) == "dry-run"
    assert verdict_of([*observed, ExpectedResult("s", "w", "warning")], dry_run=False) == "pass"


def test_a_real_run_checks_what_it_is_given(registry, tmp_path):
    """Not a dry run: the plugins ready the lane first, and expect() passes or fails on the value."""
    prepared = []
    registry.before_run(prepared.append)
    rb = Runbook("launch", _lab_lane(registry, tmp_path))
    assert [p.name for p in prepared] == ["twin"]
    assert rb.nodes.head.ssh_config == tmp_path / "ssh_config"
    rb.expect(True, what="live command carries the lane's schedule")
    with pytest.raises(StepFailed, match="^prerequisites: free memory$"):
        rb.expect(False, what="free memory")
    verdict = rb.finish()
    assert verdict["verdict"] == "fail" and verdict["commands"] == []  # only a dry run lists its commands


def test_finish_emits_the_verdict_for_the_runner(shown):
    rb = dry()
    rb.record(kv_cache_tokens=2_493_464)
    verdict = rb.finish()
    assert (
        verdict["figures"] == {"kv_cache_tokens": 2_493_464}
        and verdict["lane"] == "anemll-0731"
        and not verdict["twin"]
    )
    assert shown[-1][VERDICT_MIME] == verdict  # the output lanebook.runs.execute reads back
    assert shown[-1]["text/plain"] == '{"verdict": "dry-run", "figures": {"kv_cache_tokens": 2493464}}'


def test_a_destructive_step_needs_confirmation_and_records_who_gave_it(registry, tmp_path):
    unconfirmed = Runbook("stop", _lab_lane(registry, tmp_path), confirm=False)
    with unconfirmed.step("1 stop"):
        with pytest.raises(
            StepFailed, match=r"^1 stop: stop the lane on every node needs confirmation \(--yes or -p confirm=True\)$"
        ):
            unconfirmed.confirm("stop the lane on every node")
    assert unconfirmed.checks[-1].outcome == "fail" and "--yes" in unconfirmed.checks[-1].detail
    confirmed = Runbook("stop", _lab_lane(registry, tmp_path), confirm=True)
    with confirmed.step("1 stop"):
        confirmed.confirm("stop the lane on every node")
    (given,) = confirmed.finish()["confirmations"]
    assert given["step"] == "1 stop" and given["what"] == "stop the lane on every node" and "@" in given["by"]


def test_a_dry_run_asks_nothing():
    rb = dry()
    rb.confirm("drop the page cache on every node")  # nothing is sent, so nothing needs confirming
    assert rb.checks == [] and rb.finish()["confirmations"] == []


def test_left_unset_confirmation_is_given_on_twin_lanes_only(registry, tmp_path):
    """`confirm = None` (a notebook's default): a twin lane changes nothing real, a real lane must be confirmed."""
    assert Runbook("stop", _lab_lane(registry, tmp_path)).confirmed is True
    real = Runbook("stop", _lab_lane(registry, tmp_path, twin=False))
    with pytest.raises(StepFailed, match="needs confirmation"):
        real.confirm("stop the lane on every node")


def test_the_lanes_policy_decides_an_unset_confirmation_not_its_twin_label(registry, tmp_path):
    """policy.confirm_changes, not `twin:`, says whether an unset confirm is given."""
    strict_twin = Runbook("stop", _lab_lane(registry, tmp_path, policy=LanePolicy()))
    assert strict_twin.params.twin and strict_twin.confirmed is False
    with pytest.raises(StepFailed, match="needs confirmation"):
        strict_twin.confirm("stop the lane on every node")
    lenient = LanePolicy(confirm_changes=False)
    assert Runbook("stop", _lab_lane(registry, tmp_path, twin=False, policy=lenient)).confirmed is True


def test_a_failed_step_says_what_to_do_next_and_emits_the_figures_measured_so_far(shown):
    rb = Runbook("launch", "twin", dry_run=True)
    rb.record(free_gib=101.5)
    with pytest.raises(StepFailed, match=r"^prerequisites: parameters valid$"):
        with rb.step("prerequisites", fix="fix the lane file, then run `launch` again"):
            rb.expect(False, what="parameters valid", local=True)
    assert shown[-2] == "**What to do next:** fix the lane file, then run `launch` again"
    emitted = shown[-1][VERDICT_MIME]
    assert (emitted["verdict"], emitted["figures"]) == ("fail", {"free_gib": 101.5})
    assert emitted["failure"] == {"step": "prerequisites", "fix": "fix the lane file, then run `launch` again"}


def test_a_lanebook_error_inside_a_step_fails_that_step_with_its_message(shown):
    from lanebook.base.errors import LanebookError

    rb = Runbook("launch", "twin", dry_run=True)
    with pytest.raises(StepFailed, match=r"^3 start: step completed \(head: connection refused\)$"):
        with rb.step("3 start", fix="run `status`"):
            raise LanebookError("head: connection refused")
    assert rb.checks[-1] == ExpectedResult(
        "3 start", "step completed", "fail", "head: connection refused", "run `status`"
    )


def test_any_other_exception_is_an_error_that_still_emits_the_figures(shown):
    rb = Runbook("launch", "twin", dry_run=True)
    rb.record(kv_cache_tokens=2_300_000)
    with pytest.raises(ZeroDivisionError):
        with rb.step("4 startup log"):
            1 / 0
    assert (shown[-1][VERDICT_MIME]["verdict"], shown[-1][VERDICT_MIME]["figures"]) == (
        "error",
        {"kv_cache_tokens": 2_300_000},
    )


def test_an_explicit_confirm_parameter_decides_and_is_recorded_as_such(registry, tmp_path):
    rb = Runbook("stop", _lab_lane(registry, tmp_path, twin=False), confirm=True)
    with rb.step("1 stop"):
        rb.confirm("stop the lane on every node")
    twin = Runbook("stop", _lab_lane(registry, tmp_path))  # unset on a twin lane, no frontend here
    with twin.step("1 stop"):
        twin.confirm("stop the lane on every node")
    assert [c["how"] for c in rb.confirmations + twin.confirmations] == ["parameter", "lane policy, confirm unset"]


def test_the_buttons_decide_when_confirm_is_unset(registry, tmp_path, monkeypatch):
    """A frontend that renders the buttons: the click decides, on a real lane and on the twin alike."""
    from lanebook.base import frontend

    clicks = iter([True, False])
    monkeypatch.setattr(frontend, "ask", lambda what: next(clicks))
    rb = Runbook("stop", _lab_lane(registry, tmp_path, twin=False))
    with rb.step("1 stop"):
        rb.confirm("stop the lane on every node")
    assert rb.confirmations[-1]["how"] == "button"
    with rb.step("2 drop caches"):
        with pytest.raises(
            StepFailed, match=r"^2 drop caches: drop the page cache needs confirmation \(--yes or -p confirm=True\)$"
        ):
            rb.confirm("drop the page cache")
    assert rb.checks[-1].detail.startswith("cancelled at the button; rerun with --yes")
    monkeypatch.setattr(frontend, "ask", lambda what: pytest.fail("an explicit parameter must not ask"))
    Runbook("stop", _lab_lane(registry, tmp_path, twin=False), confirm=False)  # (asks nothing when constructed)
    refused = Runbook("stop", _lab_lane(registry, tmp_path), confirm=False)
    with pytest.raises(StepFailed, match="needs confirmation"):
        refused.confirm("stop the lane on every node")


def test_a_headless_kernel_never_waits_for_a_click(tmp_path):
    """papermill (no frontend renders the buttons), confirm unset on a real lane: the step fails with the flag
    message instead of hanging (papermill's execution timeout would fail a hang)."""
    import nbformat
    import papermill
    from lanebook.lane.params import load_lane

    lane = tmp_path / "real.yaml"
    lane.write_text(lane_with(load_lane("twin"), ssh_config=None, twin=False, policy=LanePolicy()).model_dump_json())
    code = (
        f"from lanebook.steps.runbook import Runbook\nrb = Runbook('stop', {str(lane)!r})\n"
        "with rb.step('1 stop'):\n    rb.confirm('stop the lane on every node')"
    )
    source, executed = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nbformat.write(
        nbformat.v4.new_notebook(
            cells=[nbformat.v4.new_code_cell(code)],
            metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        ),
        source,
    )
    with pytest.raises(
        papermill.PapermillExecutionError,
        match=r"1 stop: stop the lane on every node needs confirmation \(--yes or -p confirm=True\)",
    ):
        papermill.execute_notebook(
            str(source),
            str(executed),
            kernel_name="python3",
            execution_timeout=60,
            progress_bar=False,
            cwd=str(tmp_path),
        )


def test_results_per_node_are_one_check_a_node_and_expect_stops_at_the_first_that_fails(shown):
    rb = dry()
    found = {"head": (True, "48/48"), "worker": (True, "48/48")}
    rb.expect(ExpectedResult.per_node(found, "weights complete on {}", local=True))
    assert [(c.what, c.outcome, c.detail) for c in rb.checks] == [
        ("weights complete on head", "pass", "48/48"),
        ("weights complete on worker", "pass", "48/48"),
    ]
    with pytest.raises(StepFailed, match="weights complete on worker"):
        rb.expect(
            ExpectedResult.per_node(
                {"head": (True, ""), "worker": (False, "47/48"), "worker2": (False, "")},
                "weights complete on {}",
                local=True,
            )
        )
    assert [c.what for c in rb.checks[2:]] == ["weights complete on head", "weights complete on worker"]


def test_expect_takes_each_results_outcome_and_locality_in_a_dry_run(shown):
    rb = dry()
    rb.expect(
        [
            ExpectedResult.judged("1 models", "from the lane", None, "seen"),
            ExpectedResult.judged("1 models", "lane file", True, "ok", local=True),
        ]
    )
    assert [(c.what, c.outcome) for c in rb.checks] == [("from the lane", "not observed"), ("lane file", "pass")]
    with pytest.raises(StepFailed, match="lane file"):
        rb.expect(ExpectedResult.judged("1 models", "lane file", False, "bad", local=True))


def test_expect_takes_one_form_a_call_and_names_a_wrong_one(shown):
    rb = dry()
    result = ExpectedResult.judged("", "lane file", True, "ok", local=True)
    wrong = [
        (lambda: rb.expect(True), "needs what="),
        (lambda: rb.expect(result, what="lane file"), "go with a plain bool only"),
        (lambda: rb.expect([result], detail="x"), "go with a plain bool only"),
        (lambda: rb.expect("the lane is up", what="up"), "got str"),
        (lambda: rb.expect(None, what="up"), "got NoneType"),
        (lambda: rb.expect([result, True]), "got bool"),
        (lambda: rb.expect(1, what="one"), "got int"),
    ]
    for call, message in wrong:
        with pytest.raises(TypeError, match=message):
            call()
    assert rb.checks == []
    rb.expect(result)
    assert [(c.what, c.outcome) for c in rb.checks] == [("lane file", "pass")]


def test_show_displays_markdown_and_objects(shown):
    rb = dry()
    rb.show(markdown="| a |")
    rb.show({"x": 1})
    assert shown[-2:] == ["| a |", {"x": 1}]
