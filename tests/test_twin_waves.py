"""Waves in virtual time: the figures of a wave from its requests' times, and the engine driven without a clock."""

from __future__ import annotations

import pytest
from helpers.twin_engine_cases import PROBE_SETS, make_seq
from lanebook.twin import waves
from lanebook.twin.engine_core import EngineConfig, EngineCore


def test_wave_figures_from_request_times():
    figures = waves.wave_figures([waves.Timing(0.0, 0.5, 2.5, 101), waves.Timing(0.1, 1.0, 3.0, 201)])
    assert figures == waves.VirtualWaveFigures(
        concurrency=2,
        decode_tokens=300,
        wall_s=3.0,
        mean_stream_decode_tok_s=75.0,
        wall_aggregate_tok_s=100.0,
        ttft_s_median=pytest.approx(0.7),
    )


def test_a_single_token_request_has_no_decode_rate():
    assert waves.Timing(0.0, 1.0, 1.0, 1).stream_decode_tok_s == 0.0


def test_requests_sent_together_prefill_together_and_a_late_one_waits_for_its_time():
    core = EngineCore(EngineConfig())
    timings = waves.run_virtual(
        core, [(0.0, make_seq(0, "Probe 0")), (0.0, make_seq(1, "Probe 1")), (60.0, make_seq(2, "Probe 2"))]
    )
    assert timings["s0"].t_first == timings["s1"].t_first
    assert timings["s2"].t_sent == 60.0 and timings["s2"].t_first > 60.0
    assert [timings[s].completion_tokens for s in ("s0", "s1", "s2")] == [32, 32, 32]


def test_simulate_wave_is_deterministic_and_warmed_by_default():
    prompts = PROBE_SETS["status"][:4]
    assert waves.simulate_wave(EngineConfig(), prompts) == waves.simulate_wave(EngineConfig(), prompts)
    cold = waves.simulate_wave(EngineConfig(), prompts, warmed=False)
    assert cold.wall_s > waves.simulate_wave(EngineConfig(), prompts).wall_s
