"""The speed figures (the project's published definitions) as pure functions of the client's records.

- t_first/t_last: arrivals of the first/last chunk carrying content, reasoning or tool calls
  (the role-only chunk does not open the window).
- completion_tokens from the final usage chunk (a chunk may carry several tokens, so chunks are
  never counted as tokens); without usage it is estimated from the text and marked so.
- decode_tokens = completion_tokens - 1; stream rate = decode_tokens / (t_last - t_first); ttft_s = t_first - t_sent.
- wall_s: first request sent to last response finished; aggregate = sum of decode_tokens / wall_s.
- Every time of a wave is on one clock, and every chunk time comes from one stamp source (kernel
  receive stamps or the client's reads): windows measured two ways would not be comparable.
- Streams whose first content chunk came merged with the next are left out of the stream decode mean
  and TTFT median, and counted (windows()).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable, Optional

from lanebook.speed.records import CONTENT_KINDS, RequestRecord, WaveRecord

CHARS_PER_TOKEN = 4  # the usual English rule of thumb; used only when the server sent no usage


@dataclass(frozen=True)
class RequestFigures:
    t_first: float
    t_last: float
    completion_tokens: int
    decode_tokens: int
    stream_decode_tok_s: float
    ttft_s: float
    tokens_estimated: bool
    first_edge_exact: bool  # the first content chunk's arrival is its own, not shared with the next one


def content_times(record: RequestRecord) -> list[float]:
    """Arrival times of the chunks that carry content, reasoning or tool calls."""
    return [chunk.t for chunk in record.chunks if chunk.kind in CONTENT_KINDS]


def estimate_tokens(record: RequestRecord) -> int:
    """Tokens without a usage chunk: text length / 4, never fewer than the content chunks (each holds >= 1)."""
    return max(len(content_times(record)), round(record.text_chars / CHARS_PER_TOKEN))


# A stream that completed, but whose whole content arrived in one read: no decode rate can be taken from it (a fast
# server whose API process flushes late; never a lane at the recipe's tens of tokens a second)
NO_DECODE_WINDOW = "no decode window (all content in one read)"


def unmeasurable_reason(record: RequestRecord) -> Optional[str]:
    """Why a request yields no stream figures (its error, or no decode window); None when it does."""
    if record.error:
        return record.error
    times = content_times(record)
    if not times:
        return "no content in the stream"
    if len(times) < 2 or times[-1] <= times[0]:
        return NO_DECODE_WINDOW
    return None


def first_edge_merged(times: list[float]) -> bool:
    """The first content chunk arrived merged with the next (one stamp for both): its own arrival is unknown."""
    return len(times) > 1 and times[1] <= times[0]


def request_figures(record: RequestRecord) -> RequestFigures:
    """Figures of one measurable request (check unmeasurable_reason first)."""
    times = content_times(record)
    estimated = record.completion_tokens is None
    completion = estimate_tokens(record) if estimated else record.completion_tokens
    decode = completion - 1
    t_first, t_last = times[0], times[-1]
    return RequestFigures(
        t_first=t_first,
        t_last=t_last,
        completion_tokens=completion,
        decode_tokens=decode,
        stream_decode_tok_s=decode / (t_last - t_first),
        ttft_s=t_first - record.t_sent,
        tokens_estimated=estimated,
        first_edge_exact=not first_edge_merged(times),
    )


def stamp_source(records: Iterable[RequestRecord]) -> Optional[str]:
    """The one source that stamped these records' chunks (None when no record read a stream).

    Raises ValueError when they differ: kernel stamps are arrivals, read stamps come late under load,
    so figures over a mix of the two would be neither.
    """
    sources = {r.stamp_source for r in records if r.stamp_source is not None}
    if len(sources) > 1:
        raise ValueError(f"chunk times stamped by different sources in one run: {', '.join(sorted(sources))}")
    return sources.pop() if sources else None


def wall_seconds(records: list[RequestRecord]) -> float:
    """From the first request sent to the last response finished (failed requests included)."""
    start = min(r.t_sent for r in records)
    end = max(r.t_done if r.t_done is not None else r.t_sent for r in records)
    return end - start


@dataclass(frozen=True)
class WaveFigures:
    """One wave's figures; run_json() is one entry of the speed document's "runs" list, key for key."""

    concurrency: int
    trial: int
    requests: int
    ok: int
    errors: int
    error_reasons: dict[str, int]
    decode_tokens: int
    wall_s: float
    mean_stream_decode_tok_s: Optional[float]
    wall_aggregate_tok_s: float
    ttft_s_median: Optional[float]
    acceptance_rate: Optional[float]
    mean_acceptance_length: Optional[float]
    acceptance_per_position: list[float]
    tokens_estimated: bool
    idle_wait_s: Optional[float]
    stamp_source: Optional[str]  # records.STAMP_KERNEL or STAMP_LOOP
    edges_exact: int = 0  # measured streams whose first content chunk carries its own arrival
    edges_merged: int = 0  # measured streams whose first content chunk shares its arrival with the next

    def run_json(self) -> dict:
        return {
            "concurrency": self.concurrency,
            "trial": self.trial,
            "requests": self.requests,
            "ok": self.ok,
            "errors": self.errors,
            "decode_tokens": self.decode_tokens,
            "wall_s": _round(self.wall_s),
            "mean_stream_decode_tok_s": _round(self.mean_stream_decode_tok_s),
            "wall_aggregate_tok_s": _round(self.wall_aggregate_tok_s),
            "ttft_s_median": _round(self.ttft_s_median),
            "acceptance_rate": _round(self.acceptance_rate),
            "mean_acceptance_length": _round(self.mean_acceptance_length),
            "tokens_estimated": self.tokens_estimated,
            "edges_exact": self.edges_exact,
            "edges_merged": self.edges_merged,
        }


def _round(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 4)


def windows(measured: list[RequestFigures]) -> list[RequestFigures]:
    """The measured requests whose windows make a wave's stream decode mean and TTFT median: those whose first edge
    is exact. A first content chunk with the next one's arrival (a client that fell behind: Linux gives segments
    left unread one stamp, the newest's) opens the window up to a chunk interval late, so the rate would read high;
    such a stream counts in every other figure (edges_merged). The last edge needs no such rule: it can share a
    stamp only with the finish, usage and [DONE] events written with it, never with a later content chunk."""
    return [f for f in measured if f.first_edge_exact]


def window_requests(wave: WaveRecord) -> list[RequestRecord]:
    """The records of the wave's requests that windows() keeps."""
    records = [r for r in wave.requests if unmeasurable_reason(r) is None]
    figures = [request_figures(r) for r in records]
    kept = {id(f) for f in windows(figures)}
    return [r for r, f in zip(records, figures) if id(f) in kept]


def wave_figures(wave: WaveRecord) -> WaveFigures:
    """All of a wave's figures; failed or unmeasurable requests are counted as errors, never dropped."""
    measured: list[RequestFigures] = []
    reasons: dict[str, int] = {}
    for record in wave.requests:
        reason = unmeasurable_reason(record)
        if reason is None:
            measured.append(request_figures(record))
        else:
            reasons[reason] = reasons.get(reason, 0) + 1
    wall = wall_seconds(wave.requests)
    decode = sum(f.decode_tokens for f in measured)
    exact = sum(f.first_edge_exact for f in measured)
    kept = windows(measured)
    spec = wave.spec_decode
    return WaveFigures(
        concurrency=wave.concurrency,
        trial=wave.trial,
        requests=len(wave.requests),
        ok=len(measured),
        errors=len(wave.requests) - len(measured),
        error_reasons=reasons,
        decode_tokens=decode,
        wall_s=wall,
        mean_stream_decode_tok_s=statistics.fmean(f.stream_decode_tok_s for f in kept) if kept else None,
        wall_aggregate_tok_s=decode / wall if wall > 0 else 0.0,
        ttft_s_median=statistics.median(f.ttft_s for f in kept) if kept else None,
        acceptance_rate=spec.acceptance_rate if spec else None,
        mean_acceptance_length=spec.mean_acceptance_length if spec else None,
        acceptance_per_position=spec.acceptance_per_position if spec else [],
        tokens_estimated=any(f.tokens_estimated for f in measured),
        idle_wait_s=wave.idle_wait_s,
        stamp_source=stamp_source(wave.requests),
        edges_exact=exact,
        edges_merged=len(measured) - exact,
    )
