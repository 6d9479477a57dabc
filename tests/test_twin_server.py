"""The twin's `vllm serve` stand-in over HTTP: vLLM's formats, its boot log, and the seed facts it carries.

Servers run as real subprocesses on free loopback ports (127.0.0.7x, never the twin's 127.0.0.2:8888)
with a tiny LANEBOOK_TWIN_TIME_SCALE, so cold bind and JIT take a blink; decode rates are never scaled.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from recipe_fixtures import COMPOSE, FIXTURES, need

from lanebook.effective import container_spec
from lanebook.twin import server as twin_server
from lanebook.twin.engine import EngineConfig
from lanebook.twin.timing import JIT_DELAY_S
from lanebook.twin.vllm import free_port, start_local
from lanebook.twin.waves import simulate_wave

MODEL = "deepseek-ai/DeepSeek-V4-Flash-0731"
NAME = "twin-test"
SCHEDULE = [[1, 1, 5], [2, 4, 4], [5, 6, 3]]
SERVE_ARGS = [
    MODEL, "--served-model-name", NAME, "--max-model-len", "1048576", "--max-num-seqs", "6",
    "--max-num-batched-tokens", "8192", "--gpu-memory-utilization", "0.85", "--block-size", "256",
    "--long-prefill-token-threshold", "1024", "--enable-prefix-caching", "--enable-prompt-tokens-details",
    "--speculative-config", json.dumps({"method": "dspark", "num_speculative_tokens": 5,
                                        "num_speculative_tokens_per_batch_size": SCHEDULE}),
    "--default-chat-template-kwargs", '{"thinking":true,"reasoning_effort":"low"}',
    "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4",
]
SERVE_CONFIG = EngineConfig(k_schedule=tuple(map(tuple, SCHEDULE)))  # what SERVE_ARGS configure
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
OFF = {"chat_template_kwargs": {"thinking": False}}


@pytest.fixture(scope="module")
def main(tmp_path_factory):
    """The recipe's shape: breakable graphs opted out, 5/4/3 schedule, thinking on by default."""
    srv = start_local(SERVE_ARGS, tmp_path_factory.mktemp("main") / "vllm.log", host="127.0.0.71",
                      env={"VLLM_USE_BREAKABLE_CUDAGRAPH": "0", "LANEBOOK_TWIN_TIME_SCALE": "0.005"})
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def variant(tmp_path_factory):
    """The compose environment line missing (breakable graphs auto-enabled, T03) and fault prefix-evict (T13)."""
    srv = start_local(SERVE_ARGS, tmp_path_factory.mktemp("variant") / "vllm.log", host="127.0.0.72",
                      env={"LANEBOOK_TWIN_TIME_SCALE": "0.002", "LANEBOOK_TWIN_FAULTS": "prefix-evict"})
    yield srv
    srv.stop()


def chat(srv, content: str, **body) -> dict:
    payload = {"model": NAME, "messages": [{"role": "user", "content": content}], "temperature": 0, **body}
    response = httpx.post(f"{srv.url}/v1/chat/completions", json=payload, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def stream(srv, content: str, **body) -> tuple[list[dict], list[str], float]:
    """Streamed chat: the decoded events, the raw data lines, and the client's TTFT (first non-role delta)."""
    payload = {"model": NAME, "messages": [{"role": "user", "content": content}], "temperature": 0, "stream": True,
               "stream_options": {"include_usage": True}, **body}
    events, lines, ttft = [], [], None
    sent = time.monotonic()
    with httpx.stream("POST", f"{srv.url}/v1/chat/completions", json=payload, timeout=60) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            lines.append(line)
            if line != "data: [DONE]":
                events.append(json.loads(line[6:]))
                delta = (events[-1].get("choices") or [{}])[0].get("delta", {})
                if ttft is None and any(delta.get(k) for k in ("content", "reasoning", "tool_calls")):
                    ttft = time.monotonic() - sent
    return events, lines, ttft


def deltas(events: list[dict], key: str) -> list:
    return [e["choices"][0]["delta"][key] for e in events if e.get("choices") and key in e["choices"][0]["delta"]]


def truth(srv) -> list[dict]:
    return httpx.get(f"{srv.url}/twin/requests").json()["requests"]


def scrape(srv) -> dict:
    text = httpx.get(f"{srv.url}/metrics").text
    return {s.name + json.dumps(s.labels, sort_keys=True): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def metric(samples: dict, name: str) -> float:
    return sum(v for k, v in samples.items() if k.split("{")[0] == name)


# --- Flags and boot -------------------------------------------------------------------------------
def test_unknown_flag_is_refused_like_vllm_argparse():
    result = subprocess.run([sys.executable, "-m", "lanebook.twin.vllm", "serve", MODEL, "--bogus-flag", "1"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "vllm: error: unrecognized arguments: --bogus-flag 1" in result.stderr


def test_t01_fixture_recipe_at_080_fails_with_the_kv_figures(tmp_path):
    compose = need(FIXTURES / COMPOSE)
    spec = container_spec(compose, FIXTURES / "env.dspark.example", environ={"NODE_RANK": "0", "MASTER_ADDR": "127.0.0.73"})
    assert spec.arg("--gpu-memory-utilization") == "0.80"  # the compose default when the launcher sets nothing
    srv = start_local([*spec.argv[1:], "--nnodes", "1"], tmp_path / "vllm.log", host="127.0.0.73",
                      env={**spec.environment, "LANEBOOK_TWIN_TIME_SCALE": "0.002"}, wait_s=None)
    assert srv.process.wait(30) == 1
    log = srv.log()
    assert ("ValueError: To serve at least one request with the model's max seq len (1048576), (7.54 GiB KV cache "
            "is needed, which is larger than the available KV cache memory (7.16 GiB). Based on the available "
            "memory, the estimated maximum model length is 953088.") in log
    assert log.count("No available shared memory broadcast block found in 60 seconds") >= 1  # T09: not fatal
    assert "Application startup complete" not in log


def test_t02_t09_boot_log_lines(main):
    log = main.log()
    for line in ("GPU KV cache size: 2,493,464 tokens", "Maximum concurrency for 1,048,576 tokens per request: 2.38x",
                 "Available KV cache memory: 13.29 GiB", "Starting vLLM API server 0 on",
                 "Application startup complete."):
        assert line in log
    assert log.index("No available shared memory broadcast block") < log.index("Application startup complete.")
    assert "Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1" not in log


def test_t03_missing_breakable_opt_out_logs_and_slows_decode(main, variant):
    assert "Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1" in variant.log()
    rates = []
    for srv in (main, variant):
        httpx.delete(f"{srv.url}/twin/requests")
        chat(srv, "Count from 1 to 400, one number per line.", max_tokens=96, **OFF)
        record = truth(srv)[-1]
        rates.append((record["completion_tokens"] - 1) / (record["t_last"] - record["t_first"]))
    assert rates[1] < 0.9 * rates[0]


# --- Formats --------------------------------------------------------------------------------------
def test_health_models_and_routes_vllm_does_not_have(main):
    health = httpx.get(f"{main.url}/health")
    assert (health.status_code, health.content) == (200, b"")
    models = httpx.get(f"{main.url}/v1/models").json()
    assert models["object"] == "list"
    entry = models["data"][0]
    assert (entry["id"], entry["object"], entry["owned_by"], entry["root"], entry["max_model_len"]) == (
        NAME, "model", "vllm", MODEL, 1048576)
    assert entry["permission"][0]["object"] == "model_permission" and entry["parent"] is None
    for method, path in (("GET", "/api/v1/models"), ("POST", "/api/show"), ("GET", f"/v1/models/{NAME}")):
        response = httpx.request(method, f"{main.url}{path}")
        assert (response.status_code, response.json()) == (404, {"detail": "Not Found"})
    assert "twin" in httpx.get(f"{main.url}/version").json()["version"]


def test_streamed_chat_has_vllm_chunk_shapes(main):
    events, lines, _ = stream(main, "Reply exactly PROMOTE_0731_OK.", max_tokens=32, **OFF)
    assert events[0]["object"] == "chat.completion.chunk" and events[0]["model"] == NAME
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(deltas(events, "content")) == "PROMOTE_0731_OK"
    finals = [e for e in events if e.get("choices") and e["choices"][0]["finish_reason"]]
    assert len(finals) == 1 and finals[0]["choices"][0]["finish_reason"] == "stop"
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] > 0
    assert lines[-1] == "data: [DONE]"
    assert not deltas(events, "reasoning")


def test_a_chunk_carries_several_tokens_and_usage_counts_tokens(main):
    events, _, _ = stream(main, "Count from 1 to 400, one number per line.", max_tokens=64, **OFF)
    usage = events[-1]["usage"]
    assert usage["completion_tokens"] == 64 and usage["total_tokens"] == usage["prompt_tokens"] + 64
    assert "cached_tokens" in usage["prompt_tokens_details"]
    assert len(deltas(events, "content")) < 64  # speculative decoding: 1 + accepted tokens per chunk
    assert [e for e in events if e.get("choices") and e["choices"][0]["finish_reason"]][0]["choices"][0][
        "finish_reason"] == "length"


def test_non_streamed_chat_has_message_and_usage(main):
    body = chat(main, "Reply exactly CANARY_BLOG_OK.", max_tokens=32, **OFF)
    assert body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert (choice["message"]["role"], choice["message"]["content"], choice["finish_reason"]) == (
        "assistant", "CANARY_BLOG_OK", "stop")
    assert body["usage"]["completion_tokens"] >= 1 and body["usage"]["prompt_tokens"] > 0


def test_t12_tool_call_in_vllm_shape_streamed_and_not(main):
    prompt = "What is the weather in Pensacola, FL right now?"
    body = chat(main, prompt, tools=[WEATHER], **OFF)
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["id"].startswith("chatcmpl-tool-")
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Pensacola, FL"}
    events, _, _ = stream(main, prompt, tools=[WEATHER], **OFF)
    calls = [c for group in deltas(events, "tool_calls") for c in group]
    assert calls[0]["function"]["name"] == "get_weather" and calls[0]["id"].startswith("chatcmpl-tool-")
    assert json.loads("".join(c["function"]["arguments"] for c in calls)) == {"city": "Pensacola, FL"}


@pytest.mark.parametrize("kwargs, reasoning", [
    ({"thinking": "false"}, True),  # T11: the string "false" turns thinking ON
    ({"thinking": False}, False),
    (None, True),  # the server's --default-chat-template-kwargs (thinking on, low)
])
def test_t11_thinking_string_false_emits_reasoning(main, kwargs, reasoning):
    extra = {"chat_template_kwargs": kwargs} if kwargs is not None else {}
    events, _, _ = stream(main, "Reply exactly ROUTE_OK.", **extra)
    assert bool(deltas(events, "reasoning")) is reasoning
    assert "".join(deltas(events, "content")) == "ROUTE_OK"


def test_metrics_parse_with_vllm_names_and_the_fixture_families(main):
    stream(main, "Explain the lane to a new operator.", max_tokens=48, **OFF)
    samples = scrape(main)
    names = {k.split("{")[0] for k in samples}
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:num_preemptions_total",
                 "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
                 "vllm:e2e_request_latency_seconds_bucket"):
        assert name in names
    fixture = need(FIXTURES / "vllm-metrics-sample.txt").read_text()
    fixture_names = {s.name for f in text_string_to_metric_families(fixture) for s in f.samples}
    assert fixture_names <= names
    positions = {json.loads(k[k.index("{"):])["position"] for k in samples
                 if k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total")}
    assert positions == {"0", "1", "2", "3", "4"}
    assert all(json.loads(k[k.index("{"):])["model_name"] == NAME for k in samples if "{" in k and "vllm:" in k)
    assert metric(samples, "vllm:spec_decode_num_drafts_total") > 0
    assert metric(samples, "vllm:spec_decode_num_accepted_tokens_total") > 0


def test_server_decode_matches_the_model_and_truth_endpoint(main):
    httpx.delete(f"{main.url}/twin/requests")
    prompt = "Probe 0: report the lane status in a few words."
    stream(main, prompt, max_tokens=128, **OFF)
    records = truth(main)
    assert len(records) == 1 and records[0]["completion_tokens"] == 128
    record = records[0]
    served = (record["completion_tokens"] - 1) / (record["t_last"] - record["t_first"])
    expected = simulate_wave(SERVE_CONFIG, [prompt], 128).mean_stream_decode_tok_s
    assert served == pytest.approx(expected, rel=0.10)
    assert httpx.delete(f"{main.url}/twin/requests").json() == {"cleared": 1}
    assert truth(main) == []


def test_t10_first_long_prefill_pays_jit_then_warm(main):
    context = " ".join(f"entry{i} records a setting change and its measured effect." for i in range(200))
    first = stream(main, f"[A] {context} Which entries matter?", max_tokens=4, **OFF)[2]
    jit_first = truth(main)[-1]["jit_s"]
    second = stream(main, f"[B] {context} Which entries matter?", max_tokens=4, **OFF)[2]
    assert jit_first == pytest.approx(JIT_DELAY_S * 0.005)
    assert truth(main)[-1]["jit_s"] == 0
    assert first > second + 0.5 * jit_first
    assert "Compiling a graph for dynamic shape" in main.log()


@pytest.mark.parametrize("fixture_name, third_hits", [("main", True), ("variant", False)])
def test_t13_prefix_cache_a_b_a(request, fixture_name, third_hits):
    srv = request.getfixturevalue(fixture_name)
    a = "Prefix A: " + " ".join(f"alpha{i}" for i in range(400))
    b = "Prefix B: " + " ".join(f"beta{i}" for i in range(400))
    cached = []
    for prompt in (a, b, a):
        before = metric(scrape(srv), "vllm:prefix_cache_hits_total")
        events, _, _ = stream(srv, prompt, max_tokens=2, **OFF)
        cached.append(events[-1]["usage"]["prompt_tokens_details"]["cached_tokens"])
        assert metric(scrape(srv), "vllm:prefix_cache_hits_total") - before == cached[-1]
    assert cached[1] == 0
    assert (cached[2] > 0) is third_hits


def test_engine_dies_mid_bench_cuts_streams_and_health_turns_503(monkeypatch):
    monkeypatch.setattr(twin_server, "ENGINE_DIES_AFTER_TOKENS", 40)
    options = twin_server.ServeOptions(model=MODEL, served_model_names=[NAME],
                                       faults=frozenset({"engine-dies-mid-bench"}))
    app_server = twin_server.TwinServer(options, EngineConfig(time_scale=0.0))

    async def scenario():
        app_server.start_engine()
        app_server.mark_ready()
        transport = httpx.ASGITransport(app=app_server.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://twin") as client:
            body = {"model": NAME, "stream": True, "max_tokens": 200, "stream_options": {"include_usage": True},
                    **OFF}
            replies = await asyncio.gather(*(client.post("/v1/chat/completions", json={
                **body, "messages": [{"role": "user", "content": f"Explain item {i}."}]}) for i in range(2)))
            return replies, await client.get("/health"), await client.post("/v1/chat/completions", json={
                **body, "messages": [{"role": "user", "content": "again"}]})

    replies, health, after = asyncio.run(scenario())
    for reply in replies:
        assert '"type": "InternalServerError"' in reply.text and '"usage"' not in reply.text
    assert health.status_code == 503 and after.status_code == 500


# --- Multi-node rendezvous (T14) --------------------------------------------------------------------
def node_spec(rank: int, master: str, port: int, extra: dict | None = None):
    """The fixture compose's container for a node rank, as the twin's docker stand-in builds it."""
    environ = {"NODE_RANK": str(rank), "MASTER_ADDR": master, "MASTER_PORT": str(port),
               "GPU_MEMORY_UTILIZATION": "0.85", "HEADLESS": "1" if rank else ""}
    return container_spec(need(FIXTURES / COMPOSE), FIXTURES / "env.dspark.example", environ=environ)


def start_node(tmp_path, rank: int, master: str, port: int, knobs: dict):
    spec = node_spec(rank, master, port)
    return start_local(spec.argv[1:], tmp_path / f"node{rank}.log", host=master,
                       env={**spec.environment, **knobs}, wait_s=None)


def wait_for(predicate, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_head_without_worker_fails_clearly(tmp_path):
    head = start_node(tmp_path, 0, "127.0.0.74", free_port("127.0.0.74"),
                      {"LANEBOOK_TWIN_TIME_SCALE": "0.002", "LANEBOOK_TWIN_RENDEZVOUS_TIMEOUT_S": "1"})
    assert head.process.wait(30) == 1
    assert "DistStoreError: Timed out after 1 seconds waiting for clients. 1/2 clients joined." in head.log()


def test_worker_joins_and_leaves_with_a_clean_head_stop(tmp_path):
    port = free_port("127.0.0.75")
    knobs = {"LANEBOOK_TWIN_TIME_SCALE": "0.002"}
    head = start_node(tmp_path, 0, "127.0.0.75", port, knobs)
    worker = start_node(tmp_path, 1, "127.0.0.75", port, knobs)
    try:
        head.wait_healthy(30)
        assert "joined the TP group" in head.log()
        assert head.stop() == 0
        assert worker.process.wait(10) == 0
    finally:
        head.stop(), worker.stop()


def test_t14_head_dies_leaves_the_worker_orphaned(tmp_path):
    port = free_port("127.0.0.76")
    knobs = {"LANEBOOK_TWIN_TIME_SCALE": "0.002", "LANEBOOK_TWIN_FAULTS": "head-dies"}
    head = start_node(tmp_path, 0, "127.0.0.76", port, knobs)
    worker = start_node(tmp_path, 1, "127.0.0.76", port, knobs)
    try:
        assert head.process.wait(30) == 1
        assert "Application startup complete." in head.log() and "fault head-dies" in head.log()
        assert wait_for(lambda: "NCCL error" in worker.log())
        time.sleep(0.3)
        assert worker.process.poll() is None  # orphaned, still holding its GPU memory
    finally:
        head.stop(), worker.stop()
