"""The diagnose follow-ups' requests (lanebook.verify.probes) against the twin's stand-in server as local subprocesses
(twin_serve: the recipe's serve flags; `variant` runs fault prefix-evict): what a dry run records, the A→B→A
protocol's counters and TTFT, and the K-boundary waves draining with every request measured."""

import httpx
import pytest
from helpers.twin_serve import NAME, OFF, SCHEDULE, main, truth, variant  # noqa: F401 - module-scoped server fixtures
from lanebook.base.errors import LanebookError
from lanebook.nodes.ssh import Executor
from lanebook.speed.workloads import load_workload
from lanebook.twin.timing import prefill_step_s
from lanebook.verify import diagnose, probes

API = "http://192.168.1.11:8888/v1"


def test_a_dry_run_records_each_request_and_sends_nothing():
    executor = Executor(dry_run=True)
    steps = diagnose.prefix_bodies(NAME, OFF, "t1", lines=2)
    assert probes.prefix_protocol(API, steps, executor) is None
    bodies = diagnose.boundary_bodies(NAME, load_workload("code"), OFF, "t1", 0, [16, 64])
    assert probes.boundary_run(API, [("C2", bodies)], executor, drain_timeout_s=30) is None
    assert probes.healthy(API, executor) is None
    assert executor.commands()[0] == (
        f"local: prefix cache A cold: POST {API}/chat/completions stream, max_tokens 16, prompt [t1-A] (178 chars), "
        'extra {"chat_template_kwargs": {"thinking": false}}; GET http://192.168.1.11:8888/metrics before and after'
    )
    assert executor.commands()[4:] == [
        f"local: K boundary C2 #1/2 (sent at once): POST {API}/chat/completions stream, max_tokens 16, prompt "
        "[t1-k0-0] "
        '(122 chars), extra {"chat_template_kwargs": {"thinking": false}}',
        f"local: K boundary C2 #2/2 (sent at once): POST {API}/chat/completions stream, max_tokens 64, prompt "
        "[t1-k0-1] "
        '(104 chars), extra {"chat_template_kwargs": {"thinking": false}}',
        "local: K boundary C2: GET http://192.168.1.11:8888/metrics until running = waiting = 0, bound 30 s",
        "local: GET http://192.168.1.11:8888/health",
    ]
    assert all(not r.exit_code for r in executor.history) and all(r.dry_run for r in executor.history)


def protocol(srv, tag):
    steps = probes.prefix_protocol(f"{srv.url}/v1", diagnose.prefix_bodies(NAME, OFF, tag, lines=120), Executor())
    return diagnose.prefix_verdict(steps)


def test_a_b_a_hits_a_again_on_the_recipe_server(main):  # noqa: F811
    httpx.delete(f"{main.url}/twin/requests")
    verdict = protocol(main, "p-main")
    assert verdict.ok and not verdict.evicted, verdict.summary()
    a_cold, a_repeat, b_cold, a_again = verdict.steps
    assert a_cold.queried_tokens == a_repeat.queried_tokens == a_again.queried_tokens > 1024
    assert a_repeat.hit_tokens == a_again.hit_tokens == (a_cold.queried_tokens // 256) * 256  # every full block
    # What the hit saves, from the server's own record of each request rather than two client TTFTs compared under
    # whatever load the machine has: A again prefilled only what the cache did not hold, while A cold's first token
    # came after the prefill of its whole prompt, which the twin sleeps (so a loaded machine only lengthens it).
    served = sorted(truth(main), key=lambda r: r["t_sent"])
    assert [r["cached_tokens"] for r in served] == [0, a_repeat.hit_tokens, 0, a_again.hit_tokens]
    cold, again = served[0], served[3]
    cold_prefill_s = prefill_step_s(1, cold["prompt_tokens"])
    again_prefill_s = prefill_step_s(1, again["prompt_tokens"] - again["cached_tokens"])
    assert cold["t_first"] - cold["t_sent"] >= cold_prefill_s > again_prefill_s
    assert a_cold.ttft_s >= cold_prefill_s and a_again.ttft_s > 0


def test_a_b_a_misses_a_again_under_fault_prefix_evict(variant):  # noqa: F811
    verdict = protocol(variant, "p-variant")
    assert verdict.evicted and not verdict.ok
    assert verdict.steps[3].hit_tokens == 0 < verdict.steps[1].hit_tokens


def test_the_boundary_waves_complete_and_drain(main):  # noqa: F811
    plan = diagnose.boundary_plan(SCHEDULE, 5, 4, 5, max_tokens=24, short_tokens=8)
    workload = load_workload("code")
    cases = [
        (name, diagnose.boundary_bodies(NAME, workload, OFF, "b-main", i, lengths))
        for i, (name, lengths) in enumerate(plan.cases())
    ]
    measured = probes.boundary_run(f"{main.url}/v1", cases, Executor(), drain_timeout_s=30)
    assert [c.name for c in measured] == ["C4 K=4", "C5 K=3", "C5→C4 mixed (one 8-token branch)"]
    assert [(c.wave.requests, c.wave.errors, c.drained, c.preemptions) for c in measured] == [
        (4, 0, True, 0.0),
        (5, 0, True, 0.0),
        (5, 0, True, 0.0),
    ]
    assert [c.wave.decode_tokens for c in measured] == [4 * 23, 5 * 23, 7 + 4 * 23]
    assert probes.healthy(f"{main.url}/v1", Executor()) is True
    assert diagnose.boundary_verdict(measured, {}, True).ok
    assert httpx.get(f"{main.url}/metrics").status_code == 200


# --- long-context probes: stepped, watched, refused unattended on a production head (pitfall P15) ---------------


def test_long_context_steps_double_from_one_batch_budget_to_the_target():
    assert probes.long_context_steps(131072) == [8192, 16384, 32768, 65536, 131072]
    assert probes.long_context_steps(200000) == [8192, 16384, 32768, 65536, 131072, 200000]
    assert probes.long_context_steps(4000) == [4000]
    assert probes.long_context_steps(1000, first_tokens=256) == [256, 512, 1000]


def test_a_long_probe_is_refused_unless_stepped_and_on_a_real_lane_attended():
    from lanebook.lane.params import load_lane

    real, twin = load_lane("anemll-0731"), load_lane("twin")
    stepped = probes.long_context_steps(131072)
    assert probes.long_probe_refusal(real, [64000], attended=False) is None  # below 128k: no P15 rule
    assert probes.long_probe_refusal(twin, stepped, attended=False) is None  # the twin is no production head
    assert probes.long_probe_refusal(real, stepped, attended=True) is None
    unattended = probes.long_probe_refusal(real, stepped, attended=False)
    assert unattended.startswith("pitfall P15") and "anemll-0731's production head" in unattended
    for jumpy in ([131072], [4096, 65536, 131072], [16384, 32768, 65536, 131072], [8192, 16384, 16384, 131072]):
        assert "must climb to its length in steps" in probes.long_probe_refusal(twin, jumpy, attended=True)
    assert probes.long_probe_refusal(real, [8192, 2_000_000], attended=True) == (
        "a 2,000,000-token probe is longer than the lane's MAX_MODEL_LEN 1,048,576"
    )


def test_the_lanes_policy_not_its_twin_label_decides_whether_a_long_probe_needs_watching():
    from lanebook.lane.params import LanePolicy, lane_with, load_lane

    stepped = probes.long_context_steps(131072)
    watched_twin = lane_with(load_lane("twin"), policy=LanePolicy())
    assert "production head" in probes.long_probe_refusal(watched_twin, stepped, attended=False)
    headless_real = lane_with(load_lane("anemll-0731"), policy=LanePolicy(attended_long_probes=False))
    assert probes.long_probe_refusal(headless_real, stepped, attended=False) is None


def test_a_refused_long_probe_sends_nothing_and_a_dry_run_records_each_step():
    import pytest
    from lanebook.base.errors import LanebookError
    from lanebook.lane.params import load_lane
    from lanebook.nodes.ssh import LaneNodes

    nodes = LaneNodes(load_lane("anemll-0731"), dry_run=True)
    with pytest.raises(LanebookError, match="pitfall P15"):
        probes.stepped_long_context(nodes, probes.long_context_steps(131072))
    with pytest.raises(LanebookError, match="must climb"):
        probes.stepped_long_context(nodes, [131072], attended=True)
    assert nodes.executor.history == []
    assert probes.stepped_long_context(nodes, probes.long_context_steps(131072), attended=True) is None
    assert [c.split(":")[1] for c in nodes.executor.commands()] == [
        " long context 8,192 tokens",
        " long context 16,384 tokens",
        " long context 32,768 tokens",
        " long context 65,536 tokens",
        " long context 131,072 tokens",
    ]
    assert all("until running = waiting = 0" in c for c in nodes.executor.commands())


def _served(srv, name=NAME):
    from lanebook.lane.params import lane_with, load_lane
    from lanebook.nodes.ssh import Executor, LaneNodes

    return LaneNodes(
        lane_with(load_lane("twin"), api=f"{srv.url}/v1", env={"SERVED_MODEL_NAME": name}), executor=Executor()
    )


def test_a_stepped_probe_climbs_on_an_idle_queue_and_stops_at_the_first_failure(main, twin):  # noqa: F811
    """On the twin server: each step waits for idle queues and sends one needle of its length (the server counts
    that many prompt tokens, plus the template's); a step that fails ends the climb, the longer steps are never sent."""
    steps = probes.stepped_long_context(_served(main), [256, 512, 1024])
    assert [s.tokens for s in steps] == [256, 512, 1024] and all(s.error is None for s in steps)
    overhead = {s.prompt_tokens - s.tokens for s in steps}  # the chat template's and the tag's tokens, once each
    assert len(overhead) == 1 and 0 <= overhead.pop() < 64, steps
    assert all(s.idle_wait_s >= 0 and s.ttft_s > 0 for s in steps)
    failed = probes.stepped_long_context(_served(main, "no-such-model"), [256, 512])
    assert len(failed) == 1 and failed[0].error.startswith("HTTP 404"), failed


def test_the_diagnose_probe_steps_in_a_dry_run_and_on_a_lane_without_a_boundary():
    from lanebook.steps.runbook import Runbook

    rb = Runbook("diagnose", "anemll-0731", dry_run=True)
    probes.prefix_cache_step(rb, run_tag="t", lines=2)
    probes.boundary_step(rb, run_tag="t", sizes=[4, 5], workload="code", max_tokens=64, short_tokens=16)
    assert [(c.what, c.outcome) for c in rb.checks] == [
        ("A hits the cache again after unrelated B (no eviction), and sooner than cold", "not observed"),
        ("C4↔C5 stays stable across the K boundary", "not observed"),
    ]
    assert rb.figures == {} and rb.commands()
    fixed = Runbook("diagnose", "anemll-1m6", dry_run=True)  # fixed K=5: nothing changes between C4 and C5
    probes.boundary_step(fixed, run_tag="t", sizes=[4, 5], workload="code", max_tokens=64, short_tokens=16)
    assert [(c.what, c.detail) for c in fixed.checks] == [
        (
            "C4↔C5 stays stable across the K boundary",
            "skipped: the lane verifies K=5 at both batch sizes: no boundary to cross",
        )
    ]
    assert fixed.commands() == []


def test_the_long_context_step_is_opt_in_and_refused_headless_on_a_real_lane():
    from lanebook.steps.runbook import Runbook

    rb = Runbook("diagnose", "anemll-0731", dry_run=True)
    probes.long_context_step(rb, enabled=False)
    assert rb.checks[-1].detail == "skipped: long_context=False (opt-in: pitfall P15)"
    probes.long_context_step(
        rb, enabled=True, attended=True
    )  # attended: a dry run records the climb to the lane's context
    climb = [line for line in rb.nodes.executor.commands() if line.startswith("local: long context ")]
    assert [line.split(" tokens:")[0] for line in climb][-1] == "local: long context 1,048,576"
    assert len(climb) == 8
    live = Runbook("diagnose", "anemll-0731", dry_run=True)
    live.dry_run = live.nodes.executor.dry_run = False  # as a headless real run: nobody said they watch the console
    with pytest.raises(LanebookError, match="P15.*attended"):
        probes.long_context_step(live, enabled=True, target_tokens=200_000)
    assert live.nodes.executor.commands() == []  # refused before anything is sent
