"""Speed on a lane as the speed runbook runs it: the lane's workloads at C1, C4 and C6, at least three
trials per cell (fewer is refused: a band needs three), the lane's request shape, and the line each
workload's waves leave in the executor's history, so a dry run lists what it would send and sends nothing.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Optional

from rich.console import Console

from lanebook.base.errors import LanebookError
from lanebook.base.progress import counter
from lanebook.lane.params import LaneParams
from lanebook.nodes.prometheus import metrics_url
from lanebook.nodes.ssh import Executor
from lanebook.speed.bands import MIN_TRIALS
from lanebook.speed.baseline import Baseline, counterpart, judge, lane_workloads, load_baseline, write_baseline
from lanebook.speed.client import chat_url
from lanebook.speed.command import SpeedResult, run_speed
from lanebook.speed.plots import plot_workload
from lanebook.speed.provenance import Provenance, SetupMatch
from lanebook.speed.workloads import check_thinking_booleans, load_workload, request_body

if TYPE_CHECKING:
    from lanebook.steps.runbook import Runbook

LEVELS = (1, 4, 6)  # the seed's C1/C4/C6 table
MAX_TOKENS = 256  # the seed's probe: 256-token streams


def as_list(value: Any, what: str) -> list[str]:
    """A list parameter as papermill or `-p` may give it: a list, one value, or "a,b,c"."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
    else:
        items = [part.strip() for part in str(value).split(",")]
    if not all(items):
        raise LanebookError(f"{what}: an empty item in {value!r}")
    return items


def _whole(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LanebookError(f"{what} must be a whole number, got {value!r}")
    return value


@dataclass(frozen=True)
class LanePlan:
    """What one speed run measures on a lane: every workload at every level, trials times."""

    lane_name: str
    api: str
    model: str
    workloads: tuple[str, ...]
    levels: tuple[int, ...]
    trials: int
    max_tokens: int
    request: dict

    @property
    def requests_per_workload(self) -> int:
        return self.trials * sum(self.levels)

    def summary(self) -> str:
        return (
            f"workloads {', '.join(self.workloads)}; C{', C'.join(map(str, self.levels))}; {self.trials} trials; "
            f"max_tokens {self.max_tokens}; model {self.model} at {self.api}"
        )

    def wave_line(self, workload: str) -> str:
        """One workload's waves as the executor's history shows them."""
        return (
            f"speed {workload}: {self.trials} trials x C{'/C'.join(map(str, self.levels))} = "
            f"{self.requests_per_workload} streamed POST {chat_url(self.api)} (unique prompts, temperature 0, "
            f"max_tokens {self.max_tokens}, usage included); before each wave GET {metrics_url(self.api)} "
            "until no request runs or waits"
        )

    def figures(self, tolerance: float, baseline: Optional[str]) -> dict:
        """The plan as the run's record keeps it, with the tolerance and the baseline file it is judged against."""
        return {
            "workloads": list(self.workloads),
            "levels": list(self.levels),
            "trials": self.trials,
            "max_tokens": self.max_tokens,
            "tolerance": tolerance,
            "baseline": baseline,
        }

    def example_body(self, workload: str) -> dict:
        """The first request of the workload's first wave, as it is sent (the tag makes every prompt unique)."""
        return request_body(self.model, load_workload(workload), 0, "RUN-t1-c1-0", self.max_tokens, self.request)


def plan_speed(
    params: LaneParams,
    workloads: Any = None,
    concurrency: Any = None,
    trials: Any = MIN_TRIALS,
    max_tokens: Any = MAX_TOKENS,
) -> LanePlan:
    """The run's plan from the runbook's parameters, each checked; None means the lane's own (workloads, levels)."""
    names = as_list(workloads, "workloads") or lane_workloads(params.name)
    for name in names:
        load_workload(name)  # an unknown one is refused, naming the known ones
    if len(set(names)) != len(names):
        raise LanebookError(f"workloads: a workload is named twice ({', '.join(names)})")
    levels_given = as_list(concurrency, "concurrency")
    if not all(item.isdigit() for item in levels_given):
        raise LanebookError(f"concurrency: whole numbers, got {concurrency!r}")
    levels = [int(item) for item in levels_given] or list(LEVELS)
    if any(c < 1 for c in levels) or len(set(levels)) != len(levels):
        raise LanebookError(f"concurrency: distinct levels of at least 1, got {levels}")
    too_many = [c for c in levels if c > params.max_num_seqs]
    if too_many:
        raise LanebookError(
            f"concurrency {too_many} exceeds the lane's MAX_NUM_SEQS={params.max_num_seqs}: "
            "those streams would wait for a slot, and the wave would measure the queue"
        )
    trials = _whole(trials, "trials")
    if trials < MIN_TRIALS:
        raise LanebookError(
            f"trials must be at least {MIN_TRIALS} (got {trials}): a band is the median and min–max "
            "of three or more trials, never a single run"
        )
    max_tokens = _whole(max_tokens, "max_tokens")
    if max_tokens < 2:
        raise LanebookError(f"max_tokens must be at least 2 to have a decode window (got {max_tokens})")
    check_thinking_booleans(params.request)
    return LanePlan(
        params.name,
        params.api,
        params.served_model_name,
        tuple(names),
        tuple(levels),
        trials,
        max_tokens,
        dict(params.request),
    )


def notebook_console() -> Console:
    """Plain text on stdout: the wave lines land in the executed notebook, no live progress bars."""
    return Console(file=sys.stdout, force_terminal=False, force_jupyter=False, width=120, highlight=False)


def measure_workload(
    plan: LanePlan, workload: str, executor: Executor, twin: bool, console: Optional[Console] = None
) -> Optional[SpeedResult]:
    """One workload's waves (stopping after a wave with failed requests), recorded in the executor's history;
    a dry run records the line and sends nothing (None)."""
    if executor.dry_run:
        executor.record_local(plan.wave_line(workload))
        return None
    started = time.monotonic()
    result = run_speed(
        plan.api,
        plan.model,
        workload,
        list(plan.levels),
        plan.trials,
        plan.max_tokens,
        lane_request=plan.request,
        twin=twin,
        console=console or notebook_console(),
        stop_on_errors=True,
        on_wave=counter(f"{workload} waves", "waves"),
    )  # a live wave counter in JupyterLab
    failures = wave_failures(result)
    executor.record_local(
        plan.wave_line(workload),
        exit_code=1 if failures else 0,
        duration_s=time.monotonic() - started,
        detail="; ".join(failures),
    )
    return result


def bands_table(document: dict) -> str:
    """A workload's bands as Markdown: median (min–max) of stream decode, wall aggregate and TTFT per level."""

    def cell(stats: Optional[dict], digits: int) -> str:
        return (
            "-" if not stats else f"{stats['median']:.{digits}f} ({stats['min']:.{digits}f}–{stats['max']:.{digits}f})"
        )

    rows = [
        f"**{document['workload']}**, max_tokens {document['max_tokens']}: median (min–max) over trials",
        "",
        "| C | trials | errors | stream decode tok/s | wall aggregate tok/s | TTFT s | acceptance |",
        "|---|---|---|---|---|---|---|",
    ]
    for band in document["bands"]:
        rows.append(
            f"| {band['concurrency']} | {band['trials']}{'' if band['complete'] else ' (incomplete)'} | "
            f"{band['errors']} | {cell(band['mean_stream_decode_tok_s'], 1)} | "
            f"{cell(band['wall_aggregate_tok_s'], 1)} | "
            f"{cell(band['ttft_s_median'], 3)} | {cell(band['acceptance_rate'], 2)} |"
        )
    return "\n".join(rows)


def wave_failures(result: SpeedResult) -> list[str]:
    """One line per wave with failed or unmeasurable requests, naming the trial, the level and why."""
    return [
        f"trial {f.trial} C{f.concurrency}: {f.errors} of {f.requests} failed ("
        + ", ".join(f"{reason} x{n}" for reason, n in f.error_reasons.items())
        + ")"
        for f in result.figures
        if f.errors
    ]


def unchecked_idle(result: SpeedResult) -> list[str]:
    """Waves sent without the idle-queue check (no /metrics to read), as `trial K CN`."""
    return [f"trial {w.trial} C{w.concurrency}" for w in result.waves if w.idle_wait_s is None]


# --- the speed runbook's steps (each takes the runbook: it records, shows and checks) -------------------------

WAVES_FIX = (
    "read the failed waves' reasons above and run `status`; an engine that died or an orphaned worker: "
    "run `stop`, then `launch`, then speed again"
)


def baseline_note(lane_name: str, baseline: Optional[Baseline], setup: Optional[SetupMatch]) -> str:
    """What the bands below are set against: the baseline and how its setup compares, or that there is none."""
    if baseline is None or setup is None:
        return f"lane {lane_name} has no stored baseline: the bands below are shown, not judged"
    return f"baseline {baseline.path}: {baseline.source}\n{setup.summary()}"


def baseline_label(setup: Optional[SetupMatch]) -> str:
    """The plot's legend for the baseline's medians: whether they are judged (same setup) or only shown."""
    return f"baseline median ({setup.headline}: {'judged' if setup.same else 'not judged'})" if setup else ""


def plot_title(plan: LanePlan, workload: str, twin: bool) -> str:
    return f"{plan.lane_name} · {workload} · max_tokens {plan.max_tokens} · {plan.trials} trials" + (
        " · TWIN figures (not a real lane's)" if twin else ""
    )


def waves_steps(
    rb: "Runbook", plan: LanePlan, *, baseline: Optional[Baseline] = None, setup: Optional[SetupMatch] = None
) -> list[dict]:
    """The speed runbook's waves, one step a workload: its waves, its bands (a table and a plot beside the baseline's),
    every request measured, every wave checked for idle queues; a dry run shows the first request it would send. The
    documents."""
    from IPython.display import Image

    documents, bands, failed_waves = [], {}, {}
    for workload in plan.workloads:
        with rb.step(f"2 waves {workload}", fix=WAVES_FIX):
            result = measure_workload(plan, workload, rb.nodes.executor, rb.params.twin)
            if result is None:  # a dry run: the request as it would be sent
                rb.show(markdown=f"**{workload}** would send, first request of its first wave:")
                rb.show(markdown="```json\n" + json.dumps(plan.example_body(workload), indent=1) + "\n```")
                rb.expect(False, what=f"every request of {workload} measured")
                continue
            document = result.document()
            documents.append(document)
            failures = wave_failures(result)
            bands[workload], failed_waves[workload] = document["bands"], failures
            rb.record(bands=bands, wave_failures=failed_waves)
            rb.show(markdown=bands_table(document))
            rb.show(
                Image(
                    plot_workload(
                        document,
                        counterpart(baseline, document),
                        baseline_label(setup),
                        plot_title(plan, workload, rb.params.twin),
                    )
                )
            )
            rb.expect(
                not failures,
                what=f"every request of {workload} measured",
                detail="; ".join(failures) or f"{len(result.waves)} waves, {plan.requests_per_workload} requests",
            )
            unchecked = unchecked_idle(result)
            rb.expect(
                not unchecked,
                what="queues idle before every wave",
                detail="no /metrics before " + ", ".join(unchecked)
                if unchecked
                else "vllm:num_requests_running and vllm:num_requests_waiting were 0 before each wave",
            )
    return documents


def judge_step(
    rb: "Runbook",
    documents: list[dict],
    *,
    provenance: Optional[Provenance],
    baseline: Optional[Baseline] = None,
    tolerance: float,
) -> None:
    """The speed runbook's baseline step: judged against the baseline only on the same setup; otherwise shown beside it,
    not judged."""
    if rb.dry_run:
        rb.expect(False, what="speed against the lane's baseline")
        return
    judgement = judge(documents, provenance, baseline, tolerance)
    rb.record(baseline=judgement.to_json())
    if judgement.comparison is not None:
        rb.show(judgement.comparison.frame())
    if judgement.judged:
        rb.expect(
            not judgement.failed,
            what=f"medians within {tolerance:.0%} of the baseline's on the same setup",
            detail=judgement.summary(),
        )
    else:
        rb.skip("speed judged against the baseline", judgement.summary())


def baseline_source(plan: LanePlan, twin: bool, stamp: str) -> str:
    """Where a stored baseline came from, as its file says (twin figures labelled)."""
    return (
        f"speed runbook on lane {plan.lane_name}, {stamp}: {plan.trials} trials per level, max_tokens {plan.max_tokens}"
        + ("; twin figures, not a real lane's" if twin else "")
    )


def save_step(
    rb: "Runbook",
    documents: list[dict],
    *,
    path: Optional[str] = None,
    plan: LanePlan,
    provenance: Optional[Provenance],
) -> None:
    """The speed runbook's store step: this run stored as a baseline file, only when a path is given and something was
    measured."""
    if not path:
        rb.skip("stored as a baseline", "no save_baseline path given")
        return
    if rb.dry_run:
        rb.skip("stored as a baseline", "a dry run measures nothing")
        return
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    written = write_baseline(path, documents, provenance, baseline_source(plan, rb.params.twin, stamp))
    rb.expect(
        load_baseline(written).workloads == list(plan.workloads), what="stored as a baseline", detail=str(written)
    )
