"""The twin's step timing against the seeds' speed figures, through virtual-time waves: pure, exact, fast."""

from __future__ import annotations

import math

import pytest
from helpers.twin_engine_cases import PROBE_SETS, c1_rate, wave
from lanebook.twin import timing
from lanebook.twin.engine_core import EngineConfig
from lanebook.twin.facts import CODE_PROMPT, COUNT_PROMPT, JSON_PROMPT, SCHEDULE_543, SEED_003


@pytest.mark.parametrize("prompt_set", sorted(PROBE_SETS))
@pytest.mark.parametrize("c", sorted(SEED_003))
def test_t04_fixed_k5_reproduces_003_table_within_3_percent(prompt_set, c):
    figures = wave(EngineConfig(), PROBE_SETS[prompt_set], c)
    stream, aggregate = SEED_003[c]
    assert figures.decode_tokens == 255 * c
    assert figures.mean_stream_decode_tok_s == pytest.approx(stream, rel=0.03)
    assert figures.wall_aggregate_tok_s == pytest.approx(aggregate, rel=0.03)


def test_t05_543_schedule_keeps_c1_and_raises_aggregate_at_c4_to_c6():
    prompts = PROBE_SETS["status"]
    fixed, scheduled = EngineConfig(), EngineConfig(k_schedule=SCHEDULE_543)
    assert wave(scheduled, prompts, 1) == wave(fixed, prompts, 1)
    for c in (4, 5, 6):
        assert wave(scheduled, prompts, c).wall_aggregate_tok_s > 1.03 * wave(fixed, prompts, c).wall_aggregate_tok_s


def test_t07_batch_budgets_regress_as_measured():
    probe = PROBE_SETS["status"][0]
    best, big, odd = (EngineConfig(max_num_batched_tokens=b) for b in (8192, 16384, 8216))
    assert c1_rate(big, probe) < 0.97 * c1_rate(best, probe)  # 16384: single-stream regression
    for prompt in (COUNT_PROMPT, CODE_PROMPT, JSON_PROMPT):  # 8216: count, code and structured JSON regress
        assert c1_rate(odd, prompt) < 0.98 * c1_rate(best, prompt)


def test_budget_factor_against_the_measured_best():
    assert timing.budget_factor(8192) == 1.0
    assert timing.budget_factor(16384) == pytest.approx(1.06)
    assert timing.budget_factor(8216) == pytest.approx(1.04 + 0.06 * math.log2(8216 / 8192))
    assert timing.budget_factor(4096) == 1.0


def test_t03_breakable_graphs_slow_decode_and_time_scale_never_does():
    prompt = PROBE_SETS["status"][0]
    assert c1_rate(EngineConfig(breakable_cudagraph=True), prompt) < 0.9 * c1_rate(EngineConfig(), prompt)
    fast = EngineConfig(time_scale=0.01)
    assert fast.decode_s(4, 4) == EngineConfig().decode_s(4, 4)


def test_t09_cold_bind_takes_the_seed_minutes_scaled_by_time_scale():
    assert EngineConfig(time_scale=0.01).cold_bind_s == pytest.approx(timing.COLD_BIND_S * 0.01)
    assert 8 * 60 <= timing.COLD_BIND_S <= 15 * 60


def test_ttft_grows_with_prompt_length():
    short = wave(EngineConfig(), ["Status?"], 1, 16).ttft_s_median
    long = wave(EngineConfig(), ["Status? " + "more context here " * 400], 1, 16).ttft_s_median
    assert long > short + 0.2


def test_k_schedule_validation():
    assert timing.check_k_schedule([[1, 1, 5], [2, 4, 4], [5, 6, 3]], 5) == SCHEDULE_543
    for bad in ([[1, 1, 7]], [[1, 3, 5], [3, 4, 4]], [[0, 1, 5]], "5/4/3", [[1, 2]]):
        with pytest.raises(ValueError):
            timing.check_k_schedule(bad, 5)
