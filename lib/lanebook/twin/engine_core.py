"""The engine core: vLLM's scheduler loop in miniature, with no clock of its own.

``EngineCore.step`` admits up to max_num_seqs requests, prefills within the batch-token budget and
decodes with speculative drafts, then says how long that step takes. The driver keeps time:
server.py sleeps each step in real time, waves.run_virtual adds it up in virtual time, so the
server inherits exactly the figures the unit tests check.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional
from typing import Sequence as Seq

from lanebook.recipe.speculative import k_for_batch
from lanebook.twin.kv import KV_TOKENS_AT_085, MODEL_LEN_1M
from lanebook.twin.prefix_cache import PrefixCache, block_hashes
from lanebook.twin.replies import Reply, render_prompt
from lanebook.twin.timing import (
    BREAKABLE_STEP_FACTOR,
    COLD_BIND_S,
    JIT_DELAY_S,
    budget_factor,
    decode_step_s,
    prefill_step_s,
)
from lanebook.twin.tokens import pieces, stable_hash
from lanebook.twin.workloads import DRAFTER_BLOCK_SIZE, MISMATCHED_DRAFTER, RequestClass


@dataclass(frozen=True)
class EngineConfig:
    """The serve settings the behaviour depends on (from `vllm serve` flags and the container env)."""

    max_model_len: int = MODEL_LEN_1M
    max_num_seqs: int = 6
    max_num_batched_tokens: int = 8192
    long_prefill_token_threshold: int = 1024
    num_speculative_tokens: int = 5
    k_schedule: Optional[tuple[tuple[int, int, int], ...]] = None  # num_speculative_tokens_per_batch_size
    breakable_cudagraph: bool = False
    block_size: int = 256
    enable_prefix_caching: bool = True
    prefix_evict: bool = False  # fault prefix-evict
    drafter_mismatch: bool = False  # fault drafter-mismatch
    kv_tokens: int = KV_TOKENS_AT_085
    time_scale: float = 1.0

    def k_for_batch(self, batch: int) -> int:
        """Verify positions for a batch size: the schedule's inclusive range, else the fixed K."""
        return k_for_batch(self.k_schedule, self.num_speculative_tokens, batch)

    def decode_s(self, batch: int, k: int) -> float:
        """One decode step's seconds with this lane's graph path (breakable is slow) and batch budget."""
        slow = BREAKABLE_STEP_FACTOR if self.breakable_cudagraph else 1.0
        return decode_step_s(batch, k) * slow * budget_factor(self.max_num_batched_tokens)

    @property
    def jit_delay_s(self) -> float:
        return JIT_DELAY_S * self.time_scale

    @property
    def cold_bind_s(self) -> float:
        return COLD_BIND_S * self.time_scale


# Acceptance draws walk the unit interval by the golden ratio: low-discrepancy, so even a short
# stream accepts close to its class's mean, and the same request always draws the same sequence.
GOLDEN = (math.sqrt(5) - 1) / 2


def batch_bucket(batch: int) -> int:
    """The CUDA-graph batch bucket a batch size runs in (powers of two)."""
    return 1 << max(0, batch - 1).bit_length()


@dataclass(eq=False)
class Sequence:
    """One request inside the engine: prompt tokens in, ``max_new`` tokens out."""

    seq_id: str
    prompt_tokens: int
    max_new: int
    workload: RequestClass
    hashes: tuple[int, ...] = ()
    phase: float = 0.0  # start of the request's low-discrepancy acceptance draws (seeded from the request)
    owner: Any = None  # whatever the driver attaches (the server's stream handle)
    cached_tokens: int = 0
    prefilled: int = 0
    produced: int = 0
    steps: int = 0
    jit_s: float = 0.0

    @property
    def prefill_done(self) -> bool:
        return self.prefilled >= self.prompt_tokens

    @property
    def finished(self) -> bool:
        return self.produced >= self.max_new


@dataclass
class EngineStats:
    """Counters /metrics exposes (vLLM names in server.py)."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=lambda: [0] * DRAFTER_BLOCK_SIZE)
    steps: int = 0
    jit_events: int = 0


@dataclass(frozen=True)
class Step:
    """One engine step: how long it takes and the tokens each sequence has at its end."""

    duration_s: float
    emitted: tuple[tuple[Sequence, int], ...]
    jit_s: float
    k: int
    batch: int


class EngineCore:
    """vLLM's scheduler loop in miniature: admit up to max_num_seqs, prefill in budget, decode with drafts.

    Time is not kept here; the driver sleeps each Step's duration (virtual or real) and then hands the
    emitted tokens out, so concurrency effects come from the one shared step, as on the GPU.
    """

    def __init__(self, config: EngineConfig):
        self.config = config
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.stats = EngineStats(accepted_per_pos=[0] * max(DRAFTER_BLOCK_SIZE, config.num_speculative_tokens))
        self.cache = PrefixCache(config.kv_tokens // max(1, config.block_size), config.prefix_evict)
        # Twin assumption: boot-time graph capture covers single-request decode and short prefill only.
        self.warm_shapes: set[tuple] = {("decode", config.k_for_batch(1), 1), ("prefill", False)}

    def reachable_shapes(self) -> set[tuple]:
        """Every shape this configuration can run: what a complete warmup compiles."""
        decode = {
            ("decode", self.config.k_for_batch(b), batch_bucket(b)) for b in range(1, self.config.max_num_seqs + 1)
        }
        return decode | {("prefill", False), ("prefill", True)}

    def is_warm(self, shape: tuple) -> bool:
        """Compiled already: the shape itself, or for decode a larger batch bucket at the same K, which a smaller
        batch runs in padded (as a CUDA graph captured for a larger batch serves a smaller one)."""
        return shape in self.warm_shapes or (
            shape[0] == "decode"
            and any(warm[0] == "decode" and warm[1] == shape[1] and warm[2] >= shape[2] for warm in self.warm_shapes)
        )

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def abort(self, seq: Sequence) -> None:
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting.popleft()
            if self.config.enable_prefix_caching:
                hit_blocks = self.cache.lookup_and_insert(seq.hashes)
                seq.cached_tokens = min(hit_blocks * self.config.block_size, seq.prompt_tokens - 1)
                self.stats.prefix_queries += seq.prompt_tokens
                self.stats.prefix_hits += seq.cached_tokens
            seq.prefilled = seq.cached_tokens
            self.stats.prompt_tokens += seq.prompt_tokens
            self.running.append(seq)

    def step(self) -> Optional[Step]:
        """Plan and account one step; None when there is nothing to do."""
        self._admit()
        if not self.running:
            return None
        cfg = self.config
        decoding = [s for s in self.running if s.prefill_done]
        prefilling = [s for s in self.running if not s.prefill_done]
        k = cfg.k_for_batch(len(decoding)) if decoding else 0
        budget = cfg.max_num_batched_tokens - len(decoding) * (k + 1)
        chunks: list[tuple[Sequence, int]] = []
        for seq in prefilling:
            chunk = seq.prompt_tokens - seq.prefilled
            if cfg.long_prefill_token_threshold > 0:
                chunk = min(chunk, cfg.long_prefill_token_threshold)
            chunk = min(chunk, budget)
            if chunk <= 0:
                break
            chunks.append((seq, chunk))
            budget -= chunk
        shapes = set()
        duration = 0.0
        if decoding:
            shapes.add(("decode", k, batch_bucket(len(decoding))))
            duration += cfg.decode_s(len(decoding), k)
        if chunks:
            long_prefill = any(s.prompt_tokens - s.cached_tokens > cfg.long_prefill_token_threshold for s, _ in chunks)
            shapes.add(("prefill", long_prefill))
            duration += prefill_step_s(len(chunks), sum(c for _, c in chunks))
        # A shape no warmup has run yet compiles kernels now, once: the first-use JIT stall (fact T10).
        cold = {shape for shape in shapes if not self.is_warm(shape)}
        jit = cfg.jit_delay_s * len(cold)
        self.warm_shapes |= cold
        self.stats.jit_events += len(cold)
        emitted: list[tuple[Sequence, int]] = []
        for seq in decoding:
            u = (seq.phase + seq.steps * GOLDEN) % 1.0
            accepted = (MISMATCHED_DRAFTER if cfg.drafter_mismatch else seq.workload).accepted(k, u)
            seq.steps += 1
            if k:
                self.stats.drafts += 1
                self.stats.draft_tokens += k
                self.stats.accepted_tokens += accepted
                for pos in range(accepted):
                    self.stats.accepted_per_pos[pos] += 1
            emitted.append((seq, min(1 + accepted, seq.max_new - seq.produced)))
        for seq, chunk in chunks:
            seq.prefilled += chunk
            if seq.prefill_done:
                emitted.append((seq, 1))  # the first token is sampled at the end of prefill
        for seq, n in emitted:
            seq.produced += n
            self.stats.generation_tokens += n
        for seq in decoding + [s for s, _ in chunks]:
            seq.jit_s += jit
        self.running = [s for s in self.running if not s.finished]
        self.stats.steps += 1
        return Step(duration + jit, tuple(emitted), jit, k, len(decoding))


def request_phase(*parts: str) -> float:
    """Where a request's acceptance draws start in [0, 1), seeded from the request so runs repeat."""
    return stable_hash("phase", *parts) / 2.0**64


def sequence_for(
    seq_id: str,
    messages: Seq[Mapping[str, Any]],
    reply: Reply,
    config: EngineConfig,
    tools: Optional[Seq[Any]] = None,
    thinking: bool = False,
) -> Sequence:
    """The engine's view of a planned request (used by the server and by simulate_wave alike)."""
    prompt_pieces = pieces(render_prompt(messages, tools, thinking))
    return Sequence(
        seq_id=seq_id,
        prompt_tokens=max(1, len(prompt_pieces)),
        max_new=max(1, reply.tokens),
        workload=reply.workload,
        hashes=block_hashes(prompt_pieces, config.block_size),
        phase=request_phase(render_prompt(messages, tools, thinking)),
    )
