"""vLLM's Prometheus /metrics: snapshots, deltas between them, and the idle-queue wait.

Parsing uses prometheus_client's own text parser so every exposition detail (escaping, histograms,
colons in names) is handled as Prometheus does. Samples are keyed by their sample name (with the
``_total`` suffix, as vLLM exposes them) and label set; figures sum over label sets (engines) unless
a label is asked for, since a lane serves one model.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

import httpx
from prometheus_client.parser import text_string_to_metric_families

from lanebook.base.errors import LanebookError

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
PREEMPTIONS = "vllm:num_preemptions_total"

LabelSet = frozenset  # frozenset of (label, value) pairs


class MetricsUnavailable(LanebookError):
    """The server has no usable /metrics endpoint (wrong URL, not vLLM, or down)."""


class QueueNotIdle(LanebookError):
    """Requests kept running or waiting past the bounded wait: a wave would measure someone else's load."""


@dataclass(frozen=True)
class Snapshot:
    """Every sample of one /metrics scrape: {sample name: {label set: value}}."""

    samples: Mapping[str, Mapping[LabelSet, float]]

    def total(self, name: str, **labels: str) -> Optional[float]:
        """Sum of a sample over its label sets (those carrying ``labels``, if given); None when not exposed."""
        series = self.samples.get(name)
        if series is None:
            return None
        wanted = labels.items()
        return sum(value for key, value in series.items() if wanted <= key)

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """Sum of a sample per value of one label (e.g. spec-decode acceptance per ``position``)."""
        out: dict[str, float] = {}
        for labels, value in self.samples.get(name, {}).items():
            key = dict(labels).get(label)
            if key is not None:
                out[key] = out.get(key, 0.0) + value
        return out

    def minus(self, earlier: "Snapshot") -> "Snapshot":
        """Counter deltas since an earlier snapshot (series missing earlier count from zero)."""
        delta: dict[str, dict[LabelSet, float]] = {}
        for name, series in self.samples.items():
            before = earlier.samples.get(name, {})
            delta[name] = {labels: value - before.get(labels, 0.0) for labels, value in series.items()}
        return Snapshot(delta)


def parse_metrics(text: str) -> Snapshot:
    """Parse Prometheus text exposition into a Snapshot."""
    samples: dict[str, dict[LabelSet, float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(sample.name, {})[frozenset(sample.labels.items())] = float(sample.value)
    except ValueError as exc:
        raise MetricsUnavailable(f"/metrics is not Prometheus text: {exc}") from None
    return Snapshot(samples)


def server_root(api: str) -> str:
    """The server's root URL from an OpenAI base URL ending in /v1."""
    root = api.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def metrics_url(api: str) -> str:
    """vLLM serves /metrics at the server root, beside /v1."""
    return f"{server_root(api)}/metrics"


SCRAPE_BOUND_S = 10.0


async def scrape(client: httpx.AsyncClient, url: str) -> Snapshot:
    """One scrape of a /metrics URL, bounded as a whole by SCRAPE_BOUND_S. The request carries that bound too:
    otherwise the client's own read timeout (httpx's default is 5 s) cuts in first, and a server busy decoding
    (CI saw one at nice 19 miss it mid-wave) fails sooner than the bound this function promises."""
    try:
        async with asyncio.timeout(SCRAPE_BOUND_S):
            response = await client.get(url, timeout=SCRAPE_BOUND_S)
    except (TimeoutError, httpx.TimeoutException):
        raise MetricsUnavailable(f"{url} gave no answer within {SCRAPE_BOUND_S:g} s") from None
    except httpx.HTTPError as exc:
        raise MetricsUnavailable(f"cannot read {url}: {exc.__class__.__name__}") from None
    if response.status_code != 200:
        raise MetricsUnavailable(f"{url} answered HTTP {response.status_code}")
    return parse_metrics(response.text)


def queue_depth(snapshot: Snapshot) -> tuple[float, float]:
    """(running, waiting) requests; a server without these gauges cannot prove it is idle."""
    running, waiting = snapshot.total(RUNNING), snapshot.total(WAITING)
    if running is None or waiting is None:
        raise MetricsUnavailable(f"/metrics lacks {RUNNING} or {WAITING}: not a vLLM server?")
    return running, waiting


async def wait_idle(
    client: httpx.AsyncClient,
    url: str,
    timeout_s: float = 120.0,
    poll_s: float = 0.2,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Snapshot, float]:
    """Wait (bounded) until no request runs or waits; returns the idle snapshot and the seconds waited.

    The idle snapshot doubles as the "before" of a wave's spec-decode deltas.
    """
    start = clock()
    while True:
        snapshot = await scrape(client, url)
        running, waiting = queue_depth(snapshot)
        if running == 0 and waiting == 0:
            return snapshot, clock() - start
        if clock() - start >= timeout_s:
            raise QueueNotIdle(
                f"queue not idle after {timeout_s:g} s (running={running:g}, waiting={waiting:g}): "
                "another client is using the lane"
            )
        await asyncio.sleep(poll_s)


@dataclass(frozen=True)
class SpecDecode:
    """Speculative-decoding figures of one wave, from /metrics counter deltas over the wave:
    acceptance = Δaccepted / Δdraft tokens, mean acceptance length = 1 + Δaccepted / Δdrafts."""

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_per_position: dict[int, float]

    @property
    def acceptance_rate(self) -> Optional[float]:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens > 0 else None

    @property
    def mean_acceptance_length(self) -> Optional[float]:
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts > 0 else None

    @property
    def acceptance_per_position(self) -> list[float]:
        """Share of drafts whose position k was accepted, k = 0, 1, ..."""
        if self.drafts <= 0:
            return []
        return [self.accepted_per_position[k] / self.drafts for k in sorted(self.accepted_per_position)]


def spec_decode_delta(before: Snapshot, after: Snapshot) -> Optional[SpecDecode]:
    """Spec-decode figures over the interval; None when the server exposes no spec-decode counters."""
    delta = after.minus(before)
    drafts, draft_tokens, accepted = delta.total(DRAFTS), delta.total(DRAFT_TOKENS), delta.total(ACCEPTED_TOKENS)
    if drafts is None or draft_tokens is None or accepted is None:
        return None
    per_position = {int(k): v for k, v in delta.by_label(ACCEPTED_PER_POSITION, "position").items()}
    return SpecDecode(drafts, draft_tokens, accepted, per_position)
