"""The diagnose follow-ups' requests, sent with the speed harness, and what the lane showed around them.

Every request goes through lanebook.speed's streaming client (first-content times, kernel receive stamps)
and every counter comes from /metrics scraped with the queue idle, so a delta belongs to the requests
sent; lanebook.verify.diagnose judges the figures. Each send is recorded in the lane's executor history first,
so a dry run lists the requests it would send and sends none.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

import httpx

from lanebook.base import frontend
from lanebook.base.errors import LanebookError
from lanebook.lane.params import LaneParams
from lanebook.nodes.http import direct_client
from lanebook.nodes.prometheus import PREEMPTIONS, QueueNotIdle, metrics_url, scrape, server_root, wait_idle
from lanebook.nodes.ssh import Executor, LaneNodes
from lanebook.ops.launcher import lane_containers
from lanebook.ops.logs import scan_fatal
from lanebook.speed.client import chat_url, new_client, request_timeout_s, run, run_wave, stream_chat
from lanebook.speed.command import run_speed
from lanebook.speed.metrics import content_times, wave_figures
from lanebook.speed.workloads import load_workload
from lanebook.verify.diagnose import (
    BoundaryCase,
    PrefixStep,
    boundary_bodies,
    boundary_plan,
    boundary_verdict,
    prefix_bodies,
    prefix_step,
    prefix_verdict,
)

if TYPE_CHECKING:
    from lanebook.steps.runbook import Runbook

IDLE_TIMEOUT_S = 120.0


def describe(url: str, body: dict, label: str) -> str:
    """One request as the command list shows it: what it is for, where it goes and its shape (not its prompt)."""
    prompt = body["messages"][-1]["content"]
    tag = prompt.split("]", 1)[0] + "]" if prompt.startswith("[") else ""
    return (
        f"{label}: POST {url} stream, max_tokens {body['max_tokens']}, prompt {tag} ({len(prompt):,} chars), "
        f"""extra {
            json.dumps(
                {
                    k: v
                    for k, v in body.items()
                    if k not in ("model", "messages", "max_tokens", "stream", "stream_options", "temperature")
                },
                sort_keys=True,
            )
        }"""
    )


def prefix_protocol(
    api: str, steps: Sequence[tuple[str, dict]], executor: Executor, idle_timeout_s: float = IDLE_TIMEOUT_S
) -> Optional[list[PrefixStep]]:
    """Each step's request alone on an idle lane, /metrics scraped before and after it; None in a dry run."""
    url, metrics = chat_url(api), metrics_url(api)
    for name, body in steps:
        executor.record_local(describe(url, body, f"prefix cache {name}") + f"; GET {metrics} before and after")
    if executor.dry_run:
        return None

    async def protocol() -> list[PrefixStep]:
        found = []
        async with new_client() as client:
            for name, body in steps:
                before, _ = await wait_idle(client, metrics, idle_timeout_s)
                record = await stream_chat(
                    client, url, json.dumps(body).encode(), 0, request_timeout_s(body["max_tokens"])
                )
                after, _ = await wait_idle(client, metrics, idle_timeout_s)
                found.append(prefix_step(name, record, before, after))
        return found

    return run(protocol())


def boundary_run(
    api: str, cases: Sequence[tuple[str, list[dict]]], executor: Executor, drain_timeout_s: float = IDLE_TIMEOUT_S
) -> Optional[list[BoundaryCase]]:
    """Each case's requests sent at once on an idle lane; then the drain (bounded) and the preemption delta.

    A queue still busy after the bound is recorded as not drained; the next case waits for idle as every
    wave does, and fails the run if it never comes."""
    url, metrics = chat_url(api), metrics_url(api)
    for name, bodies in cases:
        for i, body in enumerate(bodies):
            executor.record_local(describe(url, body, f"K boundary {name} #{i + 1}/{len(bodies)} (sent at once)"))
        executor.record_local(
            f"K boundary {name}: GET {metrics} until running = waiting = 0, bound {drain_timeout_s:g} s"
        )
    if executor.dry_run:
        return None

    async def stability() -> list[BoundaryCase]:
        found = []
        async with new_client() as client:
            for trial, (name, bodies) in enumerate(cases, start=1):
                encoded = [json.dumps(b).encode() for b in bodies]
                timeout = request_timeout_s(max(b["max_tokens"] for b in bodies))
                before, _ = await wait_idle(client, metrics, drain_timeout_s)
                wave = await run_wave(
                    client,
                    url,
                    encoded,
                    trial,
                    timeout,
                    metrics,
                    idle_timeout_s=drain_timeout_s,
                    models_url=f"{api.rstrip('/')}/models",
                )
                started = time.monotonic()
                try:
                    after, drain = await wait_idle(client, metrics, drain_timeout_s)
                    drained = True
                except QueueNotIdle:
                    after, drain, drained = await scrape(client, metrics), time.monotonic() - started, False
                preemptions = after.minus(before).total(PREEMPTIONS) or 0.0
                found.append(BoundaryCase(name, wave_figures(wave), drained, drain, preemptions))
        return found

    return run(stability())


def healthy(api: str, executor: Executor) -> Optional[bool]:
    """One GET /health: 200 once the engine is up, 503 after engine death. None in a dry run."""
    url = f"{server_root(api)}/health"
    executor.record_local(f"GET {url}")
    if executor.dry_run:
        return None
    try:
        with direct_client(timeout=10.0) as client:
            return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def fatal_log_lines(nodes: LaneNodes) -> dict[str, dict[str, list[str]]]:
    """Every rank's log scanned for logs.FATAL_LOG_PATTERNS: {node: {kind: lines}}."""
    found: dict[str, dict[str, list[str]]] = {}
    for alias, names in lane_containers(nodes).running.items():
        by_kind = found.setdefault(alias, {})
        for name in names:  # every container of the node: one's lines never hide another's
            for kind, lines in scan_fatal(nodes.node(alias), name).items():
                by_kind.setdefault(kind, []).extend(lines)
    return found


def measure_workloads(
    nodes: LaneNodes, workloads: Sequence[str], concurrency: Sequence[int], trials: int, max_tokens: int
) -> Optional[list[dict]]:
    """One speed document per workload on the lane's API (run_speed, as `lanebook speed` measures); None in a dry
    run."""
    params = nodes.params
    for workload in workloads:
        nodes.executor.record_local(
            f"speed {workload}: {trials} trial(s) × C{','.join(map(str, concurrency))}, "
            f"max_tokens {max_tokens}, streamed to {chat_url(params.api)}"
        )
    if nodes.executor.dry_run:
        return None
    return [
        run_speed(
            params.api,
            params.served_model_name,
            workload,
            list(concurrency),
            trials,
            max_tokens,
            lane_request=params.request,
            twin=params.twin,
        ).document()
        for workload in workloads
    ]


def document_figures(documents: Sequence[dict]) -> dict[str, Any]:
    """The bands of speed documents by workload, as a run record keeps them."""
    return {doc["workload"]: doc["bands"] for doc in documents}


# --- long-context probes (pitfall P15) -------------------------------------------------------------------------
# An unwatched synthetic cold needle of 128k tokens or more on the sole production head can hard-hang the box. So a
# probe that long climbs to its length in steps, each at most twice the one before from one batch budget, with the
# queues read idle and /health asked before every step and the climb stopped at the first step that fails; and where
# the lane's policy.attended_long_probes holds (a real lane's default) it runs only with an operator watching the
# head's console (a headless run never is). "128k" is read as 128,000 so that nothing near the line slips under it.
LONG_CONTEXT_TOKENS = 128_000
FIRST_STEP_TOKENS = 8192  # the lane's batch budget (MAX_NUM_BATCHED_TOKENS 8192): one prefill step's worth


def long_context_steps(target_tokens: int, first_tokens: int = FIRST_STEP_TOKENS) -> list[int]:
    """The lengths a long-context probe sends, growing: FIRST, doubling, and TARGET last (pure)."""
    if target_tokens < 1 or first_tokens < 1:
        raise LanebookError(
            f"a long-context probe needs positive lengths, got target {target_tokens}, first {first_tokens}"
        )
    steps, length = [], min(first_tokens, target_tokens)
    while length < target_tokens:
        steps.append(length)
        length *= 2
    return steps + [target_tokens]


def long_probe_refusal(params: LaneParams, lengths: Sequence[int], *, attended: bool) -> Optional[str]:
    """Why these probe lengths must not be sent to the lane (None: they may), naming pitfall P15."""
    lengths = list(lengths)
    if not lengths:
        return "a long-context probe needs at least one length"
    longest = max(lengths)
    if longest > params.max_model_len:
        return f"a {longest:,}-token probe is longer than the lane's MAX_MODEL_LEN {params.max_model_len:,}"
    if longest < LONG_CONTEXT_TOKENS:
        return None
    climbs = lengths[0] <= FIRST_STEP_TOKENS and all(a < b <= 2 * a for a, b in zip(lengths, lengths[1:]))
    if not climbs:
        return (
            f"pitfall P15 (unwatched long cold needles): a {longest:,}-token probe must climb to its length in steps, "
            f"from at most {FIRST_STEP_TOKENS:,} tokens, each at most twice the one before "
            f"(probes.long_context_steps({longest}) gives them); got {lengths}"
        )
    if params.policy.attended_long_probes and not attended:
        return (
            f"pitfall P15 (unwatched long cold needles): a {longest:,}-token probe on {params.name}'s production head "
            "runs only with an operator watching its console (attended); a headless run is not watched"
        )
    return None


@dataclass(frozen=True)
class LongContextStep:
    """One step of a stepped long-context probe: its length, what the server counted, and how it ended."""

    tokens: int
    prompt_tokens: Optional[int]  # as the server counted them (usage), None when it sent none
    ttft_s: Optional[float]
    error: Optional[str]  # None: the step streamed content and /health stayed 200
    idle_wait_s: float  # how long the queues took to read idle before the step


def needle_body(model: str, tokens: int, request: dict, tag: str, max_tokens: int = 8) -> dict:
    """A cold needle of about TOKENS tokens (one filler word per token, as common English words are cut), unique
    from its first characters (TAG) so no prefix cache shortens it."""
    filler = " ".join(["ledger"] * max(0, tokens - 16))
    prompt = f"[{tag}] {filler}\nReply with the single word: done"
    return {
        **request,
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def stepped_long_context(
    nodes: LaneNodes, lengths: Sequence[int], *, attended: bool = False, idle_timeout_s: float = IDLE_TIMEOUT_S
) -> Optional[list[LongContextStep]]:
    """Send the probe lengths one at a time, growing, on a watched queue: before each step the queues must read idle
    and /health 200, and the climb stops at the first step that fails. Refused (LanebookError) as
    long_probe_refusal says; None in a dry run, which records the steps and sends nothing."""
    refusal = long_probe_refusal(nodes.params, lengths, attended=attended)
    if refusal:
        raise LanebookError(refusal)
    params, executor = nodes.params, nodes.executor
    url, metrics, health = chat_url(params.api), metrics_url(params.api), f"{server_root(params.api)}/health"
    for tokens in lengths:
        executor.record_local(
            f"long context {tokens:,} tokens: GET {metrics} until running = waiting = 0 and GET "
            f"{health} = 200, then POST {url} stream, one cold needle, max_tokens 8"
        )
    if executor.dry_run:
        return None

    async def climb() -> list[LongContextStep]:
        found: list[LongContextStep] = []
        async with new_client() as client:
            for step, tokens in enumerate(lengths, start=1):
                _, idle_wait = await wait_idle(client, metrics, idle_timeout_s)
                if (await client.get(health)).status_code != 200:
                    found.append(LongContextStep(tokens, None, None, "/health is not 200 before the step", idle_wait))
                    break
                body = needle_body(params.served_model_name, tokens, params.request, f"long-{step}-{time.time_ns()}")
                record = await stream_chat(
                    client, url, json.dumps(body).encode(), step, request_timeout_s(8 + tokens // 100)
                )
                times = content_times(record)
                error = record.error or (None if times else "no content in the stream")
                ttft = times[0] - record.t_sent if times else None
                found.append(LongContextStep(tokens, record.prompt_tokens, ttft, error, idle_wait))
                if error:
                    break
        return found

    return run(climb())


# --- the diagnose runbook's probe steps (each takes the runbook: it records and checks) ---------------------


def prefix_cache_step(
    rb: "Runbook", *, run_tag: str, lines: int, skip_because: Optional[str] = None, judge_ttft: bool = True
) -> None:
    """The diagnose runbook's prefix-cache churn part: prompts A, unrelated B, then A again: A hits the prefix cache
    again (no eviction), sooner than cold. skip_because: why this run leaves it out (None: it runs); judge_ttft
    False: the counters alone judge (both TTFTs are still recorded), for a model whose prefill is too short to show in
    TTFT."""
    p = rb.params
    if skip_because is not None:
        rb.skip("A hits the cache again after unrelated B", skip_because)
        return
    steps = prefix_protocol(p.api, prefix_bodies(p.served_model_name, p.request, run_tag, lines), rb.nodes.executor)
    verdict = None if steps is None else prefix_verdict(steps, judge_ttft)  # None: a dry run sent nothing
    if verdict is not None:
        rb.record(prefix_cache={s.name: s.figures() for s in steps}, prefix_cache_evicted=verdict.evicted)
    rb.expect(
        verdict is not None and verdict.ok,
        what="A hits the cache again after unrelated B (no eviction)"
        + (", and sooner than cold" if judge_ttft else " (TTFT not judged: prefix_ttft=False)"),
        detail=None if verdict is None else verdict.summary(),
    )


def boundary_step(
    rb: "Runbook",
    *,
    run_tag: str,
    sizes: Sequence[int],
    workload: str,
    max_tokens: int,
    short_tokens: int,
    skip_because: Optional[str] = None,
) -> None:
    """The diagnose runbook's K-boundary part: waves either side of the K boundary and one that crosses it mid-run stay
    stable (no error, no fatal log line, /health 200); a lane whose K does not change between the sizes has no boundary
    to cross. skip_because: why this run leaves it out (None: it runs)."""
    p = rb.params
    plan = boundary_plan(p.speculative.schedule, p.num_speculative_tokens, sizes[0], sizes[1], max_tokens, short_tokens)
    what = f"C{plan.lower}↔C{plan.upper} stays stable across the K boundary"
    if skip_because is not None:
        rb.skip(what, skip_because)
        return
    if not plan.crosses:
        rb.skip(what, f"the lane verifies K={plan.k_lower} at both batch sizes: no boundary to cross")
        return
    loaded = load_workload(workload)
    cases = [
        (name, boundary_bodies(p.served_model_name, loaded, p.request, run_tag, i, lengths))
        for i, (name, lengths) in enumerate(plan.cases())
    ]
    measured = boundary_run(p.api, cases, rb.nodes.executor)
    health = healthy(p.api, rb.nodes.executor)
    stability = None if measured is None else boundary_verdict(measured, fatal_log_lines(rb.nodes), bool(health))
    if stability is not None:
        rb.record(k_boundary={c.name: c.figures() for c in measured})
    rb.expect(
        stability is not None and stability.ok,
        what=what,
        detail=None if stability is None else stability.summary(measured),
    )


def queues_idle(api: str, executor: Executor, idle_timeout_s: float = IDLE_TIMEOUT_S) -> Optional[float]:
    """Seconds the queues took to read idle (running = waiting = 0 on /metrics); QueueNotIdle past the bound, None
    in a dry run."""
    metrics = metrics_url(api)
    executor.record_local(f"GET {metrics} until running = waiting = 0, bound {idle_timeout_s:g} s")
    if executor.dry_run:
        return None

    async def idle() -> float:
        async with new_client() as client:
            return (await wait_idle(client, metrics, idle_timeout_s))[1]

    return run(idle())


def long_context_step(
    rb: "Runbook", *, enabled: bool, target_tokens: Optional[int] = None, attended: Optional[bool] = None
) -> None:
    """The diagnose runbook's long-context part (opt-in, pitfall P15): cold needles climbing to the lane's context (or
    TARGET_TOKENS), idle queues and /health before each step, stopped at the first failure. Where the lane's
    policy.attended_long_probes holds, someone must watch the head's console: ATTENDED says so headless; unset,
    JupyterLab asks with a button; otherwise the probe is refused."""
    p = rb.params
    lengths = long_context_steps(target_tokens or p.max_model_len)
    what = f"cold needles climb to {lengths[-1]:,} tokens, every step answered"
    if not enabled:
        rb.skip(what, "long_context=False (opt-in: pitfall P15)")
        return
    question = f"an operator is watching {p.name}'s head console for a {lengths[-1]:,}-token needle climb"
    needless = attended is not None or not p.policy.attended_long_probes or rb.dry_run
    asked = None if needless else frontend.ask(question)  # JupyterLab: a button
    watched = bool(attended) if attended is not None else bool(asked)
    how = (
        "parameter"
        if attended is not None
        else "button"
        if asked is not None
        else "not asked (headless, lane policy, dry run)"
    )
    rb.record(long_context_attended={"attended": watched, "how": how})
    steps = stepped_long_context(rb.nodes, lengths, attended=watched)
    if steps is not None:
        rb.record(long_context=[s.__dict__ for s in steps])
        rb.show([s.__dict__ for s in steps])
    failed = None if steps is None else next((s for s in steps if s.error), None)
    stop = f"; stopped at {failed.tokens:,} tokens: {failed.error}" if failed else ""
    seen = None if steps is None else f"{len(steps)} of {len(lengths)} steps sent{stop}"
    rb.expect(steps is not None and failed is None and len(steps) == len(lengths), what=what, detail=seen)
