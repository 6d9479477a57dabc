"""Request classes and their draft acceptance against the seeds' per-class speeds: pure, exact, fast."""

from __future__ import annotations

import pytest
from helpers.twin_engine_cases import PROBE_SETS, c1_rate, wave
from lanebook.twin import workloads
from lanebook.twin.engine_core import EngineConfig
from lanebook.twin.facts import CODE_PROMPT, COUNT_PROMPT, JSON_PROMPT, SCHEDULE_543
from lanebook.twin.timing import decode_step_s


def test_t06_workload_classes_land_in_the_seed_bands_at_c1():
    config = EngineConfig(k_schedule=SCHEDULE_543)
    assert c1_rate(config, COUNT_PROMPT) == pytest.approx(94, rel=0.03)
    for prompt in (CODE_PROMPT, JSON_PROMPT):
        assert 47 <= c1_rate(config, prompt) <= 70
    assert workloads.classify("Find it", has_tools=True).name == "tool"
    assert workloads.classify("", after_tool_result=True).name == "agent"
    for name in ("tool", "agent"):  # steady single-stream rate of the classes a prompt alone cannot reach
        assert 47 <= workloads.WORKLOADS[name].mean_tokens_per_step(5) / decode_step_s(1, 5) <= 70
    assert c1_rate(config, "Explain what a prefix cache is.") == pytest.approx(82.8, rel=0.03)


def test_t08_k7_is_no_faster_than_the_drafter_block_of_5():
    prompts = PROBE_SETS["status"]
    k5, k7 = EngineConfig(num_speculative_tokens=5), EngineConfig(num_speculative_tokens=7)
    for c in (1, 4, 6):
        assert wave(k7, prompts, c).mean_stream_decode_tok_s <= wave(k5, prompts, c).mean_stream_decode_tok_s
    assert workloads.WORKLOADS["count"].accepted(7, 0.0) == workloads.DRAFTER_BLOCK_SIZE  # positions 6-7 never accepted


@pytest.mark.parametrize(
    "prompt, kwargs, name",
    [
        ("Count from 1 to 10.", {}, "count"),
        ("Return only JSON: a list.", {}, "json"),
        ("Summarise the plan.", {"json_format": True}, "json"),
        ("Write a bash script.", {}, "code"),
        ("What does json look like?", {}, "json"),
        ("Describe the lane.", {}, "prose"),
        ("Status?", {}, "probe"),
        ("Count the files.", {"after_tool_result": True}, "agent"),
    ],
)
def test_classify_by_prompt_and_request_shape(prompt, kwargs, name):
    assert workloads.classify(prompt, **kwargs).name == name


def test_acceptance_is_cumulative_and_capped_by_k():
    count = workloads.WORKLOADS["count"]
    assert [count.accepted(5, u) for u in (0.0, 0.5, 0.8, 0.95, 0.99)] == [5, 3, 2, 1, 0]
    assert count.accepted(2, 0.0) == 2 and count.accepted(0, 0.0) == 0
    assert count.mean_tokens_per_step(5) == pytest.approx(1 + 0.96 + 0.88 + 0.72 + 0.48 + 0.29)
