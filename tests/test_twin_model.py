"""The twin's behaviour model against the seeds' figures (SPEC section 9, T01-T15): pure, exact, fast."""
from __future__ import annotations

import json

import pytest

from lanebook.params import load_lane
from lanebook.twin import model

SCHEDULE_543 = ((1, 1, 5), (2, 4, 4), (5, 6, 3))  # 000: num_speculative_tokens_per_batch_size
SEED_003 = {1: (82.8, 76.6), 4: (59.1, 211.6), 6: (42.5, 219.2)}  # C: (mean stream, wall aggregate) tok/s
PROBE_SETS = {
    "status": [f"Probe {i}: report the lane status in a few words." for i in range(6)],
    "weather": [f"Request number {i} from the harness; say something about the weather of the day." for i in range(6)],
}


def wave(config: model.EngineConfig, prompts: list[str], c: int, max_tokens: int = 256) -> model.WaveFigures:
    return model.simulate_wave(config, prompts[:c], max_tokens)


def c1_rate(config: model.EngineConfig, prompt: str) -> float:
    return wave(config, [prompt], 1).mean_stream_decode_tok_s


# --- T01, T02, T15: KV sizing ---------------------------------------------------------------------
def test_t01_080_at_1m_fails_with_the_seed_figures_and_vllm_text():
    budget = model.kv_budget(0.80, 1_048_576, block_size=256)
    assert not budget.fits
    assert f"{budget.available_gib:.2f}" == "7.16" and f"{budget.needed_gib:.2f}" == "7.54"
    assert budget.estimated_max_len == 953_088
    assert budget.error_message() == (
        "To serve at least one request with the model's max seq len (1048576), (7.54 GiB KV cache is needed, "
        "which is larger than the available KV cache memory (7.16 GiB). Based on the available memory, the "
        "estimated maximum model length is 953088. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine.")


def test_t02_085_boots_with_kv_cache_in_the_lane_band():
    budget = model.kv_budget(0.85, 1_048_576)
    assert budget.fits
    low, high = load_lane("twin").gates.kv_cache_tokens
    assert low <= budget.kv_tokens <= high
    assert budget.log_lines() == [
        "Available KV cache memory: 13.29 GiB",
        "GPU KV cache size: 2,493,464 tokens",
        "Maximum concurrency for 1,048,576 tokens per request: 2.38x",
    ]


def test_kv_fits_shorter_context_at_080_and_sticky_memory_breaks_085():
    assert model.kv_budget(0.80, 900_000).fits
    assert not model.kv_budget(0.85, 1_048_576, sticky_gib=model.STICKY_UMA_DEFAULT_GIB).fits  # T15
    assert model.startup_memory_error(0.85) is None
    assert "Free memory on device" in model.startup_memory_error(0.85, sticky_gib=30.0)


# --- T04, T05, T06, T07, T08, T03: decode -----------------------------------------------------------
@pytest.mark.parametrize("prompt_set", sorted(PROBE_SETS))
@pytest.mark.parametrize("c", sorted(SEED_003))
def test_t04_fixed_k5_reproduces_003_table_within_3_percent(prompt_set, c):
    figures = wave(model.EngineConfig(), PROBE_SETS[prompt_set], c)
    stream, aggregate = SEED_003[c]
    assert figures.decode_tokens == 255 * c
    assert figures.mean_stream_decode_tok_s == pytest.approx(stream, rel=0.03)
    assert figures.wall_aggregate_tok_s == pytest.approx(aggregate, rel=0.03)


def test_t05_543_schedule_keeps_c1_and_raises_aggregate_at_c4_to_c6():
    prompts = PROBE_SETS["status"]
    fixed, scheduled = model.EngineConfig(), model.EngineConfig(k_schedule=SCHEDULE_543)
    assert wave(scheduled, prompts, 1) == wave(fixed, prompts, 1)
    for c in (4, 5, 6):
        assert wave(scheduled, prompts, c).wall_aggregate_tok_s > 1.03 * wave(fixed, prompts, c).wall_aggregate_tok_s


def test_t06_workload_classes_land_in_the_seed_bands_at_c1():
    config = model.EngineConfig(k_schedule=SCHEDULE_543)
    assert c1_rate(config, "Count from 1 to 400, one number per line, nothing else.") == pytest.approx(94, rel=0.03)
    for prompt in ("Write a Python function that parses ISO 8601 durations, with tests.",
                   "Return only JSON: an array of 12 city objects."):
        assert 47 <= c1_rate(config, prompt) <= 70
    assert model.classify("Find it", has_tools=True).name == "tool"
    assert model.classify("", after_tool_result=True).name == "agent"
    for name in ("tool", "agent"):  # steady single-stream rate of the classes a prompt alone cannot reach
        assert 47 <= model.WORKLOADS[name].mean_tokens_per_step(5) / model.decode_step_s(1, 5) <= 70
    assert c1_rate(config, "Explain what a prefix cache is.") == pytest.approx(82.8, rel=0.03)


def test_t07_batch_budgets_regress_as_measured():
    count = "Count from 1 to 400, one number per line, nothing else."
    code = "Write a Python function that parses ISO 8601 durations, with tests."
    json_prompt = "Return only JSON: an array of 12 city objects."
    probe = PROBE_SETS["status"][0]
    best, big, odd = (model.EngineConfig(max_num_batched_tokens=b) for b in (8192, 16384, 8216))
    assert c1_rate(big, probe) < 0.97 * c1_rate(best, probe)  # 16384: single-stream regression
    for prompt in (count, code, json_prompt):  # 8216: count, code and structured JSON regress
        assert c1_rate(odd, prompt) < 0.98 * c1_rate(best, prompt)


def test_t08_k7_is_no_faster_than_the_drafter_block_of_5():
    prompts = PROBE_SETS["status"]
    k5, k7 = model.EngineConfig(num_speculative_tokens=5), model.EngineConfig(num_speculative_tokens=7)
    for c in (1, 4, 6):
        assert wave(k7, prompts, c).mean_stream_decode_tok_s <= wave(k5, prompts, c).mean_stream_decode_tok_s
    assert model.WORKLOADS["count"].accepted(7, 0.0) == model.DRAFTER_BLOCK_SIZE  # positions 6-7 never accepted


def test_t03_breakable_graphs_slow_decode_and_time_scale_never_does():
    prompt = PROBE_SETS["status"][0]
    assert c1_rate(model.EngineConfig(breakable_cudagraph=True), prompt) < 0.9 * c1_rate(model.EngineConfig(), prompt)
    fast = model.EngineConfig(time_scale=0.01)
    assert fast.decode_s(4, 4) == model.EngineConfig().decode_s(4, 4)
    assert fast.cold_bind_s == pytest.approx(model.COLD_BIND_S * 0.01)
    assert 8 * 60 <= model.COLD_BIND_S <= 15 * 60


def test_ttft_grows_with_prompt_length():
    short = wave(model.EngineConfig(), ["Status?"], 1, 16).ttft_s_median
    long = wave(model.EngineConfig(), ["Status? " + "more context here " * 400], 1, 16).ttft_s_median
    assert long > short + 0.2


# --- Scheduler: slots, JIT (T10), prefix cache (T13) ------------------------------------------------
def make_seq(i: int, text: str, max_tokens: int = 32, config: model.EngineConfig = model.EngineConfig()):
    messages = [{"role": "user", "content": text}]
    reply = model.plan_reply(messages, max_tokens=max_tokens, thinking=False)
    return model.sequence_for(f"s{i}", messages, reply, config)


def test_max_num_seqs_caps_running_and_the_rest_wait():
    core = model.EngineCore(model.EngineConfig(max_num_seqs=2))
    for i in range(5):
        core.add(make_seq(i, f"Probe {i}"))
    core.step()
    assert (len(core.running), len(core.waiting)) == (2, 3)


def test_t10_first_use_of_a_shape_pays_jit_once():
    config = model.EngineConfig(time_scale=0.01)
    core = model.EngineCore(config)
    first = model.run_virtual(core, [(0.0, make_seq(i, f"Probe {i}")) for i in range(4)])
    second = model.run_virtual(core, [(0.0, make_seq(i + 4, f"Probe {i + 4}")) for i in range(4)])
    jit = config.jit_delay_s
    assert max(t.t_last for t in first.values()) > max(t.t_last for t in second.values()) + 0.9 * jit
    assert core.stats.jit_events >= 1
    warmed = model.EngineCore(config)
    warmed.warm_shapes |= warmed.reachable_shapes()
    model.run_virtual(warmed, [(0.0, make_seq(i, f"Probe {i}")) for i in range(4)])
    assert warmed.stats.jit_events == 0


@pytest.mark.parametrize("evict, third_hits", [(False, True), (True, False)])
def test_t13_a_b_a_prefix_cache(evict, third_hits):
    config = model.EngineConfig(block_size=16, prefix_evict=evict)
    core = model.EngineCore(config)
    a_text = "Unique prefix A " + "alpha beta gamma " * 40
    b_text = "Unrelated prefix B " + "delta epsilon zeta " * 40
    hits = []
    for i, text in enumerate((a_text, a_text, b_text, a_text)):
        before = core.stats.prefix_hits
        model.run_virtual(core, [(0.0, make_seq(i, text, 4, config))])
        hits.append(core.stats.prefix_hits - before)
    assert hits[0] == 0 and hits[1] > 0 and hits[2] == 0
    assert (hits[3] > 0) is third_hits


# --- Replies: content (exact, count), thinking (T11), tools (T12) ----------------------------------
def test_exact_reply_count_and_length():
    exact = model.plan_reply([{"role": "user", "content": "Reply exactly PROMOTE_0731_OK."}], max_tokens=32, thinking=False)
    assert ("".join(exact.content), exact.finish_reason) == ("PROMOTE_0731_OK", "stop")
    count = model.plan_reply([{"role": "user", "content": "Count from 1 to 12."}], max_tokens=256, thinking=False)
    assert ("".join(count.content), count.finish_reason) == ("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12", "stop")
    prose = model.plan_reply([{"role": "user", "content": "Explain the lane."}], max_tokens=100, thinking=False)
    assert (prose.tokens, prose.finish_reason) == (100, "length")
    again = model.plan_reply([{"role": "user", "content": "Explain the lane."}], max_tokens=100, thinking=False)
    assert again == prose  # temperature 0: deterministic


@pytest.mark.parametrize("kwargs, default, on", [
    ({"thinking": "false"}, None, True),  # 000 pitfall 10: the string "false" is truthy
    ({"thinking": False}, None, False),
    ({"thinking": False}, {"thinking": True, "reasoning_effort": "low"}, False),
    (None, {"thinking": True, "reasoning_effort": "low"}, True),
    ({"enable_thinking": "no"}, None, True),
    ({"thinking": True, "reasoning_effort": "none"}, None, False),
])
def test_t11_thinking_follows_the_deepseek_v4_template(kwargs, default, on):
    thinking, effort = model.thinking_enabled(kwargs, default)
    assert thinking is on
    reply = model.plan_reply([{"role": "user", "content": "Reply exactly ROUTE_OK."}], max_tokens=None,
                             thinking=thinking, reasoning_effort=effort)
    assert bool(reply.reasoning) is on and "".join(reply.content) == "ROUTE_OK"


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def test_t12_tool_smoke_parses_the_city():
    reply = model.plan_reply([{"role": "user", "content": "What is the weather in Pensacola, FL right now?"}],
                             max_tokens=None, thinking=False, tools=[WEATHER], tool_choice="auto")
    assert reply.tool_call.name == "get_weather"
    assert json.loads(reply.tool_call.arguments) == {"city": "Pensacola, FL"}
    assert "".join(reply.content) == reply.tool_call.arguments and reply.finish_reason == "tool_calls"


def test_tools_are_not_called_for_an_exact_reply_or_with_tool_choice_none():
    route = model.plan_reply([{"role": "user", "content": "Reply exactly ROUTE_OK."}], max_tokens=None,
                             thinking=False, tools=[WEATHER])
    assert route.tool_call is None and "".join(route.content) == "ROUTE_OK"
    assert model.plan_tool_call([WEATHER], "none", "What is the weather in Pensacola, FL?") is None


def test_k_schedule_validation():
    assert model.check_k_schedule([[1, 1, 5], [2, 4, 4], [5, 6, 3]], 5) == SCHEDULE_543
    for bad in ([[1, 1, 7]], [[1, 3, 5], [3, 4, 4]], [[0, 1, 5]], "5/4/3", [[1, 2]]):
        with pytest.raises(ValueError):
            model.check_k_schedule(bad, 5)
    config = model.EngineConfig(k_schedule=SCHEDULE_543)
    assert [config.k_for_batch(b) for b in range(1, 8)] == [5, 4, 4, 4, 3, 3, 5]
