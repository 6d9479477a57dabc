"""The server's own count of a wave beside lanebook's: an honesty check for any lane.

Over a wave (the idle scrape before it, a scrape once every stream finished) vLLM's /metrics counts the tokens it
generated (`vllm:generation_tokens_total`) and histograms each request's time to first token
(`vllm:time_to_first_token_seconds`, its _sum and _count). lanebook counts completion tokens from each stream's usage
chunk and times TTFT from the request's send to its first content chunk. The token counts must be equal; the TTFT
means are shown side by side (the client's includes the network and the send, the server's starts at arrival).

Pure functions over Snapshots and WaveRecords; the scrapes are lanebook.speed.client's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from lanebook.nodes.prometheus import Snapshot
from lanebook.speed.records import CONTENT_KINDS, RequestRecord

GENERATION_TOKENS = "vllm:generation_tokens_total"
TTFT_SUM = "vllm:time_to_first_token_seconds_sum"
TTFT_COUNT = "vllm:time_to_first_token_seconds_count"


@dataclass(frozen=True)
class ServerCounts:
    """/metrics deltas over one wave; a field is None when the server does not expose that series."""

    generation_tokens: Optional[float]
    ttft_sum_s: Optional[float]
    ttft_count: Optional[float]

    @property
    def ttft_mean_s(self) -> Optional[float]:
        if self.ttft_sum_s is None or not self.ttft_count:
            return None
        return self.ttft_sum_s / self.ttft_count


def server_counts(before: Snapshot, after: Snapshot) -> Optional[ServerCounts]:
    """The server's counts over the interval; None when it exposes none of them."""
    delta = after.minus(before)
    counts = ServerCounts(delta.total(GENERATION_TOKENS), delta.total(TTFT_SUM), delta.total(TTFT_COUNT))
    return None if counts == ServerCounts(None, None, None) else counts


def client_completion_tokens(records: list[RequestRecord]) -> Optional[int]:
    """lanebook's count: the usage chunks' completion tokens summed; None when a stream sent no usage."""
    if any(r.completion_tokens is None for r in records):
        return None
    return sum(r.completion_tokens for r in records)  # type: ignore[misc]


def client_ttft_mean_s(records: list[RequestRecord]) -> Optional[float]:
    """Mean of t_first - t_sent over the requests that got a content chunk."""
    ttfts = [next(c.t for c in r.chunks if c.kind in CONTENT_KINDS) - r.t_sent for r in records if _has_content(r)]
    return sum(ttfts) / len(ttfts) if ttfts else None


def client_ttft_count(records: list[RequestRecord]) -> int:
    """How many requests lanebook's TTFT mean covers: a reply of tokens with no text has no first content chunk."""
    return sum(1 for r in records if _has_content(r))


def _has_content(record: RequestRecord) -> bool:
    return any(c.kind in CONTENT_KINDS for c in record.chunks)


def counts_line(counts: Optional[ServerCounts], records: list[RequestRecord]) -> str:
    """'server counted N generation tokens, lanebook counted N (equal); TTFT mean: server X s (n), lanebook Y s (m)'."""
    if counts is None:
        return "server counts: /metrics has no vllm:generation_tokens_total or TTFT histogram (or was not read)"
    mine = client_completion_tokens(records)
    theirs = counts.generation_tokens
    if theirs is None:
        tokens = "server counted no generation tokens (no vllm:generation_tokens_total)"
    else:
        judged = "" if mine is None else " (equal)" if mine == theirs else f" (DIFFER by {theirs - mine:+g})"
        counted = "nothing (a stream sent no usage)" if mine is None else f"{mine}"
        tokens = f"server counted {theirs:g} generation tokens, lanebook counted {counted}{judged}"
    server_ttft, client_ttft = counts.ttft_mean_s, client_ttft_mean_s(records)
    ttft = "TTFT mean: server " + ("-" if server_ttft is None else f"{server_ttft:.3f} s ({counts.ttft_count:g})")
    ttft += ", lanebook " + ("-" if client_ttft is None else f"{client_ttft:.3f} s ({client_ttft_count(records)})")
    return f"{tokens}; {ttft}"
