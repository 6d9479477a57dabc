"""The bounded post-readiness warmup (lanebook.ops.warmup): the lane's shapes, the bypass key, wave summaries, checks,
figures and warnings as pure functions with exact values; then against a cold twin vLLM of its own (127.0.0.7,
never the shared twin), where a shape's first use compiles (the twin logs and times a JIT stall) and the first
request of a warmed shape does not, and where busy queues or no /metrics leave the warmup unsent, as warnings."""

import json
import threading

import httpx
import pytest
from lanebook.lane.params import lane_with, load_lane
from lanebook.nodes.ssh import Executor
from lanebook.ops import warmup
from lanebook.speed.records import CONTENT, ROLE, USAGE, ChunkArrival, RequestRecord, WaveRecord
from lanebook.twin import vllm as twin_vllm

# --- the lane's shapes and the bypass -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env,expected",
    [
        ({}, (True, "POST_READINESS_WARMUP_ENABLED unset: the launcher's default, 1")),
        ({"POST_READINESS_WARMUP_ENABLED": 1}, (True, "the lane sets POST_READINESS_WARMUP_ENABLED: 1")),
        (
            {"POST_READINESS_WARMUP_ENABLED": 0},
            (False, "the lane sets POST_READINESS_WARMUP_ENABLED: 0 (the recipe's immediate bypass)"),
        ),
        (
            {"POST_READINESS_WARMUP_ENABLED": "0"},
            (False, "the lane sets POST_READINESS_WARMUP_ENABLED: 0 (the recipe's immediate bypass)"),
        ),
        # the launcher compares the env file's text with 0: 0.0 is not 0, so it warms
        ({"POST_READINESS_WARMUP_ENABLED": 0.0}, (True, "the lane sets POST_READINESS_WARMUP_ENABLED: 0.0")),
    ],
)
def test_warmup_enabled_reads_the_key_as_the_launcher_does(env, expected):
    assert warmup.warmup_enabled(env) == expected


def test_each_lane_gets_the_recipes_shapes_labelled_with_its_verify_k():
    labels = lambda name: [p.label for p in warmup.plan_shapes(load_lane(name))]  # noqa: E731
    assert labels("anemll-0731") == ["bounded prefill", "C4 (K4)", "C6 (K3)"]
    assert labels("anemll-1m6") == ["bounded prefill", "C4 (K5)", "C6 (K5)"]  # fixed K=5, no schedule
    narrow = lane_with(load_lane("anemll-1m6"), env={"MAX_NUM_SEQS": 4})
    assert [p.label for p in warmup.plan_shapes(narrow)] == ["bounded prefill", "C4 (K5)"]  # C6 would queue
    prefill = warmup.plan_shapes(load_lane("anemll-0731"))[0].shape
    assert (prefill.concurrency, prefill.workload, prefill.max_tokens) == (1, "long_prefill", 8)


# --- waves, checks and figures (pure) -------------------------------------------------------------------------


def record(index, t_sent, first, done, error=None):
    chunks = (
        []
        if first is None
        else [ChunkArrival(first - 0.01, ROLE), ChunkArrival(first, CONTENT), ChunkArrival(done, USAGE)]
    )
    return RequestRecord(index=index, t_sent=t_sent, t_done=done, chunks=chunks, completion_tokens=8, error=error)


def test_summarize_wave_counts_failures_and_times_the_wave():
    wave = WaveRecord(
        4,
        1,
        [
            record(0, 10.0, 10.5, 11.0),
            record(1, 10.1, 10.4, 11.5),
            record(2, 10.2, None, 10.3, error="HTTP 500: boom"),
            record(3, 10.2, None, 10.9),
        ],
    )
    summary = warmup.summarize_wave(wave)
    assert (summary.requests, summary.ok) == (4, 2)
    assert summary.errors == {"HTTP 500: boom": 1, "no content in the stream": 1}
    assert summary.wall_s == pytest.approx(1.5) and summary.ttft_s == pytest.approx(0.4)
    assert summary.error_text() == "1× HTTP 500: boom; 1× no content in the stream"


def summary(wall_s, ttft_s=0.5, requests=4):
    return warmup.WaveSummary(requests, requests, {}, wall_s, ttft_s)


def warmed_result(**changes):
    shapes = [
        warmup.ShapeRun("bounded prefill", 1, summary(2.2, 1.9, 1), summary(1.9, 1.6, 1)),
        warmup.ShapeRun("C4 (K4)", 4, summary(1.6), summary(1.0)),
    ]
    fields = dict(shapes=shapes, idle_wait_before_s=0.04, idle_wait_after_s=0.01, preemptions=0.0, duration_s=9.123)
    return warmup.WarmupResult(False, **{**fields, **changes})


def test_a_clean_warmup_passes_every_check_and_records_each_shapes_stall():
    result = warmed_result()
    assert [(c.ok, c.what, c.detail, c.fail_open) for c in result.checks()] == [
        (True, "queues idle before the warmup (running 0, waiting 0)", "idle after 0.0 s", True),
        (
            True,
            "bounded prefill: every request completed, first use and warmed",
            "first use 2.20 s, warmed 1.90 s",
            True,
        ),
        (True, "C4 (K4): every request completed, first use and warmed", "first use 1.60 s, warmed 1.00 s", True),
        (True, "queues idle after the warmup (they drained)", "idle after 0.0 s", True),
        (True, "no preemption during the warmup (vllm:num_preemptions_total)", "", False),
    ]
    assert result.figures() == {
        "warmup_s": 9.12,
        "warmup_idle_wait_before_s": 0.04,
        "warmup_idle_wait_after_s": 0.01,
        "warmup_preemptions": 0.0,
        "warmup_shapes": {
            "bounded prefill": {
                "concurrency": 1,
                "first_use_wall_s": 2.2,
                "warmed_wall_s": 1.9,
                "first_use_ttft_s": 1.9,
                "warmed_ttft_s": 1.6,
                "first_use_stall_s": 0.3,
                "error": None,
            },
            "C4 (K4)": {
                "concurrency": 4,
                "first_use_wall_s": 1.6,
                "warmed_wall_s": 1.0,
                "first_use_ttft_s": 0.5,
                "warmed_ttft_s": 0.5,
                "first_use_stall_s": 0.6,
                "error": None,
            },
        },
        "warmup_warnings": [],
    }
    assert result.table(load_lane("twin").figures_label).splitlines() == [
        "Wall time of each shape's wave (twin figures):",
        "",
        "| shape | first use (s) | warmed (s) | first-use stall removed (s) |",
        "|---|---|---|---|",
        "| bounded prefill | 2.20 | 1.90 | +0.30 |",
        "| C4 (K4) | 1.60 | 1.00 | +0.60 |",
    ]


def test_a_warmup_that_could_not_finish_is_a_warning_and_preemption_is_not():
    failed = warmup.ShapeRun("C4 (K4)", 4, summary(1.6), None, error="warmed: 1 of 4 failed: 1× timeout after 126 s")
    result = warmed_result(
        shapes=[failed],
        not_idle_after="queue not idle after 120 s (running=1, waiting=0)",
        idle_wait_after_s=None,
        preemptions=2.0,
    )
    assert [(c.ok, c.fail_open) for c in result.checks()] == [
        (True, True),
        (False, True),
        (False, True),
        (False, False),
    ]
    assert result.checks()[-1].detail == "2 preempted: the KV cache cannot hold the lane's batch"
    assert result.warnings() == [
        "C4 (K4): every request completed, first use and warmed: warmed: 1 of 4 failed: 1× timeout after 126 s",
        "queues idle after the warmup (they drained): queue not idle after 120 s (running=1, waiting=0)",
    ]
    assert failed.first_use_stall_s is None and result.figures()["warmup_shapes"]["C4 (K4)"]["warmed_wall_s"] is None


def test_busy_queues_before_leave_one_warning_and_nothing_else():
    result = warmup.WarmupResult(
        False, not_idle_before="queue not idle after 120 s (running=3, waiting=1): another client is using the lane"
    )
    assert [(c.ok, c.what, c.detail, c.fail_open) for c in result.checks()] == [
        (
            False,
            "queues idle before the warmup (running 0, waiting 0)",
            "the warmup was not sent: queue not idle after "
            "120 s (running=3, waiting=1): another client is using the lane",
            True,
        )
    ]


def test_a_dry_run_lists_every_wave_and_sends_nothing():
    params = load_lane("anemll-0731")
    executor = Executor(dry_run=True)
    result = warmup.run_warmup(params, executor)
    assert result.dry_run and result.figures() == {} and result.warnings() == []
    assert [s.label for s in result.shapes] == ["bounded prefill", "C4 (K4)", "C6 (K3)"]
    lines = executor.commands()
    assert lines[0] == (
        "local: warmup, before: GET http://192.168.1.11:8888/metrics until vllm:num_requests_running and "
        "vllm:num_requests_waiting read 0, bound 120 s"
    )
    assert lines[2] == (
        "local: warmup C4 (K4), first use: POST http://192.168.1.11:8888/v1/chat/completions ×4 at once "
        "(streamed, count prompts, max_tokens 32, temperature 0), once the queues read idle"
    )
    assert [line.split(":")[1].strip() for line in lines[1:7]] == [
        "warmup bounded prefill, first use",
        "warmup C4 (K4), first use",
        "warmup C6 (K3), first use",
        "warmup bounded prefill, warmed",
        "warmup C4 (K4), warmed",
        "warmup C6 (K3), warmed",
    ]
    assert lines[7].startswith("local: warmup, after:") and len(lines) == 8
    assert all(r.dry_run for r in executor.history)


def test_no_metrics_leaves_the_warmup_unsent_as_a_warning():
    params = lane_with(load_lane("anemll-0731"), api="http://127.0.0.1:1/v1")  # nothing listens there
    result = warmup.run_warmup(params, Executor())
    assert result.shapes == [] and result.not_idle_before.startswith("cannot read http://127.0.0.1:1/metrics")
    assert result.warnings() == [
        f"queues idle before the warmup (running 0, waiting 0): the warmup was not sent: {result.not_idle_before}"
    ]


# --- against a cold twin vLLM ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cold_twin(tmp_path_factory):
    """A fresh twin vLLM configured as anemll-0731's compose starts it; time scale 0.01 makes a JIT stall 0.3 s."""
    params = load_lane("anemll-0731")
    spec = {
        "method": "dspark",
        "num_speculative_tokens": 5,
        "draft_sample_method": "probabilistic",
        "num_speculative_tokens_per_batch_size": [list(r) for r in params.speculative.schedule],
    }
    args = [
        params.weights.repo,
        "--served-model-name",
        params.served_model_name,
        "--max-model-len",
        str(params.max_model_len),
        "--max-num-seqs",
        str(params.max_num_seqs),
        "--max-num-batched-tokens",
        "8192",
        "--gpu-memory-utilization",
        "0.85",
        "--speculative-config",
        json.dumps(spec),
    ]
    server = twin_vllm.start_local(
        args,
        tmp_path_factory.mktemp("cold") / "vllm.log",
        host="127.0.0.7",
        env={"LANEBOOK_TWIN_TIME_SCALE": "0.01", "VLLM_USE_BREAKABLE_CUDAGRAPH": "0"},
    )
    yield server, lane_with(params, api=f"{server.url}/v1")
    server.stop()


def truth(server):
    """The twin server's own record of each request (jit_s: the compile stalls it spent), in the order sent."""
    return sorted(httpx.get(f"{server.url}/twin/requests").json()["requests"], key=lambda r: r["t_sent"])


def server_span_s(requests):
    """The server's own wall time of a wave: its first request received to its last token emitted (time.time)."""
    return max(r["t_last"] for r in requests) - min(r["t_sent"] for r in requests)


def test_on_a_cold_engine_the_first_use_stalls_and_the_warmed_shape_does_not(cold_twin):
    server, params = cold_twin
    httpx.delete(f"{server.url}/twin/requests")
    executor = Executor()
    result = warmup.run_warmup(params, executor)
    assert all(c.ok for c in result.checks()) and result.warnings() == [], result.checks()
    sent = truth(server)
    assert len(sent) == 2 * (1 + 4 + 6)
    first_use, warmed = sent[:11], sent[11:]
    by_shape = {"bounded prefill": first_use[:1], "C4 (K4)": first_use[1:5], "C6 (K3)": first_use[5:]}
    shapes = {s.label: s for s in result.shapes}
    for label, requests in by_shape.items():
        stalled = max(r["jit_s"] for r in requests)
        assert stalled > 0, label  # the shape's first use compiled
        # The server slept that stall inside the wave (its engine steps at deadlines that include it), so the
        # server's own span of the wave and the wave's wall time as the warmup measured it both hold it whole.
        # Read from the server's truth, not from two wall times compared under whatever load the machine has.
        assert server_span_s(requests) >= stalled, (label, requests)
        assert shapes[label].first_use.wall_s >= stalled, (label, result.figures())
        assert result.figures()["warmup_shapes"][label]["first_use_stall_s"] is not None, label  # the figure is kept
    assert [r["jit_s"] for r in warmed] == [0.0] * 11  # the first request of each warmed shape compiles nothing
    assert first_use[0]["prompt_tokens"] > 4096  # the bounded prefill is long, and cold (no prefix cache hit)
    assert result.preemptions == 0 and [r.exit_code for r in executor.history] == [0] * 8
    assert "Compiling a graph for dynamic shape (batch 6, K 3)" in server.log()


def test_busy_queues_leave_the_warmup_unsent(cold_twin, monkeypatch):
    server, params = cold_twin
    monkeypatch.setattr(warmup, "IDLE_TIMEOUT_S", 1.0)
    started, stop = threading.Event(), threading.Event()

    def someone_else():  # a long stream from another client, closed once the warmup has looked
        body = {
            "model": params.served_model_name,
            "messages": [{"role": "user", "content": "Count from 1 to 4000."}],
            "max_tokens": 4000,
            "stream": True,
        }
        with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=60) as response:
            for _ in response.iter_lines():
                started.set()
                if stop.is_set():
                    return

    other = threading.Thread(target=someone_else)
    other.start()
    try:
        assert started.wait(30)
        httpx.delete(f"{server.url}/twin/requests")
        result = warmup.run_warmup(params, Executor())
    finally:
        stop.set()
        other.join(60)
    assert result.not_idle_before.startswith("queue not idle after 1 s (running=1, waiting=0)")
    assert result.shapes == [] and len(result.warnings()) == 1
    assert len(truth(server)) <= 1  # the warmup sent nothing: at most the other client's stream, once it ended


def test_warmup_steps_skip_when_the_lane_bypasses_the_warmup(tmp_path):
    from lanebook.steps.runbook import Runbook

    off = lane_with(load_lane("anemll-0731"), env={warmup.ENABLED_KEY: 0})
    (tmp_path / "off.yaml").write_text(off.model_dump_json())  # JSON is YAML
    rb = Runbook("warmup", str(tmp_path / "off.yaml"), dry_run=True)
    warmup.warmup_step(rb)
    warmup.lane_step(rb)
    warmup.post_readiness_step(rb, hook=None)
    why = warmup.warmup_enabled(off.env)[1]
    assert [(c.what, c.detail) for c in rb.checks] == [
        ("the bounded post-readiness warmup ran", f"skipped: {why}"),
        ("the lane is well after the warmup", f"skipped: {why}"),
        ("the bounded post-readiness warmup ran", f"skipped: {why}"),
    ]
    assert rb.commands() == []


def test_a_hook_warmed_lane_is_not_warmed_twice_and_a_dry_run_lists_the_waves():
    from lanebook.steps.runbook import Runbook

    rb = Runbook("launch", "anemll-0731", dry_run=True)
    warmup.post_readiness_step(rb, hook="Post-readiness warmup: ok")
    assert rb.figures == {"warmed_by": "the launcher's post-readiness hook"}
    assert rb.checks[0].what == "lanebook's own warmup waves" and rb.checks[0].outcome == "skipped"
    assert not any("/chat/completions" in c for c in rb.commands())
    cold = Runbook("warmup", "anemll-0731", dry_run=True)
    warmup.warmup_step(cold)
    assert any("/chat/completions" in c for c in cold.commands()) and cold.checks
    assert {c.outcome for c in cold.checks} == {"not observed"}
