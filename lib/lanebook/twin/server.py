"""The twin's vLLM-compatible HTTP server: vLLM's routes and formats over the behaviour model.

One asyncio engine loop steps ``EngineCore`` at absolute deadlines (no drift), so batching,
speculative acceptance and JIT stalls reach every stream together, as on the GPU. Pace mode
(LANEBOOK_TWIN_PACE_TOK_S) bypasses the engine and streams each request at a fixed rate: it exists
to measure clients, not the lane. GET /twin/requests is twin-only truth: per request, when the
server emitted its first and last tokens, for benchmarks to check clients against.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import secrets
import sys
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator, Callable, Optional

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from lanebook.twin.engine_core import EngineConfig, EngineCore, Sequence, Step, sequence_for
from lanebook.twin.replies import Reply, plan_reply, thinking_enabled

VLLM_VERSION = "0.25.2+lanebook.twin"  # the twin marks itself wherever vLLM prints its version
ADMISSION_WINDOW_S = 0.02  # twin assumption: an idle engine gathers requests sent "at once" into one step
MAX_CATCH_UP_S = 1.0  # a loop this late resynchronises instead of bursting steps
ENGINE_DIES_AFTER_TOKENS = 3000  # fault engine-dies-mid-bench: "some thousands of tokens under concurrency"
TP_HANG_AFTER_TOKENS = 3000  # fault tp-hang: the worker rank wedges under load, after as many tokens
SHM_WAIT_S = 60.0  # vLLM's shared-memory broadcast warns each minute a reader is behind (scaled by time_scale)
SHM_WARNING = (
    "No available shared memory broadcast block found in 60 seconds. This typically happens when some "
    "processes are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache quantization)."
)
HEAD_DIES_AFTER_TOKENS = 32  # fault head-dies: mid-request, after this many tokens of a stream
HEAD_DIES_AFTER_S = 300.0  # fault head-dies: or this long after ready (scaled by time_scale)
STATS_LOG_INTERVAL_S = 10.0  # vLLM logs engine stats every 10 s while busy
ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."


def log(level: str, where: str, message: str, process: str = "APIServer") -> None:
    """One line in vLLM's logger format; stdout is the container log."""
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"({process} pid={os.getpid()}) {level} {stamp} [{where}] {message}", flush=True)


def error_body(message: str, kind: str, code: int, param: Optional[str] = None) -> dict:
    """vLLM's ErrorResponse."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class EngineDead(Exception):
    """The engine core died (fault engine-dies-mid-bench or a lost TP worker)."""


# What vLLM 0.32.0's --api-key guards (vllm/entrypoints/serve/middleware/authenticate.py: GUARDED_PREFIX); every other
# route (/health, /metrics, /version, /ping, the twin's own /twin/requests) stays keyless.
GUARDED_PREFIX = ("/v1", "/v2", "/inference", "/cohere")


class KeyGuard:
    """vLLM's AuthenticationMiddleware as it behaves: a pure ASGI middleware that answers 401 {"error":
    "Unauthorized"} to a request of a guarded path (OPTIONS passes) whose `Authorization: Bearer KEY` (scheme case
    insensitive) is none of the keys, before any route runs (so also before the engine is up, and for paths no route
    serves)."""

    def __init__(self, app, tokens: list[str]) -> None:
        self.app = app
        self.tokens = [hashlib.sha256(t.encode()).digest() for t in tokens]

    def _verified(self, headers: Headers) -> bool:
        scheme, _, param = (headers.get("authorization") or "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(param.encode()).digest()
        return any(secrets.compare_digest(digest, token) for token in self.tokens)

    def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket") or scope.get("method") == "OPTIONS":
            return self.app(scope, receive, send)
        path = scope["path"].removeprefix(scope.get("root_path", ""))
        if path.startswith(GUARDED_PREFIX) and not self._verified(Headers(scope=scope)):
            return JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
        return self.app(scope, receive, send)


@dataclass
class ServeOptions:
    """What `vllm serve` was asked for, beyond the engine's behaviour settings."""

    model: str
    served_model_names: list[str]
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: list[str] = field(default_factory=list)
    default_chat_template_kwargs: dict = field(default_factory=dict)
    reasoning_parser: Optional[str] = None  # without one, vLLM returns the thinking as content (reasoning: null)
    enable_auto_tool_choice: bool = False
    enable_prompt_tokens_details: bool = False
    access_log: bool = True
    faults: frozenset = frozenset()
    pace_tok_s: Optional[float] = None
    tokens_per_chunk: int = 3
    time_scale: float = 1.0

    @property
    def name(self) -> str:
        return self.served_model_names[0]


class StreamSource:
    """Token counts for one request as the engine emits them (or an EngineDead)."""

    def __init__(self, seq: Sequence):
        self.seq = seq
        self.queue: asyncio.Queue = asyncio.Queue()
        seq.owner = self

    def feed(self, n: int) -> None:
        self.queue.put_nowait(n)

    def fail(self, exc: Exception) -> None:
        self.queue.put_nowait(exc)

    async def counts(self) -> AsyncIterator[int]:
        produced = 0
        while produced < self.seq.max_new:
            item = await self.queue.get()
            if isinstance(item, Exception):
                raise item
            produced += item
            yield item


async def paced_counts(total: int, tok_s: float, per_chunk: int) -> AsyncIterator[int]:
    """Pace mode: ``per_chunk`` tokens every per_chunk/tok_s seconds at absolute times."""
    loop = asyncio.get_running_loop()
    start, interval, sent, i = loop.time(), per_chunk / tok_s, 0, 0
    while sent < total:
        i += 1
        delay = start + i * interval - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        n = min(per_chunk, total - sent)
        sent += n
        yield n


class EngineLoop:
    """Steps the engine core at absolute deadlines and hands each step's tokens to the streams."""

    def __init__(self, core: EngineCore, after_step: Callable[[Step], None], on_crash: Callable[[str], None]):
        self.core = core
        self.after_step = after_step
        self.on_crash = on_crash
        self.dead: Optional[EngineDead] = None
        self.hung = False  # a rank stopped making progress: no step ends, no abort is processed (fault tp-hang)
        self.step_factor: Callable[[], float] = lambda: 1.0  # a slowdown injected at run time (POST /twin/inject)
        self._wake = asyncio.Event()
        self._task: Optional[asyncio.Task] = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def submit(self, seq: Sequence) -> None:
        self.core.add(seq)
        self._wake.set()

    def abort(self, seq: Sequence) -> None:
        if not self.hung:  # a wedged engine core never reads the abort: the request stays running
            self.core.abort(seq)

    def kill(self, reason: EngineDead) -> None:
        """The engine dies: every in-flight stream fails, nothing new is accepted."""
        self.dead = reason
        for seq in list(self.core.running) + list(self.core.waiting):
            seq.owner.fail(reason)
            self.core.abort(seq)
        if self._task:
            self._task.cancel()

    async def _run(self) -> None:
        try:
            await self._steps()
        except Exception as exc:  # a bug must not leave streams waiting forever
            self.on_crash(f"engine loop failed: {exc!r}")
            raise

    async def _steps(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = 0.0
        while True:
            if self.core.idle:
                self._wake.clear()
                await self._wake.wait()
                deadline = loop.time()
                await asyncio.sleep(ADMISSION_WINDOW_S)
            if self.hung:  # the next step waits on the wedged rank forever: no token, no abort, no finish
                await asyncio.Event().wait()
            step = self.core.step()
            if step is None:
                continue
            deadline = max(deadline, loop.time() - MAX_CATCH_UP_S) + step.duration_s * self.step_factor()
            delay = deadline - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            for seq, n in step.emitted:
                seq.owner.feed(n)
            self.after_step(step)


class EngineCollector:
    """vLLM's engine counters and gauges, read from the engine core at scrape time."""

    def __init__(self, server: "TwinServer"):
        self.server = server
        self.created = time.time()

    def _family(self, kind, name: str, documentation: str, value: float, extra: Optional[dict] = None):
        labels = {"engine": "0", "model_name": self.server.options.name, **(extra or {})}
        family = kind(name, documentation, labels=list(labels))
        if kind is CounterMetricFamily:
            family.add_metric(list(labels.values()), value, created=self.created)
        else:
            family.add_metric(list(labels.values()), value)
        return family

    def collect(self):
        s = self.server
        stats = s.core.stats
        yield self._family(
            GaugeMetricFamily,
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            len(s.core.running) + s.paced_running,
        )
        yield self._family(
            GaugeMetricFamily,
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            len(s.core.waiting),
        )
        yield self._family(
            GaugeMetricFamily, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage()
        )
        counters = [
            (
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                stats.prefix_queries,
            ),
            ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", stats.prefix_hits),
            ("vllm:num_preemptions", "Cumulative number of preemption from the engine.", 0),
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", stats.prompt_tokens),
            ("vllm:generation_tokens", "Number of generation tokens processed.", stats.generation_tokens),
        ]
        if s.core.config.num_speculative_tokens:
            counters += [
                ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", stats.drafts),
                ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", stats.draft_tokens),
                ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", stats.accepted_tokens),
            ]
        for name, documentation, value in counters:
            yield self._family(CounterMetricFamily, name, documentation, value)
        labels = {"engine": "0", "model_name": s.options.name}
        family = CounterMetricFamily(  # one family, a series per reason (not a family per reason)
            "vllm:request_success", "Count of successfully processed requests.", labels=[*labels, "finished_reason"]
        )
        for reason in ("stop", "length", "abort"):
            family.add_metric([*labels.values(), reason], s.finished.get(reason, 0), created=self.created)
        yield family
        if s.core.config.num_speculative_tokens:
            labels = {"engine": "0", "model_name": s.options.name}
            family = CounterMetricFamily(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                labels=[*labels, "position"],
            )
            for pos in range(s.core.config.num_speculative_tokens):
                family.add_metric([*labels.values(), str(pos)], stats.accepted_per_pos[pos], created=self.created)
            yield family


class ChatStream:
    """Turns one request's planned reply and its token counts into vLLM's chunks and truth."""

    def __init__(self, server: "TwinServer", body: dict, reply: Reply, seq: Sequence):
        self.server = server
        self.reply = reply
        self.seq = seq
        self.request_id = f"chatcmpl-{uuid.uuid4().hex}"
        self.tool_call_id = f"chatcmpl-tool-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.t_sent = time.time()
        self.t_first: Optional[float] = None
        self.t_last: Optional[float] = None
        self.emitted = 0
        self.finish_reason: Optional[str] = None
        options = body.get("stream_options")
        self.include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        head = {
            "id": self.request_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": server.options.name,
        }
        self._head = json.dumps(head, separators=(",", ":"))[:-1]

    # Token text -------------------------------------------------------------------------------
    def _texts(self, start: int, end: int) -> tuple[str, str]:
        """Reasoning and content/argument text of tokens [start, end)."""
        reasoning_n = len(self.reply.reasoning)
        reasoning = "".join(self.reply.reasoning[start : min(end, reasoning_n)]) if start < reasoning_n else ""
        rest = (
            "".join(self.reply.content[max(start, reasoning_n) - reasoning_n : end - reasoning_n])
            if end > reasoning_n
            else ""
        )
        return reasoning, rest

    def _delta(self, start: int, end: int) -> dict:
        reasoning, rest = self._texts(start, end)
        delta: dict[str, Any] = {}
        if reasoning:
            delta["reasoning"] = reasoning
        if rest and self.reply.tool_call:
            call: dict[str, Any] = {"index": 0, "function": {"arguments": rest}}
            if start <= len(self.reply.reasoning):  # the first tool chunk names the call
                call = {
                    "index": 0,
                    "id": self.tool_call_id,
                    "type": "function",
                    "function": {"name": self.reply.tool_call.name, "arguments": rest},
                }
            delta["tool_calls"] = [call]
        elif rest:
            delta["content"] = rest
        return delta

    def _chunk(self, choices: list, usage: Optional[dict] = None) -> bytes:
        tail = f',"choices":{json.dumps(choices, separators=(",", ":"))}'
        if usage is not None:
            tail += f',"usage":{json.dumps(usage, separators=(",", ":"))}'
        return f"data: {self._head}{tail}}}\n\n".encode()

    def usage(self) -> dict:
        usage = {
            "prompt_tokens": self.seq.prompt_tokens,
            "total_tokens": self.seq.prompt_tokens + self.emitted,
            "completion_tokens": self.emitted,
        }
        if self.server.options.enable_prompt_tokens_details:
            usage["prompt_tokens_details"] = {"cached_tokens": self.seq.cached_tokens}
        return usage

    def _advance(self, n: int) -> tuple[int, int]:
        """Account ``n`` more tokens emitted now; returns their [start, end)."""
        start, self.emitted = self.emitted, self.emitted + n
        now = time.time()
        if self.t_first is None:
            self.t_first = now
            self.server.ttft.labels(*self.server.labels).observe(now - self.t_sent)
        else:
            self.server.itl.labels(*self.server.labels).observe((now - self.t_last) / n)
        self.t_last = now
        if self.emitted >= self.reply.tokens:
            self.finish_reason = self.reply.finish_reason
        self.server.on_tokens(self, n)
        return start, self.emitted

    # Responses --------------------------------------------------------------------------------
    async def sse(self) -> AsyncIterator[bytes]:
        """The streamed response, chunk by chunk, as vLLM sends it."""
        yield self._chunk(
            [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]
        )
        try:
            async for n in self.server.token_counts(self):
                start, end = self._advance(n)
                choice = {
                    "index": 0,
                    "delta": self._delta(start, end),
                    "logprobs": None,
                    "finish_reason": self.finish_reason,
                }
                if self.finish_reason:
                    choice["stop_reason"] = None
                yield self._chunk([choice])
            if self.include_usage:
                yield self._chunk([], self.usage())
        except EngineDead:
            log("ERROR", "serving_chat.py:1168", "Error in chat completion stream generator.")
            yield f"data: {json.dumps(error_body(ENGINE_DEAD_MESSAGE, 'InternalServerError', 500))}\n\n".encode()
        finally:
            self.server.finish(self)
        yield b"data: [DONE]\n\n"

    async def complete(self) -> dict:
        """The non-streamed response with usage."""
        try:
            async for n in self.server.token_counts(self):
                self._advance(n)
        finally:
            self.server.finish(self)
        reasoning, rest = self._texts(0, self.emitted)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if self.reply.tool_call else rest,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": [],
            "reasoning": reasoning or None,
        }
        if self.reply.tool_call:
            message["tool_calls"] = [
                {
                    "id": self.tool_call_id,
                    "type": "function",
                    "function": {"name": self.reply.tool_call.name, "arguments": rest},
                }
            ]
        return {
            "id": self.request_id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.server.options.name,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self.finish_reason,
                    "stop_reason": None,
                }
            ],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": self.usage(),
            "prompt_logprobs": None,
            "kv_transfer_params": None,
        }

    def truth(self) -> dict:
        return {
            "id": self.request_id,
            "t_sent": self.t_sent,
            "t_first": self.t_first,
            "t_last": self.t_last,
            "completion_tokens": self.emitted,
            "prompt_tokens": self.seq.prompt_tokens,
            "cached_tokens": self.seq.cached_tokens,
            "finish_reason": self.finish_reason,
            "workload": self.reply.workload.name,
            "jit_s": round(self.seq.jit_s, 6),
        }


class BadRequest(Exception):
    def __init__(self, message: str, code: int = 400, kind: str = "BadRequestError", param: Optional[str] = None):
        super().__init__(message)
        self.response = JSONResponse(error_body(message, kind, code, param), status_code=code)


def invalid(param: str, value: Any, message: str) -> BadRequest:
    """A request parameter vLLM refuses: its message names the parameter and the value given."""
    shown = float(value) if param in ("temperature", "top_p") else value
    return BadRequest(f"{message} (parameter={param}, value={shown})", param=param)


def check_sampling(body: dict) -> None:
    """vLLM's sampling-parameter checks a client meets most: temperature >= 0, top_p in (0, 1]."""
    temperature, top_p = body.get("temperature"), body.get("top_p")
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature < 0:
        raise invalid("temperature", temperature, f"temperature must be non-negative, got {float(temperature)}.")
    if isinstance(top_p, (int, float)) and not isinstance(top_p, bool) and not 0 < top_p <= 1:
        raise invalid("top_p", top_p, f"top_p must be in (0, 1], got {float(top_p)}.")


class TwinServer:
    """The routes, the engine loop, the metrics and the truth records of one serving process."""

    def __init__(self, options: ServeOptions, config: EngineConfig):
        self.options = options
        self.core = EngineCore(config)
        self.engine = EngineLoop(self.core, self._after_step, self.kill_engine)
        self.ready = False
        self.ready_at: Optional[float] = None  # twin-only truth: when it became ready, for readiness benchmarks
        self.records: list[dict] = []
        self.finished: dict[str, int] = {}
        self.paced_running = 0
        self._shm_warnings: Optional[asyncio.Task] = None  # fault tp-hang's warnings, kept from garbage collection
        self.labels = ("0", options.name)
        self.on_ready: list[Callable[[], None]] = []
        self.registry = CollectorRegistry()
        self.registry.register(EngineCollector(self))
        names = ["engine", "model_name"]
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            names,
            registry=self.registry,
            buckets=(
                0.001,
                0.005,
                0.01,
                0.02,
                0.04,
                0.06,
                0.08,
                0.1,
                0.25,
                0.5,
                0.75,
                1.0,
                2.5,
                5.0,
                7.5,
                10.0,
                20.0,
                40.0,
                80.0,
                160.0,
                640.0,
                2560.0,
            ),
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            names,
            registry=self.registry,
            buckets=(
                0.01,
                0.025,
                0.05,
                0.075,
                0.1,
                0.15,
                0.2,
                0.3,
                0.4,
                0.5,
                0.75,
                1.0,
                2.5,
                5.0,
                7.5,
                10.0,
                20.0,
                40.0,
                80.0,
            ),
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            names,
            registry=self.registry,
            buckets=(
                0.3,
                0.5,
                0.8,
                1.0,
                1.5,
                2.0,
                2.5,
                5.0,
                10.0,
                15.0,
                20.0,
                30.0,
                40.0,
                50.0,
                60.0,
                120.0,
                240.0,
                480.0,
                960.0,
                1920.0,
                7680.0,
            ),
        )
        for histogram in (self.ttft, self.itl, self.e2e):
            histogram.labels(*self.labels)  # vLLM exposes every series from the start, at zero
        self.app = Starlette(
            routes=[
                Route("/health", self.health, methods=["GET"]),
                Route("/ping", self.health, methods=["GET", "POST"]),
                Route("/version", self.version, methods=["GET"]),
                Route("/metrics", self.metrics, methods=["GET"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/twin/requests", self.twin_requests, methods=["GET", "DELETE"]),
                Route("/twin/inject", self.twin_inject, methods=["POST"]),
            ]
        )
        self.app.add_exception_handler(404, self._not_found)
        self.app.add_exception_handler(405, self._not_allowed)
        if self.options.api_keys:  # vLLM adds its AuthenticationMiddleware only when started with keys
            self.app.add_middleware(KeyGuard, tokens=self.options.api_keys)

    # Lifecycle --------------------------------------------------------------------------------
    def start_engine(self) -> None:
        self.engine.start()

    def mark_ready(self) -> None:
        self.ready, self.ready_at = True, time.time()
        for callback in self.on_ready:
            callback()

    def kill_engine(self, why: str) -> None:
        """Engine death as vLLM logs it: in-flight streams fail, /health turns 503."""
        if self.engine.dead:
            return
        log("ERROR", "core.py:1011", f"EngineCore encountered a fatal error: {why}", "EngineCore_DP0")
        log("ERROR", "async_llm.py:480", "AsyncLLM output_handler failed. EngineDeadError: " + ENGINE_DEAD_MESSAGE)
        self.engine.kill(EngineDead(why))

    def kv_usage(self) -> float:
        used = sum(q.prompt_tokens + q.produced for q in self.core.running)
        return used / max(1, self.core.config.kv_tokens)

    @property
    def healthy(self) -> bool:
        return self.ready and not self.engine.dead  # fault health-never: dead after its first batched decode shape

    # Engine hooks -----------------------------------------------------------------------------
    def _after_step(self, step: Step) -> None:
        if step.jit_s:
            log(
                "INFO",
                "backends.py:215",
                f"Compiling a graph for dynamic shape (batch {step.batch}, K {step.k}) takes {step.jit_s:.2f} s",
                "EngineCore_DP0",
            )
        if (
            "engine-dies-mid-bench" in self.options.faults
            and len(self.core.running) >= 2
            and self.core.stats.generation_tokens >= ENGINE_DIES_AFTER_TOKENS
        ):
            self.kill_engine("CUDA error: an illegal memory access was encountered (fault engine-dies-mid-bench)")
        if "health-never" in self.options.faults and step.jit_s and step.batch >= 2:
            # compiling the first batched decode shape (boot captured single-request decode only; the post-readiness
            # warmup's C4) kills the engine core: the launcher's single smoke request passed, /v1/models still lists
            # the model, and /health answers 503 from now on
            self.kill_engine("CUDA error: an illegal memory access was encountered (fault health-never)")
        if (
            "tp-hang" in self.options.faults
            and not self.engine.hung
            and len(self.core.running) >= 2
            and self.core.stats.generation_tokens >= TP_HANG_AFTER_TOKENS
        ):
            self.hang()

    def hang(self) -> None:
        """Fault tp-hang: the worker rank wedges in a collective; the head's engine core waits on it forever. Requests
        stay running, no token moves, /health still answers 200, and the shared-memory broadcast warns each minute."""
        self.engine.hung = True
        self._shm_warnings = asyncio.get_running_loop().create_task(self._warn_shm_forever())

    async def _warn_shm_forever(self) -> None:
        while True:
            await asyncio.sleep(SHM_WAIT_S * self.options.time_scale)
            log("INFO", "shm_broadcast.py:501", SHM_WARNING, "EngineCore_DP0")

    def token_counts(self, stream: ChatStream) -> AsyncIterator[int]:
        if self.options.pace_tok_s:
            return paced_counts(stream.reply.tokens, self.options.pace_tok_s, self.options.tokens_per_chunk)
        return stream.seq.owner.counts()

    def on_tokens(self, stream: ChatStream, n: int) -> None:
        if self.options.pace_tok_s:
            self.core.stats.generation_tokens += n
        if "head-dies" in self.options.faults and stream.emitted >= HEAD_DIES_AFTER_TOKENS:
            self.die_head("mid-request")

    def die_head(self, when: str) -> None:
        """Fault head-dies: the head process is gone at once; its worker is left orphaned (fact T14)."""
        log(
            "ERROR",
            "multiproc_executor.py:149",
            f"Worker proc VllmWorker-0 died unexpectedly ({when}), shutting down executor. (fault head-dies)",
            "EngineCore_DP0",
        )
        sys.stdout.flush()
        os._exit(1)

    def finish(self, stream: ChatStream) -> None:
        if self.options.pace_tok_s:
            self.paced_running -= 1
        elif not stream.seq.finished:
            self.engine.abort(stream.seq)
        # The engine finishes a tool call with "stop"; only the API layer calls it "tool_calls".
        reason = {"tool_calls": "stop", None: "abort"}.get(stream.finish_reason, stream.finish_reason)
        self.finished[reason] = self.finished.get(reason, 0) + 1
        if stream.t_first is not None:
            self.e2e.labels(*self.labels).observe(time.time() - stream.t_sent)
        self.records.append(stream.truth())

    # Routes -----------------------------------------------------------------------------------
    async def _not_found(self, request: Request, exc: Exception) -> Response:
        return JSONResponse({"detail": "Not Found"}, status_code=404)

    async def _not_allowed(self, request: Request, exc: Exception) -> Response:
        return JSONResponse({"detail": "Method Not Allowed"}, status_code=405)

    async def health(self, request: Request) -> Response:
        return Response(status_code=200 if self.healthy else 503)

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": VLLM_VERSION})

    async def metrics(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def models(self, request: Request) -> Response:
        if not self.ready:  # vLLM serves /v1/models only once the engine is up: launchers wait on it
            return JSONResponse(error_body("The engine is still starting.", "ServiceUnavailableError", 503), 503)
        now = int(time.time())
        data = [
            {
                "id": name,
                "object": "model",
                "created": now,
                "owned_by": "vllm",
                "root": self.options.model,
                "parent": None,
                "max_model_len": self.core.config.max_model_len,
                "permission": [
                    {
                        "id": f"modelperm-{uuid.uuid4().hex}",
                        "object": "model_permission",
                        "created": now,
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ],
            }
            for name in self.options.served_model_names
        ]
        return JSONResponse({"object": "list", "data": data})

    async def twin_requests(self, request: Request) -> Response:
        """Twin-only truth: per request, the server's own emission times, and when it became ready (time.time()
        seconds)."""
        if request.method == "DELETE":
            cleared, self.records = len(self.records), []
            return JSONResponse({"cleared": cleared})
        return JSONResponse({"twin": True, "clock": "time.time", "ready_at": self.ready_at, "requests": self.records})

    async def twin_inject(self, request: Request) -> Response:
        """Twin-only: a fault met while serving, for benchmarks that inject faults at random times (the product never
        calls it). {"fault": "engine-dies"} kills the engine core (/health 503); "tp-hang" wedges a rank as fault
        tp-hang does; "head-dies" ends this process at once (its worker left orphaned). {"slowdown": {"to": F,
        "over_s": S}} makes every engine step slower, growing linearly to F times its time over S seconds (a slow
        regression, as an update can bring); {"slowdown": null} takes it away."""
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return JSONResponse({"error": "a JSON object: fault or slowdown"}, status_code=400)
        fault = body.get("fault")
        if fault == "engine-dies":
            self.kill_engine("CUDA error: an illegal memory access was encountered (injected engine-dies)")
        elif fault == "tp-hang":
            if not self.engine.hung:
                self.hang()
        elif fault == "head-dies":
            asyncio.get_running_loop().call_later(0.05, self.die_head, "injected while serving")
        elif "slowdown" in body:
            slow = body["slowdown"]
            if slow is None:
                self.engine.step_factor = lambda: 1.0
            else:
                try:
                    to, over_s, since = float(slow["to"]), max(float(slow.get("over_s", 0)), 1e-9), time.monotonic()
                except (TypeError, KeyError, ValueError):
                    return JSONResponse({"error": "slowdown: {to: F, over_s: S}"}, status_code=400)
                self.engine.step_factor = lambda: 1.0 + (to - 1.0) * min(1.0, (time.monotonic() - since) / over_s)
        else:
            return JSONResponse(
                {"error": f"unknown fault {fault!r} (engine-dies, tp-hang, head-dies)"}, status_code=400
            )
        return JSONResponse({"injected": fault or "slowdown"})

    def _plan(self, body: Any) -> tuple[Reply, Sequence]:
        """Validate a chat request as vLLM does and plan its reply."""
        if not isinstance(body, dict):
            raise BadRequest("Request body must be a JSON object")
        name = body.get("model")
        if name is not None and name not in self.options.served_model_names:
            raise BadRequest(f"The model `{name}` does not exist.", 404, "NotFoundError", "model")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise BadRequest("messages must be a non-empty list of message objects", param="messages")
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            raise invalid("max_tokens", max_tokens, f"max_tokens must be at least 1, got {max_tokens}.")
        limit = self.core.config.max_model_len
        if max_tokens is not None and max_tokens > limit:
            raise invalid(
                "max_tokens",
                max_tokens,
                f"max_tokens={max_tokens} cannot be greater than max_model_len={limit}. "
                "Please request fewer output tokens.",
            )
        check_sampling(body)
        tools = body.get("tools") or None
        if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
            raise BadRequest("tools must be a list of tool objects", param="tools")
        tool_choice = body.get("tool_choice", "auto" if tools else "none")
        if tools and tool_choice == "auto" and not self.options.enable_auto_tool_choice:
            raise BadRequest('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')
        kwargs = body.get("chat_template_kwargs")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise BadRequest("chat_template_kwargs must be an object", param="chat_template_kwargs")
        thinking, effort = thinking_enabled(
            kwargs, self.options.default_chat_template_kwargs, body.get("reasoning_effort")
        )
        temperature = body.get("temperature", 1.0)
        salt = "" if temperature == 0 else f"{body.get('seed', uuid.uuid4().hex)}"
        response_format = body.get("response_format")
        json_format = isinstance(response_format, dict) and str(response_format.get("type", "")).startswith("json")

        def planned(tokens: Optional[int]) -> tuple:
            reply = plan_reply(
                messages,
                max_tokens=tokens,
                thinking=thinking,
                reasoning_effort=effort,
                tools=tools,
                tool_choice=tool_choice,
                salt=salt,
                json_format=json_format,
            )
            if reply.reasoning and not self.options.reasoning_parser:
                reply = replace(reply, reasoning=(), content=reply.reasoning + reply.content)
            return reply, sequence_for("", messages, reply, self.core.config, tools, thinking)

        reply, seq = planned(max_tokens)
        if seq.prompt_tokens >= limit:  # vLLM counts the prompt up to one token past the limit
            seen = min(seq.prompt_tokens, limit + 1)
            raise invalid(
                "input_tokens",
                seen,
                f"This model's maximum context length is {limit} tokens. However, your prompt contains at least "
                f"{seen} input tokens, which exceeds this limit even without any output tokens. Please reduce the "
                "length of the input prompt.",
            )
        if max_tokens is not None and seq.prompt_tokens + max_tokens > limit:
            # vLLM 0.32 stops the reply at the context's end (finish_reason length) rather than refusing it
            reply, seq = planned(limit - seq.prompt_tokens)
        return reply, seq

    async def chat(self, request: Request) -> Response:
        if not self.ready:
            return JSONResponse(error_body("The engine is still starting.", "ServiceUnavailableError", 503), 503)
        if self.engine.dead:
            return JSONResponse(error_body(ENGINE_DEAD_MESSAGE, "InternalServerError", 500), 500)
        try:
            body = json.loads(await request.body())
        except json.JSONDecodeError as exc:  # vLLM's request validation error, as its API server words it
            where = f"body.{exc.pos}"
            detail = {
                "type": "json_invalid",
                "loc": where,
                "msg": "JSON decode error",
                "input": "<dict of 0 items>",
                "ctx": {"error": exc.msg},
            }
            return JSONResponse(error_body(f"1 validation error:\n  {detail}", "Bad Request", 400, where), 400)
        except ValueError as exc:
            return JSONResponse(error_body(f"Invalid body: {exc}", "Bad Request", 400, "body"), 400)
        try:
            reply, seq = self._plan(body)
        except BadRequest as exc:
            return exc.response
        stream = ChatStream(self, body, reply, seq)
        seq.seq_id = stream.request_id
        if self.options.pace_tok_s:
            self.paced_running += 1
            self.core.stats.prompt_tokens += seq.prompt_tokens
        else:
            StreamSource(seq)
            self.engine.submit(seq)
        if body.get("stream"):
            return StreamingResponse(stream.sse(), media_type="text/event-stream")
        try:
            return JSONResponse(await stream.complete())
        except EngineDead:
            return JSONResponse(error_body(ENGINE_DEAD_MESSAGE, "InternalServerError", 500), 500)

    # Engine stats log line --------------------------------------------------------------------
    def _stats_snapshot(self) -> tuple:
        s = self.core.stats
        return (
            s.prompt_tokens,
            s.generation_tokens,
            s.drafts,
            s.draft_tokens,
            s.accepted_tokens,
            tuple(s.accepted_per_pos[: self.core.config.num_speculative_tokens]),
        )

    async def log_stats_forever(self) -> None:
        """vLLM's periodic "Engine 000: ..." and SpecDecoding lines (interval figures) while there is traffic."""
        last = self._stats_snapshot()
        while True:
            await asyncio.sleep(STATS_LOG_INTERVAL_S)
            now = self._stats_snapshot()
            prompt, generated, drafts, drafted, accepted = (b - a for a, b in zip(last[:5], now[:5]))
            per_pos = [b - a for a, b in zip(last[5], now[5])]
            last = now
            if not (prompt or generated) and self.core.idle:
                continue
            stats = self.core.stats
            hit = 100.0 * stats.prefix_hits / stats.prefix_queries if stats.prefix_queries else 0.0
            log(
                "INFO",
                "loggers.py:127",
                f"Engine 000: Avg prompt throughput: {prompt / STATS_LOG_INTERVAL_S:.1f} tokens/s, "
                f"Avg generation throughput: {generated / STATS_LOG_INTERVAL_S:.1f} tokens/s, "
                f"Running: {len(self.core.running) + self.paced_running} reqs, Waiting: {len(self.core.waiting)} reqs, "
                f"GPU KV cache usage: {100.0 * self.kv_usage():.1f}%, Prefix cache hit rate: {hit:.1f}%",
            )
            if drafts:
                rates = ", ".join(f"{n / drafts:.3f}" for n in per_pos)
                log(
                    "INFO",
                    "metrics.py:96",
                    f"SpecDecoding metrics: Mean acceptance length: {1 + accepted / drafts:.2f}, "
                    f"Accepted: {accepted} tokens, Drafted: {drafted} tokens, Per-position acceptance rate: {rates}, "
                    f"Avg Draft acceptance rate: {100.0 * accepted / drafted:.1f}%",
                )


def configure_uvicorn_logging(access_log: bool) -> None:
    """uvicorn's access lines on stdout as vLLM shows them; its own startup lines are printed at ready."""
    from uvicorn.logging import AccessFormatter, DefaultFormatter

    access = logging.getLogger("uvicorn.access")
    access.handlers.clear()
    if access_log:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(
            AccessFormatter('%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s', use_colors=False)
        )
        access.addHandler(handler)
    access.setLevel(logging.INFO)
    access.propagate = False
    errors = logging.getLogger("uvicorn.error")
    errors.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(DefaultFormatter("%(levelprefix)s %(message)s", use_colors=False))
    errors.addHandler(handler)
    errors.setLevel(logging.WARNING)
    errors.propagate = False
