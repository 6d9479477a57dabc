"""The watch's judgments (lanebook.verify.watch_probe), pure functions of probe records: served, healthy and the cause
a failed round points at (and whether a relaunch can fix it), whether clients are being served, the pair probe's
output read back, and the speed regression test over several waves, never one."""

from __future__ import annotations

import pytest
from lanebook.lane.params import load_lane
from lanebook.verify import watch_probe as wp

HEALTHY = {
    "t": 100.0,
    "round": 1,
    "health": 200,
    "models": True,
    "chat": True,
    "chat_s": 0.2,
    "chat_tokens": 1,
    "metrics": {"running": 0.0, "waiting": 0.0, "kv_usage": 0.0, "prompt_tokens": 10.0, "generation_tokens": 5.0},
    "ssh": {"head": True, "worker": True},
    "containers": {"head": ["p-vllm-dspark-1"], "worker": ["p-vllm-dspark-1"]},
    "disk_free_kib": {"head": 10**9, "worker": 10**9},
    "state": "up",
    "errors": [],
}


def judged(**changes) -> dict:
    return wp.judged({**HEALTHY, **changes}, head="head")


def test_a_round_that_serves_a_client_on_an_up_pair_is_healthy():
    record = judged()
    assert (record["served"], record["healthy"], record["cause"], record["failures"]) == (True, True, None, [])
    assert wp.detail(record).startswith("healthy: served in 0.2 s")


@pytest.mark.parametrize(
    "changes, cause, served",
    [
        ({"ssh": {"head": True, "worker": False}, "state": None, "containers": {"head": ["p-vllm-dspark-1"]}},
         wp.NODE_UNREACHABLE, True),
        ({"disk_free_kib": {"head": 2 * 1024**2, "worker": 10**9}}, wp.DISK_FULL, True),
        ({"containers": {"head": [], "worker": ["p-vllm-dspark-1"]}, "state": "orphaned worker", "health": None,
          "models": False, "chat": False}, wp.ORPHANED, False),
        ({"health": 503, "chat": False}, wp.ENGINE_DOWN, False),
        ({"chat": False}, wp.NOT_SERVED, False),
        ({"state": "down", "containers": {"head": [], "worker": []}, "health": None, "models": False, "chat": False},
         wp.ENGINE_DOWN, False),
    ],
)  # fmt: skip
def test_a_failed_round_names_its_cause_most_basic_first(changes, cause, served):
    record = judged(**changes)
    assert (record["healthy"], record["cause"], record["served"]) == (False, cause, served)
    assert wp.detail(record).startswith(f"{cause}: ")


def test_only_what_a_relaunch_can_fix_is_relaunched():
    assert [c for c in (wp.ENGINE_DOWN, wp.ORPHANED, wp.NOT_SERVED) if not wp.relaunch_can_fix(c)] == []
    assert not any(
        wp.relaunch_can_fix(c) for c in (wp.NODE_UNREACHABLE, wp.DISK_FULL, wp.LINK_DEGRADED, wp.SPEED_REGRESSION)
    )


def test_clients_are_busy_when_requests_run_or_tokens_moved_beyond_the_watchs_own():
    before = judged()
    assert wp.clients_busy(before, judged(), own_tokens=1) is None
    running = {**HEALTHY["metrics"], "running": 2.0}
    assert wp.clients_busy(before, judged(metrics=running)) == "requests running 2, waiting 0"
    moved = {**HEALTHY["metrics"], "generation_tokens": 45.0}
    assert wp.clients_busy(before, judged(metrics=moved), own_tokens=1) == (
        "39 tokens generated for clients since the last round"
    )
    assert (
        wp.clients_busy(before, judged(metrics={**HEALTHY["metrics"], "generation_tokens": 6.0}), own_tokens=1) is None
    )


def test_the_pair_command_output_reads_back_into_names_and_free_disk():
    assert wp.read_pair_output(f"a-vllm\nb\n{wp.PAIR_MARK}\n1234\n") == (["a-vllm", "b"], 1234)
    assert wp.read_pair_output(f"{wp.PAIR_MARK}\n") == ([], None)
    assert "docker ps --format '{{.Names}}'" in wp.pair_command()


def wave(value: float, band_min: float = 80.0) -> dict:
    return {
        "stream_decode_tok_s": value,
        "band_min": band_min,
        "band_trials": 3,
        "below": wp.below_band(value, band_min),
    }


def test_one_slow_wave_is_never_a_regression_three_in_a_row_below_the_band_is():
    assert not wp.speed_regression([wave(10.0)], k=3).regression
    assert not wp.speed_regression([wave(70.0), wave(85.0), wave(70.0)], k=3).regression
    judgment = wp.speed_regression([wave(90.0), wave(70.0), wave(71.0), wave(72.0)], k=3)
    assert judgment.regression
    assert judgment.why == (
        "the last 3 speed waves (70, 71, 72 tok/s) all fell more than 3% below the band's minimum 80 tok/s "
        "(chance under no change: under 1/64)"
    )


def test_a_wave_a_hair_under_the_bands_minimum_is_within_it():
    assert not wp.below_band(81.60, 81.62) and not wp.below_band(79.2, 81.62)
    assert wp.below_band(79.0, 81.62) and wp.below_band(None, 81.62)
    hairs = [wave(79.5), wave(79.9), wave(78.0)]  # each under 80, none by 3 %
    assert not wp.speed_regression(hairs, k=3).regression


def test_the_chat_probe_asks_one_token_of_the_served_model_in_the_lanes_request_shape():
    params = load_lane("twin")
    body = wp.chat_body(params)
    assert (body["model"], body["max_tokens"], body["chat_template_kwargs"]) == (
        params.served_model_name,
        1,
        {"thinking": False},
    )


def test_availability_is_the_share_of_rounds_that_served_a_client():
    assert wp.availability([]) is None
    assert wp.availability([judged(), judged(chat=False), judged(), judged()]) == 0.75


def test_a_round_waits_at_most_half_its_interval_for_an_answer_so_a_hang_is_met_within_two_intervals():
    assert wp.round_timeout_s(30) == wp.HTTP_TIMEOUT_S  # a real lane's interval: the usual 10 s
    assert wp.round_timeout_s(4) == 2.0
    assert wp.round_timeout_s(0.5) == wp.MIN_HTTP_TIMEOUT_S
    assert wp.round_timeout_s(None) == wp.HTTP_TIMEOUT_S


def test_a_speed_wave_is_bounded_by_three_times_its_stream_at_the_bands_minimum_plus_a_rounds_wait():
    # 256 tokens at 80 tok/s take 3.2 s: a wave may take 9.6 s plus the round's wait, never the speed client's minutes
    assert wp.wave_timeout_s(256, 80.0, interval_s=4) == pytest.approx(9.6 + 2.0)
    assert wp.wave_timeout_s(256, 80.0, interval_s=30) == pytest.approx(9.6 + wp.HTTP_TIMEOUT_S)


def test_a_speed_wave_that_a_client_shared_is_no_sample_of_the_lane():
    assert wp.wave_disturbed(100.0, 356.0, 256.0) is None  # the wave's own tokens only
    assert "30 tokens were generated for clients" in wp.wave_disturbed(100.0, 386.0, 256.0)
    assert wp.wave_disturbed(None, 386.0, 256.0) is None and wp.wave_disturbed(5000.0, 300.0, 256.0) is None
