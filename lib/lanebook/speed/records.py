"""Plain records of what the client saw: no arithmetic here, so figures can be recomputed and tested.

As in vLLM's benchmark code, I/O fills these records and lanebook.speed.metrics turns them into
figures with pure functions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Optional

from ..metrics import SpecDecode

# Chunk kinds. Only CONTENT_KINDS open and close a stream's decode window (SPEC section 6).
ROLE, CONTENT, REASONING, TOOL_CALLS, USAGE, OTHER = "role", "content", "reasoning", "tool_calls", "usage", "other"
CONTENT_KINDS = frozenset({CONTENT, REASONING, TOOL_CALLS})


class ChunkArrival(NamedTuple):
    """One SSE chunk: when its bytes were read (perf_counter seconds) and what its delta carried."""

    t: float
    kind: str


@dataclass
class RequestRecord:
    """One streamed chat request as observed by the client."""

    index: int
    t_sent: float
    t_done: Optional[float] = None
    chunks: list[ChunkArrival] = field(default_factory=list)
    completion_tokens: Optional[int] = None  # from the final usage chunk; None when the server sent none
    prompt_tokens: Optional[int] = None
    text_chars: int = 0  # characters of content/reasoning/tool-call text, for the estimate without usage
    finish_reason: Optional[str] = None
    error: Optional[str] = None  # "timeout", "HTTP 500: ...", "stream ended before [DONE]", ...


@dataclass
class WaveRecord:
    """C requests sent at once, plus the /metrics context around them."""

    concurrency: int
    trial: int
    requests: list[RequestRecord]
    idle_wait_s: Optional[float] = None  # None: /metrics unavailable, idle precondition unchecked
    spec_decode: Optional[SpecDecode] = None  # deltas over the wave, when the server exposes them
