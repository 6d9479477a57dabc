"""Shared by the twin's engine-process tests (test_twin_vllm, test_twin_server): the recipe's serve flags,
two module-scoped stand-in servers and small HTTP helpers.

Servers run as real subprocesses on free loopback ports (127.0.0.7x, never the twin's 127.0.0.2:8888)
with a tiny LANEBOOK_TWIN_TIME_SCALE, so cold bind and JIT take a blink; decode rates are never scaled.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from lanebook.twin.engine_core import EngineConfig
from lanebook.twin.vllm import start_local
from prometheus_client.parser import text_string_to_metric_families

MODEL = "deepseek-ai/DeepSeek-V4-Flash-0731"
NAME = "twin-test"
SCHEDULE = [[1, 1, 5], [2, 4, 4], [5, 6, 3]]
SERVE_ARGS = [
    MODEL,
    "--served-model-name",
    NAME,
    "--max-model-len",
    "1048576",
    "--max-num-seqs",
    "6",
    "--max-num-batched-tokens",
    "8192",
    "--gpu-memory-utilization",
    "0.85",
    "--block-size",
    "256",
    "--long-prefill-token-threshold",
    "1024",
    "--enable-prefix-caching",
    "--enable-prompt-tokens-details",
    "--speculative-config",
    json.dumps({"method": "dspark", "num_speculative_tokens": 5, "num_speculative_tokens_per_batch_size": SCHEDULE}),
    "--default-chat-template-kwargs",
    '{"thinking":true,"reasoning_effort":"low"}',
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "deepseek_v4",
    "--reasoning-parser",
    "deepseek_v4",
]
SERVE_CONFIG = EngineConfig(k_schedule=tuple(map(tuple, SCHEDULE)))  # what SERVE_ARGS configure
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
OFF = {"chat_template_kwargs": {"thinking": False}}


@pytest.fixture(scope="module")
def main(tmp_path_factory):
    """The recipe's shape: breakable graphs opted out, 5/4/3 schedule, thinking on by default."""
    srv = start_local(
        SERVE_ARGS,
        tmp_path_factory.mktemp("main") / "vllm.log",
        host="127.0.0.71",
        env={"VLLM_USE_BREAKABLE_CUDAGRAPH": "0", "LANEBOOK_TWIN_TIME_SCALE": "0.005"},
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def variant(tmp_path_factory):
    """The compose environment line missing, so breakable graphs are auto-enabled (fact T03), and fault
    prefix-evict, so an unrelated prompt empties the prefix cache (fact T13)."""
    srv = start_local(
        SERVE_ARGS,
        tmp_path_factory.mktemp("variant") / "vllm.log",
        host="127.0.0.72",
        env={"LANEBOOK_TWIN_TIME_SCALE": "0.002", "LANEBOOK_TWIN_FAULTS": "prefix-evict"},
    )
    yield srv
    srv.stop()


def chat(srv, content: str, **body) -> dict:
    payload = {"model": NAME, "messages": [{"role": "user", "content": content}], "temperature": 0, **body}
    response = httpx.post(f"{srv.url}/v1/chat/completions", json=payload, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def stream(srv, content: str, **body) -> tuple[list[dict], list[str], float]:
    """Streamed chat: the decoded events, the raw data lines, and the client's TTFT (first non-role delta)."""
    payload = {
        "model": NAME,
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        **body,
    }
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
    return {
        s.name + json.dumps(s.labels, sort_keys=True): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def metric(samples: dict, name: str) -> float:
    return sum(v for k, v in samples.items() if k.split("{")[0] == name)
