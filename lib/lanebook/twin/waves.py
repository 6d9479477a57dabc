"""Waves in virtual time: C requests sent at once, measured as the seeds' streaming tables were.

A wave is C streaming chat requests with unique prompts at temperature 0. Per request, t_first and
t_last are when its first and last tokens arrive; its decode rate is (completion tokens - 1) /
(t_last - t_first). A wave reports the mean of those rates, the wall aggregate (all decode tokens
over the time from the first request sent to the last token) and the median time to first token:
the definitions lanebook speed uses, and those of the canary's table (seed 003: C1 82.8 tok/s per
stream, C4 59.1 with 211.6 aggregate, C6 42.5 with 219.2; fact T04 in lanebook.twin.facts).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable
from typing import Sequence as Seq

from lanebook.twin.engine_core import EngineConfig, EngineCore, Sequence, sequence_for
from lanebook.twin.replies import plan_reply


@dataclass(frozen=True)
class Timing:
    """One request of a wave: when it was sent, got its first and last tokens (seconds from the wave start)."""

    t_sent: float
    t_first: float
    t_last: float
    completion_tokens: int

    @property
    def decode_tokens(self) -> int:
        return self.completion_tokens - 1

    @property
    def stream_decode_tok_s(self) -> float:
        return self.decode_tokens / (self.t_last - self.t_first) if self.t_last > self.t_first else 0.0


@dataclass(frozen=True)
class VirtualWaveFigures:
    """The figures of one wave in virtual time (rates in decode tokens per second, times in seconds); lanebook
    speed's WaveFigures are a real wave's, as its run record keeps them."""

    concurrency: int
    decode_tokens: int
    wall_s: float
    mean_stream_decode_tok_s: float
    wall_aggregate_tok_s: float
    ttft_s_median: float


def wave_figures(timings: Seq[Timing]) -> VirtualWaveFigures:
    """The figures of one wave, as lanebook speed computes them from a real lane's streams."""
    start = min(t.t_sent for t in timings)
    wall = max(t.t_last for t in timings) - start
    decode = sum(t.decode_tokens for t in timings)
    return VirtualWaveFigures(
        concurrency=len(timings),
        decode_tokens=decode,
        wall_s=wall,
        mean_stream_decode_tok_s=statistics.fmean(t.stream_decode_tok_s for t in timings),
        wall_aggregate_tok_s=decode / wall,
        ttft_s_median=statistics.median(t.t_first - t.t_sent for t in timings),
    )


def run_virtual(core: EngineCore, arrivals: Iterable[tuple[float, Sequence]]) -> dict[str, Timing]:
    """Drive the core in virtual time: requests join at step boundaries, as on the server."""
    pending = sorted(arrivals, key=lambda a: a[0])
    sent = {seq.seq_id: t for t, seq in pending}
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    produced: dict[str, int] = {}
    now, i = 0.0, 0
    while i < len(pending) or not core.idle:
        while i < len(pending) and pending[i][0] <= now:
            core.add(pending[i][1])
            i += 1
        step = core.step()
        if step is None:
            now = pending[i][0]
            continue
        now += step.duration_s
        for seq, n in step.emitted:
            first.setdefault(seq.seq_id, now)
            last[seq.seq_id] = now
            produced[seq.seq_id] = produced.get(seq.seq_id, 0) + n
    return {sid: Timing(sent[sid], first[sid], last[sid], produced[sid]) for sid in sent}


def simulate_wave(
    config: EngineConfig, prompts: Seq[str], max_tokens: int = 256, warmed: bool = True
) -> VirtualWaveFigures:
    """C simultaneous streaming requests (one per prompt), temperature 0, thinking off: the wave's figures.

    ``warmed`` measures a lane after its bounded warmup (every shape compiled), as the seeds' tables were.
    """
    core = EngineCore(config)
    if warmed:
        core.warm_shapes |= core.reachable_shapes()
    arrivals = []
    for i, prompt in enumerate(prompts):
        messages = [{"role": "user", "content": prompt}]
        reply = plan_reply(messages, max_tokens=max_tokens, thinking=False)
        arrivals.append((0.0, sequence_for(f"wave-{i}", messages, reply, config)))
    return wave_figures(list(run_virtual(core, arrivals).values()))
