"""A one-axis canary on a live lane: relaunch it with a variant's values, measure, and put the lane's value back.

A relaunch is the recipe's own sequence: render the values into the head's checkout (each changed file backed
up, written atomically: lanebook.ops.checkout_env), copy the checkout to the workers over the RoCE link, stop the
lane from the head (and any orphaned worker), clean SHM and page cache on every node, check free memory,
start it from the head, then read the live `vllm serve` command against the values rendered. A variant that
fails anywhere (it does not come up, does not carry its value, or a measurement raises) is replaced by the
lane's own values at once, so a failed canary never leaves the lane on the variant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

from lanebook.base.checks import ExpectedResult
from lanebook.base.errors import LanebookError
from lanebook.lane.params import LaneParams, lane_with
from lanebook.nodes.ssh import LaneNodes
from lanebook.ops.checkout_env import render_on_head
from lanebook.ops.launcher import (
    LauncherResult,
    StopResult,
    container_name,
    start_lane,
    stop_lane,
    stop_orphaned_workers,
)
from lanebook.ops.logs import live_command
from lanebook.ops.memory import check_sticky_uma, clean_memory
from lanebook.ops.transfers import RsyncStats, sync_checkout
from lanebook.recipe.effective.checkout import ENV_NAME, read_node_files
from lanebook.recipe.effective.mismatches import LiveMismatch, live_mismatches
from lanebook.recipe.envfile import env_map, parse_env_text
from lanebook.recipe.render import RenderResult
from lanebook.speed.bands import bands_frame
from lanebook.speed.references import PUBLISHED_FIGURES, PublishedFigure
from lanebook.verify import gates, hermes
from lanebook.verify.diagnose import CanaryDecision, canary_decision
from lanebook.verify.probes import document_figures, fatal_log_lines, measure_workloads, queues_idle

if TYPE_CHECKING:
    from lanebook.steps.runbook import Runbook


@dataclass
class Relaunch:
    """What relaunching the lane with some values did, step by step (None: the step was not reached)."""

    params: LaneParams
    change: Optional[RenderResult] = None
    synced: dict[str, RsyncStats] = field(default_factory=dict)
    stopped: Optional[StopResult] = None
    orphans: dict[str, list[str]] = field(default_factory=dict)
    cleaned: Optional[ExpectedResult] = None
    free: Optional[ExpectedResult] = None
    started: Optional[LauncherResult] = None
    live: Optional[list[LiveMismatch]] = None  # what the live command does not carry of params
    error: Optional[str] = None  # a LanebookError that stopped the relaunch

    @property
    def ok(self) -> bool:
        """Up and carrying every value rendered (never in a dry run: nothing was observed)."""
        return self.error is None and self.started is not None and self.started.ok and self.live == []

    def summary(self) -> str:
        if self.error:
            return f"relaunch stopped: {self.error}"
        parts = [
            f"rendered {', '.join(self.change.changed) or 'nothing (already those values)'}" if self.change else "",
            f"copied to {', '.join(self.synced)}" if self.synced else "",
            f"memory still held, not started: {self.free.detail}"
            if self.free is not None and not self.free.ok and self.started is None
            else "",
            self.started.summary() if self.started else "",
            (
                "live command carries the values"
                if self.live == []
                else "live command: " + "; ".join(map(str, self.live))
            )
            if self.live is not None
            else "",
        ]
        return "; ".join(part for part in parts if part)

    def figures(self) -> dict[str, Any]:
        return {
            "changed": self.change.changed if self.change else [],
            "backups": [b.to_json() for b in self.change.backups] if self.change else [],
            "stop": self.stopped.launcher.outcome if self.stopped else None,
            "orphaned_workers_stopped": self.orphans,
            "free_gib": None if self.free is None else self.free.figure("free_gib"),
            "launcher": self.started.outcome if self.started else None,
            "live_mismatches": None if self.live is None else [str(m) for m in self.live],
            "error": self.error,
        }


def relaunch_with(nodes: LaneNodes, params: LaneParams) -> Relaunch:
    """Render PARAMS on the head, copy the checkout to the workers, stop, clean memory, start, read the live command.

    Memory still held after the cleanup (sticky UMA) ends the relaunch before the start; a LanebookError (a
    container left running, an unreachable node) is recorded as the relaunch's error rather than raised, so
    the caller can still restore."""
    relaunch = Relaunch(params)
    try:
        relaunch.change = render_on_head(nodes, params)
        relaunch.synced = sync_checkout(nodes, timeout_s=600)
        relaunch.stopped = stop_lane(nodes)
        relaunch.orphans = stop_orphaned_workers(nodes)
        relaunch.cleaned = clean_memory(nodes)  # refuses while any vLLM container still runs
        relaunch.free = check_sticky_uma(nodes)
        if relaunch.free.ok or nodes.executor.dry_run:
            relaunch.started = start_lane(nodes)
            if relaunch.started.ok or nodes.executor.dry_run:
                relaunch.live = live_mismatches(params, live_command(nodes.head, container_name(nodes)))
    except LanebookError as exc:
        relaunch.error = str(exc)
    if nodes.executor.dry_run:
        relaunch.live = None  # a dry run observed no command
    return relaunch


@dataclass
class VariantTrial:
    """The variant relaunched and measured; restored: the lane's own values relaunched because the variant failed."""

    relaunch: Relaunch
    documents: Optional[list[dict]] = None
    error: Optional[str] = None  # a LanebookError while measuring
    restored: Optional[Relaunch] = None

    @property
    def failed(self) -> bool:
        return not self.relaunch.ok or self.error is not None

    def figures(self) -> dict[str, Any]:
        return {
            "relaunch": self.relaunch.figures(),
            "error": self.error,
            "restored_after_failure": self.restored.figures() if self.restored else None,
        }


def try_variant(nodes: LaneNodes, variant: LaneParams, measure: Callable[[], Optional[list[dict]]]) -> VariantTrial:
    """Relaunch with the variant and measure it; on any failure relaunch with the lane's own values (lane.params).

    In a dry run every step is recorded, measuring included, and nothing is restored (nothing changed)."""
    trial = VariantTrial(relaunch_with(nodes, variant))
    if trial.relaunch.ok or nodes.executor.dry_run:
        try:
            trial.documents = measure()
        except LanebookError as exc:
            trial.error = str(exc)
    if trial.failed and not nodes.executor.dry_run:
        trial.restored = relaunch_with(nodes, nodes.params)
    return trial


def head_env_value(nodes: LaneNodes, key: str) -> Optional[str]:
    """What the head's env file sets KEY to now (its last line for KEY; None without one, or in a dry run)."""
    data = read_node_files(nodes.head, [f"{nodes.params.checkout.rstrip('/')}/{ENV_NAME}"])[0]
    if data is None:
        return None
    return env_map(parse_env_text(data.decode("utf-8", errors="replace"))).get(key)


# --- the diagnose runbook's canary steps (each takes the runbook: it confirms, records, shows and checks) ------


@dataclass(frozen=True, kw_only=True)
class Trials:
    """What each side of a canary measures: the workloads at every concurrency level, `trials` times, at most
    `max_tokens` a request."""

    workloads: list[str]
    concurrency: list[int]
    trials: int
    max_tokens: int

    def measure(self, nodes: LaneNodes) -> Optional[list[dict]]:
        """The documents measured (None in a dry run)."""
        return measure_workloads(nodes, self.workloads, self.concurrency, self.trials, self.max_tokens)


@dataclass(frozen=True, kw_only=True)
class CanaryPlan:
    """The canary the diagnose runbook's parameters ask for: one key, the variant's value, what each side measures,
    and the tolerance of the decision; not enabled: parts 1-2 only."""

    enabled: bool
    key: str
    value: Any
    tolerance: float
    measured: Trials

    def variant(self, params: LaneParams) -> LaneParams:
        return lane_with(params, env={self.key: self.value})


def show_change(rb: "Runbook", relaunch: Relaunch) -> None:
    """What a relaunch rendered into the head's checkout (in a dry run: into lanebook's reference checkout)."""
    if relaunch.change is not None:
        diff = relaunch.change.diff or "(no change: the checkout already runs these values)"
        rb.show(markdown=f"```diff\n{diff}\n```")


def show_documents(rb: "Runbook", name: str, documents: Optional[list[dict]]) -> None:
    """Record a measured side's figures under `name` and show its bands (nothing measured: nothing shown)."""
    if documents:
        rb.record(**{name: document_figures(documents)})
        rb.show(bands_frame(documents))


def baseline_step(rb: "Runbook", plan: CanaryPlan) -> Optional[list[dict]]:
    """The canary's first measure: the lane's own value measured, every request of it; the documents."""
    if not plan.enabled:
        rb.skip("the lane's own value measured", "canary=False: parts 1-2 only")
        return None
    env = rb.params.env
    rb.expect(
        plan.key in env, what=f"the lane sets {plan.key} (the canary's one axis)", detail=env.get(plan.key), local=True
    )
    documents = plan.measured.measure(rb.nodes)
    show_documents(rb, "canary_baseline", documents)
    failed = None if documents is None else sum(r["errors"] for d in documents for r in d["runs"])
    rb.expect(
        failed == 0,
        what=f"every request measured at {plan.key}={env.get(plan.key)}",
        detail=None if failed is None else f"{failed} failed or unmeasurable",
    )
    return documents


def variant_step(rb: "Runbook", plan: CanaryPlan) -> Optional[VariantTrial]:
    """The canary's variant: relaunch with the variant and measure it (a failed variant puts the lane's own value
    back)."""
    key, value = plan.key, plan.value
    if not plan.enabled:
        rb.skip(f"the lane relaunched with {key}={value} and measured", "canary=False")
        return None
    rb.confirm(f"relaunch lane {rb.params.name} with {key}={value} (stop, clean memory, start) and measure it")
    trial = try_variant(rb.nodes, plan.variant(rb.params), lambda: plan.measured.measure(rb.nodes))
    rb.record(canary_variant_run=trial.figures())
    show_change(rb, trial.relaunch)
    show_documents(rb, "canary_variant", trial.documents)
    rb.expect(
        trial.relaunch.ok,
        what=f"the lane is up with {key}={value} and the live command carries it",
        detail=trial.relaunch.summary(),
    )
    rb.expect(
        trial.error is None,
        what=f"{', '.join(plan.measured.workloads)} measured at {key}={value}",
        detail=trial.error or "",
    )
    return trial


def decision_step(
    rb: "Runbook", plan: CanaryPlan, *, baseline: Optional[list[dict]], trial: Optional[VariantTrial]
) -> Optional[CanaryDecision]:
    """The canary's decision: keep or reject the variant from both sides' figures (none without both measured)."""
    what = "an explicit keep or reject from the measured figures"
    if not plan.enabled:
        rb.skip(what, "canary=False")
        return None
    decision = None
    if baseline and trial and trial.documents:
        decision = canary_decision(
            plan.key, rb.params.env[plan.key], plan.value, baseline, trial.documents, plan.tolerance
        )
        rb.record(canary=decision.figures())
        rb.show(markdown=f"### Decision: **{decision.decision}** {plan.key}={plan.value}\n\n{decision.summary()}")
        rb.show(decision.comparison.frame() if decision.comparison else decision.reasons)
    rb.expect(decision is not None, what=what, detail=None if decision is None else decision.summary())
    return decision


def kept_lane(params: LaneParams, plan: CanaryPlan, decision: Optional[CanaryDecision]) -> LaneParams:
    """The lane's values the canary keeps: the variant's when it was kept, else the lane's own (a dry run decides
    nothing, so it shows the reject path)."""
    return plan.variant(params) if decision is not None and decision.decision == "keep" else params


def lane_file_note(params: LaneParams, key: str, kept_value: Any) -> str:
    """What to change in the lane file when the kept value is not the one it holds ("" when it holds it)."""
    if params.env[key] == kept_value:
        return ""
    return (
        f"the lane file says {params.env[key]}: set env.{key}: {kept_value} in params/{params.name}.yaml "
        "so the lane file is the truth again"
    )


def restore_step(rb: "Runbook", plan: CanaryPlan, decision: Optional[CanaryDecision]) -> None:
    """The canary's outcome: the lane runs the kept value: the lane's own rendered back and relaunched, or the kept
    variant checked in the live command; the head's env file and the lane file hold it."""
    key, p = plan.key, rb.params
    if not plan.enabled:
        rb.skip("the kept value is what the lane runs", "canary=False")
        return
    kept = kept_lane(p, plan, decision)
    kept_value = kept.env[key]
    if kept is p:
        rb.confirm(f"render {key}={kept_value} back into lane {p.name}'s checkout and relaunch it")
        restored = relaunch_with(rb.nodes, p)
        rb.record(canary_restore=restored.figures())
        show_change(rb, restored)
        rb.expect(
            restored.ok,
            what=f"the lane is up again with {key}={kept_value} and the live command carries it",
            detail=restored.summary(),
        )
    else:
        rb.skip(f"{key}={kept_value} rendered back", "the variant is kept: it is what the lane runs")
        mismatches = live_mismatches(kept, live_command(rb.nodes.head, container_name(rb.nodes)))
        rb.expect(
            not mismatches, what=f"the live command carries {key}={kept_value}", detail="; ".join(map(str, mismatches))
        )
    on_head = head_env_value(rb.nodes, key)
    rb.record(canary_kept={key: kept_value, "head_env_file": on_head})
    rb.expect(on_head == str(kept_value), what=f"the head's env file sets {key}={kept_value}", detail=on_head)
    rb.expect(
        p.env[key] == kept_value,
        what=f"the lane file holds the kept {key}={kept_value}",
        detail=lane_file_note(p, key, kept_value),
        local=True,
    )


# --- a restored lane proven, not assumed (seed 000: "The restored lane returned a 90.70 t/s best count-300 run,
# passed tools and Hermes routing, drained its queues, and stayed clean on both TP ranks") ------------------------

PROOF_WORKLOAD, PROOF_MAX_TOKENS = "count", 300  # the write-up's count-300 run


def best_stream_tok_s(documents: Optional[list[dict]]) -> Optional[float]:
    """The best trial's mean stream decode rate over the documents (the write-up quotes a best run; None: nothing)."""
    rates = [r["mean_stream_decode_tok_s"] for d in documents or [] for r in d["runs"] if r["errors"] == 0]
    rates = [rate for rate in rates if rate is not None]
    return max(rates) if rates else None


def count_300_reference() -> PublishedFigure:
    return next(f for f in PUBLISHED_FIGURES if f.figure == "best count-300 run")


def proof_step(rb: "Runbook", *, relaunched: bool, trials: int) -> None:
    """The diagnose runbook's proof of the relaunched lane: after a canary relaunched it, prove it as the write-up did:
    a best count-300 run (beside the write-up's figure, twin figures labelled twin), the tool smoke and Hermes ROUTE_OK,
    idle queues, and no fatal line in any rank's log. Nothing relaunched: nothing to prove again."""
    p = rb.params
    if not relaunched:
        rb.skip("the restored lane passes tools, Hermes, queues and both ranks' logs", "no canary relaunched the lane")
        return
    documents = measure_workloads(rb.nodes, [PROOF_WORKLOAD], [1], trials, PROOF_MAX_TOKENS)
    best, reference = best_stream_tok_s(documents), count_300_reference()
    rb.record(restored_best_count_300={"tok_s": best, "twin": p.twin, "reference_tok_s": reference.value})
    label = "TWIN figure" if p.twin else "this lane"
    cited = f"{reference.value} {reference.unit} ({reference.measured_by}, {reference.conditions})"
    rb.show(markdown=f"Best count-300 run: **{best} tok/s** ({label}); the write-up's restored lane: {cited}.")
    rb.expect(best is not None, what=f"a clean count-{PROOF_MAX_TOKENS} run at C1", detail=best)
    step = rb.current_step
    rb.expect(gates.tool_smoke_gate(step, rb.nodes.executor, p))
    provider, found = hermes.block_gate(step, rb.nodes, None)
    route, routed = hermes.route_gate(step, rb.nodes, provider)
    rb.record(restored_hermes=hermes.route_figures(route))
    rb.expect(found + routed)
    waited = queues_idle(p.api, rb.nodes.executor)
    rb.expect(
        waited is not None,
        what="the queues drain (running = waiting = 0)",
        detail=None if waited is None else f"idle after {waited:.1f} s",
    )
    found_lines = None if rb.dry_run else fatal_log_lines(rb.nodes)
    scanned = sorted(found_lines or {})
    lines = [f"{node}: {line}" for node, kinds in (found_lines or {}).items() for ls in kinds.values() for line in ls]
    rb.expect(
        found_lines is not None and scanned == sorted(n.alias for n in p.nodes) and not lines,
        what="no CUDA, NCCL, engine-death or out-of-memory line on any rank",
        detail=f"scanned {', '.join(scanned)}" + (f"; {'; '.join(lines[:3])}" if lines else ""),
    )
