"""The bounded post-readiness warmup, sent from the operator's machine, and what it observed.

Each request shape production uses (a long prefill, then waves of four and six) is sent so the first production burst
does not compile kernels (pitfall P12), then once more to measure the stall the warmup took out (first_use_stall_s).
A warmup that cannot run or finish only warns (`fail_open`); a sick lane fails: the engine dead after it, a fatal line
in any rank's log (logs.FATAL_LOG_PATTERNS) or preemptions on /metrics. A dry run lists what it would send.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from lanebook.base.checks import FAIL, ExpectedResult
from lanebook.base.errors import LanebookError
from lanebook.nodes.prometheus import PREEMPTIONS, MetricsUnavailable, QueueNotIdle, metrics_url, wait_idle
from lanebook.nodes.ssh import Executor, LaneNodes
from lanebook.ops.launcher import container_name
from lanebook.ops.logs import FATAL_LOG_PATTERNS, scan_fatal
from lanebook.ops.readiness import wait_health
from lanebook.recipe.effective.mismatches import env_text
from lanebook.recipe.speculative import k_for_batch
from lanebook.speed.client import Plan, chat_url, new_client, request_timeout_s, run, run_wave
from lanebook.speed.metrics import content_times, wall_seconds
from lanebook.speed.records import WaveRecord
from lanebook.speed.workloads import load_workload

if TYPE_CHECKING:
    from lanebook.lane.params import LaneParams
    from lanebook.steps.runbook import Runbook

ENABLED_KEY = "POST_READINESS_WARMUP_ENABLED"  # the recipe's bypass: 0 skips the warmup; unset or anything else runs it
IDLE_TIMEOUT_S = 120.0  # how long the queues may take to read idle, before the warmup and after it
HEALTH_AFTER_S = 30.0  # how long /health may take to answer 200 after the warmup (503: the engine died)
FIRST_USE, WARMED = "first use", "warmed"  # the two passes: every shape once, then every shape again


@dataclass(frozen=True)
class Shape:
    """One request shape the warmup touches: C concurrent requests of a workload, each max_tokens long."""

    name: str
    concurrency: int
    workload: str  # a lanebook.speed workload (its prompts are the requests' content)
    max_tokens: int


# The recipe's three shapes. The bounded prefill is one request carrying the long_prefill workload's ~8K-token
# context (about one batch budget, MAX_NUM_BATCHED_TOKENS 8192), far from the >=128k cold needles that can hang
# the head (P15), with a short answer. The C4 and C6 waves are the loads the 5/4/3 schedule verifies at K4 and K3;
# count prompts run every request to its 32 tokens, so the batch decodes at full size, then drains.
SHAPES = (
    Shape("bounded prefill", 1, "long_prefill", 8),
    Shape("C4", 4, "count", 32),
    Shape("C6", 6, "count", 32),
)


def warmup_enabled(env: Mapping[str, Any]) -> tuple[bool, str]:
    """Does the lane run the post-readiness warmup, and why: as the recipe's launcher reads its env file,
    only the text 0 disables it."""
    if ENABLED_KEY not in env:
        return True, f"{ENABLED_KEY} unset: the launcher's default, 1"
    text = env_text(env[ENABLED_KEY])
    if text == "0":
        return False, f"the lane sets {ENABLED_KEY}: 0 (the recipe's immediate bypass)"
    return True, f"the lane sets {ENABLED_KEY}: {text}"


@dataclass(frozen=True)
class PlannedShape:
    label: str  # "C4 (K4)": the shape as the lane serves it
    shape: Shape


def plan_shapes(params: "LaneParams") -> list[PlannedShape]:
    """The recipe's shapes as this lane serves them, labelled with their verify K; a wave wider than the lane's
    MAX_NUM_SEQS is left out (it would queue, not run at that width)."""
    planned = []
    for shape in SHAPES:
        if shape.concurrency > params.max_num_seqs:
            continue
        label = shape.name
        if shape.concurrency > 1:
            label += f" (K{k_for_batch(params.speculative.schedule, params.num_speculative_tokens, shape.concurrency)})"
        planned.append(PlannedShape(label, shape))
    return planned


@dataclass(frozen=True)
class WaveSummary:
    """What one wave of the warmup came to: requests that streamed content, why the others did not, its wall
    time (first request sent to last response finished) and median time to first content."""

    requests: int
    ok: int
    errors: dict[str, int]
    wall_s: float
    ttft_s: Optional[float]

    def error_text(self) -> str:
        return "; ".join(f"{n}× {reason}" for reason, n in self.errors.items())


def summarize_wave(wave: WaveRecord) -> WaveSummary:
    """A wave's summary from the client's records (pure). A request is ok when it ended without error and
    streamed content; no decode window is needed, since the warmup's answers are short."""
    errors: dict[str, int] = {}
    ttfts = []
    for record in wave.requests:
        times = content_times(record)
        reason = record.error or (None if times else "no content in the stream")
        if reason:
            errors[reason] = errors.get(reason, 0) + 1
        else:
            ttfts.append(times[0] - record.t_sent)
    return WaveSummary(
        len(wave.requests), len(ttfts), errors, wall_seconds(wave.requests), statistics.median(ttfts) if ttfts else None
    )


@dataclass
class ShapeRun:
    """One shape's two waves: its first use (during the warmup) and its first request once warm."""

    label: str
    concurrency: int
    first_use: Optional[WaveSummary] = None
    warmed: Optional[WaveSummary] = None
    error: Optional[str] = None  # why a wave was not sent or not every request completed

    @property
    def first_use_stall_s(self) -> Optional[float]:
        """How much longer the shape's first use took than its first request once warm (the JIT stall removed)."""
        if self.first_use is None or self.warmed is None or self.error:
            return None
        return self.first_use.wall_s - self.warmed.wall_s

    def figures(self) -> dict:
        def rounded(value: Optional[float]) -> Optional[float]:
            return None if value is None else round(value, 3)

        return {
            "concurrency": self.concurrency,
            "first_use_wall_s": rounded(self.first_use.wall_s) if self.first_use else None,
            "warmed_wall_s": rounded(self.warmed.wall_s) if self.warmed else None,
            "first_use_ttft_s": rounded(self.first_use.ttft_s) if self.first_use else None,
            "warmed_ttft_s": rounded(self.warmed.ttft_s) if self.warmed else None,
            "first_use_stall_s": rounded(self.first_use_stall_s),
            "error": self.error,
        }


@dataclass
class WarmupResult:
    """What the warmup observed (nothing, in a dry run)."""

    dry_run: bool
    shapes: list[ShapeRun] = field(default_factory=list)
    idle_wait_before_s: Optional[float] = None  # seconds until the queues read idle; None: they never did
    not_idle_before: Optional[str] = None  # why the warmup was not sent (busy queues, no /metrics)
    idle_wait_after_s: Optional[float] = None
    not_idle_after: Optional[str] = None
    preemptions: Optional[float] = None  # vllm:num_preemptions_total over the warmup; None: not read
    duration_s: float = 0.0

    def checks(self) -> list[ExpectedResult]:
        """The warmup's own expected results (queues, every shape, preemptions); lane_checks adds the lane's.
        A dry run observed none of them: they are listed as not observed."""
        observed = not self.dry_run

        def judged(what: str, ok: bool, detail: str, fail_open: bool = True) -> ExpectedResult:
            return ExpectedResult.judged("", what, ok if observed else None, detail, fail_open=fail_open)

        idle_before = (
            f"the warmup was not sent: {self.not_idle_before}"
            if self.not_idle_before
            else f"idle after {self.idle_wait_before_s:.1f} s"
            if observed
            else ""
        )
        checks = [
            judged("queues idle before the warmup (running 0, waiting 0)", self.not_idle_before is None, idle_before)
        ]
        if self.not_idle_before:
            return checks
        for s in self.shapes:
            timed = (
                f"first use {s.first_use.wall_s:.2f} s, warmed {s.warmed.wall_s:.2f} s"
                if s.first_use and s.warmed
                else ""
            )
            checks.append(
                judged(f"{s.label}: every request completed, first use and warmed", s.error is None, s.error or timed)
            )
        idle_after = self.not_idle_after or (f"idle after {self.idle_wait_after_s:.1f} s" if observed else "")
        checks.append(judged("queues idle after the warmup (they drained)", self.not_idle_after is None, idle_after))
        if self.preemptions is not None or self.dry_run:
            checks.append(
                judged(
                    f"no preemption during the warmup ({PREEMPTIONS})",
                    self.preemptions == 0,
                    f"{self.preemptions:g} preempted: the KV cache cannot hold the lane's batch"
                    if self.preemptions
                    else "",
                    fail_open=False,
                )
            )
        return checks

    def warnings(self) -> list[str]:
        return [f"{c.what}: {c.detail}" for c in self.checks() if c.fail_open and c.outcome == FAIL]

    def figures(self) -> dict:
        """The run record's figures (the record's twin flag says whose: twin figures are a twin's)."""
        if self.dry_run:
            return {}
        return {
            "warmup_s": round(self.duration_s, 2),
            "warmup_idle_wait_before_s": _round(self.idle_wait_before_s),
            "warmup_idle_wait_after_s": _round(self.idle_wait_after_s),
            "warmup_preemptions": self.preemptions,
            "warmup_shapes": {s.label: s.figures() for s in self.shapes},
            "warmup_warnings": self.warnings(),
        }

    def table(self, figures_label: str) -> str:
        """Each shape's first use against its first request once warm, as a Markdown table of FIGURES_LABEL figures
        (the lane's `figures_label`)."""
        rows = [
            f"Wall time of each shape's wave ({figures_label} figures):",
            "",
            f"| shape | {FIRST_USE} (s) | {WARMED} (s) | first-use stall removed (s) |",
            "|---|---|---|---|",
        ]
        for s in self.shapes:
            cells = [f"{w.wall_s:.2f}" if w else "—" for w in (s.first_use, s.warmed)]
            stall = s.first_use_stall_s
            rows.append(f"| {s.label} | {cells[0]} | {cells[1]} | {'—' if stall is None else f'{stall:+.2f}'} |")
        return "\n".join(rows)


def _round(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 2)


def _wave_line(planned: PlannedShape, phase: str, url: str) -> str:
    s = planned.shape
    return (
        f"warmup {planned.label}, {phase}: POST {url} ×{s.concurrency} at once (streamed, {s.workload} prompts, "
        f"max_tokens {s.max_tokens}, temperature 0), once the queues read idle"
    )


def _idle_line(metrics: str, when: str) -> str:
    return (
        f"warmup, {when}: GET {metrics} until vllm:num_requests_running and vllm:num_requests_waiting read 0, "
        f"bound {IDLE_TIMEOUT_S:g} s"
    )


def run_warmup(params: "LaneParams", executor: Executor) -> WarmupResult:
    """The bounded warmup of the lane's API: idle queues, every shape once, every shape again, idle queues.

    Fail-open: nothing the warmup meets raises; the result says what happened. Every wave and idle wait goes into
    the executor's history (the lane's), so a dry run lists them and sends nothing.
    """
    planned = plan_shapes(params)
    metrics, url = metrics_url(params.api), chat_url(params.api)
    if executor.dry_run:
        executor.record_local(_idle_line(metrics, "before"))
        for phase in (FIRST_USE, WARMED):
            for p in planned:
                executor.record_local(_wave_line(p, phase, url))
        executor.record_local(_idle_line(metrics, "after"))
        return WarmupResult(True, [ShapeRun(p.label, p.shape.concurrency) for p in planned])
    return run(_warm(params, planned, executor))


async def _warm(params: "LaneParams", planned: list[PlannedShape], executor: Executor) -> WarmupResult:
    started = time.monotonic()
    result = WarmupResult(False)
    metrics = metrics_url(params.api)
    async with new_client() as client:
        try:
            before, result.idle_wait_before_s = await wait_idle(client, metrics, IDLE_TIMEOUT_S)
        except (QueueNotIdle, MetricsUnavailable) as exc:
            result.not_idle_before = str(exc)
            executor.record_local(_idle_line(metrics, "before"), exit_code=1, detail=str(exc))
            result.duration_s = time.monotonic() - started
            return result
        executor.record_local(_idle_line(metrics, "before"), duration_s=result.idle_wait_before_s)
        result.shapes = [ShapeRun(p.label, p.shape.concurrency) for p in planned]
        busy = False
        for trial, phase in enumerate((FIRST_USE, WARMED), start=1):
            for p, shape_run in zip(planned, result.shapes):
                if busy or shape_run.error:
                    continue
                busy = await _send_wave(client, params, p, shape_run, trial, phase, executor)
        try:
            after, result.idle_wait_after_s = await wait_idle(client, metrics, IDLE_TIMEOUT_S)
            executor.record_local(_idle_line(metrics, "after"), duration_s=result.idle_wait_after_s)
            counted = [snap.total(PREEMPTIONS) for snap in (before, after)]
            if None not in counted:
                result.preemptions = counted[1] - counted[0]
        except (QueueNotIdle, MetricsUnavailable) as exc:
            result.not_idle_after = str(exc)
            executor.record_local(_idle_line(metrics, "after"), exit_code=1, detail=str(exc))
    result.duration_s = time.monotonic() - started
    return result


async def _send_wave(
    client: Any,
    params: "LaneParams",
    planned: PlannedShape,
    shape_run: ShapeRun,
    trial: int,
    phase: str,
    executor: Executor,
) -> bool:
    """One wave of a shape, summarized into its ShapeRun; True when the queues were busy (stop sending)."""
    s, url = planned.shape, chat_url(params.api)
    bodies = Plan(
        params.api,
        params.served_model_name,
        load_workload(s.workload),
        [s.concurrency],
        2,
        s.max_tokens,
        params.request,
    ).bodies(trial, s.concurrency)
    line = _wave_line(planned, phase, url)
    try:
        wave = await run_wave(
            client,
            url,
            bodies,
            trial,
            request_timeout_s(s.max_tokens),
            metrics_url(params.api),
            IDLE_TIMEOUT_S,
            models_url=f"{params.api.rstrip('/')}/models",
        )
    except QueueNotIdle as exc:  # someone else is using the lane: send nothing more
        shape_run.error = f"{phase} wave not sent: {exc}"
        executor.record_local(line, exit_code=1, detail=str(exc))
        return True
    summary = summarize_wave(wave)
    if phase == FIRST_USE:
        shape_run.first_use = summary
    else:
        shape_run.warmed = summary
    if summary.errors:
        shape_run.error = (
            f"{phase}: {summary.requests - summary.ok} of {summary.requests} failed: {summary.error_text()}"
        )
    executor.record_local(
        line, exit_code=1 if summary.errors else 0, duration_s=summary.wall_s, detail=summary.error_text()
    )
    return False


def lane_checks(nodes: LaneNodes) -> list[ExpectedResult]:
    """After the warmup, is the lane still well: /health 200 (vLLM answers 503 once its engine died), and no fatal
    runtime error (CUDA, NCCL, engine death, preemption) in the server container's log on any node. None is
    fail-open: each is a real lane problem."""
    checks = []
    try:
        wait_health(nodes.params.api, HEALTH_AFTER_S, 2.0, executor=nodes.executor)
        checks.append(ExpectedResult.judged("", "/health answers 200 after the warmup (the engine is alive)", True))
    except LanebookError as exc:
        checks.append(
            ExpectedResult.judged("", "/health answers 200 after the warmup (the engine is alive)", False, str(exc))
        )
    container = container_name(nodes)
    kinds = ", ".join(FATAL_LOG_PATTERNS)
    for node in nodes:
        found = scan_fatal(node, container)
        seen = "; ".join(f"{kind}: {lines[-1].strip()[:200]} ({len(lines)} lines)" for kind, lines in found.items())
        checks.append(
            ExpectedResult.judged(
                "", f"no fatal runtime error in {node.alias}'s log of {container} ({kinds})", not found, seen
            )
        )
    return checks


def post_readiness_step(rb: "Runbook", *, hook: Optional[str] = None) -> None:
    """The bounded warmup after a launch (P12), fail-open: skipped when the lane disables it; when the launcher's
    own hook warmed the lane (`hook`, its line), only the lane's health and logs are checked, not the shapes twice."""
    enabled, why = warmup_enabled(rb.params.env)
    if not enabled:
        rb.skip("the bounded post-readiness warmup ran", why)
    elif hook is not None:
        rb.record(warmed_by="the launcher's post-readiness hook")
        rb.skip("lanebook's own warmup waves", f"the launcher's hook warmed the lane ({hook}); not sent twice")
        rb.expect(lane_checks(rb.nodes))
    else:
        warm_step(rb, after=lane_checks)


def warmup_step(rb: "Runbook") -> None:
    """The warmup runbook's warmup step: the bounded warmup, unless the lane disables it."""
    enabled, why = warmup_enabled(rb.params.env)
    if not enabled:
        rb.skip("the bounded post-readiness warmup ran", why)
        return
    warm_step(rb)


def lane_step(rb: "Runbook") -> None:
    """The warmup runbook's lane check: is the lane still well after the warmup (skipped with it)."""
    enabled, why = warmup_enabled(rb.params.env)
    if not enabled:
        rb.skip("the lane is well after the warmup", why)
        return
    rb.expect(lane_checks(rb.nodes))


def warm_step(rb: "Runbook", *, after: Optional[Callable[[LaneNodes], list[ExpectedResult]]] = None) -> None:
    """Run the bounded warmup, record its figures, show its table (not in a dry run) and check it, with
    `after(lane)`'s checks of the lane when given."""
    warmed = run_warmup(rb.params, rb.nodes.executor)
    rb.record(**warmed.figures())
    if not rb.dry_run:
        rb.show(markdown=warmed.table(rb.params.figures_label))
    rb.expect(warmed.checks() + (after(rb.nodes) if after else []))
