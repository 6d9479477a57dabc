"""The harness against the twin's vLLM stand-in (T04, T05, T06). Twin figures, checked against the seeds.

The module starts its own `python -m lanebook.twin.vllm serve` on a free port of 127.0.0.7 (never the
shared twin's 8888), configured from a shipped lane as its compose would: fixed K=5 (anemll-1m6,
seed 003) or the 5/4/3 verify schedule (anemll-0731, seed 000). One warm-up wave per level first,
as the warmup runbook does (T10: first use of a shape compiles). One trial per cell and shared servers keep it ~40 s.
"""

import json

import httpx
import pytest
from lanebook.lane.params import load_lane
from lanebook.speed.bands import compare_to_baseline
from lanebook.speed.baseline import stored_baseline
from lanebook.speed.command import run_speed
from lanebook.twin import vllm as twin_vllm

LEVELS = [1, 4, 6]


def start_lane(lane_name, log_dir):
    """A twin vLLM configured as the lane's compose would start it, warmed, on a free port of 127.0.0.7."""
    params = load_lane(lane_name)
    spec = {
        "method": params.speculative.method,
        "num_speculative_tokens": params.num_speculative_tokens,
        "draft_sample_method": params.speculative.draft_sample_method,
    }
    if params.speculative.schedule:
        spec["num_speculative_tokens_per_batch_size"] = [list(r) for r in params.speculative.schedule]
    args = [
        params.weights.repo,
        "--served-model-name",
        params.served_model_name,
        "--max-model-len",
        str(params.max_model_len),
        "--max-num-seqs",
        str(params.max_num_seqs),
        "--max-num-batched-tokens",
        str(params.env["MAX_NUM_BATCHED_TOKENS"]),
        "--gpu-memory-utilization",
        str(params.env["GPU_MEMORY_UTILIZATION"]),
        "--speculative-config",
        json.dumps(spec),
    ]
    server = twin_vllm.start_local(
        args,
        log_dir / f"{lane_name}.log",
        host="127.0.0.7",
        env={"LANEBOOK_TWIN_TIME_SCALE": "0.001", "VLLM_USE_BREAKABLE_CUDAGRAPH": "0"},
    )
    api = f"{server.url}/v1"
    run_speed(api, params.served_model_name, "probe", LEVELS, trials=1, max_tokens=8, lane_request=params.request)
    return server, api, params


@pytest.fixture(scope="module")
def fixed_k5(tmp_path_factory):
    server, api, lane = start_lane("anemll-1m6", tmp_path_factory.mktemp("twin-fixed"))
    yield api, lane
    server.stop()


@pytest.fixture(scope="module")
def schedule_543(tmp_path_factory):
    server, api, lane = start_lane("anemll-0731", tmp_path_factory.mktemp("twin-543"))
    yield api, lane
    server.stop()


def measure(api, params, workload, levels=LEVELS):
    """One trial per level: the SpeedResult (its document() is the speed document)."""
    httpx.delete(f"{api.removesuffix('/v1')}/twin/requests")
    speed = run_speed(
        api,
        params.served_model_name,
        workload,
        levels,
        trials=1,
        max_tokens=256,
        lane_request=params.request,
        twin=True,
    )
    assert speed.errors == 0
    return speed


def verified_k(speed) -> dict[int, float]:
    """Each wave's draft tokens per draft on the server's own counters (/metrics deltas): the K it verified."""
    return {w.concurrency: w.spec_decode.draft_tokens / w.spec_decode.drafts for w in speed.waves}


def served_aggregates(api, levels=LEVELS) -> dict[int, tuple[float, float]]:
    """Each wave's aggregate decode rate on the twin server's own clock (/twin/requests, since measure() began): its
    decode tokens over the span from its first request received to its last token emitted (the seed's aggregate),
    and over the span from its first token to its last (the decode alone, which the engine paces at absolute step
    deadlines: no admission or prefill in it, so a loaded machine skews it least)."""
    sent = sorted(httpx.get(f"{api.removesuffix('/v1')}/twin/requests").json()["requests"], key=lambda r: r["t_sent"])
    assert [len(sent)] == [sum(levels)], sent
    aggregates, start = {}, 0
    for level in levels:  # run_speed's waves, one after the other on an idle server
        wave, start = sent[start : start + level], start + level
        tokens = sum(r["completion_tokens"] - 1 for r in wave)
        last = max(r["t_last"] for r in wave)
        aggregates[level] = (
            tokens / (last - min(r["t_sent"] for r in wave)),
            tokens / (last - min(r["t_first"] for r in wave)),
        )
    return aggregates


@pytest.fixture(scope="module")
def fixed_probe(fixed_k5):
    """The fixed-K lane's probe waves: the document as measured, and the server's own aggregates of its waves. A
    wave whose every stream's first chunk shared its stamp with the next (a loaded machine) has no stream figure to
    compare, and a loaded machine only slows the twin's paced decode (it never runs ahead of its step deadlines): the
    waves are measured again, at most twice more, while an edge is merged or a figure is slower than seed 003's
    (measure() starts the server's record afresh). A figure faster than the seed's fails at once."""
    seed = stored_baseline("anemll-1m6").documents[0]
    for _ in range(3):
        speed = measure(*fixed_k5, "probe")
        document = speed.document()
        slower = [c for c in compare_to_baseline([document], [seed], tolerance=0.03).cells if c.verdict == "worse"]
        if all(run.get("edges_exact", 1) for run in document["runs"]) and not slower:
            break
    return document, served_aggregates(fixed_k5[0]), verified_k(speed)


def by_level(doc, figure):
    return {r["concurrency"]: r[figure] for r in doc["runs"]}


def test_t04_fixed_k5_matches_seed_003_within_3_percent(fixed_probe):
    fixed_probe, _, _ = fixed_probe
    comparison = compare_to_baseline([fixed_probe], [stored_baseline("anemll-1m6").documents[0]], tolerance=0.03)
    assert [(c.concurrency, c.figure, c.verdict) for c in comparison.cells if c.verdict != "within"] == []
    assert by_level(fixed_probe, "decode_tokens") == {1: 255, 4: 1020, 6: 1530}
    assert all(0 < r["acceptance_rate"] < 1 for r in fixed_probe["runs"])  # from the twin's /metrics deltas


def test_t05_543_schedule_beats_fixed_k5_in_aggregate_at_c4_c6(fixed_probe, schedule_543):
    """Two runs compared on the server's own clock (served_aggregates), not on two client wall times: its decode
    alone, which the engine paces at its step deadlines (admission and prefill, the same model on both sides, are
    what a loaded machine skews most: 4% apart once beside a full suite)."""
    _, fixed_agg, fixed_k = fixed_probe
    speed = measure(*schedule_543, "probe")
    sched_agg, sched_k = served_aggregates(schedule_543[0]), verified_k(speed)
    assert sched_agg[4][1] > fixed_agg[4][1] * 1.02 and sched_agg[6][1] > fixed_agg[6][1] * 1.02, (sched_agg, fixed_agg)
    # C1 verifies K=5 under both, on the servers' own counters. Not compared by rate: a single stream's rate follows
    # its acceptance draws (3.1% apart once on CI's machine, with K=5 on both)
    assert fixed_k[1] == sched_k[1] == 5, (fixed_k, sched_k)
    assert fixed_k[4] == fixed_k[6] == 5 and sched_k[4] < 5 and sched_k[6] < sched_k[4], (fixed_k, sched_k)
    assert by_level(speed.document(), "decode_tokens") == {1: 255, 4: 1020, 6: 1530}  # the client saw every token


def stream_rate(api_params, workload, attempts=3):
    """A C1 stream's decode rate. A stream whose first chunk arrived merged with the next (the client fell behind, on
    a loaded machine) has no rate and is left out of it, said so: it is measured again, up to ATTEMPTS times."""
    for _ in range(attempts):
        rate = by_level(measure(*api_params, workload, [1]).document(), "mean_stream_decode_tok_s")[1]
        if rate is not None:
            return rate
    pytest.fail(f"{workload}: no stream rate in {attempts} attempts: the client fell behind every time")


def test_t06_count_stream_beats_code(schedule_543):
    count, code = stream_rate(schedule_543, "count"), stream_rate(schedule_543, "code")
    assert count > code * 1.2
    assert 47 <= code <= 70  # seed 000: code/agent work lives in the 47-70 band
