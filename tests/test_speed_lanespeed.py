"""A lane's speed plan (lanebook.speed.lanespeed): its workloads and levels, three trials at least, the request as
sent, the line a dry run records instead of sending, and the bands table and failure lines the runbook shows."""

import pytest
from lanebook.base.errors import LanebookError
from lanebook.lane.params import load_lane
from lanebook.nodes.ssh import Executor
from lanebook.speed.bands import bands_from_runs
from lanebook.speed.command import SpeedResult
from lanebook.speed.lanespeed import (
    LEVELS,
    MAX_TOKENS,
    as_list,
    bands_table,
    measure_workload,
    plan_speed,
    unchecked_idle,
    wave_failures,
)
from lanebook.speed.metrics import WaveFigures
from lanebook.speed.records import WaveRecord


def test_defaults_are_the_seeds_levels_and_tokens_and_the_lanes_workloads():
    plan = plan_speed(load_lane("twin"))
    assert (plan.workloads, plan.levels, plan.trials, plan.max_tokens) == (("probe", "code"), LEVELS, 3, MAX_TOKENS)
    assert LEVELS == (1, 4, 6) and MAX_TOKENS == 256
    assert plan.requests_per_workload == 33
    assert plan_speed(load_lane("anemll-0731")).workloads == ("probe", "code", "prose")
    assert plan.summary() == (
        "workloads probe, code; C1, C4, C6; 3 trials; max_tokens 256; "
        "model deepseek-v4-flash-0731 at http://127.0.0.2:8888/v1"
    )


def test_parameters_as_papermill_and_lanebook_run_give_them():
    params = load_lane("twin")
    assert plan_speed(params, "probe, json", "1,4", 5, 32).workloads == ("probe", "json")
    assert plan_speed(params, ["count"], [6], 3, 32).levels == (6,)
    assert plan_speed(params, concurrency=4).levels == (4,)
    assert as_list(None, "x") == [] and as_list("a,b", "x") == ["a", "b"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"trials": 2}, r"trials must be at least 3 \(got 2\)"),
        ({"trials": 1}, "never a single run"),
        ({"trials": True}, "trials must be a whole number"),
        ({"max_tokens": 1}, "max_tokens must be at least 2"),
        ({"max_tokens": "256"}, "max_tokens must be a whole number"),
        ({"workloads": "probe,nope"}, "unknown workload 'nope'"),
        ({"workloads": "probe,probe"}, "a workload is named twice"),
        ({"workloads": "probe,"}, "an empty item"),
        ({"concurrency": "1,8"}, r"concurrency \[8\] exceeds the lane's MAX_NUM_SEQS=6"),
        ({"concurrency": "0"}, "distinct levels of at least 1"),
        ({"concurrency": "4,4"}, "distinct levels"),
        ({"concurrency": "four"}, "whole numbers"),
    ],
)
def test_bad_parameters_are_refused_naming_them(kwargs, message):
    with pytest.raises(LanebookError, match=message):
        plan_speed(load_lane("twin"), **kwargs)


def test_the_request_as_sent_carries_the_lanes_shape():
    body = plan_speed(load_lane("anemll-0731")).example_body("probe")
    assert body["chat_template_kwargs"] == {"thinking": False}
    assert (body["model"], body["temperature"], body["max_tokens"], body["stream"]) == (
        "deepseek-v4-flash-0731",
        0,
        256,
        True,
    )
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"][0]["content"].startswith("[RUN-t1-c1-0]\n")


def test_a_dry_run_records_the_waves_and_sends_nothing():
    plan = plan_speed(load_lane("anemll-0731"), "code", trials=4, max_tokens=64)
    executor = Executor(dry_run=True)
    assert measure_workload(plan, "code", executor, twin=False) is None
    assert executor.commands() == [
        "local: speed code: 4 trials x C1/C4/C6 = 44 streamed POST http://192.168.1.11:8888/v1/chat/completions "
        "(unique prompts, temperature 0, max_tokens 64, usage included); before each wave "
        "GET http://192.168.1.11:8888/metrics until no request runs or waits"
    ]


def figures(c, trial, errors=0, reasons=None):
    return WaveFigures(
        c,
        trial,
        c,
        c - errors,
        errors,
        reasons or {},
        31 * (c - errors),
        1.0,
        60.0,
        100.0,
        0.5,
        None,
        None,
        [],
        False,
        0.0,
        "kernel",
    )


def test_failed_waves_and_unchecked_idle_are_named():
    result = SpeedResult(
        "http://x/v1",
        "m",
        "probe",
        32,
        True,
        [WaveRecord(1, 1, [], idle_wait_s=0.0), WaveRecord(4, 1, [], idle_wait_s=None)],
        [figures(1, 1), figures(4, 1, errors=4, reasons={"HTTP 500: engine dead": 3, "timeout after 126 s": 1})],
        [],
    )
    assert wave_failures(result) == ["trial 1 C4: 4 of 4 failed (HTTP 500: engine dead x3, timeout after 126 s x1)"]
    assert unchecked_idle(result) == ["trial 1 C4"]


def test_bands_table_shows_median_and_min_max():
    runs = [
        {
            "concurrency": 1,
            "trial": t,
            "requests": 1,
            "ok": 1,
            "errors": 0,
            "decode_tokens": 255,
            "wall_s": 3.3,
            "mean_stream_decode_tok_s": s,
            "wall_aggregate_tok_s": a,
            "ttft_s_median": 0.25,
            "acceptance_rate": None,
            "mean_acceptance_length": None,
            "tokens_estimated": False,
        }
        for t, s, a in ((1, 82.0, 76.0), (2, 80.5, 75.0), (3, 83.1, 77.2))
    ]
    table = bands_table({"workload": "probe", "max_tokens": 256, "runs": runs, "bands": bands_from_runs(runs, "probe")})
    assert table.splitlines()[0] == "**probe**, max_tokens 256: median (min–max) over trials"
    assert table.splitlines()[-1] == "| 1 | 3 | 0 | 82.0 (80.5–83.1) | 76.0 (75.0–77.2) | 0.250 (0.250–0.250) | - |"


def test_what_the_runbook_says_of_its_baseline_and_its_plots():
    from lanebook.speed import lanespeed
    from lanebook.speed.baseline import stored_baseline
    from lanebook.speed.provenance import SetupMatch

    plan = plan_speed(load_lane("anemll-0731"), "probe", "1,4", 3, 64)
    assert plan.figures(0.1, None) == {
        "workloads": ["probe"],
        "levels": [1, 4],
        "trials": 3,
        "max_tokens": 64,
        "tolerance": 0.1,
        "baseline": None,
    }
    assert lanespeed.baseline_note("x", None, None) == (
        "lane x has no stored baseline: the bands below are shown, not judged"
    )
    base = stored_baseline("twin")
    same, other = SetupMatch((), ()), SetupMatch((("image", "a", "b"),), ())
    assert lanespeed.baseline_note("twin", base, same) == f"baseline {base.path}: {base.source}\n{same.summary()}"
    assert lanespeed.baseline_label(same) == "baseline median (same setup: judged)"
    assert lanespeed.baseline_label(other) == "baseline median (different setup: not judged)"
    assert lanespeed.baseline_label(None) == ""
    assert lanespeed.plot_title(plan, "probe", True) == (
        "anemll-0731 · probe · max_tokens 64 · 3 trials · TWIN figures (not a real lane's)"
    )
    assert lanespeed.baseline_source(plan, False, "2026-12-02 05:00 UTC") == (
        "speed runbook on lane anemll-0731, 2026-12-02 05:00 UTC: 3 trials per level, max_tokens 64"
    )
    assert lanespeed.baseline_source(plan, True, "T").endswith("max_tokens 64; twin figures, not a real lane's")


def test_a_dry_run_of_the_speed_steps_shows_the_request_and_judges_nothing(tmp_path):
    from lanebook.speed import lanespeed
    from lanebook.steps.runbook import Runbook

    rb = Runbook("speed", "anemll-0731", dry_run=True)
    plan = plan_speed(rb.params, "probe,code")
    assert lanespeed.waves_steps(rb, plan) == []
    assert [(c.step, c.outcome) for c in rb.checks] == [
        ("2 waves probe", "not observed"),
        ("2 waves code", "not observed"),
    ]
    assert rb.commands() == [f"local: {plan.wave_line('probe')}", f"local: {plan.wave_line('code')}"]
    lanespeed.save_step(rb, [], plan=plan, provenance=None)
    lanespeed.save_step(rb, [], path=str(tmp_path / "b.json"), plan=plan, provenance=None)
    assert [c.detail for c in rb.checks[2:]] == [
        "skipped: no save_baseline path given",
        "skipped: a dry run measures nothing",
    ]
    lanespeed.judge_step(rb, [], provenance=None, tolerance=0.1)
    assert rb.checks[-1].outcome == "not observed" and not (tmp_path / "b.json").exists()
