"""The diagnose follow-ups' requests (lanebook.probes) against the twin's stand-in server as local subprocesses
(twin_serve: the recipe's serve flags; `variant` runs fault prefix-evict): what a dry run records, the A→B→A
protocol's counters and TTFT, and the K-boundary waves draining with every request measured."""
import httpx

from lanebook import diagnose, probes
from lanebook.nodes import Executor
from lanebook.speed.workloads import load_workload
from twin_serve import NAME, OFF, SCHEDULE, main, variant  # noqa: F401 - module-scoped server fixtures

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
        'extra {"chat_template_kwargs": {"thinking": false}}; GET http://192.168.1.11:8888/metrics before and after')
    assert executor.commands()[4:] == [
        f"local: K boundary C2 #1/2 (sent at once): POST {API}/chat/completions stream, max_tokens 16, prompt [t1-k0-0] "
        '(122 chars), extra {"chat_template_kwargs": {"thinking": false}}',
        f"local: K boundary C2 #2/2 (sent at once): POST {API}/chat/completions stream, max_tokens 64, prompt [t1-k0-1] "
        '(104 chars), extra {"chat_template_kwargs": {"thinking": false}}',
        "local: K boundary C2: GET http://192.168.1.11:8888/metrics until running = waiting = 0, bound 30 s",
        "local: GET http://192.168.1.11:8888/health"]
    assert all(not r.exit_code for r in executor.history) and all(r.dry_run for r in executor.history)


def protocol(srv, tag):
    steps = probes.prefix_protocol(f"{srv.url}/v1", diagnose.prefix_bodies(NAME, OFF, tag, lines=120), Executor())
    return diagnose.prefix_verdict(steps)


def test_a_b_a_hits_a_again_on_the_recipe_server(main):  # noqa: F811
    verdict = protocol(main, "p-main")
    assert verdict.ok and not verdict.evicted, verdict.summary()
    a_cold, a_repeat, b_cold, a_again = verdict.steps
    assert a_cold.queried_tokens == a_repeat.queried_tokens == a_again.queried_tokens > 1024
    assert a_repeat.hit_tokens == a_again.hit_tokens == (a_cold.queried_tokens // 256) * 256  # every full block
    assert a_again.ttft_s < a_cold.ttft_s


def test_a_b_a_misses_a_again_under_fault_prefix_evict(variant):  # noqa: F811
    verdict = protocol(variant, "p-variant")
    assert verdict.evicted and not verdict.ok
    assert verdict.steps[3].hit_tokens == 0 < verdict.steps[1].hit_tokens


def test_the_boundary_waves_complete_and_drain(main):  # noqa: F811
    plan = diagnose.boundary_plan(SCHEDULE, 5, 4, 5, max_tokens=24, short_tokens=8)
    workload = load_workload("code")
    cases = [(name, diagnose.boundary_bodies(NAME, workload, OFF, "b-main", i, lengths))
             for i, (name, lengths) in enumerate(plan.cases())]
    measured = probes.boundary_run(f"{main.url}/v1", cases, Executor(), drain_timeout_s=30)
    assert [c.name for c in measured] == ["C4 K=4", "C5 K=3", "C5→C4 mixed (one 8-token branch)"]
    assert [(c.wave.requests, c.wave.errors, c.drained, c.preemptions) for c in measured] == \
        [(4, 0, True, 0.0), (5, 0, True, 0.0), (5, 0, True, 0.0)]
    assert [c.wave.decode_tokens for c in measured] == [4 * 23, 5 * 23, 7 + 4 * 23]
    assert probes.healthy(f"{main.url}/v1", Executor()) is True
    assert diagnose.boundary_verdict(measured, [], True).ok
    assert httpx.get(f"{main.url}/metrics").status_code == 200
