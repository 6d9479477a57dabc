"""Prometheus /metrics parsing, deltas and spec-decode figures (lanebook.nodes.prometheus)."""

import asyncio
from pathlib import Path

import httpx
import pytest
from lanebook.nodes import prometheus
from lanebook.nodes.prometheus import (
    ACCEPTED_PER_POSITION,
    DRAFTS,
    MetricsUnavailable,
    metrics_url,
    parse_metrics,
    queue_depth,
    scrape,
    spec_decode_delta,
)

FIXTURE = (
    Path(__file__).resolve().parents[1] / ".." / "shared" / "fixtures" / "miaai-recipe" / "vllm-metrics-sample.txt"
)


def exposition(drafts, draft_tokens, accepted, per_pos, running=0, waiting=0, engines=("0",)):
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        "# TYPE vllm:num_requests_waiting gauge",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
    ]
    for engine in engines:
        labels = f'engine="{engine}",model_name="m"'
        lines += [
            f"vllm:num_requests_running{{{labels}}} {running}",
            f"vllm:num_requests_waiting{{{labels}}} {waiting}",
            f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}",
            f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {draft_tokens}",
            f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted}",
        ]
        lines += [
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {v}'
            for i, v in enumerate(per_pos)
        ]
    return "\n".join(lines) + "\n"


def test_real_vllm_excerpt_parses():
    if not FIXTURE.is_file():
        pytest.skip(f"shared fixture not present: {FIXTURE}")
    snapshot = parse_metrics(FIXTURE.read_text())
    assert snapshot.total(DRAFTS) == 105.0
    assert snapshot.by_label(ACCEPTED_PER_POSITION, "position") == {
        "0": 84.0,
        "1": 63.0,
        "2": 1.0,
        "3": 1.0,
        "4": 0.0,
        "5": 0.0,
    }
    # acceptance over the process lifetime (a delta from zero): 149 / 630 drafted, 1 + 149 / 105 per draft
    spec = spec_decode_delta(parse_metrics(""), snapshot)
    assert spec.acceptance_rate == pytest.approx(149 / 630)
    assert spec.mean_acceptance_length == pytest.approx(1 + 149 / 105)
    assert spec.acceptance_per_position[:2] == pytest.approx([84 / 105, 63 / 105])
    with pytest.raises(MetricsUnavailable):  # the excerpt has no queue gauges: idleness cannot be proven
        queue_depth(snapshot)


def test_deltas_between_snapshots_sum_engines():
    before = parse_metrics(exposition(100, 500, 200, [80, 60, 40, 15, 5], engines=("0", "1")))
    after = parse_metrics(exposition(150, 750, 330, [125, 95, 70, 30, 10], running=2, engines=("0", "1")))
    spec = spec_decode_delta(before, after)
    assert (spec.drafts, spec.draft_tokens, spec.accepted_tokens) == (100, 500, 260)  # two engines each
    assert spec.acceptance_rate == pytest.approx(0.52)
    assert spec.mean_acceptance_length == pytest.approx(3.6)
    assert spec.acceptance_per_position == pytest.approx([0.9, 0.7, 0.6, 0.3, 0.1])
    assert queue_depth(after) == (4, 0)
    assert after.total("vllm:num_requests_running", engine="1") == 2
    assert after.total("vllm:num_requests_running", engine="7") == 0


def test_no_spec_decode_counters_means_no_acceptance():
    text = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
    assert spec_decode_delta(parse_metrics(text), parse_metrics(text)) is None


def test_idle_window_gives_no_rate_rather_than_dividing_by_zero():
    same = parse_metrics(exposition(10, 50, 20, [8, 6, 4, 1, 1]))
    spec = spec_decode_delta(same, same)
    assert spec.acceptance_rate is None and spec.mean_acceptance_length is None and spec.acceptance_per_position == []


def test_garbage_is_one_clear_error():
    with pytest.raises(MetricsUnavailable, match="not Prometheus text"):
        parse_metrics("<html>not metrics {{{</html>\n")


@pytest.mark.parametrize(
    "api, url",
    [
        ("http://127.0.0.2:8888/v1", "http://127.0.0.2:8888/metrics"),
        ("http://h:1/v1/", "http://h:1/metrics"),
        ("http://h:1", "http://h:1/metrics"),
    ],
)
def test_metrics_url_is_beside_v1(api, url):
    assert metrics_url(api) == url


async def scrape_from_a_server_answering_after(delay_s: float, client_timeout_s: float) -> prometheus.Snapshot:
    """scrape() against a loopback server that reads the request, waits, then answers with one gauge pair."""
    body = exposition(1, 5, 3, [1, 1, 1, 0, 0], running=2).encode()

    async def answer(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(delay_s)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=client_timeout_s) as client:
            return await scrape(client, f"http://127.0.0.1:{port}/metrics")
    finally:
        server.close()


def test_a_slow_answer_within_the_bound_is_read_whatever_the_clients_own_timeout():
    # the client's read timeout (httpx's default is 5 s) must not cut a scrape shorter than its stated bound
    snapshot = asyncio.run(scrape_from_a_server_answering_after(0.3, client_timeout_s=0.05))
    assert queue_depth(snapshot) == (2, 0)


def test_no_answer_within_the_bound_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(prometheus, "SCRAPE_BOUND_S", 0.2)
    with pytest.raises(MetricsUnavailable, match=r"/metrics gave no answer within 0\.2 s$"):
        asyncio.run(scrape_from_a_server_answering_after(5.0, client_timeout_s=30))
