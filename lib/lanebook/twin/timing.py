"""How long an engine step takes, and the batch-size verify schedule that shapes it.

Decode speed under concurrency comes from one shared step: every running request verifies its
drafts in the same forward pass, so the step grows with the batch and each stream slows down. The
constants below are fitted to the canary's (seed 003) streaming table and shaped by the recipe's
(seed 000) measured regressions; each names what it reproduces (facts T03, T04, T05, T07, T09 and
T10 in lanebook.twin.facts). Twin figures, never a real lane's.
"""

from __future__ import annotations

import math
from typing import Any

# One decode step verifies K+1 tokens for each of B requests: n = B*(K+1). Its time is a soft
# roofline: memory-bound STEP_BASE_S at small n, compute-bound STEP_PER_TOKEN_S*n at large n,
# blended by a p-norm. The three constants are fitted (waves.simulate_wave, fixed K=5, probe class,
# 256-token streams) to the canary's (003) mean per-stream decode rates: 82.8 tok/s with one stream
# (C1), 59.1 with four (C4), 42.5 with six (C6) (fact T04). The roofline shape is a twin assumption;
# it is what makes the recipe's (000) 5/4/3 verify schedule (K=5 for one request, 4 for two to four,
# 3 for five or six) raise aggregate throughput at C4-C6 while leaving C1 as it was (fact T05): fewer
# verify positions per request buy more than the tail acceptance they give up.
STEP_BASE_S = 0.045074
STEP_PER_TOKEN_S = 0.0023723
STEP_ROOFLINE_P = 3.5320
# Prefill: all requests admitted at one step boundary prefill together. Cost grows with their number
# (superlinear: they contend for the same step) and with their tokens. Fitted to the canary's (003)
# wall aggregates, 76.6 tok/s at C1, 211.6 at C4, 219.2 at C6 (255 decode tokens per request);
# PREFILL_PER_TOKEN_S is a twin assumption (about 4,000 prompt tokens/s), so TTFT also grows with
# prompt length.
PREFILL_BASE_S = 0.23618
PREFILL_BATCH_S = 0.0040963
PREFILL_BATCH_EXP = 2.8389
PREFILL_PER_TOKEN_S = 0.00025
# Twin assumption: the breakable CUDA-graph path costs this much per decode step. The recipe (000,
# pitfall 1) says only that the Anemll image auto-enables this slow path unless
# VLLM_USE_BREAKABLE_CUDAGRAPH=0 reaches the container (fact T03); its 94.3-94.7 tok/s count stream
# came "after the graph fix".
BREAKABLE_STEP_FACTOR = 1.25
# MAX_NUM_BATCHED_TOKENS: 8192 is the recipe's measured best (000). Twin assumptions for its measured
# regressions (fact T07): 16384 slows every decode step (pitfall 2: a single-stream regression), and a
# budget that is not a whole number of 256-token blocks (8216, pitfall 3: count, code and structured
# JSON regressed) slows them too.
BATCH_BUDGET_BEST = 8192
BUDGET_PER_DOUBLING_FACTOR = 0.06
BUDGET_MISALIGNED_FACTOR = 0.04
SCHEDULER_BLOCK_TOKENS = 256
# Twin assumptions for the two latency events; both scale with time_scale, decode never does.
COLD_BIND_S = 9 * 60.0  # the recipe (000): cold bind is often 8-15 minutes (fact T09)
# The recipe (000, pitfall 12): the first use of a request shape no warmup touched compiles kernels
# mid-inference, a latency event that a bounded warmup removes (fact T10).
JIT_DELAY_S = 30.0


def budget_factor(max_num_batched_tokens: int) -> float:
    """Decode-step slowdown of a batch-token budget against the measured best, 8192."""
    factor = 1.0
    if max_num_batched_tokens > BATCH_BUDGET_BEST:
        factor += BUDGET_PER_DOUBLING_FACTOR * math.log2(max_num_batched_tokens / BATCH_BUDGET_BEST)
    if max_num_batched_tokens % SCHEDULER_BLOCK_TOKENS:
        factor += BUDGET_MISALIGNED_FACTOR
    return factor


def decode_step_s(batch: int, k: int) -> float:
    """Seconds for one decode step of ``batch`` requests verifying ``k`` draft positions each (fast path)."""
    n = batch * (k + 1)
    return (STEP_BASE_S**STEP_ROOFLINE_P + (STEP_PER_TOKEN_S * n) ** STEP_ROOFLINE_P) ** (1.0 / STEP_ROOFLINE_P)


def prefill_step_s(requests: int, tokens: int) -> float:
    """Seconds a step spends prefilling ``tokens`` prompt tokens of ``requests`` requests."""
    return PREFILL_BASE_S + PREFILL_BATCH_S * requests**PREFILL_BATCH_EXP + PREFILL_PER_TOKEN_S * tokens


def check_k_schedule(schedule: Any, num_speculative_tokens: int) -> tuple[tuple[int, int, int], ...]:
    """Validate num_speculative_tokens_per_batch_size as vLLM does: [[start_bs, end_bs, K], ...]."""
    if not isinstance(schedule, list) or not schedule:
        raise ValueError("num_speculative_tokens_per_batch_size must be a non-empty list of [start_bs, end_bs, K]")
    rows = []
    for row in schedule:
        if (
            not isinstance(row, list)
            or len(row) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in row)
        ):
            raise ValueError(
                f"num_speculative_tokens_per_batch_size entry {row!r} must be [start_bs, end_bs, K] integers"
            )
        start, end, k = row
        if start < 1 or end < start:
            raise ValueError(f"num_speculative_tokens_per_batch_size entry {row!r}: need 1 <= start_bs <= end_bs")
        if not 0 <= k <= num_speculative_tokens:
            raise ValueError(
                f"num_speculative_tokens_per_batch_size entry {row!r}: K must be between 0 and "
                f"num_speculative_tokens ({num_speculative_tokens})"
            )
        rows.append((start, end, k))
    rows.sort()
    for (_, end, _), (start, _, _) in zip(rows, rows[1:]):
        if start <= end:
            raise ValueError("num_speculative_tokens_per_batch_size ranges overlap")
    return tuple(rows)
