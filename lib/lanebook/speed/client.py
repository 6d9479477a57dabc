"""The streaming client: async httpx, waves of C requests sent at once, plain records out.

Chunk times are arrival times: the lean transport (transport.py) stamps each socket read with the
kernel's receive time of its bytes, so a busy event loop, or 64 first chunks landing at once, does
not make a chunk look later than it came. An SSE event takes the stamp of the read that completed its
`data:` line (DataLines). Where the kernel cannot stamp, the transport's perf_counter reading at each
read stands in, and the record says which (stamp_source).

Kept cheap as well, so the client's CPU stays low at many streams: request bodies are encoded before a
wave starts, the body is read from the transport's stamped reads (no httpx generator layers per
block), events go straight to the C json scanner, the garbage collector waits between waves, and
the event loop is uvloop's when installed.
"""

from __future__ import annotations

import asyncio
import gc
import json
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Coroutine, Iterator, Mapping, Optional, TypeVar

import httpx

from lanebook.nodes.http import lane_auth, refused_key
from lanebook.nodes.prometheus import MetricsUnavailable, metrics_url, queue_depth, scrape, spec_decode_delta, wait_idle
from lanebook.speed.records import (
    CONTENT,
    CONTENT_KINDS,
    OTHER,
    REASONING,
    ROLE,
    STAMP_LOOP,
    TOOL_CALLS,
    USAGE,
    ChunkArrival,
    RequestRecord,
    WaveRecord,
)
from lanebook.speed.servercounts import server_counts
from lanebook.speed.transport import LeanTransport
from lanebook.speed.workloads import Workload, request_body

# accept-encoding identity: the events are parsed from the bytes as they arrive, so nothing may compress them
JSON_HEADERS = {"content-type": "application/json", "accept": "text/event-stream", "accept-encoding": "identity"}
# One event's JSON object: raw_decode skips json.loads' Python layers (encoding detection, a second
# whitespace scan), a third of the cost per event.
decode_event = json.JSONDecoder().raw_decode
T = TypeVar("T")


@dataclass
class Tally:
    """Live counters a progress display reads while a wave runs (plain ints: no locking, no callbacks)."""

    content_chunks: int = 0
    finished: int = 0


def chat_url(api: str) -> str:
    return api.rstrip("/") + "/chat/completions"


def request_timeout_s(max_tokens: int) -> float:
    """Generous: a first-use JIT (seed 000) can stall a request for a while; a hung stream must still end."""
    return 120.0 + max_tokens / 5.0


def new_client(transport: Optional[LeanTransport] = None) -> httpx.AsyncClient:
    """One pooled client per run on the lean transport; no proxies from the environment (the lane is
    reached directly); a keyed lane's key sent where vLLM asks for it (nodes.http.lane_auth)."""
    return httpx.AsyncClient(
        transport=transport or LeanTransport(),
        timeout=httpx.Timeout(120.0, connect=10.0),
        trust_env=False,
        auth=lane_auth(),
    )


class DataLines:
    """The `data:` payloads of an SSE byte stream fed one socket read at a time: each feed returns the
    payloads whose line that read completed. A payload split over reads comes out of the last of them;
    several completed by one read come out together (and so share its arrival stamp)."""

    def __init__(self) -> None:
        self.pending = b""  # the start of a line whose newline has not arrived yet

    def feed(self, data: bytes) -> list[bytes]:
        if b"\n" not in data:
            self.pending += data
            return []
        *lines, self.pending = (self.pending + data).split(b"\n")
        return [line[5:].strip() for line in lines if line.startswith(b"data:")]


def _observe(event: Mapping[str, Any], record: RequestRecord) -> str:
    """Fold one decoded SSE event into the record; returns the chunk's kind."""
    usage = event.get("usage")
    if usage:
        record.completion_tokens = usage.get("completion_tokens")
        record.prompt_tokens = usage.get("prompt_tokens")
    choices = event.get("choices")
    if not choices:
        if "error" in event:
            error = event["error"]
            record.error = f"server error: {error.get('message', error) if isinstance(error, Mapping) else error}"
        return USAGE if usage else OTHER
    choice = choices[0]
    if choice.get("finish_reason"):
        record.finish_reason = choice["finish_reason"]
    delta = choice.get("delta") or {}
    text = delta.get("content")
    if text:
        record.text_chars += len(text)
        return CONTENT
    text = delta.get("reasoning") or delta.get("reasoning_content")
    if text:
        record.text_chars += len(text)
        return REASONING
    calls = delta.get("tool_calls")
    if calls:
        for call in calls:
            function = call.get("function") or {}
            record.text_chars += len(function.get("name") or "") + len(function.get("arguments") or "")
        return TOOL_CALLS
    return ROLE if delta.get("role") else OTHER


async def _clock_stamped(response: httpx.Response) -> AsyncIterator[tuple[bytes, float]]:
    """Blocks of a body from httpx's own transport (https://), stamped when this process gets them."""
    clock = time.perf_counter
    async for data in response.aiter_bytes():
        yield data, clock()


async def _read_stream(response: httpx.Response, record: RequestRecord, tally: Optional[Tally]) -> Optional[float]:
    """Fold the stream's events into the record; returns the arrival of its last bytes (None after an error)."""
    if response.headers.get("content-encoding", "identity") != "identity":
        record.error = f"compressed event stream (content-encoding: {response.headers['content-encoding']})"
        return None
    body = response.extensions.get("stamped_body")
    if body is not None:
        blocks, record.stamp_source = body.stamped(), body.source
    else:
        blocks, record.stamp_source = _clock_stamped(response), STAMP_LOOP
    chunks = record.chunks
    lines = DataLines()
    done = False
    end = None
    async for data, end in blocks:
        if end is None:
            record.error = "a read carried no kernel receive timestamp"
            return None
        if not data:
            continue
        for payload in lines.feed(data):
            if payload == b"[DONE]":
                done = True
                continue
            try:
                event = decode_event(payload.decode())[0]
            except ValueError:  # bad JSON or bad UTF-8
                record.error = f"undecodable event: {payload[:80]!r}"
                return None
            kind = _observe(event, record)
            chunks.append(ChunkArrival(end, kind))
            if tally is not None and kind in CONTENT_KINDS:
                tally.content_chunks += 1
    if not done and record.error is None:
        record.error = "stream ended before [DONE]"
    return end


async def stream_chat(
    client: httpx.AsyncClient,
    url: str,
    body: bytes,
    index: int,
    timeout_s: float,
    tally: Optional[Tally] = None,
) -> RequestRecord:
    """POST one streamed chat request; every failure ends up in record.error, never raised.

    t_sent is when the request's headers start onto the socket (the transport's trace hook), not when the
    coroutine began: with C requests launched together, each waits for the others' set-up first.
    t_done is the arrival of the response's last bytes, on the chunks' clock; when the request
    failed, the moment the client gave up.
    """
    clock = time.perf_counter
    record = RequestRecord(index=index, t_sent=clock())
    end = None

    async def trace(event: str, info: Mapping[str, Any]) -> None:
        if event.endswith("send_request_headers.started"):
            record.t_sent = clock()

    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream(
                "POST", url, content=body, headers=JSON_HEADERS, extensions={"trace": trace}
            ) as response:
                if response.status_code != 200:
                    detail = (await response.aread())[:200].decode(errors="replace").strip()
                    record.error = refused_key(response.status_code, url) or f"HTTP {response.status_code}: {detail}"
                else:
                    end = await _read_stream(response, record, tally)
    except TimeoutError:
        record.error = f"timeout after {timeout_s:g} s"
    except httpx.HTTPError as exc:
        record.error = f"{type(exc).__name__}: {exc}".rstrip(": ")
    record.t_done = end if end is not None and record.error is None else clock()
    if tally is not None:
        tally.finished += 1
    return record


async def open_connections(client: httpx.AsyncClient, url: str, count: int) -> None:
    """Have `count` pooled connections open (concurrent GETs), so no wave's wall includes TCP set-up:
    otherwise the first wave at a level pays handshakes the later ones do not. Best effort."""

    async def touch() -> None:
        try:
            async with asyncio.timeout(10.0):
                await client.get(url)
        except (httpx.HTTPError, TimeoutError):
            pass

    await asyncio.gather(*(touch() for _ in range(count)))


async def run_wave(
    client: httpx.AsyncClient,
    url: str,
    bodies: list[bytes],
    trial: int,
    timeout_s: float,
    metrics: Optional[str] = None,
    idle_timeout_s: float = 120.0,
    tally: Optional[Tally] = None,
    models_url: Optional[str] = None,
) -> WaveRecord:
    """Open the connections, wait for an idle queue (when /metrics is known), send every body at once.

    The idle scrape is the "before" of the wave's spec-decode deltas; the "after" is taken once every
    stream has finished.
    """
    if models_url:
        await open_connections(client, models_url, len(bodies))
    before = waited = None
    if metrics:
        try:
            before, waited = await wait_idle(client, metrics, idle_timeout_s)
        except MetricsUnavailable:
            pass  # the server went away mid-run: send anyway, so the wave's failures are counted, not lost
    records = await asyncio.gather(
        *(stream_chat(client, url, body, i, timeout_s, tally) for i, body in enumerate(bodies))
    )
    spec = counts = None
    if before is not None:
        try:
            after = await scrape(client, metrics)
            spec, counts = spec_decode_delta(before, after), server_counts(before, after)
        except MetricsUnavailable:
            pass  # no "after": acceptance unknown for this wave (null in the JSON), the timings still stand
    return WaveRecord(len(bodies), trial, list(records), idle_wait_s=waited, spec_decode=spec, server_counts=counts)


@contextmanager
def paused_gc() -> Iterator[None]:
    """No garbage-collector pauses inside a wave (as timeit does): a full collection over a freshly
    imported heap costs tens of milliseconds, which would land in some stream's timings. A wave's
    records hold no reference cycles; the collector catches up between waves."""
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


@dataclass
class Plan:
    """What to measure: trials x concurrency levels of one workload on one API."""

    api: str
    model: str
    workload: Workload
    concurrency: list[int]
    trials: int
    max_tokens: int
    lane_request: Mapping[str, Any] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: secrets.token_hex(4))
    timeout_s: Optional[float] = None  # each request's bound (default: request_timeout_s, generous)
    idle_timeout_s: float = 120.0  # how long a wave waits for an idle queue before it is refused

    def bodies(self, trial: int, concurrency: int) -> list[bytes]:
        """Encoded before the wave starts; the tag makes every prompt of the run unique."""
        return [
            json.dumps(
                request_body(
                    self.model,
                    self.workload,
                    trial * concurrency + i,
                    f"{self.run_id}-t{trial}-c{concurrency}-{i}",
                    self.max_tokens,
                    self.lane_request,
                )
            ).encode()
            for i in range(concurrency)
        ]


async def probe_metrics(client: httpx.AsyncClient, api: str) -> tuple[Optional[str], Optional[str]]:
    """The /metrics URL when the server has one, else None and why (the idle check is then skipped)."""
    url = metrics_url(api)
    try:
        queue_depth(await scrape(client, url))
    except MetricsUnavailable as exc:
        return None, str(exc)
    return url, None


async def measure(
    plan: Plan,
    on_wave_start: Callable[[int, int, Tally], None] = lambda trial, c, tally: None,
    on_wave_end: Callable[[WaveRecord], None] = lambda wave: None,
    on_note: Callable[[str], None] = lambda note: None,
    stop_on_errors: bool = False,
) -> list[WaveRecord]:
    """Every wave of the plan, trials interleaved over concurrency so drift spreads across cells.

    stop_on_errors: end after the first wave in which a request failed (a dying server would make every
    later wave fail too, each only after its idle wait and timeouts)."""
    transport = LeanTransport()
    why = transport.stamp_note or (
        None
        if plan.api.startswith("http://")
        else "https:// goes through httpx's own transport, which cannot pass them on"
    )
    if why:
        on_note(
            f"chunk arrivals are stamped when this process reads them, not by the kernel ({why}): "
            "a busy client reads them late"
        )
    async with new_client(transport) as client:
        metrics, why = await probe_metrics(client, plan.api)
        if why:
            on_note(f"idle-queue check and acceptance figures skipped: {why}")
        url = chat_url(plan.api)
        waves = []
        for trial in range(1, plan.trials + 1):
            for concurrency in plan.concurrency:
                bodies = plan.bodies(trial, concurrency)
                tally = Tally()
                on_wave_start(trial, concurrency, tally)
                with paused_gc():
                    wave = await run_wave(
                        client,
                        url,
                        bodies,
                        trial,
                        plan.timeout_s or request_timeout_s(plan.max_tokens),
                        metrics,
                        idle_timeout_s=plan.idle_timeout_s,
                        tally=tally,
                        models_url=f"{plan.api.rstrip('/')}/models",
                    )
                on_wave_end(wave)
                waves.append(wave)
                failed = [r.error for r in wave.requests if r.error]
                if stop_on_errors and failed:
                    on_note(
                        f"stopped after trial {trial} C{concurrency}: {len(failed)} of {concurrency} request(s) failed "
                        f"({failed[0]})"
                    )
                    return waves
        return waves


def _run_here(coro: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run to completion on a fresh uvloop loop (a cheaper loop is a more accurate clock under load).

    Inside a running loop (a Jupyter kernel runs one, so every runbook cell does) the waves get
    their own thread and loop, rather than sharing the kernel's.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_here(coro)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lanebook-speed") as pool:
        return pool.submit(_run_here, coro).result()
