"""The twin's KV sizing against the seeds' memory figures: pure and exact."""

from __future__ import annotations

from lanebook.lane.params import load_lane
from lanebook.twin import kv


def test_t01_080_at_1m_fails_with_the_seed_figures_and_vllm_text():
    budget = kv.kv_budget(0.80, 1_048_576, block_size=256)
    assert not budget.fits
    assert f"{budget.available_gib:.2f}" == "7.16" and f"{budget.needed_gib:.2f}" == "7.54"
    assert budget.estimated_max_len == 953_088
    assert budget.error_message() == (
        "To serve at least one request with the model's max seq len (1048576), (7.54 GiB KV cache is needed, "
        "which is larger than the available KV cache memory (7.16 GiB). Based on the available memory, the "
        "estimated maximum model length is 953088. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine."
    )


def test_t02_085_boots_with_kv_cache_in_the_lane_band():
    budget = kv.kv_budget(0.85, 1_048_576)
    assert budget.fits
    low, high = load_lane("twin").gates.kv_cache_tokens
    assert low <= budget.kv_tokens <= high
    assert budget.log_lines() == [
        "Available KV cache memory: 13.29 GiB",
        "GPU KV cache size: 2,493,464 tokens",
        "Maximum concurrency for 1,048,576 tokens per request: 2.38x",
    ]


def test_kv_fits_a_shorter_context_at_080():
    assert kv.kv_budget(0.80, 900_000).fits


def test_t15_memory_held_after_a_stop_breaks_085():
    assert not kv.kv_budget(0.85, 1_048_576, sticky_gib=kv.STICKY_UMA_DEFAULT_GIB).fits
    assert kv.startup_memory_error(0.85) is None
    assert "Free memory on device" in kv.startup_memory_error(0.85, sticky_gib=30.0)


def test_no_memory_left_for_the_cache_is_vllms_other_error():
    budget = kv.kv_budget(0.70, 1_048_576)
    assert budget.available_gib <= 0 and not budget.fits
    assert budget.error_message().startswith("No available memory for the cache blocks.")
