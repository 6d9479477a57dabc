"""The engine core: slots, the verify schedule per batch size, first-use JIT and the counters it keeps."""

from __future__ import annotations

from helpers.twin_engine_cases import make_seq
from lanebook.twin import engine_core
from lanebook.twin.facts import SCHEDULE_543
from lanebook.twin.waves import run_virtual


def test_max_num_seqs_caps_running_and_the_rest_wait():
    core = engine_core.EngineCore(engine_core.EngineConfig(max_num_seqs=2))
    for i in range(5):
        core.add(make_seq(i, f"Probe {i}"))
    core.step()
    assert (len(core.running), len(core.waiting)) == (2, 3)


def test_k_for_batch_follows_the_schedule_and_falls_back_to_the_fixed_k():
    config = engine_core.EngineConfig(k_schedule=SCHEDULE_543)
    assert [config.k_for_batch(b) for b in range(1, 8)] == [5, 4, 4, 4, 3, 3, 5]


def test_t10_first_use_of_a_shape_pays_jit_once():
    config = engine_core.EngineConfig(time_scale=0.01)
    core = engine_core.EngineCore(config)
    first = run_virtual(core, [(0.0, make_seq(i, f"Probe {i}")) for i in range(4)])
    second = run_virtual(core, [(0.0, make_seq(i + 4, f"Probe {i + 4}")) for i in range(4)])
    jit = config.jit_delay_s
    assert max(t.t_last for t in first.values()) > max(t.t_last for t in second.values()) + 0.9 * jit
    assert core.stats.jit_events >= 1
    warmed = engine_core.EngineCore(config)
    warmed.warm_shapes |= warmed.reachable_shapes()
    run_virtual(warmed, [(0.0, make_seq(i, f"Probe {i}")) for i in range(4)])
    assert warmed.stats.jit_events == 0


def test_a_compiled_decode_bucket_serves_smaller_batches_at_the_same_k_only():
    core = engine_core.EngineCore(engine_core.EngineConfig(k_schedule=SCHEDULE_543))
    core.warm_shapes.add(("decode", 4, 4))
    assert core.is_warm(("decode", 4, 4)) and core.is_warm(("decode", 4, 2))
    assert not core.is_warm(("decode", 4, 8)) and not core.is_warm(("decode", 3, 2))
    assert not core.is_warm(("prefill", True)) and core.is_warm(("prefill", False))  # boot covers short prefill


def test_a_step_accounts_prefill_then_decode_with_drafts():
    core = engine_core.EngineCore(engine_core.EngineConfig())
    seq = make_seq(0, "Count from 1 to 400.", max_tokens=20)
    core.add(seq)
    prefill = core.step()
    assert (prefill.batch, prefill.k, [(s.seq_id, n) for s, n in prefill.emitted]) == (0, 0, [("s0", 1)])
    decode = core.step()
    assert (decode.batch, decode.k) == (1, 5)
    assert core.stats.drafts == 1 and core.stats.draft_tokens == 5
    assert core.stats.generation_tokens == 1 + decode.emitted[0][1] == seq.produced
    assert core.stats.accepted_tokens == decode.emitted[0][1] - 1 == sum(core.stats.accepted_per_pos)
    assert core.stats.prompt_tokens == seq.prompt_tokens


def test_a_finished_or_aborted_request_leaves_the_engine():
    core = engine_core.EngineCore(engine_core.EngineConfig())
    done, dropped = make_seq(0, "Reply exactly OK.", max_tokens=1), make_seq(1, "Probe 1")
    core.add(done)
    core.add(dropped)
    core.step()
    assert done.finished and done not in core.running
    core.abort(dropped)
    assert core.idle and core.step() is None


def test_batch_buckets_are_powers_of_two():
    assert [engine_core.batch_bucket(b) for b in range(1, 10)] == [1, 2, 4, 4, 8, 8, 8, 8, 16]
