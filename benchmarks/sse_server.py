"""A loopback OpenAI-style streaming server with a known schedule: the truth for speed accuracy figures.

Every stream sends the role chunk, then its first content token after TTFT, then chunks of K tokens
paced at a fixed token rate (a chunk leaves when its last token is due), then finish, usage and
[DONE] — vLLM's streaming shape. The server records, per request, when it wrote the first and last
content chunk to the socket; GET /bench/truth returns those records (DELETE clears them). /metrics
exposes vLLM's queue gauges and spec-decode counters (each chunk of k tokens counts as one draft
with k - 1 accepted tokens) so the harness's idle check and deltas run against a real endpoint.

Plain asyncio, no framework: the server must stay cheap enough to share two cores with the client.

Markers in the last user message select behaviours the harness must survive (tests use them):
#http500 (HTTP 500), #stall (stops after the first content chunk), #cut (closes before [DONE]),
#nousage (no usage chunk), #reasoning (delta.reasoning instead of content), #tools (tool_calls deltas),
#onechunk (all tokens in one chunk).

    python benchmarks/sse_server.py --port 0 --pace-tok-s 400 --tokens-per-chunk 3
prints "READY http://HOST:PORT" once listening. POST /bench/config {"pace_tok_s", "tokens_per_chunk",
"ttft_s"} changes the schedule between runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field

clock = time.perf_counter


@dataclass
class Schedule:
    pace_tok_s: float = 400.0
    tokens_per_chunk: int = 3
    ttft_s: float = 0.02
    num_speculative_tokens: int = 5


@dataclass
class State:
    schedule: Schedule
    model: str = "bench-model"
    running: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    truth: list[dict] = field(default_factory=list)


def _frame(payload: bytes) -> bytes:
    """One HTTP/1.1 chunked-transfer frame."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: dict) -> bytes:
    return _frame(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


class Stream:
    """Pre-encoded SSE chunks of one request, so the per-chunk cost is a bytes join and a write."""

    def __init__(self, rid: str, model: str):
        self.head = (
            b'data: {"id":"'
            + rid.encode()
            + b'","object":"chat.completion.chunk","created":'
            + str(int(time.time())).encode()
            + b',"model":"'
            + model.encode()
            + b'","choices":[{"index":0,"delta":'
        )
        self.rid, self.model = rid, model

    def delta(self, delta_json: bytes, finish: bytes = b"null") -> bytes:
        return _frame(self.head + delta_json + b',"logprobs":null,"finish_reason":' + finish + b"}]}\n\n")

    def content(self, text: str, field_name: str) -> bytes:
        return self.delta(b'{"' + field_name.encode() + b'":' + json.dumps(text).encode() + b"}")

    def tool_call(self, first: bool, text: str) -> bytes:
        call = {"index": 0, "function": {"arguments": text}}
        if first:
            call.update(id=f"call_{self.rid}", type="function", function={"name": "get_weather", "arguments": text})
        return self.delta(json.dumps({"tool_calls": [call]}, separators=(",", ":")).encode())


async def _chat(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: dict, state: State) -> None:
    schedule = state.schedule
    prompt = str(body.get("messages", [{}])[-1].get("content", ""))
    n_tokens = max(1, int(body.get("max_completion_tokens") or body.get("max_tokens") or 16))
    t_start = clock()
    if "#http500" in prompt:
        payload = b'{"error":{"message":"injected failure","code":500}}'
        writer.write(
            b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (len(payload), payload)
        )
        return
    per_chunk = n_tokens if "#onechunk" in prompt else max(1, schedule.tokens_per_chunk)
    field_name = "reasoning" if "#reasoning" in prompt else "content"
    stream = Stream(f"chatcmpl-{len(state.truth)}-{int(t_start * 1e6)}", state.model)
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
        b"transfer-encoding: chunked\r\n\r\n"
    )
    writer.write(stream.delta(b'{"role":"assistant","content":""}'))
    state.running += 1
    t_first = t_last = None
    sent = 0
    k = schedule.num_speculative_tokens
    try:
        t0 = clock() + schedule.ttft_s
        while sent < n_tokens:
            count = 1 if sent == 0 and per_chunk < n_tokens else min(per_chunk, n_tokens - sent)
            delay = t0 + (sent + count - 1) / schedule.pace_tok_s - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            text = " tok" * count
            if "#tools" in prompt:
                writer.write(stream.tool_call(sent == 0, text))
            else:
                writer.write(stream.content(text, field_name))
            t_last = clock()
            t_first = t_first or t_last
            sent += count
            if sent > count:  # decode steps after the first token count as drafts
                state.drafts += 1
                state.draft_tokens += k
                state.accepted_tokens += count - 1
                for pos in range(min(count - 1, k)):
                    state.accepted_per_position[pos] += 1
            await writer.drain()
            if "#stall" in prompt:
                while not reader.at_eof():
                    await asyncio.sleep(0.05)  # until the client gives up and closes the connection
                return
            if "#cut" in prompt and sent >= n_tokens // 2:
                writer.close()
                return
        writer.write(stream.delta(b"{}", b'"tool_calls"' if "#tools" in prompt else b'"length"'))
        if "#nousage" not in prompt:
            writer.write(
                _event(
                    {
                        "id": stream.rid,
                        "object": "chat.completion.chunk",
                        "model": state.model,
                        "choices": [],
                        "usage": {
                            "prompt_tokens": len(prompt) // 4,
                            "completion_tokens": sent,
                            "total_tokens": len(prompt) // 4 + sent,
                        },
                    }
                )
            )
        writer.write(_frame(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
    finally:
        state.running -= 1
        state.truth.append(
            {
                "prompt": prompt[:60],
                "t_start": t_start,
                "t_first": t_first,
                "t_last": t_last,
                "t_end": clock(),
                "completion_tokens": sent,
            }
        )


def _metrics(state: State) -> bytes:
    labels = f'engine="0",model_name="{state.model}"'
    lines = []
    for name, kind, value in (
        ("vllm:num_requests_running", "gauge", state.running),
        ("vllm:num_requests_waiting", "gauge", 0),
        ("vllm:spec_decode_num_drafts_total", "counter", state.drafts),
        ("vllm:spec_decode_num_draft_tokens_total", "counter", state.draft_tokens),
        ("vllm:spec_decode_num_accepted_tokens_total", "counter", state.accepted_tokens),
    ):
        lines += [f"# HELP {name} bench", f"# TYPE {name} {kind}", f"{name}{{{labels}}} {float(value)}"]
    per_pos = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    lines += [f"# HELP {per_pos} bench", f"# TYPE {per_pos} counter"]
    lines += [f'{per_pos}{{{labels},position="{i}"}} {float(v)}' for i, v in enumerate(state.accepted_per_position)]
    return ("\n".join(lines) + "\n").encode()


def _respond(writer: asyncio.StreamWriter, status: str, payload: bytes, ctype: str = "application/json") -> None:
    writer.write(
        b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s"
        % (status.encode(), ctype.encode(), len(payload), payload)
    )


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, state: State) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, path, _ = request_line.split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
            raw = await reader.readexactly(int(headers.get("content-length", 0)))
            if method == "POST" and path == "/v1/chat/completions":
                await _chat(reader, writer, json.loads(raw), state)
            elif path == "/metrics":
                _respond(writer, "200 OK", _metrics(state), "text/plain; version=0.0.4")
            elif path == "/bench/truth":
                if method == "DELETE":
                    state.truth.clear()
                _respond(writer, "200 OK", json.dumps({"requests": state.truth}).encode())
            elif method == "POST" and path == "/bench/config":
                for key, value in json.loads(raw or b"{}").items():
                    setattr(state.schedule, key, type(getattr(state.schedule, key))(value))
                _respond(writer, "200 OK", json.dumps(state.schedule.__dict__).encode())
            elif path == "/v1/models":
                _respond(
                    writer,
                    "200 OK",
                    json.dumps(
                        {"object": "list", "data": [{"id": state.model, "object": "model", "owned_by": "bench"}]}
                    ).encode(),
                )
            elif path == "/health":
                _respond(writer, "200 OK", b"")
            else:
                _respond(writer, "404 Not Found", b'{"detail":"Not Found"}')
            await writer.drain()
            if writer.is_closing():
                return
    except (asyncio.IncompleteReadError, ConnectionError):
        return
    finally:
        writer.close()


async def serve(host: str, port: int, schedule: Schedule, model: str) -> None:
    state = State(schedule, model, accepted_per_position=[0] * schedule.num_speculative_tokens)
    server = await asyncio.start_server(lambda r, w: _handle(r, w, state), host, port, backlog=1024)
    bound = server.sockets[0].getsockname()
    print(f"READY http://{bound[0]}:{bound[1]}", flush=True)
    async with server:
        await server.serve_forever()


def spawn(*args: str, host: str = "127.0.0.1") -> tuple[subprocess.Popen, str]:
    """Start this server in a subprocess on a free port; returns the process and its base URL."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--host", host, "--port", "0", *args], stdout=subprocess.PIPE, text=True
    )
    line = proc.stdout.readline()
    if not line.startswith("READY "):
        proc.kill()
        raise RuntimeError(f"bench server did not start (said {line!r})")
    return proc, line.split()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model", default="bench-model")
    parser.add_argument("--pace-tok-s", type=float, default=400.0)
    parser.add_argument("--tokens-per-chunk", type=int, default=3)
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    args = parser.parse_args()
    schedule = Schedule(args.pace_tok_s, args.tokens_per_chunk, args.ttft_ms / 1000.0)
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.host, args.port, schedule, args.model))
    else:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve(args.host, args.port, schedule, args.model))


if __name__ == "__main__":
    main()
