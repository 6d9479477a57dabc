"""KV-cache sizing at boot: what fits for a memory setting and context length, and vLLM's refusals.

The fit is a pair of straight lines through the seeds' own figures (facts T01, T02 and T15 in
lanebook.twin.facts): the canary write-up's failed boot at GPU_MEMORY_UTILIZATION 0.80 (7.16 GiB of
KV available, 7.54 GiB needed for a 1,048,576-token context, 953,088 tokens estimated to fit) and
the recipe's good boot at 0.85 (a KV cache of 2,493,464 tokens). Twin figures, never a real lane's.
"""

from __future__ import annotations

import math

MODEL_LEN_1M = 1_048_576

# needed(len) = KV_FIXED_GIB + KV_PER_TOKEN_GIB * len, the line through the canary's two failure
# figures: 7.54 GiB needed at 1,048,576 tokens and 7.16 GiB available being enough for 953,088.
KV_NEEDED_AT_1M_GIB = 7.54  # canary write-up (003): "7.54 GiB KV cache is needed"
KV_AVAILABLE_AT_080_GIB = 7.16  # canary write-up (003): KV available at GPU_MEMORY_UTILIZATION=0.80
KV_ESTIMATED_MAX_LEN_AT_080 = 953_088  # canary write-up (003): "estimated maximum model length is 953088"
# The field notes' example of vLLM's boot line ("GPU KV cache size: 2,493,464 tokens"), taken as the
# twin's figure at 0.85: inside the recipe's (000) expected band of 2.2-2.5M tokens.
KV_TOKENS_AT_085 = 2_493_464
KV_PER_TOKEN_GIB = (KV_NEEDED_AT_1M_GIB - KV_AVAILABLE_AT_080_GIB) / (MODEL_LEN_1M - KV_ESTIMATED_MAX_LEN_AT_080)
KV_FIXED_GIB = KV_NEEDED_AT_1M_GIB - KV_PER_TOKEN_GIB * MODEL_LEN_1M
# available(u) = u * GPU_MEMORY_GIB - NON_KV_USED_GIB through (0.80, 7.16 GiB) and the 0.85 point
# whose KV holds 2,493,464 tokens: about 122.6 GiB of GPU memory and 90.9 GiB for weights and graphs.
_AVAILABLE_AT_085_GIB = KV_FIXED_GIB + KV_PER_TOKEN_GIB * KV_TOKENS_AT_085
GPU_MEMORY_GIB = (_AVAILABLE_AT_085_GIB - KV_AVAILABLE_AT_080_GIB) / (0.85 - 0.80)
NON_KV_USED_GIB = 0.80 * GPU_MEMORY_GIB - KV_AVAILABLE_AT_080_GIB
# The recipe (000, pitfall 4): after a stop, free memory can stay "~10-16 Gi" short with no containers
# running, until the page cache is dropped or the node reboots (fact T15, fault sticky-uma).
STICKY_UMA_DEFAULT_GIB = 12.0


class KvBudget:
    """What vLLM's KV sizing reports at boot for one memory setting and context length.

    A plain class, not a dataclass: the node's memory model (lanebook.twin.standins.machine, imported by every stand-in
    process) takes the sticky-UMA figure from this module, which stays cheap to import."""

    __slots__ = (
        "gpu_memory_utilization",
        "max_model_len",
        "available_gib",
        "needed_gib",
        "kv_tokens",
        "estimated_max_len",
    )

    def __init__(
        self,
        *,
        gpu_memory_utilization: float,
        max_model_len: int,
        available_gib: float,
        needed_gib: float,
        kv_tokens: int,
        estimated_max_len: int,
    ):
        self.gpu_memory_utilization = gpu_memory_utilization
        self.max_model_len = max_model_len
        self.available_gib = available_gib
        self.needed_gib = needed_gib
        self.kv_tokens = kv_tokens
        self.estimated_max_len = estimated_max_len

    @property
    def fits(self) -> bool:
        return self.available_gib > 0 and self.needed_gib <= self.available_gib

    @property
    def max_concurrency(self) -> float:
        return self.kv_tokens / self.max_model_len

    def log_lines(self) -> list[str]:
        """The lines operators grep after a good boot, with vLLM's thousands separators in the figures."""
        return [
            f"Available KV cache memory: {self.available_gib:.2f} GiB",
            f"GPU KV cache size: {self.kv_tokens:,} tokens",
            f"Maximum concurrency for {self.max_model_len:,} tokens per request: {self.max_concurrency:.2f}x",
        ]

    def error_message(self) -> str:
        """vLLM's ValueError text, in the shape vllm/v1/core/kv_cache_utils.py raises it."""
        if self.available_gib <= 0:
            return (
                "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine."
            )
        return (
            f"To serve at least one request with the model's max seq len ({self.max_model_len}), "
            f"({self.needed_gib:.2f} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({self.available_gib:.2f} GiB). Based on the available memory, the estimated maximum "
            f"model length is {self.estimated_max_len}. Try increasing `gpu_memory_utilization` or "
            f"decreasing `max_model_len` when initializing the engine."
        )


def kv_budget(
    gpu_memory_utilization: float, max_model_len: int, block_size: int = 256, sticky_gib: float = 0.0
) -> KvBudget:
    """KV sizing for a memory setting; ``sticky_gib`` is memory the OS still holds (fault sticky-uma)."""
    available = gpu_memory_utilization * GPU_MEMORY_GIB - NON_KV_USED_GIB - sticky_gib
    tokens = max(0.0, (available - KV_FIXED_GIB) / KV_PER_TOKEN_GIB)
    # vLLM's estimate is a whole number of blocks; the epsilon keeps 953088.0 from flooring a block down.
    estimated = int(math.floor(tokens / block_size + 1e-6)) * block_size
    return KvBudget(
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len,
        available_gib=available,
        needed_gib=KV_FIXED_GIB + KV_PER_TOKEN_GIB * max_model_len,
        kv_tokens=int(round(tokens)),
        estimated_max_len=estimated,
    )


def startup_memory_error(gpu_memory_utilization: float, sticky_gib: float = 0.0) -> str | None:
    """vLLM's refusal when free memory at start is below what the utilization asks for.

    Memory still held after a stop (sticky UMA, fact T15) is what makes a setting that booted before fail.
    """
    free = GPU_MEMORY_GIB - sticky_gib
    wanted = gpu_memory_utilization * GPU_MEMORY_GIB
    if free >= wanted:
        return None
    return (
        f"Free memory on device ({free:.2f}/{GPU_MEMORY_GIB:.2f} GiB) on startup is less than desired GPU memory "
        f"utilization ({gpu_memory_utilization}, {wanted:.2f} GiB). Decrease GPU memory utilization or reduce "
        f"GPU memory used by other processes."
    )
