"""The speed figures (ARCHITECTURE.md, "Speed figures") from hand-built records: exact arithmetic, no server."""

import pytest
from lanebook.nodes.prometheus import SpecDecode
from lanebook.speed.metrics import estimate_tokens, request_figures, stamp_source, unmeasurable_reason, wave_figures
from lanebook.speed.records import (
    CONTENT,
    OTHER,
    REASONING,
    ROLE,
    STAMP_KERNEL,
    STAMP_LOOP,
    TOOL_CALLS,
    USAGE,
    ChunkArrival,
    RequestRecord,
    WaveRecord,
)

RUN_KEYS = [
    "concurrency",
    "trial",
    "requests",
    "ok",
    "errors",
    "decode_tokens",
    "wall_s",
    "mean_stream_decode_tok_s",
    "wall_aggregate_tok_s",
    "ttft_s_median",
    "acceptance_rate",
    "mean_acceptance_length",
    "tokens_estimated",
    "edges_exact",
    "edges_merged",
]


def stream(index, t_sent, t_first, rate, completion=256, per_chunk=3, t_done=None, role_at=None):
    """A record as the client would fill it: role chunk, 1-token first chunk, then per_chunk-token chunks at `rate`."""
    chunks = [ChunkArrival(role_at if role_at is not None else t_sent, ROLE)]
    sent, t = 0, t_first
    while sent < completion:
        count = 1 if sent == 0 else min(per_chunk, completion - sent)
        sent += count
        t = t_first + (sent - 1) / rate
        chunks.append(ChunkArrival(t, CONTENT))
    chunks += [ChunkArrival(t, OTHER), ChunkArrival(t, USAGE)]
    return RequestRecord(
        index=index,
        t_sent=t_sent,
        t_done=t if t_done is None else t_done,
        chunks=chunks,
        completion_tokens=completion,
        text_chars=4 * completion,
    )


@pytest.mark.parametrize(
    "concurrency, stream_rate, wall, decode, aggregate",
    [
        (1, 82.8, 3.33, 255, 76.6),
        (4, 59.1, 4.82, 1020, 211.6),
        (6, 42.5, 6.98, 1530, 219.2),
    ],
)
def test_seed_003_table(concurrency, stream_rate, wall, decode, aggregate):
    """Seed 003's C1/C4/C6 rows come out of their token counts and walls: 255/3.33 = 76.58 -> 76.6."""
    records = [stream(i, 0.0, 0.2 + 0.01 * i, stream_rate) for i in range(concurrency)]
    records[-1].t_done = wall  # the last response finishes at the seed's wall
    figures = wave_figures(WaveRecord(concurrency, 1, records))
    assert figures.decode_tokens == decode
    assert figures.wall_s == pytest.approx(wall)
    assert round(figures.wall_aggregate_tok_s, 1) == aggregate
    assert round(figures.mean_stream_decode_tok_s, 1) == stream_rate
    assert figures.ok == concurrency and figures.errors == 0 and not figures.tokens_estimated


def test_multi_token_chunks_count_by_usage_not_chunks():
    record = stream(0, 0.0, 0.5, 100.0, completion=256, per_chunk=5)
    content_chunks = sum(c.kind == CONTENT for c in record.chunks)
    assert content_chunks == 52  # 1 + ceil(255 / 5): counting chunks would say 51 decode tokens
    figures = request_figures(record)
    assert figures.decode_tokens == 255
    assert figures.stream_decode_tok_s == pytest.approx(100.0)


def test_role_only_chunk_does_not_open_the_window():
    record = stream(0, t_sent=1.0, t_first=1.8, rate=50.0, role_at=1.05)
    figures = request_figures(record)
    assert figures.t_first == 1.8 and figures.ttft_s == pytest.approx(0.8)


def test_reasoning_and_tool_call_chunks_count_as_content():
    record = RequestRecord(
        0,
        0.0,
        2.0,
        [
            ChunkArrival(0.1, ROLE),
            ChunkArrival(0.3, REASONING),
            ChunkArrival(1.0, CONTENT),
            ChunkArrival(1.3, TOOL_CALLS),
            ChunkArrival(1.3, USAGE),
        ],
        completion_tokens=41,
    )
    figures = request_figures(record)
    assert (figures.t_first, figures.t_last) == (0.3, 1.3)
    assert figures.stream_decode_tok_s == pytest.approx(40 / 1.0)


def test_without_usage_tokens_are_estimated_and_marked():
    record = stream(0, 0.0, 0.5, 100.0, completion=101)
    record.completion_tokens = None
    record.text_chars = 400
    assert estimate_tokens(record) == 100
    figures = wave_figures(WaveRecord(1, 1, [record]))
    assert figures.tokens_estimated is True
    assert figures.decode_tokens == 99


def test_errors_are_counted_never_dropped():
    good = stream(0, 0.0, 0.2, 80.0)
    failed = RequestRecord(1, 0.0, 9.0, error="timeout after 10 s")
    one_read = RequestRecord(2, 0.0, 0.5, [ChunkArrival(0.4, CONTENT)], completion_tokens=256)
    empty = RequestRecord(3, 0.0, 0.5, [ChunkArrival(0.1, ROLE), ChunkArrival(0.2, USAGE)], completion_tokens=0)
    figures = wave_figures(WaveRecord(4, 2, [good, failed, one_read, empty]))
    assert (figures.requests, figures.ok, figures.errors) == (4, 1, 3)
    assert figures.error_reasons == {
        "timeout after 10 s": 1,
        "no decode window (all content in one read)": 1,
        "no content in the stream": 1,
    }
    assert figures.wall_s == 9.0  # the failed request's finish still ends the wall
    assert figures.decode_tokens == 255
    assert unmeasurable_reason(good) is None


def test_all_failed_wave_has_no_stream_figures():
    figures = wave_figures(WaveRecord(2, 1, [RequestRecord(i, 0.0, 1.0, error="HTTP 500: x") for i in range(2)]))
    assert figures.mean_stream_decode_tok_s is None and figures.ttft_s_median is None
    assert figures.wall_aggregate_tok_s == 0.0 and figures.errors == 2


def test_run_json_has_exactly_the_spec_keys_and_acceptance():
    spec = SpecDecode(
        drafts=100, draft_tokens=500, accepted_tokens=230, accepted_per_position={0: 90, 1: 70, 2: 40, 3: 20, 4: 10}
    )
    figures = wave_figures(WaveRecord(1, 3, [stream(0, 0.0, 0.2, 80.0)], idle_wait_s=0.0, spec_decode=spec))
    run = figures.run_json()
    assert list(run) == RUN_KEYS
    assert run["acceptance_rate"] == 0.46 and run["mean_acceptance_length"] == 3.3
    assert figures.acceptance_per_position == [0.9, 0.7, 0.4, 0.2, 0.1]
    assert run["trial"] == 3 and run["tokens_estimated"] is False


def test_a_wave_names_its_one_stamp_source_and_refuses_a_mix():
    kernel = [stream(i, 0.0, 0.2, 80.0) for i in range(2)]
    for record in kernel:
        record.stamp_source = STAMP_KERNEL
    unread = RequestRecord(2, 0.0, 0.1, error="ConnectError: refused")  # read no stream: no source
    assert wave_figures(WaveRecord(3, 1, [*kernel, unread])).stamp_source == STAMP_KERNEL
    assert stamp_source([unread]) is None
    late = stream(3, 0.0, 0.2, 80.0)
    late.stamp_source = STAMP_LOOP
    with pytest.raises(ValueError, match="chunk times stamped by different sources in one run: kernel, loop"):
        wave_figures(WaveRecord(3, 1, [*kernel, late]))


def test_a_late_first_chunk_reads_high_by_exactly_its_lateness():
    """Why stamps must be arrivals: 255 decode tokens over a 5.1 s window are 50 tok/s; a first chunk
    stamped 51 ms late (loop lag) leaves 5.049 s, and the rate reads 255 / 5.049 = +1.01 %."""
    on_time = stream(0, 0.0, 0.2, 50.0)
    late = stream(0, 0.0, 0.2, 50.0)
    first = next(i for i, c in enumerate(late.chunks) if c.kind == CONTENT)
    late.chunks[first] = ChunkArrival(0.2 + 0.051, CONTENT)
    assert request_figures(on_time).stream_decode_tok_s == pytest.approx(50.0)
    assert request_figures(late).stream_decode_tok_s == pytest.approx(255 / 5.049)
    assert request_figures(late).ttft_s == pytest.approx(0.251)


def merged_first_edge(record):
    """The record as a client that fell behind reads it: the first content chunk stamped with the next one's arrival."""
    chunks = record.chunks
    first = next(i for i, c in enumerate(chunks) if c.kind == CONTENT)
    chunks[first] = ChunkArrival(chunks[first + 1].t, CONTENT)
    return record


def test_a_first_chunk_merged_with_the_next_is_left_out_of_stream_and_ttft():
    """255 tokens at 50 tok/s from a 1-token first chunk then 3-token chunks: the second chunk lands 60 ms after the
    first. Merged, that stream's window is 60 ms short (+1.19 %); left out, the wave reads the exact streams' 50.0."""
    exact = [stream(i, 0.0, 0.2, 50.0) for i in range(3)]
    merged = merged_first_edge(stream(3, 0.0, 0.2, 50.0))
    assert request_figures(merged).first_edge_exact is False
    assert request_figures(merged).stream_decode_tok_s == pytest.approx(255 / (5.1 - 0.06))
    figures = wave_figures(WaveRecord(4, 1, [*exact, merged]))
    assert figures.mean_stream_decode_tok_s == pytest.approx(50.0) and figures.ttft_s_median == pytest.approx(0.2)
    assert (figures.edges_exact, figures.edges_merged) == (3, 1)
    assert (figures.ok, figures.errors, figures.decode_tokens) == (4, 0, 4 * 255)  # still measured, still counted
    run = figures.run_json()
    assert (run["edges_exact"], run["edges_merged"]) == (3, 1)


def test_a_wave_with_no_exact_edge_has_no_stream_figures_and_says_why():
    merged = [merged_first_edge(stream(i, 0.0, 0.2, 50.0)) for i in range(2)]
    figures = wave_figures(WaveRecord(2, 1, merged))
    assert figures.mean_stream_decode_tok_s is None and figures.ttft_s_median is None
    assert (figures.edges_exact, figures.edges_merged, figures.ok, figures.errors) == (0, 2, 2, 0)
    assert figures.wall_aggregate_tok_s == pytest.approx(2 * 255 / figures.wall_s)


def test_the_last_chunk_sharing_its_stamp_with_the_previous_is_still_its_arrival():
    """Segments queued unread take the newest's stamp: a last chunk merged with the one before it keeps its own."""
    record = stream(0, 0.0, 0.2, 50.0)
    last = max(i for i, c in enumerate(record.chunks) if c.kind == CONTENT)
    record.chunks[last - 1] = ChunkArrival(record.chunks[last].t, CONTENT)
    figures = wave_figures(WaveRecord(1, 1, [record]))
    assert figures.mean_stream_decode_tok_s == pytest.approx(50.0) and figures.edges_exact == 1
