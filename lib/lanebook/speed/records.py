"""Plain records of what the client saw: no arithmetic here, so figures can be recomputed and tested.

As in vLLM's benchmark code, I/O fills these records and lanebook.speed.metrics turns them into
figures with pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Optional

from lanebook.nodes.prometheus import SpecDecode

if TYPE_CHECKING:
    from lanebook.speed.servercounts import ServerCounts

# Chunk kinds. Only CONTENT_KINDS open and close a stream's decode window: the role-only
# first chunk carries no token, so counting it would stretch the window (vllm bench serve does).
ROLE, CONTENT, REASONING, TOOL_CALLS, USAGE, OTHER = "role", "content", "reasoning", "tool_calls", "usage", "other"
CONTENT_KINDS = frozenset({CONTENT, REASONING, TOOL_CALLS})


# What stamped the chunk arrivals of a record (one source per run, never mixed):
# STAMP_KERNEL: the kernel's receive time of the bytes (SO_TIMESTAMPNS), which no lag of the client moves;
# STAMP_LOOP: the client's clock when it read the bytes, late by however long the client was busy.
STAMP_KERNEL, STAMP_LOOP = "kernel", "loop"


class ChunkArrival(NamedTuple):
    """One SSE chunk: when it arrived (perf_counter seconds) and what its delta carried.

    An event's bytes may come in several socket reads, and one read may complete several events: an
    event arrived with the read that completed its `data:` line, so it carries that read's stamp.
    """

    t: float
    kind: str


@dataclass
class RequestRecord:
    """One streamed chat request as observed by the client."""

    index: int
    t_sent: float  # perf_counter when the request started onto the socket
    t_done: Optional[float] = None  # arrival of the response's last bytes; when it failed, when the client gave up
    chunks: list[ChunkArrival] = field(default_factory=list)
    completion_tokens: Optional[int] = None  # from the final usage chunk; None when the server sent none
    prompt_tokens: Optional[int] = None
    text_chars: int = 0  # characters of content/reasoning/tool-call text, for the estimate without usage
    finish_reason: Optional[str] = None
    error: Optional[str] = None  # "timeout", "HTTP 500: ...", "stream ended before [DONE]", ...
    stamp_source: Optional[str] = None  # STAMP_KERNEL or STAMP_LOOP; None when no stream was read


@dataclass
class WaveRecord:
    """C requests sent at once, plus the /metrics context around them."""

    concurrency: int
    trial: int
    requests: list[RequestRecord]
    idle_wait_s: Optional[float] = None  # None: /metrics unavailable, idle precondition unchecked
    spec_decode: Optional[SpecDecode] = None  # deltas over the wave, when the server exposes them
    server_counts: Optional["ServerCounts"] = None  # the server's own token and TTFT counts over the wave
