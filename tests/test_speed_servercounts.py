"""The server's own counts beside lanebook's (lanebook.speed.servercounts): /metrics deltas over a wave, lanebook's
sums, and the line `lanebook speed` prints."""

from lanebook.nodes.prometheus import parse_metrics
from lanebook.speed.records import CONTENT, ROLE, ChunkArrival, RequestRecord
from lanebook.speed.servercounts import (
    ServerCounts,
    client_completion_tokens,
    client_ttft_count,
    client_ttft_mean_s,
    counts_line,
    server_counts,
)


def exposition(generated: float, ttft_sum: float, ttft_count: float) -> str:
    return "\n".join(
        [
            "# TYPE vllm:generation_tokens counter",
            f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {generated}',
            "# TYPE vllm:time_to_first_token_seconds histogram",
            f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf",model_name="m"}} {ttft_count}',
            f'vllm:time_to_first_token_seconds_count{{engine="0",model_name="m"}} {ttft_count}',
            f'vllm:time_to_first_token_seconds_sum{{engine="0",model_name="m"}} {ttft_sum}',
            "",
        ]
    )


def record(index: int, t_sent: float, t_first: float, tokens) -> RequestRecord:
    return RequestRecord(
        index, t_sent, t_first + 1, [ChunkArrival(t_sent + 0.01, ROLE), ChunkArrival(t_first, CONTENT)], tokens
    )


def test_deltas_over_the_wave():
    counts = server_counts(parse_metrics(exposition(100, 2.0, 4)), parse_metrics(exposition(148, 2.6, 7)))
    assert counts.generation_tokens == 48
    assert round(counts.ttft_sum_s, 6) == 0.6 and counts.ttft_count == 3
    assert round(counts.ttft_mean_s, 6) == 0.2


def test_a_server_without_the_series_counts_nothing():
    empty = parse_metrics("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n")
    assert server_counts(empty, empty) is None
    assert ServerCounts(5, None, None).ttft_mean_s is None and ServerCounts(5, 1.0, 0).ttft_mean_s is None


def test_lanebooks_side():
    records = [record(0, 10.0, 10.3, 16), record(1, 10.0, 10.5, 16)]
    assert client_completion_tokens(records) == 32
    assert round(client_ttft_mean_s(records), 6) == 0.4
    assert client_completion_tokens([*records, record(2, 10.0, 10.2, None)]) is None  # a stream sent no usage
    no_content = RequestRecord(3, 10.0, 11.0, [ChunkArrival(10.1, ROLE)], 0)
    assert round(client_ttft_mean_s([*records, no_content]), 6) == 0.4
    assert client_ttft_count([*records, no_content]) == 2  # the mean covers two of the three


def test_the_line_says_equal_or_how_far_apart():
    records = [record(0, 10.0, 10.3, 16), record(1, 10.0, 10.5, 16)]
    line = counts_line(ServerCounts(32, 0.5, 2), records)
    assert line == (
        "server counted 32 generation tokens, lanebook counted 32 (equal); TTFT mean: server 0.250 s (2), "
        "lanebook 0.400 s (2)"
    )
    assert "(DIFFER by +3)" in counts_line(ServerCounts(35, 0.5, 2), records)
    assert "(DIFFER by -2)" in counts_line(ServerCounts(30, None, None), records)
    assert counts_line(None, records).startswith("server counts: /metrics has no")
