"""The diagnose follow-ups' rules (lanebook.verify.diagnose), with exact figures: the A→B→A requests and verdict, the K
boundary's plan and stability verdict, and the canary's keep/reject rule, also on the twin engine's own
figures for batch 8192 against 8216 (virtual time, so exact and fast)."""

from dataclasses import replace

import pytest
from lanebook.nodes.prometheus import parse_metrics
from lanebook.speed.bands import bands_from_runs
from lanebook.speed.metrics import wave_figures
from lanebook.speed.records import CONTENT, ROLE, USAGE, ChunkArrival, RequestRecord, WaveRecord
from lanebook.speed.workloads import load_workload
from lanebook.twin.engine_core import EngineConfig
from lanebook.twin.waves import simulate_wave
from lanebook.verify import diagnose

OFF = {"chat_template_kwargs": {"thinking": False}}


# --- prefix cache ----------------------------------------------------------------------------------


def test_prefix_bodies_share_framing_and_differ_from_the_first_token():
    bodies = diagnose.prefix_bodies("m", OFF, "run1", lines=3, max_tokens=16)
    assert [name for name, _ in bodies] == ["A cold", "A repeat", "B cold", "A again"]
    a_cold, a_repeat, b_cold, a_again = (body for _, body in bodies)
    assert a_cold == a_repeat == a_again  # A is sent three times exactly alike
    a, b = a_cold["messages"][0]["content"], b_cold["messages"][0]["content"]
    assert a == (
        "[run1-A]\nEntry 1: the berth schedule reading was 37 units.\n"
        "Entry 2: the tide gauge reading was 74 units.\nEntry 3: the pilot boat reading was 111 units.\n\n"
        "Which entry records the largest reading? Reply with its entry number only."
    )
    assert b.startswith("[run1-B]\nEntry 1: the cider press reading was 53 units.\n")
    assert a.splitlines()[-1] == b.splitlines()[-1] and len(a.splitlines()) == len(b.splitlines())
    framing = {k: v for k, v in a_cold.items() if k != "messages"}
    assert (
        framing
        == {k: v for k, v in b_cold.items() if k != "messages"}
        == {
            "chat_template_kwargs": {"thinking": False},
            "model": "m",
            "temperature": 0,
            "max_tokens": 16,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )


def snapshot(hits, queries, preemptions=0):
    return parse_metrics(
        f"vllm:prefix_cache_hits_total {hits}\nvllm:prefix_cache_queries_total {queries}\n"
        f"vllm:num_preemptions_total {preemptions}\n"
    )


def record(t_sent=10.0, first=10.25, error=None):
    chunks = [
        ChunkArrival(10.1, ROLE),
        ChunkArrival(first, CONTENT),
        ChunkArrival(first + 0.1, CONTENT),
        ChunkArrival(first + 0.1, USAGE),
    ]
    return RequestRecord(index=0, t_sent=t_sent, chunks=[] if error else chunks, error=error)


def test_prefix_step_is_the_counter_delta_and_first_content_ttft():
    step = diagnose.prefix_step("A repeat", record(), snapshot(100, 3000), snapshot(2660, 5816))
    assert (step.queried_tokens, step.hit_tokens, step.ttft_s) == (2816.0, 2560.0, pytest.approx(0.25))
    assert step.hit_rate == pytest.approx(2560 / 2816)
    assert step.figures() == {
        "queried_tokens": 2816.0,
        "hit_tokens": 2560.0,
        "hit_rate": 0.9091,
        "ttft_s": 0.25,
        "server_ttft_s": None,  # this server exposes no TTFT histogram
        "error": None,
    }
    assert diagnose.ttft_s(record(error="HTTP 500: boom")) is None


def ttft_snapshot(total, count):
    return parse_metrics(
        f"vllm:time_to_first_token_seconds_sum {total}\nvllm:time_to_first_token_seconds_count {count}\n"
    )


def test_the_servers_ttft_of_one_request_is_its_histograms_sum_delta():
    assert diagnose.one_request_ttft_s(ttft_snapshot(12.5, 41).minus(ttft_snapshot(12.25, 40))) == 0.25
    assert diagnose.one_request_ttft_s(ttft_snapshot(12.5, 42).minus(ttft_snapshot(12.25, 40))) is None  # two timed
    assert diagnose.one_request_ttft_s(snapshot(1, 2).minus(snapshot(0, 0))) is None  # not exposed


def test_the_servers_clock_judges_the_cached_prefill_where_it_timed_both():
    """A stream stamped late by a busy client does not fail the step when the server saw the cached prefill sooner;
    and the server's own clock fails it when it did not."""
    client_late = steps(again_ttft=1.3)
    client_late[0] = replace(client_late[0], server_ttft_s=0.9)
    client_late[3] = replace(client_late[3], server_ttft_s=0.1)
    assert diagnose.prefix_verdict(client_late).ok
    server_slow = steps()
    server_slow[0] = replace(server_slow[0], server_ttft_s=0.2)
    server_slow[3] = replace(server_slow[3], server_ttft_s=0.25)
    assert diagnose.prefix_verdict(server_slow).problems == [
        "A again hit the cache but its TTFT (0.250 s, the server's) is not below A cold's (0.200 s): the counters and "
        "the stream disagree"
    ]

    # judge_ttft=False (a model whose prefill is milliseconds): the counters alone judge; eviction still fails
    assert diagnose.prefix_verdict(server_slow, judge_ttft=False).ok
    assert diagnose.prefix_verdict(steps(again_hits=0.0), judge_ttft=False).evicted


def steps(again_hits=2560.0, cold_hits=0.0, again_ttft=0.3, repeat_hits=2560.0, error=None):
    return [
        diagnose.PrefixStep("A cold", 2816, cold_hits, 1.2),
        diagnose.PrefixStep("A repeat", 2816, repeat_hits, 0.3),
        diagnose.PrefixStep("B cold", 2816, 0, 1.1, error),
        diagnose.PrefixStep("A again", 2816, again_hits, again_ttft),
    ]


def test_prefix_verdict_passes_when_a_hits_again_and_answers_sooner():
    verdict = diagnose.prefix_verdict(steps())
    assert verdict.ok and not verdict.evicted and verdict.problems == []
    assert verdict.summary() == (
        "A cold: 0/2816 tokens hit, TTFT 1.200 s; A repeat: 2560/2816 tokens hit, TTFT 0.300 s; "
        "B cold: 0/2816 tokens hit, TTFT 1.100 s; A again: 2560/2816 tokens hit, TTFT 0.300 s"
    )


def test_prefix_verdict_names_eviction():
    verdict = diagnose.prefix_verdict(steps(again_hits=0.0, again_ttft=1.2))
    assert not verdict.ok and verdict.evicted
    assert verdict.problems == [
        "A→B→A eviction reproduced: after unrelated B, A hit 0 cached tokens where its repeat hit 2560"
    ]
    assert diagnose.prefix_verdict(steps(again_hits=1280.0)).evicted  # a partial eviction is eviction too


@pytest.mark.parametrize(
    "kwargs, problem",
    [
        (
            {"cold_hits": 256.0},
            "A cold hit 256 cached tokens: its prefix was not unique, so the protocol does not test eviction",
        ),
        (
            {"repeat_hits": 0.0, "again_hits": 0.0},
            "A repeat hit no cached tokens: the prefix cache is not working (is prefix caching on?)",
        ),
        (
            {"again_ttft": 1.3},
            (
                "A again hit the cache but its TTFT (1.300 s, the stream's) is not below A cold's (1.200 s): the "
                "counters and the stream disagree"
            ),
        ),
        ({"error": "timeout after 120 s"}, "B cold: request failed: timeout after 120 s"),
    ],
)
def test_prefix_verdict_refuses_an_invalid_protocol(kwargs, problem):
    verdict = diagnose.prefix_verdict(steps(**kwargs))
    assert (verdict.ok, verdict.evicted, verdict.problems) == (False, False, [problem])


def test_prefix_verdict_needs_the_four_steps_in_order():
    with pytest.raises(ValueError, match="the protocol's steps are"):
        diagnose.prefix_verdict(steps()[::-1])


# --- K boundary ------------------------------------------------------------------------------------

SCHEDULE = [[1, 1, 5], [2, 4, 4], [5, 6, 3]]


def test_boundary_plan_crosses_c4_c5_with_one_shorter_branch():
    plan = diagnose.boundary_plan(SCHEDULE, 5, 4, 5, max_tokens=256, short_tokens=64)
    assert (plan.k_lower, plan.k_upper, plan.crosses) == (4, 3, True)
    assert plan.cases() == [
        ("C4 K=4", [256] * 4),
        ("C5 K=3", [256] * 5),
        ("C5→C4 mixed (one 64-token branch)", [64, 256, 256, 256, 256]),
    ]
    assert not diagnose.boundary_plan(None, 5, 4, 5, 256, 64).crosses  # fixed K: no boundary to cross
    with pytest.raises(ValueError, match="short_tokens < max_tokens"):
        diagnose.boundary_plan(SCHEDULE, 5, 4, 5, 64, 64)
    with pytest.raises(ValueError, match="lower < upper"):
        diagnose.boundary_plan(SCHEDULE, 5, 5, 4, 256, 64)


def test_boundary_bodies_are_unique_and_carry_each_branch_length():
    bodies = diagnose.boundary_bodies("m", load_workload("code"), OFF, "run1", 3, [64, 256])
    assert [b["max_tokens"] for b in bodies] == [64, 256]
    assert [b["messages"][0]["content"].split("]")[0] for b in bodies] == ["[run1-k3-0", "[run1-k3-1"]


def wave(c, errors=0):
    requests = []
    for i in range(c):
        if i < errors:
            requests.append(RequestRecord(index=i, t_sent=0.0, t_done=1.0, error="stream ended before [DONE]"))
        else:
            chunks = [ChunkArrival(0.5, CONTENT), ChunkArrival(4.5, CONTENT)]
            requests.append(RequestRecord(index=i, t_sent=0.0, t_done=5.0, chunks=chunks, completion_tokens=256))
    return wave_figures(WaveRecord(c, 1, requests))


def test_boundary_case_figures_are_aggregates():
    case = diagnose.BoundaryCase("C4 K=4", wave(4), True, 0.21, 0.0)
    assert case.figures() == {
        "requests": 4,
        "ok": 4,
        "errors": 0,
        "unfinished": 0,
        "decode_tokens": 1020,
        "wall_s": 5.0,
        "wall_aggregate_tok_s": 204.0,
        "drained": True,
        "drain_s": 0.21,
        "preemptions": 0.0,
    }


def test_boundary_verdict_names_every_instability():
    stable = [
        diagnose.BoundaryCase("C4 K=4", wave(4), True, 0.2, 0.0),
        diagnose.BoundaryCase("C5 K=3", wave(5), True, 0.2, 0.0),
    ]
    assert diagnose.boundary_verdict(stable, {}, healthy=True).ok
    bad = [diagnose.BoundaryCase("C4 K=4", wave(4, errors=1), False, 120.0, 2.0)]
    fatal = {
        "head": {"CUDA error": ["ERROR CUDA error: an illegal memory access"], "engine death": []},
        "worker": {"NCCL error": ["ERROR NCCL error: remote process exited"]},
    }
    verdict = diagnose.boundary_verdict(bad, fatal, healthy=False)
    assert not verdict.ok and verdict.problems == [
        "C4 K=4: 1 of 4 requests failed (1× stream ended before [DONE])",
        "C4 K=4: the queue did not drain (requests still running or waiting)",
        "C4 K=4: 2 preemption(s)",
        "/health is no longer 200 after the waves",
        (
            "fatal log lines: head: ERROR CUDA error: an illegal memory access; worker: ERROR NCCL error: remote "
            "process exited"
        ),
    ]


def test_a_completed_stream_with_no_decode_window_is_no_instability():
    """Seen on the real vLLM CPU build beside the suite: whole replies in one read. Not measurable, but complete."""
    burst = RequestRecord(
        index=0, t_sent=0.0, t_done=1.0, chunks=[ChunkArrival(0.9, CONTENT), ChunkArrival(0.9, CONTENT)]
    )
    case = diagnose.BoundaryCase("C5 K=3", wave_figures(WaveRecord(1, 1, [burst])), True, 0.1, 0.0)
    assert (case.wave.errors, case.unfinished) == (1, 0)
    assert diagnose.boundary_verdict([case], {}, healthy=True).ok
    broken = RequestRecord(index=1, t_sent=0.0, t_done=1.0, error="stream ended before [DONE]")
    mixed = diagnose.BoundaryCase("C5 K=3", wave_figures(WaveRecord(2, 1, [burst, broken])), True, 0.1, 0.0)
    assert diagnose.boundary_verdict([mixed], {}, healthy=True).problems == [
        "C5 K=3: 1 of 2 requests failed (1× stream ended before [DONE])"
    ]


def test_boundary_verdict_names_a_line_of_two_fatal_kinds_once():
    line = "ERROR EngineCore encountered a fatal error: CUDA error: an illegal memory access"
    stable = [diagnose.BoundaryCase("C4 K=4", wave(4), True, 0.2, 0.0)]
    assert diagnose.boundary_verdict(
        stable, {"head": {"engine death": [line], "CUDA error": [line]}}, True
    ).problems == [f"fatal log lines: head: {line}"]


# --- canary keep/reject ----------------------------------------------------------------------------


def speed_doc(workload, streams, errors=0, max_tokens=256):
    runs = [
        {
            "concurrency": 1,
            "trial": t + 1,
            "requests": 1,
            "ok": 1 - (errors if t == 0 else 0),
            "errors": errors if t == 0 else 0,
            "decode_tokens": 255,
            "wall_s": 255 / (s * 0.9),
            "mean_stream_decode_tok_s": s,
            "wall_aggregate_tok_s": s * 0.9,
            "ttft_s_median": 0.25,
            "acceptance_rate": None,
            "mean_acceptance_length": None,
            "tokens_estimated": False,
        }
        for t, s in enumerate(streams)
    ]
    return {"workload": workload, "max_tokens": max_tokens, "runs": runs, "bands": bands_from_runs(runs, workload)}


BASE = [
    speed_doc("count", (94.0, 94.5, 95.0)),
    speed_doc("code", (55.0, 56.0, 57.0)),
    speed_doc("json", (60.0, 61.0, 62.0)),
]


def test_canary_rejects_a_variant_worse_beyond_tolerance():
    variant = [speed_doc("count", (85.0, 86.0, 87.0)), BASE[1], BASE[2]]
    decision = diagnose.canary_decision("MAX_NUM_BATCHED_TOKENS", 8192, 8216, BASE, variant, tolerance=0.05)
    assert (decision.decision, decision.kept_value) == ("reject", 8192)
    assert decision.reasons == [
        "worse beyond ±5% on count C1 stream 94.5→86.0 (-9.0%), count C1 aggregate 85.0→77.4 (-9.0%)"
    ]
    assert decision.summary().endswith("; the lane keeps MAX_NUM_BATCHED_TOKENS=8192")
    figures = decision.figures()
    assert (figures["verdict"], figures["kept"], figures["tolerance"]) == ("reject", 8192, 0.05)
    assert figures["cells"][0] == {
        "workload": "code",
        "concurrency": 1,
        "figure": "mean_stream_decode_tok_s",
        "baseline": 56.0,
        "variant": 56.0,
        "change": 0.0,
        "verdict": "within",
    }


def test_canary_rejects_a_variant_that_is_only_slower_within_tolerance():
    slower = [speed_doc(d["workload"], [r["mean_stream_decode_tok_s"] * 0.97 for r in d["runs"]]) for d in BASE]
    decision = diagnose.canary_decision("MAX_NUM_BATCHED_TOKENS", 8192, 8216, BASE, slower)
    assert decision.decision == "reject" and decision.comparison.verdict == "no gain"
    assert decision.reasons[0].startswith(
        "no cell clearly better beyond ±5%; slower on 6 of 6 cells (code C1 stream 56.0→54.3 (-3.0%)"
    )


def test_canary_keeps_a_healthy_better_variant():
    faster = [speed_doc("count", (101.0, 102.0, 103.0)), BASE[1], BASE[2]]
    decision = diagnose.canary_decision("MAX_NUM_BATCHED_TOKENS", 8192, 8216, BASE, faster)
    assert (decision.decision, decision.kept_value) == ("keep", 8216)
    assert decision.reasons == [
        "better beyond ±5% on count C1 stream 94.5→102.0 (+7.9%), count C1 aggregate 85.0→91.8 (+7.9%), worse nowhere"
    ]


def test_canary_rejects_a_better_median_whose_trials_overlap_the_baseline():
    """json 60.5→66.8 (+10%) on three short trials, 60.8-70.4 against 60.5-66.2: the bands overlap, so the gain
    may be noise (a twin canary of 64-token probes measured exactly this), and the lane's value stays."""
    noisy = [BASE[0], BASE[1], speed_doc("json", (60.8, 66.8, 70.4))]
    base = [BASE[0], BASE[1], speed_doc("json", (60.5, 60.5, 66.2))]
    decision = diagnose.canary_decision("MAX_NUM_BATCHED_TOKENS", 8192, 8216, base, noisy)
    assert (decision.decision, decision.kept_value, decision.comparison.verdict) == ("reject", 8192, "no gain")
    assert decision.reasons == [
        "no cell clearly better beyond ±5%; slower on 0 of 6 cells",
        "a better median inside overlapping trial bands may be noise: json C1 stream 60.5→66.8 (+10.4%), "
        "json C1 aggregate 54.5→60.1 (+10.4%)",
    ]


def test_canary_does_not_weigh_levels_where_both_sides_run_the_same():
    faster = [speed_doc("count", (101.0, 102.0, 103.0)), BASE[1], BASE[2]]
    decision = diagnose.canary_decision(
        "num_speculative_tokens_per_batch_size", "fixed K=5", "[[1, 1, 5]]", BASE, faster, alike=[1]
    )
    assert (decision.decision, decision.comparison.verdict) == ("reject", "no gain")
    assert decision.reasons == [
        "no level measured where the two sides differ: nothing shows a gain",
        "C1: both sides run the same there, so those cells are shown and not weighed",
    ]
    assert {c["verdict"] for c in decision.figures()["cells"]} == {"alike"}


def test_canary_rejects_unhealthy_or_incomplete_evidence():
    faster_but_failing = [speed_doc("count", (101.0, 102.0, 103.0), errors=1), BASE[1], BASE[2]]
    decision = diagnose.canary_decision("K", 1, 2, BASE, faster_but_failing)
    assert (decision.decision, decision.reasons, decision.comparison) == (
        "reject",
        ["variant unhealthy: 1 request(s) failed or were unmeasurable"],
        None,
    )
    short = [speed_doc(d["workload"], [r["mean_stream_decode_tok_s"] * 1.1 for r in d["runs"]][:2]) for d in BASE]
    decision = diagnose.canary_decision(
        "K",
        1,
        2,
        [speed_doc(d["workload"], [r["mean_stream_decode_tok_s"] for r in d["runs"]][:2]) for d in BASE],
        short,
    )
    assert decision.decision == "reject"
    assert decision.reasons == ["bands incomplete (fewer than 3 trials a cell): a value is kept only on complete bands"]


COUNT = "[t] Count from 1 to 400, one number per line, nothing else."
CODE = (
    "[t] Write a Python function that parses an ISO 8601 duration like P3DT4H5M into seconds, with a docstring and "
    "tests."
)
JSON = '[t] Return only JSON: an array of 12 objects {"id": int, "city": string} for large cities.'


def twin_doc(workload, prompt, budget):
    """Three identical trials of the twin engine's C1 wave (virtual time): the same figures every trial."""
    fig = simulate_wave(
        EngineConfig(max_num_batched_tokens=budget, k_schedule=tuple(map(tuple, SCHEDULE))), [prompt], 256
    )
    runs = [
        {
            "concurrency": 1,
            "trial": t,
            "requests": 1,
            "ok": 1,
            "errors": 0,
            "decode_tokens": fig.decode_tokens,
            "wall_s": fig.wall_s,
            "mean_stream_decode_tok_s": fig.mean_stream_decode_tok_s,
            "wall_aggregate_tok_s": fig.wall_aggregate_tok_s,
            "ttft_s_median": fig.ttft_s_median,
            "acceptance_rate": None,
            "mean_acceptance_length": None,
            "tokens_estimated": False,
        }
        for t in (1, 2, 3)
    ]
    return {"workload": workload, "max_tokens": 256, "runs": runs, "bands": bands_from_runs(runs, workload)}


def test_the_twins_batch_8216_is_slower_on_count_code_and_json_and_the_canary_rejects_it():
    probes = (("count", COUNT), ("code", CODE), ("json", JSON))
    base = [twin_doc(w, p, 8192) for w, p in probes]
    odd = [twin_doc(w, p, 8216) for w, p in probes]
    for b, v in zip(base, odd):
        assert v["runs"][0]["mean_stream_decode_tok_s"] < b["runs"][0]["mean_stream_decode_tok_s"] * 0.97
    decision = diagnose.canary_decision("MAX_NUM_BATCHED_TOKENS", 8192, 8216, base, odd)
    assert (decision.decision, decision.kept_value) == ("reject", 8192)
    assert all(c["change"] < 0 for c in decision.figures()["cells"])
